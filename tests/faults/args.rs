//! Bad arguments: exit 2 and one line naming the flag; and the longest
//! durations, taken.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use crate::util::Env;

/// A key one byte longer than a key may be.
const LONG_KEY: &str = match std::str::from_utf8(&[b'k'; 513]) {
    Ok(key) => key,
    Err(_) => panic!("ASCII is UTF-8"),
};

/// Bad command lines: the arguments, the exit, and what the one line of
/// error must name (the flag, or the thing).
const BAD_ARGUMENTS: &[(&[&str], i32, &str)] = &[
    (
        &["run", "--key", "k", "--retries", "-1", "--", "true"],
        2,
        "--retries",
    ),
    (
        &["run", "--key", "k", "--retries", "x", "--", "true"],
        2,
        "--retries",
    ),
    (
        &[
            "run",
            "--key",
            "k",
            "--retries",
            "99999999999",
            "--",
            "true",
        ],
        2,
        "--retries",
    ),
    (
        &["run", "--key", "k", "--retries", "", "--", "true"],
        2,
        "--retries",
    ),
    (
        &["run", "--key", "k", "--backoff", "-1s", "--", "true"],
        2,
        "--backoff",
    ),
    (
        &["run", "--key", "k", "--backoff=-1s", "--", "true"],
        2,
        "--backoff",
    ),
    (
        &["run", "--key", "k", "--backoff", "5", "--", "true"],
        2,
        "--backoff",
    ),
    (
        &["run", "--key", "k", "--backoff", "soon", "--", "true"],
        2,
        "--backoff",
    ),
    (
        &["run", "--key", "k", "--max-backoff", "", "--", "true"],
        2,
        "--max-backoff",
    ),
    (
        &["run", "--key", "k", "--timeout", "0", "--", "true"],
        2,
        "--timeout",
    ),
    (
        &[
            "run",
            "--key",
            "k",
            "--timeout",
            "500000000000y",
            "--",
            "true",
        ],
        2,
        "--timeout",
    ),
    (
        &["run", "--key", "k", "--timeout", "--", "true"],
        2,
        "--timeout",
    ),
    (
        &["run", "--key", "k", "--wait", "101y", "--", "true"],
        2,
        "--wait",
    ),
    (
        &["run", "--key", "k", "--wait", "1e9", "--", "true"],
        2,
        "--wait",
    ),
    (
        &["run", "--key", "k", "--ttl", "forever", "--", "true"],
        2,
        "--ttl",
    ),
    (
        &["run", "--key", "k", "--kill-after", "1x", "--", "true"],
        2,
        "--kill-after",
    ),
    (
        &["run", "--key", "k", "--lease", "0", "--", "true"],
        2,
        "--lease",
    ),
    (
        &["run", "--key", "k", "--lease", "300ms", "--", "true"],
        2,
        "--lease",
    ),
    (
        &["run", "--key", "k", "--retry-on", "1,x", "--", "true"],
        2,
        "--retry-on",
    ),
    (
        &["run", "--key", "k", "--retry-on", "300", "--", "true"],
        2,
        "--retry-on",
    ),
    (
        &["run", "--key", "k", "--retry-on", "5-1", "--", "true"],
        2,
        "--retry-on",
    ),
    (
        &["run", "--key", "k", "--retry-on", "-1", "--", "true"],
        2,
        "--retry-on",
    ),
    (
        &["run", "--key", "k", "--retry-on", "", "--", "true"],
        2,
        "--retry-on",
    ),
    (
        &["run", "--key", "k", "--no-retry-on", "1,,2", "--", "true"],
        2,
        "--no-retry-on",
    ),
    (
        &[
            "run",
            "--key",
            "k",
            "--skipped-exit-code",
            "256",
            "--",
            "true",
        ],
        2,
        "--skipped-exit-code",
    ),
    (
        &[
            "run",
            "--key",
            "k",
            "--conflict-exit-code",
            "-3",
            "--",
            "true",
        ],
        2,
        "--conflict-exit-code",
    ),
    (
        &["run", "--key", "k", "--capture", "5GiB", "--", "true"],
        2,
        "--capture",
    ),
    (
        &["run", "--key", "k", "--capture", "-1", "--", "true"],
        2,
        "--capture",
    ),
    (
        &["run", "--key", "k", "--capture", "64 KiB", "--", "true"],
        2,
        "--capture",
    ),
    (
        &["run", "--key", "k", "--on-abandoned", "maybe", "--", "true"],
        2,
        "--on-abandoned",
    ),
    (&["run", "--key", "k"], 2, "<COMMAND>"),
    (&["run", "--key", "k", "--"], 2, "<COMMAND>"),
    (&["run", "--key", "k", "--", ""], 2, "command after --"),
    (&["run", "--", "true"], 2, "--key"),
    (&["run", "--key", "", "--", "true"], 2, "--key"),
    (&["run", "--key", "{nope}", "--", "true"], 2, "--key"),
    (&["run", "--key", "{}", "--", "true"], 2, "--key"),
    (&["run", "--key", "a{date", "--", "true"], 2, "--key"),
    (&["run", "--key", "a}b", "--", "true"], 2, "--key"),
    (&["run", "--key", "a\tb", "--", "true"], 2, "--key"),
    (&["run", "--key", "a\u{7f}b", "--", "true"], 2, "--key"),
    (&["run", "--key", "line\nbreak", "--", "true"], 2, "--key"),
    (&["run", "--key", LONG_KEY, "--", "true"], 2, "--key"),
    (&["run", "--nope", "--key", "k", "--", "true"], 2, "--nope"),
    (&["ledger", "list", "--limit", "-5"], 2, "--limit"),
    (&["ledger", "list", "--limit", "many"], 2, "--limit"),
    (&["ledger", "list", "--since", "yesterday"], 2, "--since"),
    (&["ledger", "list", "--status", "weird"], 2, "--status"),
    (&["--db", "", "ledger", "list"], 2, "--db"),
    (&["doctor", "--bogus"], 2, "--bogus"),
    (&["nosuch"], 2, "nosuch"),
];

