//! What an attempt says of itself: the hint when its command was not
//! found, what the ledger keeps of one whose setup failed, and idem's own
//! lines starting a line of their own after the command's output.

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

#[test]
fn idem_s_lines_start_a_line_after_output_cut_mid_line() {
    let env = Env::new();
    let args = ["run", "--key", "k", "--retries", "0", "--", "sh", "-c"];
    // Apart: only the command's stderr counts for idem's lines there.
    let apart = env
        .idem(args.iter().chain(&["printf out; printf err >&2; exit 3"]))
        .output()
        .unwrap();
    assert_code(&apart, 3);
    assert_eq!(text(&apart.stdout), "out");
    assert!(
        text(&apart.stderr).starts_with("err\nidem: "),
        "{}",
        text(&apart.stderr)
    );
    let whole = env
        .idem([
            "run",
            "--key",
            "w",
            "--retries",
            "0",
            "--",
            "sh",
            "-c",
            "printf out; echo err >&2; exit 3",
        ])
        .output()
        .unwrap();
    assert!(
        text(&whole.stderr).starts_with("err\nidem: "),
        "{}",
        text(&whole.stderr)
    );
    // One file for both: the command's last byte on either counts.
    let log = env.path("log");
    let file = std::fs::File::create(&log).unwrap();
    let together = env
        .idem([
            "run",
            "--key",
            "t",
            "--retries",
            "0",
            "--",
            "sh",
            "-c",
            "printf out; exit 3",
        ])
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .status()
        .unwrap();
    assert_eq!(together.code(), Some(3));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.starts_with("out\nidem: "), "{logged}");
    assert!(!logged.contains("\n\n"), "{logged}");
}
