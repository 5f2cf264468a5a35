//! Bytes are data: keys, arguments and output that are not plain text
//! reach the child and the ledger byte for byte.

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::process::Command;

use crate::util::{integrity_check, text, Env};

/// A child that writes each argument, NUL-terminated, to `argv.out`.
fn argv_writer(env: &Env) -> Vec<OsString> {
    let out = env.path("argv.out");
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "for a in \"$@\"; do printf '%s\\0' \"$a\"; done > '{}'",
            out.display()
        )
        .into(),
        "sh".into(),
    ]
}

#[test]
fn keys_and_arguments_reach_the_child_and_the_ledger_byte_for_byte() {
    let env = Env::new();
    let key = "it's \"quoted\" '); DROP TABLE keys; -- ünïcödé ✓ 日本 {{x}}";
    let stored_key = "it's \"quoted\" '); DROP TABLE keys; -- ünïcödé ✓ 日本 {x}";
    let args: Vec<OsString> = vec![
        "it's".into(),
        "\"double\"".into(),
        "'; DROP TABLE runs; --".into(),
        "Robert'); DELETE FROM keys WHERE ('1'='1".into(),
        "ünïcödé ✓ 日本 🦀".into(),
        OsString::from_vec(vec![0xff, 0xfe, b'x', 0x80]),
        "".into(),
        "$(touch pwned) `touch pwned` *".into(),
        "two\nlines\ttab".into(),
        "%s %n %x".into(),
    ];
    let mut argv: Vec<OsString> = vec!["run".into(), "--key".into(), key.into(), "--".into()];
    argv.extend(argv_writer(&env));
    argv.extend(args.iter().cloned());
    env.cmd(&argv).succeeds();
    let written = fs::read(env.path("argv.out")).unwrap();
    let expected: Vec<u8> = args
        .iter()
        .flat_map(|arg| arg.as_bytes().iter().copied().chain([0]))
        .collect();
    assert_eq!(written, expected, "the child got other bytes");
    assert!(!env.path("pwned").exists(), "an argument reached a shell");

    // Stored byte for byte: the command column holds argv NUL-separated.
    let mut command = argv_writer(&env);
    command.extend(args.iter().cloned());
    let stored = Command::new("sqlite3")
        .arg(env.db())
        .arg("SELECT hex(command) FROM runs")
        .output()
        .unwrap();
    let hex: String = command
        .iter()
        .map(|arg| arg.as_bytes().to_vec())
        .collect::<Vec<_>>()
        .join(&0u8)
        .iter()
        .map(|byte| format!("{byte:02X}"))
        .collect();
    assert_eq!(text(&stored.stdout).trim(), hex);

    // Shown without corruption (lossy only where bytes are not UTF-8).
    let runs = env.list_json();
    assert_eq!(runs[0]["key"], stored_key);
    let shown = env.show_json(stored_key);
    let words = shown["command"].as_array().unwrap();
    assert_eq!(words[4], "it's");
    assert_eq!(words[6], "'; DROP TABLE runs; --");
    assert_eq!(words[8], "ünïcödé ✓ 日本 🦀");
    assert_eq!(words[9], "\u{fffd}\u{fffd}x\u{fffd}");
    assert_eq!(words[12], "two\nlines\ttab");
    env.cmd(["ledger", "show", stored_key])
        .succeeds()
        .stdout_has("日本");

    // The same bytes are the same command: skipped, not a mismatch.
    fs::remove_file(env.path("argv.out")).unwrap();
    env.cmd(&argv).succeeds();
    assert!(!env.path("argv.out").exists(), "it ran twice");
    // A glob full of quotes finds the key and breaks nothing.
    let found = env
        .cmd([
            "ledger",
            "list",
            "--json",
            "--key",
            "it's \"quoted\" '); DROP*",
        ])
        .succeeds()
        .json();
    assert_eq!(found.as_array().unwrap().len(), 1);
    assert_eq!(integrity_check(&env.db()), "ok");
}

#[test]
fn binary_output_keeps_json_valid() {
    let env = Env::new();
    let ran = env
        .cmd([
            "run",
            "--key",
            "bin",
            "--shell",
            "--",
            "head -c 20000 /dev/urandom; printf '\\0\\377\\033[31m\"\\\\' >&2",
        ])
        .succeeds();
    assert_eq!(
        ran.output.stdout.len(),
        20000,
        "stdout passed through byte for byte"
    );
    let shown = env.show_json("bin");
    let tail = shown["attempts_detail"][0]["stderr_tail"].as_str().unwrap();
    assert_eq!(tail, "\0\u{fffd}\u{1b}[31m\"\\");
    let _ = env.list_json();
    // --replay gives back the raw bytes.
    let replay = env
        .cmd([
            "run",
            "--key",
            "bin",
            "--replay",
            "--shell",
            "--",
            "head -c 20000 /dev/urandom; printf '\\0\\377\\033[31m\"\\\\' >&2",
        ])
        .succeeds();
    assert_eq!(replay.output.stderr, b"\0\xff\x1b[31m\"\\");
}