/// Arguments that are not UTF-8 where text is expected (`\xff` is never
/// UTF-8), as for [`BAD_ARGUMENTS`].
const NOT_UTF8: &[(&[&[u8]], i32, &str)] = &[
    (&[b"run", b"--key", b"k\xff", b"--", b"true"], 2, "--key"),
    (&[b"run", b"--key=k\xff", b"--", b"true"], 2, "--key"),
    (
        &[
            b"run",
            b"--key",
            b"k",
            b"--timeout",
            b"1\xffs",
            b"--",
            b"true",
        ],
        2,
        "--timeout",
    ),
    (&[b"ledger", b"show", b"k\xff"], 2, "argument 'k"),
    (
        &[b"--db", b"postgres://\xff", b"ledger", b"list"],
        2,
        "--db",
    ),
];

/// Every bad argument: its exit, one line naming the flag (or the thing),
/// never a panic, and no ledger created.
#[test]
fn bad_arguments_are_one_line_naming_the_flag() {
    let env = Env::new();
    let text = BAD_ARGUMENTS.iter().map(|(args, code, names)| {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        (args, *code, *names)
    });
    let bytes = NOT_UTF8.iter().map(|(args, code, names)| {
        let args: Vec<OsString> = args
            .iter()
            .map(|arg| OsStr::from_bytes(arg).into())
            .collect();
        (args, *code, *names)
    });
    let mut all_stderr = String::new();
    for (args, code, names) in text.chain(bytes) {
        let stderr = env
            .cmd(&args)
            .expect_code(code)
            .stderr_one_line()
            .stderr_starts_with("idem: ")
            .stderr_has(names)
            .stderr();
        all_stderr.push_str(&stderr);
    }
    assert!(!all_stderr.contains("panicked"), "{all_stderr}");
    assert!(!all_stderr.contains("RUST_BACKTRACE"), "{all_stderr}");
    assert!(!env.db().exists(), "bad input created a ledger");
}

/// Durations up to the bound are taken, and do not overflow any deadline.
#[test]
fn long_durations_are_taken() {
    Env::new()
        .cmd([
            "run",
            "--key",
            "k",
            "--retries",
            "1",
            "--timeout",
            "99y",
            "--wait",
            "99y",
            "--ttl",
            "99y",
            "--kill-after",
            "99y",
            "--lease",
            "99y",
            "--backoff",
            "1ms",
            "--max-backoff",
            "99y",
            "--",
            "true",
        ])
        .succeeds();
}

/// Each command line and the one line it must get (after `idem: `).
fn each_says(lines: &[(&[&str], &str)]) {
    let env = Env::new();
    for (args, expected) in lines {
        env.cmd(*args)
            .expect_code(2)
            .stderr_is(&format!("idem: {expected}\n"));
    }
}

/// A long flag given one dash: clap reads `-key` as `-k ey` and then
/// fails on the next word, which is not what went wrong, or runs under
/// the key "ey".
#[test]
fn a_long_flag_with_one_dash_is_named() {
    each_says(&[
        (
            &["run", "-key", "--", "true"],
            "unknown option '-key'; did you mean '--key'? (see idem run --help)",
        ),
        (
            &["run", "-key=x", "--", "true"],
            "unknown option '-key=x'; did you mean '--key'? (see idem run --help)",
        ),
        (
            &["-verbose", "run", "--key", "k", "--", "true"],
            "unknown option '-verbose'; did you mean '--verbose'? (see idem --help)",
        ),
        (
            &["run", "-key", "k", "--", "true"],
            "unknown option '-key'; did you mean '--key'? (see idem run --help)",
        ),
        (
            &["run", "--key", "k", "-retries", "3", "--", "true"],
            "unknown option '-retries'; did you mean '--retries'? (see idem run --help)",
        ),
        (
            &["run", "-quiet", "--key", "k", "--", "true"],
            "unknown option '-quiet'; did you mean '--quiet'? (see idem run --help)",
        ),
        (
            &["run", "--key", "k", "-timeout=5m", "--", "true"],
            "unknown option '-timeout=5m'; did you mean '--timeout'? (see idem run --help)",
        ),
        (
            &["ledger", "list", "-limit", "3"],
            "unknown option '-limit'; did you mean '--limit'? (see idem ledger list --help)",
        ),
    ]);
    // After --, the words are the command's.
    Env::new()
        .cmd(["run", "--key", "k", "--", "echo", "-key"])
        .succeeds()
        .stdout_is("-key\n");
}

