//! What an attempt says of itself: the hint when its command was not
//! found, and what the ledger keeps of one whose setup failed.

use crate::util::{assert_code, text, Env};

#[test]
fn a_shell_word_not_found_says_to_use_shell() {
    let env = Env::new();
    let builtin = env.run(["run", "--key", "b", "--", "source", "x"]);
    assert_code(&builtin, 127);
    assert!(
        text(&builtin.stderr)
            .contains("command not found: source (it is a shell builtin: run it with --shell)"),
        "{}",
        text(&builtin.stderr)
    );
    let plain = env.run(["run", "--key", "p", "--", "no-such-command-idem"]);
    assert!(text(&plain.stderr)
        .contains("command not found: no-such-command-idem (check the name and PATH)"));
}
