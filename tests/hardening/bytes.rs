//! Hostile bytes: control and format characters in what was recorded.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use crate::util::{sqlite, Env};

// ------------------------------------------------------------ hostile bytes

#[test]
fn list_and_show_escape_control_characters() {
    let env = Env::new();
    let hostile = "\x1b]0;owned\x07\x1b[2J\r";
    env.cmd([
        OsStr::new("run"),
        "--key".as_ref(),
        "k".as_ref(),
        "--".as_ref(),
        "printf".as_ref(),
        OsString::from(format!("{hostile}%s\u{202e}\n")).as_os_str(),
        "tail".as_ref(),
    ])
    .succeeds();
    // A key recorded by some other means, with a right-to-left override.
    sqlite(
        &env.db(),
        "UPDATE keys SET key = 'a' || char(0x202e) || char(7) || 'b' WHERE key = 'k'",
    );
    let list = env.cmd(["ledger", "list"]).succeeds();
    let show = env
        .cmd([
            OsStr::new("ledger"),
            "show".as_ref(),
            OsStr::from_bytes("a\u{202e}\x07b".as_bytes()),
        ])
        .succeeds();
    for (name, output) in [("list", &list), ("show", &show)] {
        let stdout = output.stdout();
        for bad in ['\x1b', '\x07', '\r', '\u{202e}'] {
            assert!(
                !stdout.contains(bad),
                "{name} prints {bad:?} raw: {stdout:?}"
            );
        }
        assert!(stdout.contains("\\x1b"), "{name}: {stdout}");
        assert!(stdout.contains("\\u{202e}"), "{name}: {stdout}");
    }
    // JSON keeps the exact text.
    let runs = env
        .cmd([OsStr::new("ledger"), "list".as_ref(), "--json".as_ref()])
        .run()
        .json();
    assert_eq!(runs[0]["key"], "a\u{202e}\x07b");
}

#[test]
fn keys_with_format_characters_are_refused() {
    let env = Env::new();
    for key in [
        "pay\u{202e}gnp",
        "a\u{2066}b",
        "zero\u{200b}width",
        "a\u{feff}",
    ] {
        env.cmd(["run", "--key", key, "--", "true"])
            .expect_code(2)
            .stderr_has("invalid --key")
            // The message does not repeat the key raw.
            .stderr_lacks(key);
    }
    assert!(!env.db().exists());
}
