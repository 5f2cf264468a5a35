//! `idem ledger`: list, show, forget, prune, export/import, metrics, and
//! `idem run --replay`, on real SQLite ledgers.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{assert_code, text, Env};

/// Runs `script` under `key` through the shell, with no retries.
fn sh(env: &Env, key: &str, script: &str) -> std::process::Output {
    env.run([
        "run",
        "--key",
        key,
        "--retries",
        "0",
        "--shell",
        "--",
        script,
    ])
}

fn lines(output: &std::process::Output) -> Vec<String> {
    text(&output.stdout).lines().map(str::to_owned).collect()
}

fn keys_of(runs: &Value) -> Vec<String> {
    runs.as_array()
        .unwrap()
        .iter()
        .map(|run| run["key"].as_str().unwrap().to_owned())
        .collect()
}

fn list_keys<const N: usize>(env: &Env, args: [&str; N]) -> Vec<String> {
    let output = env.run(["ledger", "list", "--json"].into_iter().chain(args));
    assert_code(&output, 0);
    keys_of(&serde_json::from_slice(&output.stdout).unwrap())
}

/// Polls until `done` holds, failing after a generous bound.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "gave up waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `idem run --key KEY -- sleep 600` and waits until it runs.
fn start_sleeper(env: &Env, key: &str) -> Child {
    let child = env
        .idem(["run", "--key", key, "--", "sleep", "600"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("the sleeper is running", || {
        env.list_json()
            .as_array()
            .unwrap()
            .iter()
            .any(|run| run["key"] == key && run["status"] == "running")
    });
    child
}

#[test]
fn list_is_newest_first_with_every_filter() {
    let env = Env::new();
    assert_code(&sh(&env, "backup-a", "true"), 0);
    assert_code(&sh(&env, "backup-b", "exit 3"), 3);
    assert_code(&sh(&env, "report", "true"), 0);
    assert_code(&sh(&env, "backup-b", "exit 4"), 4);

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

    let bad = env.run(["ledger", "list", "--since", "yesterday"]);
    assert_code(&bad, 2);
    assert_eq!(
        text(&bad.stderr).lines().count(),
        1,
        "{}",
        text(&bad.stderr)
    );
    assert!(text(&bad.stderr).contains("--since"));
    assert_code(&env.run(["ledger", "list", "--status", "done"]), 2);
}

#[test]
fn list_draws_a_plain_table_off_a_terminal() {
    let env = Env::new();
    let long = format!("echo {}", "x".repeat(200));
    assert_code(&sh(&env, "long", &long), 0);
    assert_code(&sh(&env, "short", "exit 9"), 9);
    let output = env.idem(["ledger", "list"]).output().unwrap();
    assert_code(&output, 0);
    let table = lines(&output);
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
    let all = text(&output.stdout);
    assert!(!all.contains('\x1b'), "{all}");
    assert!(table[2].ends_with('…'), "{}", table[2]);
    assert!(table.iter().all(|line| line == line.trim_end()));

    // $COLUMNS bounds the width; the command gives way first.
    let narrow = env
        .idem(["ledger", "list"])
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    for line in lines(&narrow) {
        assert!(line.chars().count() <= 100, "{line}");
    }
    assert!(lines(&narrow)[2].starts_with("long "));

    // An empty ledger (or none at all) lists nothing.
    let fresh = Env::new();
    let none = fresh.run(["ledger", "list"]);
    assert_code(&none, 0);
    assert_eq!(text(&none.stdout), "");
    assert_eq!(fresh.list_json(), serde_json::json!([]));
}

#[test]
fn list_json_has_the_spec_fields() {
    let env = Env::new();
    assert_code(&sh(&env, "k", "exit 5"), 5);
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

#[test]
fn show_gives_state_runs_attempts_and_output() {
    let env = Env::new();
    let flaky = format!(
        "{}; echo out-$(wc -l < count); echo err >&2; [ $(wc -l < count) -ge 2 ]",
        env.count_cmd("count")
    );
    assert_code(
        &env.run([
            "run",
            "--key",
            "job",
            "--retries",
            "0",
            "--shell",
            "--",
            &flaky,
        ]),
        1,
    );
    assert_code(
        &env.run([
            "run",
            "--key",
            "job",
            "--retries",
            "0",
            "--shell",
            "--",
            &flaky,
        ]),
        0,
    );

    let human = env.run(["ledger", "show", "job"]);
    assert_code(&human, 0);
    let human = text(&human.stdout);
    assert!(human.starts_with("key job: succeeded at "), "{human}");
    assert!(human.contains("the next run skips it"), "{human}");
    assert!(
        human.contains("out-2") && human.contains("out-1"),
        "{human}"
    );
    assert!(human.contains("stderr:"), "{human}");
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

#[test]
fn show_of_non_utf8_output_is_valid_json() {
    let env = Env::new();
    let output = env
        .idem(["run", "--key", "bin", "--", "printf"])
        .arg(OsStr::from_bytes(b"\xff\xfeok\n"))
        .output()
        .unwrap();
    assert_code(&output, 0);
    let shown = env.show_json("bin");
    let tail = shown["attempts_detail"][0]["stdout_tail"].as_str().unwrap();
    assert!(tail.ends_with("ok\n"), "{tail:?}");
    assert!(tail.contains('\u{fffd}'));
}

#[test]
fn show_of_an_unknown_key_exits_1() {
    let env = Env::new();
    let none = env.run(["ledger", "show", "nope"]);
    assert_code(&none, 1);
    assert_eq!(text(&none.stdout), "");
    let stderr = text(&none.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("nope"), "{stderr}");
    assert_code(&sh(&env, "other", "true"), 0);
    assert_code(&env.run(["ledger", "show", "nope", "--json"]), 1);
}

#[test]
fn replay_prints_the_recorded_output_when_skipping() {
    let env = Env::new();
    let script = format!("{}; echo result; echo note >&2", env.count_cmd("count"));
    let first = env.run(["run", "--key", "k", "--shell", "--", &script]);
    assert_code(&first, 0);
    assert_eq!(text(&first.stdout), "result\n");

    let silent = env.run(["run", "--key", "k", "--shell", "--", &script]);
    assert_code(&silent, 0);
    assert_eq!(text(&silent.stdout), "");

    let replayed = env.run(["run", "--key", "k", "--replay", "--shell", "--", &script]);
    assert_code(&replayed, 0);
    assert_eq!(text(&replayed.stdout), "result\n");
    assert_eq!(text(&replayed.stderr), "note\n");
    assert_eq!(env.count("count"), 1);
}

#[test]
fn forget_makes_a_key_run_again_and_keeps_its_history() {
    let env = Env::new();
    let count = env.count_cmd("count");
    let run = || env.run(["run", "--key", "k", "--shell", "--", &count]);
    assert_code(&run(), 0);
    assert_code(&run(), 0);
    assert_eq!(env.count("count"), 1);

    let dry = env.run(["ledger", "forget", "--dry-run", "k"]);
    assert_code(&dry, 0);
    assert_eq!(
        text(&dry.stdout),
        "would forget k: was succeeded; it runs next time (1 run kept)\n"
    );
    assert_code(&run(), 0);
    assert_eq!(env.count("count"), 1, "a dry run changed nothing");

    let forgot = env.run(["ledger", "forget", "k"]);
    assert_code(&forgot, 0);
    assert_eq!(
        text(&forgot.stdout),
        "forgot k: was succeeded; it runs next time (1 run kept)\n"
    );
    let shown = text(&env.run(["ledger", "show", "k"]).stdout);
    assert!(shown.starts_with("key k: forgotten"), "{shown}");
    assert_eq!(env.list_json().as_array().unwrap().len(), 1);

    assert_code(&run(), 0);
    assert_eq!(env.count("count"), 2);
    assert_code(&run(), 0);
    assert_eq!(env.count("count"), 2, "the new success decides again");
    assert_eq!(env.list_json().as_array().unwrap().len(), 2);

    // Forgetting twice is harmless.
    assert_code(&env.run(["ledger", "forget", "k"]), 0);
    let again = env.run(["ledger", "forget", "k"]);
    assert_code(&again, 0);
    assert!(text(&again.stdout).contains("was forgotten already"));
}

#[test]
fn forget_purge_removes_the_history() {
    let env = Env::new();
    assert_code(&sh(&env, "gone", "exit 1"), 1);
    assert_code(&sh(&env, "gone", "true"), 0);
    assert_code(&sh(&env, "kept", "true"), 0);

    let dry = env.run(["ledger", "forget", "--purge", "--dry-run", "gone"]);
    assert_code(&dry, 0);
    assert_eq!(
        text(&dry.stdout),
        "would purge gone: was succeeded; 2 runs removed; it runs next time\n"
    );
    assert_eq!(env.list_json().as_array().unwrap().len(), 3);

    let purged = env.run(["ledger", "forget", "--purge", "gone"]);
    assert_code(&purged, 0);
    assert_eq!(keys_of(&env.list_json()), ["kept"]);
    assert_code(&env.run(["ledger", "show", "gone"]), 1);
    assert_code(&sh(&env, "gone", "true"), 0);
    assert_eq!(env.list_json().as_array().unwrap().len(), 2);
}

#[test]
fn forget_of_an_unknown_key_exits_1_after_forgetting_the_others() {
    let env = Env::new();
    assert_code(&sh(&env, "known", "true"), 0);
    let output = env.run(["ledger", "forget", "known", "nope"]);
    assert_code(&output, 1);
    assert!(text(&output.stdout).starts_with("forgot known:"));
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no key nope"), "{stderr}");
    assert!(text(&env.run(["ledger", "show", "known"]).stdout).contains("forgotten"));
    // No ledger at all: every key is unknown.
    assert_code(&Env::new().run(["ledger", "forget", "x"]), 1);
}

#[test]
fn quiet_silences_summaries_but_not_data_or_errors() {
    let env = Env::new();
    assert_code(&sh(&env, "a", "true"), 0);
    assert_code(&sh(&env, "b", "true"), 0);
    let exported = export(&env);
    let silent = |args: &[&str]| {
        let output = env.run(args);
        assert_code(&output, 0);
        assert_eq!(text(&output.stdout), "", "{args:?}");
        assert_eq!(text(&output.stderr), "", "{args:?}");
    };
    silent(&["-q", "ledger", "forget", "a"]);
    let shown = text(&env.run(["ledger", "show", "a"]).stdout);
    assert!(shown.starts_with("key a: forgotten"), "{shown}");
    silent(&["-q", "ledger", "prune", "--older-than", "0s"]);
    assert_eq!(
        env.list_json().as_array().unwrap().len(),
        1,
        "b's run stays"
    );
    let path = env.path("runs.jsonl");
    std::fs::write(&path, &exported).unwrap();
    let imported = env.run([
        OsStr::new("-q"),
        OsStr::new("ledger"),
        OsStr::new("import"),
        path.as_os_str(),
    ]);
    assert_code(&imported, 0);
    assert_eq!(text(&imported.stdout), "");
    assert_eq!(
        env.list_json().as_array().unwrap().len(),
        2,
        "a's run is back"
    );
    // Data still prints, and so do errors.
    assert!(!env.run(["-q", "ledger", "list"]).stdout.is_empty());
    let unknown = env.run(["-q", "ledger", "forget", "nope"]);
    assert_code(&unknown, 1);
    assert!(text(&unknown.stderr).contains("no key nope"));
}

#[test]
fn forget_refuses_a_key_that_runs_under_a_live_owner() {
    let env = Env::new();
    assert_code(&sh(&env, "other", "true"), 0);
    let mut sleeper = start_sleeper(&env, "busy");

    let refused = env.run(["ledger", "forget", "other", "busy"]);
    assert_code(&refused, 75);
    let stderr = text(&refused.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("key busy is running"), "{stderr}");
    assert!(stderr.contains("nothing was forgotten"), "{stderr}");
    assert_eq!(text(&refused.stdout), "");
    // All or nothing: the other key still decides.
    assert!(text(&env.run(["ledger", "show", "other"]).stdout).contains("succeeded"));
    assert_code(&env.run(["ledger", "forget", "--purge", "busy"]), 75);

    // SIGKILL the wrapper: its command dies with it (parent-death signal),
    // the owner is gone, and the key may be forgotten.
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    eventually("forget is allowed once the owner is gone", || {
        let output = env.run(["ledger", "forget", "busy"]);
        if output.status.code() == Some(75) {
            return false;
        }
        assert_code(&output, 0);
        assert!(
            text(&output.stdout).contains("marked abandoned"),
            "{}",
            text(&output.stdout)
        );
        true
    });
    let runs = env.list_json();
    let busy = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["key"] == "busy")
        .unwrap();
    assert_eq!(busy["status"], "abandoned");
    // Forgotten, so the next run is a fresh start, not a recovery.
    let recovered = env.run([
        "run",
        "--key",
        "busy",
        "--shell",
        "--",
        "test -z \"$IDEM_RECOVERED\"",
    ]);
    assert_code(&recovered, 0);
}

#[test]
fn prune_keeps_what_decides() {
    let env = Env::new();
    let count = env.count_cmd("count");
    // A key that failed, then succeeded: the success decides.
    assert_code(&sh(&env, "ok", "echo first; exit 1"), 1);
    assert_code(&sh(&env, "ok", &count), 0);
    // A key that only failed: its last failure decides (it runs again).
    assert_code(&sh(&env, "bad", "exit 2"), 2);
    assert_code(&sh(&env, "bad", "exit 3"), 3);
    // A forgotten key: nothing decides, so all of it may go.
    assert_code(&sh(&env, "old", "true"), 0);
    assert_code(&env.run(["ledger", "forget", "old"]), 0);

    let young = env.run(["ledger", "prune", "--older-than", "1h"]);
    assert_code(&young, 0);
    assert!(
        text(&young.stdout).starts_with("pruned 0 runs (0 attempts, 0 B of output)"),
        "{}",
        text(&young.stdout)
    );

    let dry = env.run(["ledger", "prune", "--older-than", "0s", "--dry-run"]);
    assert_code(&dry, 0);
    assert!(
        text(&dry.stdout).starts_with(
            "would prune 3 runs (3 attempts, 6 B of output, 1 forgotten key) that finished before "
        ),
        "{}",
        text(&dry.stdout)
    );
    assert_eq!(env.list_json().as_array().unwrap().len(), 5);

    let pruned = env.run(["ledger", "prune", "--older-than", "0s"]);
    assert_code(&pruned, 0);
    assert!(
        text(&pruned.stdout)
            .starts_with("pruned 3 runs (3 attempts, 6 B of output, 1 forgotten key)"),
        "{}",
        text(&pruned.stdout)
    );
    assert!(text(&pruned.stdout).contains("every key's deciding run stays"));
    let runs = env.list_json();
    let left: Vec<(String, String)> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|run| {
            (
                run["key"].as_str().unwrap().to_owned(),
                run["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        left,
        [
            ("bad".to_owned(), "failed".to_owned()),
            ("ok".to_owned(), "succeeded".to_owned())
        ]
    );
    // What run decides is unchanged: ok skips, bad runs.
    assert_code(&sh(&env, "ok", &count), 0);
    assert_eq!(env.count("count"), 1);
    assert_code(&sh(&env, "bad", "exit 4"), 4);
    assert_code(&env.run(["ledger", "show", "old"]), 1);
}

#[test]
fn prune_never_touches_a_running_run() {
    let env = Env::new();
    let mut sleeper = start_sleeper(&env, "busy");
    let pruned = env.run(["ledger", "prune", "--older-than", "0s"]);
    assert_code(&pruned, 0);
    assert!(text(&pruned.stdout).starts_with("pruned 0 runs"));
    assert_eq!(env.list_json()[0]["status"], "running");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}

fn export(env: &Env) -> Vec<u8> {
    let output = env.run(["ledger", "export"]);
    assert_code(&output, 0);
    output.stdout
}

fn import(env: &Env, stream: &[u8]) -> std::process::Output {
    let path = env.path("import.jsonl");
    std::fs::write(&path, stream).unwrap();
    env.run([OsStr::new("ledger"), OsStr::new("import"), path.as_os_str()])
}

#[test]
fn export_then_import_round_trips_into_a_fresh_ledger() {
    let source = Env::new();
    // Non-UTF-8 argv and output, a retried failure, a forgotten key.
    let binary = source
        .idem(["run", "--key", "bin", "--", "printf"])
        .arg(OsStr::from_bytes(b"\xff\xfe-out\n"))
        .output()
        .unwrap();
    assert_code(&binary, 0);
    assert_code(
        &source.run([
            "run",
            "--key",
            "flaky",
            "--retries",
            "1",
            "--backoff",
            "1ms",
            "--shell",
            "--",
            "echo try >&2; exit 3",
        ]),
        3,
    );
    assert_code(&sh(&source, "done", "echo done"), 0);
    assert_code(&sh(&source, "dropped", "true"), 0);
    assert_code(&source.run(["ledger", "forget", "dropped"]), 0);

    let stream = export(&source);
    let lines: Vec<Value> = stream
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 4);
    let bin = lines.iter().find(|line| line["key"] == "bin").unwrap();
    assert!(bin.get("command_base64").is_some(), "{bin}");
    assert!(bin["attempts_detail"][0]
        .get("stdout_tail_base64")
        .is_some());
    assert_eq!(bin["head"], true);
    let flaky = lines.iter().find(|line| line["key"] == "flaky").unwrap();
    assert_eq!(flaky["attempts_detail"].as_array().unwrap().len(), 2);
    let dropped = lines.iter().find(|line| line["key"] == "dropped").unwrap();
    assert_eq!(dropped["head"], false);

    let target = Env::new();
    let first = import(&target, &stream);
    assert_code(&first, 0);
    assert_eq!(
        text(&first.stdout),
        "imported 4 runs (0 updated, 0 already here); 3 became their keys' deciding runs\n"
    );
    assert_eq!(export(&target), stream, "the round trip is lossless");
    assert_eq!(target.list_json(), source.list_json());
    assert_eq!(target.show_json("bin"), source.show_json("bin"));

    let second = import(&target, &stream);
    assert_code(&second, 0);
    assert_eq!(
        text(&second.stdout),
        "imported 0 runs (0 updated, 4 already here); 0 became their keys' deciding runs\n"
    );
    assert_eq!(export(&target), stream, "importing twice changes nothing");

    // Through stdin too.
    let piped = Env::new();
    let mut child = piped
        .idem(["ledger", "import"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), &stream).unwrap();
    assert_code(&child.wait_with_output().unwrap(), 0);
    assert_eq!(export(&piped), stream);
}

#[test]
fn an_imported_success_is_honoured_by_run() {
    let source = Env::new();
    let count = source.count_cmd("count");
    assert_code(
        &source.run(["run", "--key", "k", "--shell", "--", &count]),
        0,
    );
    let target = Env::new();
    assert_code(&import(&target, &export(&source)), 0);
    // The same command line (the fingerprint covers argv): skipped.
    assert_code(
        &target.run(["run", "--key", "k", "--shell", "--", &count]),
        0,
    );
    assert_eq!(source.count("count"), 1);
    // A forgotten key stays forgotten through export and import.
    assert_code(&source.run(["ledger", "forget", "k"]), 0);
    let again = Env::new();
    assert_code(&import(&again, &export(&source)), 0);
    assert_code(
        &again.run(["run", "--key", "k", "--shell", "--", &count]),
        0,
    );
    assert_eq!(source.count("count"), 2);
}

#[test]
fn an_import_never_overrides_a_newer_run() {
    let older = Env::new();
    assert_code(&sh(&older, "k", "exit 1"), 1);
    let stream = export(&older);
    let target = Env::new();
    assert_code(&sh(&target, "k", "echo newer"), 0);
    let imported = import(&target, &stream);
    assert_code(&imported, 0);
    assert!(text(&imported.stdout).contains("0 became"));
    let shown = target.show_json("k");
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["history"][0]["status"], "failed");
    // The newer success still decides.
    assert_code(&sh(&target, "k", "echo newer"), 0);
    assert_eq!(target.list_json().as_array().unwrap().len(), 2);
}

#[test]
fn import_refuses_a_bad_line_with_its_number() {
    let source = Env::new();
    assert_code(&sh(&source, "a", "true"), 0);
    let mut stream = export(&source);
    stream.extend_from_slice(b"{\"key\": \"b\"}\n");
    let target = Env::new();
    let output = import(&target, &stream);
    assert_code(&output, 2);
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("run_id"), "{stderr}");
    // The good line before it is in, so a fixed stream can be imported again.
    assert_eq!(keys_of(&target.list_json()), ["a"]);

    for bad in [
        "not json",
        "[]",
        r#"{"key":"","run_id":"01a22687-a584-7676-8edf-694d9a9fe33c"}"#,
    ] {
        let output = import(&Env::new(), bad.as_bytes());
        assert_code(&output, 2);
        assert!(text(&output.stderr).contains("line 1"));
    }
    let missing = Env::new().run(["ledger", "import", "no-such-file"]);
    assert_code(&missing, 2);
    assert!(text(&missing.stderr).contains("no-such-file"));
}

/// Checks one line of the Prometheus text exposition format and returns
/// (name, labels, value).
fn parse_sample(line: &str) -> (String, Vec<(String, String)>, f64) {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    assert!(
        !name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit()),
        "bad metric name in {line:?}"
    );
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            let eq = rest.find('=').expect("label=value");
            let label = &rest[..eq];
            assert!(
                !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "bad label name in {line:?}"
            );
            rest = rest[eq + 1..].strip_prefix('"').expect("a quoted value");
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                let (at, c) = chars.next().expect("a closing quote");
                match c {
                    '"' => break at,
                    '\\' => match chars.next().expect("an escape").1 {
                        'n' => value.push('\n'),
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        other => panic!("bad escape \\{other} in {line:?}"),
                    },
                    '\n' => panic!("raw newline in {line:?}"),
                    c => value.push(c),
                }
            };
            labels.push((label.to_owned(), value));
            rest = &rest[end + 1..];
            if let Some(more) = rest.strip_prefix(',') {
                rest = more;
            } else {
                rest = rest.strip_prefix('}').expect("a closing brace");
                break;
            }
        }
    }
    let value = rest.strip_prefix(' ').expect("a space before the value");
    let value: f64 = value.parse().expect("a float value");
    (name.to_owned(), labels, value)
}

