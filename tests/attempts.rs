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

/// Under an open files limit of 64 the guardian cannot move its
/// descriptors above 100: a step of the setup fails after the attempt was
/// recorded as started, and its row says how it ended.
#[test]
fn an_attempt_whose_setup_failed_is_recorded_ended() {
    use std::os::unix::process::CommandExt;
    let env = Env::new();
    let mut idem = env.idem(["run", "--key", "k", "--", "true"]);
    // SAFETY: setrlimit is async-signal-safe and reads the struct we own;
    // the closure allocates nothing.
    unsafe {
        idem.pre_exec(|| {
            let limit = nix::libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            match nix::libc::setrlimit(nix::libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    assert_code(&idem.output().unwrap(), 125);
    let shown = env.show_json("k");
    let attempt = &shown["attempts_detail"][0];
    assert_eq!(attempt["exit_code"], 125, "{shown}");
    assert!(attempt["finished_at"].is_string(), "{shown}");
    assert_eq!(shown["status"], "failed");
}
