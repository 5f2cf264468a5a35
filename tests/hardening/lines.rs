//! idem's own lines: one write each, under concurrency and odd
//! environments.

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::util::{assert_code, require, sqlite, text, Env};

// ------------------------------------------------------------------- lines

/// The buffers written, in strace's notation, by every (process, descriptor)
/// that wrote an `idem: ` line: idem's stderr, however duplicated.
fn stderr_writes(trace: &Path) -> Vec<String> {
    let calls: Vec<(String, String)> = fs::read_to_string(trace)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let (pid, call) = line.split_once(' ')?;
            let call = call.trim_start().strip_prefix("write(")?;
            let (fd, rest) = call.split_once(", ")?;
            let buffer = rest.rsplit_once(", ")?.0;
            Some((format!("{pid}/{fd}"), buffer.to_owned()))
        })
        .collect();
    let streams: Vec<&String> = calls
        .iter()
        .filter(|(_, buffer)| buffer.contains("idem: "))
        .map(|(stream, _)| stream)
        .collect();
    calls
        .iter()
        .filter(|(stream, _)| streams.contains(&stream))
        .map(|(_, buffer)| buffer.clone())
        .collect()
}

/// idem `args` on ledger `db` under strace, its writes kept in `trace`.
fn traced(env: &Env, trace: &Path, db: &Path, args: &[&str]) -> Output {
    Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=write",
            "-e",
            "signal=none",
            "-s",
            "4096",
            "-o",
        ])
        .arg(trace)
        .arg(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .env("IDEM_DB", db)
        .env("HOME", env.dir.path())
        .env("TZ", "UTC")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn each_idem_line_is_one_write() {
    if !require(Command::new("strace").arg("-V").output().is_ok(), "strace") {
        return;
    }
    let env = Env::new();
    let trace = env.path("trace");
    let retried = [
        "run",
        "--key",
        "k",
        "--retries",
        "2",
        "--backoff",
        "1ms",
        "--",
        "false",
    ];
    let output = traced(&env, &trace, &env.db(), &retried);
    assert_code(&output, 1);
    let lines = text(&output.stderr).lines().count();
    assert_eq!(lines, 3, "{}", text(&output.stderr));
    let writes = stderr_writes(&trace);
    assert_eq!(writes.len(), lines, "{writes:#?}");
    for write in &writes {
        assert!(
            write.starts_with("\"idem: ") && write.ends_with("\\n\""),
            "{write}"
        );
    }

    // An error that stops idem, printed by main.
    fs::write(env.path("not-a-folder"), b"a file").unwrap();
    let db = env.path("not-a-folder/ledger.db");
    let output = traced(&env, &trace, &db, &["ledger", "show", "k"]);
    assert_code(&output, 125);
    let writes = stderr_writes(&trace);
    assert_eq!(writes.len(), 1, "{writes:#?}");
}

#[test]
fn a_delay_under_a_second_is_told_in_milliseconds() {
    let env = Env::new();
    let output = env
        .cmd([
            "run",
            "--key",
            "k",
            "--retries",
            "1",
            "--backoff",
            "300ms",
            "--",
            "false",
        ])
        .expect_code(1);
    let stderr = output.stderr();
    let said = stderr
        .split("retrying in ")
        .nth(1)
        .unwrap_or_else(|| panic!("{stderr}"));
    let number: String = said.chars().take_while(char::is_ascii_digit).collect();
    assert!(said[number.len()..].starts_with("ms"), "{stderr}");
    let ms: u64 = number.parse().unwrap();
    assert!((150..=300).contains(&ms), "{stderr}");
}

#[test]
fn a_clock_before_1970_is_a_clear_125() {
    if !crate::util::have_faketime() {
        return;
    }
    let env = Env::new();
    let template = env.idem([
        "run",
        "--key",
        "k",
        "--shell",
        "--",
        &env.count_cmd("count"),
    ]);
    let mut command = crate::util::wrapped(&template, &["faketime", "1969-12-31 00:00:00"]);
    let output = command.output().unwrap();
    assert_code(&output, 125);
    assert!(
        text(&output.stderr).contains("before 1970"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(env.count("count"), 0);
}

#[test]
fn an_unusable_tmpdir_under_quiet_success_claims_nothing() {
    let env = Env::new();
    env.cmd([
        "run",
        "--key",
        "k",
        "--quiet-success",
        "--shell",
        "--",
        &env.count_cmd("count"),
    ])
    .env("TMPDIR", env.path("missing"))
    .expect_code(125);
    assert_eq!(env.count("count"), 0);
    // Nothing was left running, so the next run is not told of a recovery.
    let recovered = format!(
        "echo \"$IDEM_RECOVERED\" >> '{}'",
        env.path("seen").display()
    );
    env.cmd(["run", "--key", "k", "--shell", "--", &recovered])
        .succeeds();
    assert_eq!(fs::read_to_string(env.path("seen")).unwrap(), "\n");
}

#[test]
fn a_closed_stdout_is_not_retried() {
    let env = Env::new();
    // idem's stdout is a pipe whose reader has gone.
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    let output = env
        .idem([
            "run",
            "--key",
            "k",
            "--backoff",
            "10ms",
            "--shell",
            "--",
            &format!("{}; yes | head -c 1000000", env.count_cmd("count")),
        ])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_code(&output, 141);
    assert_eq!(env.count("count"), 1, "{}", text(&output.stderr));
}

#[test]
fn a_replay_of_an_output_longer_than_was_kept_says_its_start_is_cut() {
    let env = Env::new();
    let run = |key: &str, args: &[&str]| {
        let mut all = vec!["run", "--key", key, "--replay", "--capture", "16"];
        all.extend_from_slice(args);
        env.cmd(all)
    };
    run("long", &["--", "seq", "1", "100"]).succeeds();
    run("long", &["--", "seq", "1", "100"])
        .succeeds()
        .stdout_is("96\n97\n98\n99\n100\n")
        .stderr_has("the replay lacks its start");
    // What was kept whole replays without a word.
    run("short", &["--", "echo", "hi"]).succeeds();
    run("short", &["--", "echo", "hi"])
        .run()
        .stdout_is("hi\n")
        .stderr_is("");
    // The ledger tells it to scripts, and an export carries it.
    assert_eq!(
        env.show_json("long")["attempts_detail"][0]["output_cut"],
        true
    );
    assert_eq!(
        env.show_json("short")["attempts_detail"][0]["output_cut"],
        false
    );
    env.cmd(["ledger", "export"])
        .run()
        .stdout_has("\"output_cut\":true");
}

/// A count or a number out of its range, in a ledger edited by hand, is an
/// error naming the ledger and the column: never a zero that looks like a
/// job that never failed, nor words about a time.
#[test]
fn a_negative_count_or_an_out_of_range_number_is_an_error_naming_the_ledger() {
    let env = Env::new();
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    let ledger = env.db().display().to_string();
    sqlite(&env.db(), "UPDATE jobs SET failures = -1;");
    env.cmd(["status"])
        .expect_code(125)
        .stderr_has(&ledger)
        .stderr_has("a stored value cannot be read (a negative count (-1) in column failures)")
        .stderr_one_line();
    sqlite(
        &env.db(),
        "UPDATE jobs SET failures = 0; UPDATE runs SET pid = -1;",
    );
    env.cmd(["ledger", "list"])
        .expect_code(125)
        .stderr_has(&ledger)
        .stderr_has("a stored value cannot be read (-1 is out of range in column pid)")
        .stderr_one_line();
}
