//! `idem ledger list` and `show`, `idem run --replay`, and `--quiet` on
//! the ledger commands.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;

use serde_json::Value;

use crate::util::{on_every_backend, text, Backend, Env};

use super::{export, lines, list_keys, sh};

on_every_backend!(
    list_is_newest_first_with_every_filter,
    list_draws_a_plain_table_off_a_terminal,
    list_json_has_the_spec_fields,
    show_gives_state_runs_attempts_and_output,
    show_of_non_utf8_output_is_valid_json,
    show_of_an_unknown_key_exits_1,
    runs_once_then_skips,
    replay_prints_the_recorded_output_when_skipping,
    quiet_silences_summaries_but_not_data_or_errors,
    list_colours_the_status_only_on_a_terminal_without_no_color,
);

fn list_is_newest_first_with_every_filter(backend: &Backend) {
    let env = backend.env();
    sh(&env, "backup-a", "true").succeeds();
    sh(&env, "backup-b", "exit 3").expect_code(3);
    sh(&env, "report", "true").succeeds();
    sh(&env, "backup-b", "exit 4").expect_code(4);

    assert_eq!(
        list_keys(&env, []),
        ["backup-b", "report", "backup-b", "backup-a"]
    );
    assert_eq!(
        list_keys(&env, ["--key", "backup-*"]),
        ["backup-b", "backup-b", "backup-a"]
    );
    assert_eq!(list_keys(&env, ["--key", "backup-?"]).len(), 3);
    assert_eq!(list_keys(&env, ["--key", "[r]*"]), ["report"]);
    assert_eq!(
        list_keys(&env, ["--status", "failed"]),
        ["backup-b", "backup-b"]
    );
    assert_eq!(
        list_keys(&env, ["--status", "succeeded", "--status", "failed"]).len(),
        4
    );
    assert!(list_keys(&env, ["--status", "running"]).is_empty());
    assert_eq!(list_keys(&env, ["--limit", "2"]), ["backup-b", "report"]);
    assert_eq!(list_keys(&env, ["--since", "1h"]).len(), 4);
    assert_eq!(
        list_keys(&env, ["--since", "2000-01-01T00:00:00Z"]).len(),
        4
    );
    assert!(list_keys(&env, ["--since", "2999-01-01T00:00:00Z"]).is_empty());
    assert_eq!(
        list_keys(
            &env,
            ["--key", "backup-*", "--status", "failed", "--limit", "1"]
        ),
        ["backup-b"]
    );

    env.cmd(["ledger", "list", "--since", "yesterday"])
        .expect_code(2)
        .stderr_one_line()
        .stderr_has("--since");
    env.cmd(["ledger", "list", "--status", "done"])
        .expect_code(2);
}

fn list_draws_a_plain_table_off_a_terminal(backend: &Backend) {
    let env = backend.env();
    let long = format!("echo {}", "x".repeat(200));
    sh(&env, "long", &long).succeeds();
    sh(&env, "short", "exit 9").expect_code(9);
    let output = env.cmd(["ledger", "list"]).succeeds();
    let table = lines(&output.stdout());
    assert_eq!(table.len(), 3, "{table:?}");
    let header: Vec<&str> = table[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["KEY", "STATUS", "EXIT", "ATTEMPTS", "STARTED", "DURATION", "HOST", "COMMAND"]
    );
    let short: Vec<&str> = table[1].split_whitespace().collect();
    assert_eq!(&short[..4], ["short", "failed", "9", "1"]);
    // Started in local time (TZ=UTC here), to the second.
    assert_eq!(short[4].len(), "2026-01-01".len());
    assert_eq!(short[5].len(), "00:00:00".len());
    // Off a terminal: no colour, and the command is shortened.
    output.stdout_lacks("\x1b");
    assert!(table[2].ends_with('…'), "{}", table[2]);
    assert!(table.iter().all(|line| line == line.trim_end()));

    // $COLUMNS bounds the width; the command gives way first.
    let narrow = env.cmd(["ledger", "list"]).env("COLUMNS", "100").run();
    for line in lines(&narrow.stdout()) {
        assert!(line.chars().count() <= 100, "{line}");
    }
    assert!(lines(&narrow.stdout())[2].starts_with("long "));

    // An empty ledger lists nothing (one that is not there is told: see
    // tests/truth.rs).
    let fresh = backend.env();
    fresh.cmd(["ledger", "import"]).stdin("").succeeds();
    fresh.cmd(["ledger", "list"]).succeeds().stdout_is("");
    assert_eq!(fresh.list_json(), serde_json::json!([]));
}