#[test]
fn metrics_are_the_prometheus_text_format() {
    let env = Env::new();
    let odd = r#"we"ird\key"#;
    assert_code(&sh(&env, odd, "true"), 0);
    let force = |script: &str| {
        env.run([
            "run",
            "--key",
            odd,
            "--retries",
            "0",
            "--force",
            "--shell",
            "--",
            script,
        ])
    };
    assert_code(&force("exit 1"), 1);
    assert_code(&force("exit 2"), 2);
    assert_code(&sh(&env, "fine", "true"), 0);

    let output = env.run(["ledger", "metrics"]);
    assert_code(&output, 0);
    let body = text(&output.stdout);
    let mut samples = Vec::new();
    let mut typed = std::collections::HashSet::new();
    for line in body.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            let words: Vec<&str> = comment.splitn(3, ' ').collect();
            assert!(matches!(words[0], "HELP" | "TYPE"), "{line}");
            assert!(words[1].starts_with("idem_"), "{line}");
            if words[0] == "TYPE" {
                assert!(matches!(words[2], "gauge" | "counter"), "{line}");
                assert!(typed.insert(words[1].to_owned()), "TYPE twice: {line}");
            }
            continue;
        }
        let (name, labels, value) = parse_sample(line);
        assert!(name.starts_with("idem_"), "{line}");
        assert!(typed.contains(&name), "a sample before its TYPE: {line}");
        samples.push((name, labels, value));
    }
    let get = |name: &str, key: &str, status: Option<&str>| -> f64 {
        samples
            .iter()
            .find(|(n, labels, _)| {
                n == name
                    && labels.contains(&("job".to_owned(), key.to_owned()))
                    && status.is_none_or(|s| labels.contains(&("status".to_owned(), s.to_owned())))
            })
            .unwrap_or_else(|| panic!("no {name} for {key} {status:?} in\n{body}"))
            .2
    };
    assert_eq!(get("idem_consecutive_failures", odd, None), 2.0);
    assert_eq!(get("idem_consecutive_failures", "fine", None), 0.0);
    assert_eq!(get("idem_last_run_status", odd, Some("failed")), 1.0);
    assert_eq!(get("idem_last_run_status", odd, Some("succeeded")), 0.0);
    assert_eq!(get("idem_last_run_exit_code", odd, None), 2.0);
    assert_eq!(get("idem_runs", odd, Some("succeeded")), 1.0);
    assert_eq!(get("idem_runs", odd, Some("failed")), 2.0);
    assert_eq!(get("idem_runs", odd, Some("running")), 0.0);
    let success = get("idem_last_success_timestamp_seconds", odd, None);
    let started = get("idem_last_run_timestamp_seconds", odd, None);
    assert!(success > 1.6e9 && started >= success, "{success} {started}");
    assert!(body.contains(r#"job="we\"ird\\key""#), "{body}");
    // Each key was its own job here; --per-key adds the per-key families.
    let per_key = text(&env.run(["ledger", "metrics", "--per-key"]).stdout);
    assert!(
        per_key.contains(r#"idem_key_consecutive_failures{key="we\"ird\\key"} 2"#),
        "{per_key}"
    );

    // No ledger: an empty but valid exposition.
    let none = Env::new().run(["ledger", "metrics"]);
    assert_code(&none, 0);
    assert!(text(&none.stdout).lines().all(|line| line.starts_with('#')));
}

#[test]
fn a_run_exported_while_running_takes_its_outcome_on_a_later_import() {
    let source = Env::new();
    let sleeper = start_sleeper(&source, "slow");
    let during = export(&source);
    let target = Env::new();
    let first = import(&target, &during);
    assert_code(&first, 0);
    assert!(
        text(&first.stdout).contains("0 became"),
        "{}",
        text(&first.stdout)
    );
    assert_eq!(target.list_json()[0]["status"], "running");
    // Its owner is not in this ledger, so it decides nothing here.
    assert!(text(&target.run(["ledger", "show", "slow"]).stdout).contains("forgotten"));

    // SIGTERM: idem passes it on and records the run as failed.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sleeper.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_code(&sleeper.wait_with_output().unwrap(), 143);
    let after = import(&target, &export(&source));
    assert_code(&after, 0);
    assert_eq!(
        text(&after.stdout),
        "imported 0 runs (1 updated, 0 already here); 1 became its key's deciding run\n"
    );
    assert_eq!(export(&target), export(&source));
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
        .env("IDEM_DB", env.db())
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

#[test]
fn list_colours_the_status_only_on_a_terminal_without_no_color() {
    let env = Env::new();
    assert_code(&sh(&env, "k", "exit 3"), 3);
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

#[test]
fn export_into_a_closed_pipe_is_the_readers_choice() {
    let source = Env::new();
    assert_code(&sh(&source, "seed", "true"), 0);
    let line = String::from_utf8(export(&source)).unwrap();
    let template: Value = serde_json::from_str(line.trim()).unwrap();
    // Enough runs that the export outgrows any pipe buffer.
    let mut stream = String::new();
    for n in 0..3000u32 {
        let mut run = template.clone();
        run["run_id"] = format!("01a22687-a584-7676-8edf-{n:012}").into();
        run["key"] = format!("key-{n}").into();
        run["attempts_detail"][0]["stdout_tail"] = "x".repeat(200).into();
        stream.push_str(&run.to_string());
        stream.push('\n');
    }
    let env = Env::new();
    assert_code(&import(&env, stream.as_bytes()), 0);
    let mut child = env
        .idem(["ledger", "export"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 100];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert_code(&output, 0);
    assert_eq!(text(&output.stderr), "");
}

#[test]
fn a_missing_ledger_lists_empty_but_an_impossible_path_is_an_error() {
    let env = Env::new();
    let missing = env.path("not/yet/ledger.db");
    let output = env
        .idem(["ledger", "list"])
        .env("IDEM_DB", &missing)
        .output()
        .unwrap();
    assert_code(&output, 0);
    assert_eq!(text(&output.stdout), "");
    assert!(!missing.exists(), "listing creates nothing");
    let file = env.path("a-file");
    std::fs::write(&file, "x").unwrap();
    let output = env
        .idem(["ledger", "list"])
        .env("IDEM_DB", file.join("ledger.db"))
        .output()
        .unwrap();
    assert_code(&output, 125);
    assert!(text(&output.stderr).contains("is not a folder"));
}

#[test]
fn a_value_that_cannot_be_read_is_an_error_naming_the_ledger() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "k", "--", "true"]), 0);
    // A run id that is not a UUID (a ledger edited by hand, or damaged).
    let edited = std::process::Command::new("sqlite3")
        .arg(env.db())
        .arg("UPDATE runs SET run_id = x'0102';")
        .status()
        .expect("sqlite3 is installed (.ci/run installs it)");
    assert!(edited.success());
    let output = env.run(["ledger", "list"]);
    assert_code(&output, 125);
    let stderr = text(&output.stderr);
    assert!(stderr.contains(&env.db().display().to_string()), "{stderr}");
    assert!(stderr.contains("a stored value cannot be read"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