/// Nothing ran under "ey" when `-key` was refused; a short flag glued to
/// its value is still that flag and value.
#[test]
fn a_short_flag_glued_to_its_value_still_runs() {
    let env = Env::new();
    env.cmd(["run", "-key", "--", "true"]).expect_code(2);
    env.cmd(["run", "-kbackup", "--", "true"]).succeeds();
    env.cmd(["run", "-k", "ey", "--", "true"]).succeeds();
    env.cmd(["run", "-k-key", "--", "true"]).succeeds();
    let mut keys: Vec<String> = env
        .list_json()
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    assert_eq!(keys, ["-key", "backup", "ey"]);
}

/// A duration split by a space (`--timeout 5 minutes`): its second word
/// is not the command, and the line says how to write the value.
#[test]
fn a_duration_split_by_a_space_is_named() {
    each_says(&[
        (
            &[
                "run",
                "--key",
                "k",
                "--timeout",
                "5",
                "minutes",
                "--",
                "true",
            ],
            "invalid value '5 minutes' for '--timeout': quote it or write it without the space: \
             --timeout 5m (see idem run --help)",
        ),
        (
            &["run", "--key", "k", "--backoff=1", "h", "--", "true"],
            "invalid value '1 h' for '--backoff': quote it or write it without the space: \
             --backoff 1h (see idem run --help)",
        ),
        (
            &["run", "--key", "k", "--timeout", "1h", "30m", "--", "true"],
            "invalid value '1h 30m' for '--timeout': quote it or write it without the space: \
             --timeout 1h30m (see idem run --help)",
        ),
    ]);
    // A whole value followed by a word: a missing --, as before.
    let env = Env::new();
    for (args, corrected) in [
        (
            &["run", "--key", "k", "echo", "hi"][..],
            "idem run --key k -- echo hi",
        ),
        (
            &["run", "--key", "k", "--retries", "3", "4", "--", "true"][..],
            "idem run --key k --retries 3 -- 4 -- true",
        ),
        (
            &["run", "--key", "k", "--timeout", "5m", "sleep", "1"][..],
            "idem run --key k --timeout 5m -- sleep 1",
        ),
    ] {
        env.cmd(args)
            .expect_code(2)
            .stderr_one_line()
            .stderr_has(&format!("put -- before the command: {corrected}"));
    }
}

/// A flag or subcommand a few letters off gets the nearest one, in one
/// sentence; one of as many words wins a tie (`--retry` meant the plural).
#[test]
fn a_typo_gets_the_nearest_flag_or_subcommand() {
    each_says(&[
        (
            &["run", "--ky", "k", "--", "true"],
            "unknown option '--ky'; did you mean '--key'? (see idem run --help)",
        ),
        (
            &["run", "--key", "k", "--retry", "3", "--", "true"],
            "unknown option '--retry'; did you mean '--retries'? (see idem run --help)",
        ),
        (
            &["run", "--key", "k", "--retryon", "3", "--", "true"],
            "unknown option '--retryon'; did you mean '--retry-on'? (see idem run --help)",
        ),
        (
            &["rn", "--key", "k", "--", "true"],
            "unknown subcommand 'rn'; did you mean 'run'? (see idem --help)",
        ),
        (
            &["ledger", "lst"],
            "unknown subcommand 'lst'; did you mean 'list'? (see idem ledger --help)",
        ),
    ]);
    // Nothing close: clap's words, no guess.
    let env = Env::new();
    for args in [
        &["nosuch"][..],
        &["run", "--nope", "--key", "k", "--", "true"],
    ] {
        env.cmd(args)
            .expect_code(2)
            .stderr_one_line()
            .stderr_lacks("did you mean")
            .stderr_lacks("tip:");
    }
}

/// A count out of range is said in words, not as the range of a type.
#[test]
fn a_bad_count_says_how_to_write_one() {
    let env = Env::new();
    for (args, said) in [
        (
            &["run", "--key", "k", "--retries", "-1"][..],
            "a count cannot be negative; write 0 or more",
        ),
        (
            &["run", "--key", "k", "--catch-up", "-2"],
            "a count cannot be negative",
        ),
        (
            &["ledger", "list", "--limit", "-1"],
            "a count cannot be negative",
        ),
        (
            &["run", "--key", "k", "--retries", "3x"],
            "3x is not a whole number",
        ),
        (
            &["run", "--key", "k", "--retries", "99999999999"],
            "more than idem counts to",
        ),
    ] {
        let mut args = args.to_vec();
        if args[0] == "run" {
            args.extend(["--", "true"]);
        }
        env.cmd(&args)
            .expect_code(2)
            .stderr_one_line()
            .stderr_has(said)
            .stderr_lacks("0..=");
    }
}