fn list_json_has_the_spec_fields(backend: &Backend) {
    let env = backend.env();
    sh(&env, "k", "exit 5").expect_code(5);
    let runs = env.list_json();
    let run = &runs[0];
    for field in [
        "key",
        "run_id",
        "status",
        "exit_code",
        "signal",
        "attempts",
        "started_at",
        "finished_at",
        "duration_ms",
        "host",
        "pid",
        "command",
        "shell",
    ] {
        assert!(run.get(field).is_some(), "missing {field} in {run}");
    }
    assert_eq!(run["status"], "failed");
    assert_eq!(run["exit_code"], 5);
    assert_eq!(run["signal"], Value::Null);
    assert_eq!(run["shell"], true);
    assert_eq!(run["command"], serde_json::json!(["exit 5"]));
    assert!(run["started_at"].as_str().unwrap().ends_with('Z'));
    assert!(run["duration_ms"].as_i64().unwrap() >= 0);
}

fn show_gives_state_runs_attempts_and_output(backend: &Backend) {
    let env = backend.env();
    let flaky = format!(
        "{}; echo out-$(wc -l < count); echo err >&2; [ $(wc -l < count) -ge 2 ]",
        env.count_cmd("count")
    );
    sh(&env, "job", &flaky).expect_code(1);
    sh(&env, "job", &flaky).succeeds();

    let human = env
        .cmd(["ledger", "show", "job"])
        .succeeds()
        .stdout_starts_with("key job: succeeded at ")
        .stdout_has("the next run skips it")
        .stdout_has("out-2")
        .stdout_has("out-1")
        .stdout_has("stderr:")
        .stdout();
    // Newest run first.
    assert!(human.find("out-2") < human.find("out-1"), "{human}");

    let shown = env.show_json("job");
    assert_eq!(shown["key"], "job");
    assert_eq!(shown["status"], "succeeded");
    let detail = shown["attempts_detail"].as_array().unwrap();
    assert_eq!(detail.len(), 1);
    for field in [
        "exit_code",
        "signal",
        "timed_out",
        "started_at",
        "finished_at",
        "stdout_tail",
        "stderr_tail",
    ] {
        assert!(detail[0].get(field).is_some(), "missing {field}");
    }
    assert_eq!(detail[0]["stdout_tail"], "out-2\n");
    assert_eq!(detail[0]["stderr_tail"], "err\n");
    assert_eq!(detail[0]["timed_out"], false);
    let history = shown["history"].as_array().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["status"], "failed");
    assert_eq!(history[0]["exit_code"], 1);
}

fn show_of_non_utf8_output_is_valid_json(backend: &Backend) {
    let env = backend.env();
    env.cmd(["run", "--key", "bin", "--", "printf"])
        .arg(OsStr::from_bytes(b"\xff\xfeok\n"))
        .succeeds();
    let shown = env.show_json("bin");
    let tail = shown["attempts_detail"][0]["stdout_tail"].as_str().unwrap();
    assert!(tail.ends_with("ok\n"), "{tail:?}");
    assert!(tail.contains('\u{fffd}'));
}

fn show_of_an_unknown_key_exits_1(backend: &Backend) {
    let env = backend.env();
    // Before any run (on SQLite: no ledger at all, which is told so).
    env.cmd(["ledger", "show", "nope"])
        .expect_code(1)
        .stdout_is("")
        .stderr_one_line();
    sh(&env, "other", "true").succeeds();
    env.cmd(["ledger", "show", "nope"])
        .expect_code(1)
        .stdout_is("")
        .stderr_one_line()
        .stderr_has("no runs of key nope");
    env.cmd(["ledger", "show", "nope", "--json"]).expect_code(1);
}

/// The run story of a ledger: once, then skipped; a different command is
/// refused; a failure runs again; --force runs; and show, list and
/// --replay read it all back.
fn runs_once_then_skips(backend: &Backend) {
    let env = backend.env();
    let count = env.count_cmd("count");
    for _ in 0..3 {
        env.cmd(["run", "--key", "backup", "--shell", "--", &count])
            .succeeds();
    }
    assert_eq!(env.count("count"), 1);
    let runs = env.list_json();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    assert_eq!(runs[0]["key"], "backup");
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[0]["exit_code"], 0);
    assert_eq!(runs[0]["attempts"], 1);
    assert_eq!(runs[0]["shell"], true);

    // A different command: refused; a failure runs again; --force runs.
    env.cmd(["run", "--key", "backup", "--", "true"])
        .expect_code(65);
    let fail = format!("{count}; exit 7");
    for _ in 0..2 {
        env.cmd([
            "run",
            "--key",
            "f",
            "--retries",
            "1",
            "--backoff",
            "10ms",
            "--shell",
            "--",
            &fail,
        ])
        .expect_code(7);
    }
    assert_eq!(env.count("count"), 5);
    env.cmd(["run", "--key", "backup", "--force", "--shell", "--", &count])
        .succeeds();
    assert_eq!(env.count("count"), 6);

    let show = env.cmd(["ledger", "show", "f", "--json"]).succeeds().json();
    assert_eq!(show["status"], "failed");
    assert_eq!(show["exit_code"], 7);
    assert_eq!(show["attempts"], 2);
    assert_eq!(show["attempts_detail"].as_array().unwrap().len(), 2);
    assert_eq!(show["history"].as_array().unwrap().len(), 1);
    let failed = env
        .cmd([
            "ledger", "list", "--json", "--status", "failed", "--key", "f*",
        ])
        .succeeds()
        .json();
    assert_eq!(failed.as_array().unwrap().len(), 2);

    // Output tails and --replay come back from the ledger.
    env.cmd(["run", "--key", "hello", "--", "echo", "hello"])
        .succeeds();
    env.cmd(["run", "--key", "hello", "--replay", "--", "echo", "hello"])
        .succeeds()
        .stdout_is("hello\n");
}

fn replay_prints_the_recorded_output_when_skipping(backend: &Backend) {
    let env = backend.env();
    let script = format!("{}; echo result; echo note >&2", env.count_cmd("count"));
    env.cmd(["run", "--key", "k", "--shell", "--", &script])
        .succeeds()
        .stdout_is("result\n");
    env.cmd(["run", "--key", "k", "--shell", "--", &script])
        .succeeds()
        .stdout_is("");
    env.cmd(["run", "--key", "k", "--replay", "--shell", "--", &script])
        .succeeds()
        .stdout_is("result\n")
        .stderr_is("note\n");
    assert_eq!(env.count("count"), 1);
}

fn quiet_silences_summaries_but_not_data_or_errors(backend: &Backend) {
    let env = backend.env();
    sh(&env, "a", "true").succeeds();
    sh(&env, "b", "true").succeeds();
    let exported = export(&env);
    let silent = |args: &[&str]| {
        env.cmd(args).succeeds().stdout_is("").stderr_is("");
    };
    silent(&["-q", "ledger", "forget", "a"]);
    env.cmd(["ledger", "show", "a"])
        .run()
        .stdout_starts_with("key a: forgotten");
    silent(&["-q", "ledger", "prune", "--older-than", "0s"]);
    assert_eq!(
        env.list_json().as_array().unwrap().len(),
        1,
        "b's run stays"
    );
    let path = env.path("runs.jsonl");
    std::fs::write(&path, &exported).unwrap();
    env.cmd(["-q", "ledger", "import"])
        .arg(&path)
        .succeeds()
        .stdout_is("");
    assert_eq!(
        env.list_json().as_array().unwrap().len(),
        2,
        "a's run is back"
    );
    // Data still prints, and so do errors.
    assert!(!env.cmd(["-q", "ledger", "list"]).run().stdout().is_empty());
    env.cmd(["-q", "ledger", "forget", "nope"])
        .expect_code(1)
        .stderr_has("no key nope");
}

/// `idem ARGS` on a pseudo-terminal (script(1)), with `NO_COLOR` as given.
fn on_a_terminal(env: &Env, args: &str, no_color: Option<&str>) -> Option<String> {
    let mut command = std::process::Command::new("script");
    command
        .args([
            "-qec",
            &format!("{} {args}", env!("CARGO_BIN_EXE_idem")),
            "/dev/null",
        ])
        .env("IDEM_DB", env.ledger())
        .env("TZ", "UTC")
        .env("COLUMNS", "120")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    if let Some(value) = no_color {
        command.env("NO_COLOR", value);
    }
    let output = command.output().ok()?;
    // script(1) itself failed (no pseudo-terminal to be had).
    if text(&output.stderr).starts_with("script:") {
        return None;
    }
    Some(text(&output.stdout))
}

fn list_colours_the_status_only_on_a_terminal_without_no_color(backend: &Backend) {
    let env = backend.env();
    sh(&env, "k", "exit 3").expect_code(3);
    let Some(coloured) = on_a_terminal(&env, "ledger list", None) else {
        crate::util::require(false, "a terminal from script(1)");
        return;
    };
    assert!(coloured.contains("\x1b["), "{coloured:?}");
    assert!(coloured.contains("failed"), "{coloured:?}");
    let plain = on_a_terminal(&env, "ledger list", Some("1")).unwrap();
    assert!(!plain.contains('\x1b'), "{plain:?}");
    assert!(plain.contains("failed"), "{plain:?}");
    // Off a terminal there is never colour (see the plain-table test).

    // import does not wait on a terminal for a stream that never comes.
    let refused = on_a_terminal(&env, "ledger import; echo exit=$?", None).unwrap();
    assert!(
        refused.contains("pipe one in or give a FILE"),
        "{refused:?}"
    );
    assert!(refused.contains("exit=2"), "{refused:?}");
}
