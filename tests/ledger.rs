//! `idem ledger`: list, show, forget, prune, export/import, metrics, and
//! `idem run --replay`. Each scenario takes its ledgers from a [`Backend`]
//! and runs on SQLite and on PostgreSQL from one body; what only a SQLite
//! file can show comes last.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::util::{assert_code, eventually, on_every_backend, text, Backend, Env, Idem};

on_every_backend!(
    list_is_newest_first_with_every_filter,
    list_draws_a_plain_table_off_a_terminal,
    list_json_has_the_spec_fields,
    show_gives_state_runs_attempts_and_output,
    show_of_non_utf8_output_is_valid_json,
    show_of_an_unknown_key_exits_1,
    runs_once_then_skips,
    replay_prints_the_recorded_output_when_skipping,
    forget_makes_a_key_run_again_and_keeps_its_history,
    forget_purge_removes_the_history,
    forget_of_an_unknown_key_exits_1_after_forgetting_the_others,
    quiet_silences_summaries_but_not_data_or_errors,
    forget_refuses_a_key_that_runs_under_a_live_owner,
    prune_keeps_what_decides,
    prune_never_touches_a_running_run,
    forget_prune_and_metrics,
    export_then_import_round_trips_into_a_fresh_ledger,
    a_long_export_comes_whole_and_in_order,
    an_imported_success_is_honoured_by_run,
    an_import_never_overrides_a_newer_run,
    import_refuses_a_bad_line_with_its_number,
    metrics_are_the_prometheus_text_format,
    a_run_exported_while_running_takes_its_outcome_on_a_later_import,
    list_colours_the_status_only_on_a_terminal_without_no_color,
    export_into_a_closed_pipe_is_the_readers_choice,
);

/// Runs `script` under `key` through the shell, with no retries.
fn sh(env: &Env, key: &str, script: &str) -> Idem {
    env.cmd([
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

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_owned).collect()
}

fn keys_of(runs: &Value) -> Vec<String> {
    runs.as_array()
        .unwrap()
        .iter()
        .map(|run| run["key"].as_str().unwrap().to_owned())
        .collect()
}

#[track_caller]
fn list_keys<const N: usize>(env: &Env, args: [&str; N]) -> Vec<String> {
    keys_of(
        &env.cmd(["ledger", "list", "--json"])
            .args(args)
            .succeeds()
            .json(),
    )
}

/// Starts `idem run --key KEY -- sleep 600` and waits until it runs. On a
/// shared ledger an owner is judged by its lease alone, so there the lease
/// is short: a killed sleeper's key is free again within seconds.
fn start_sleeper(backend: &Backend, env: &Env, key: &str) -> Child {
    let lease: &[&str] = if backend.is_postgres() {
        &["--lease", "2s"]
    } else {
        &[]
    };
    let child = env
        .idem(["run", "--key", key])
        .args(lease)
        .args(["--", "sleep", "600"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("the sleeper to run", Duration::from_secs(30), || {
        // Until the sleeper has made the ledger, list says there is none.
        let listed = env.run(["ledger", "list", "--json"]);
        listed.status.success()
            && serde_json::from_slice::<Value>(&listed.stdout)
                .unwrap()
                .as_array()
                .unwrap()
                .iter()
                .any(|run| run["key"] == key && run["status"] == "running")
    });
    child
}

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

fn forget_makes_a_key_run_again_and_keeps_its_history(backend: &Backend) {
    let env = backend.env();
    let count = env.count_cmd("count");
    let run = || env.cmd(["run", "--key", "k", "--shell", "--", &count]);
    run().succeeds();
    run().succeeds();
    assert_eq!(env.count("count"), 1);

    env.cmd(["ledger", "forget", "--dry-run", "k"])
        .succeeds()
        .stdout_is("would forget k: was succeeded; it runs next time (1 run kept)\n");
    run().succeeds();
    assert_eq!(env.count("count"), 1, "a dry run changed nothing");

    env.cmd(["ledger", "forget", "k"])
        .succeeds()
        .stdout_is("forgot k: was succeeded; it runs next time (1 run kept)\n");
    env.cmd(["ledger", "show", "k"])
        .run()
        .stdout_starts_with("key k: forgotten");
    assert_eq!(env.list_json().as_array().unwrap().len(), 1);

    run().succeeds();
    assert_eq!(env.count("count"), 2);
    run().succeeds();
    assert_eq!(env.count("count"), 2, "the new success decides again");
    assert_eq!(env.list_json().as_array().unwrap().len(), 2);

    // Forgetting twice is harmless.
    env.cmd(["ledger", "forget", "k"]).succeeds();
    env.cmd(["ledger", "forget", "k"])
        .succeeds()
        .stdout_has("was forgotten already");
}

fn forget_purge_removes_the_history(backend: &Backend) {
    let env = backend.env();
    sh(&env, "gone", "exit 1").expect_code(1);
    sh(&env, "gone", "true").succeeds();
    sh(&env, "kept", "true").succeeds();

    env.cmd(["ledger", "forget", "--purge", "--dry-run", "gone"])
        .succeeds()
        .stdout_is("would purge gone: was succeeded; 2 runs removed; it runs next time\n");
    assert_eq!(env.list_json().as_array().unwrap().len(), 3);

    env.cmd(["ledger", "forget", "--purge", "gone"]).succeeds();
    assert_eq!(keys_of(&env.list_json()), ["kept"]);
    env.cmd(["ledger", "show", "gone"]).expect_code(1);
    sh(&env, "gone", "true").succeeds();
    assert_eq!(env.list_json().as_array().unwrap().len(), 2);
}

fn forget_of_an_unknown_key_exits_1_after_forgetting_the_others(backend: &Backend) {
    let env = backend.env();
    sh(&env, "known", "true").succeeds();
    env.cmd(["ledger", "forget", "known", "nope"])
        .expect_code(1)
        .stdout_starts_with("forgot known:")
        .stderr_one_line()
        .stderr_has("no key nope");
    env.cmd(["ledger", "show", "known"])
        .run()
        .stdout_has("forgotten");
    // No ledger at all: every key is unknown.
    backend.env().cmd(["ledger", "forget", "x"]).expect_code(1);
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

fn forget_refuses_a_key_that_runs_under_a_live_owner(backend: &Backend) {
    let env = backend.env();
    sh(&env, "other", "true").succeeds();
    let mut sleeper = start_sleeper(backend, &env, "busy");

    env.cmd(["ledger", "forget", "other", "busy"])
        .expect_code(75)
        .stderr_one_line()
        .stderr_has("key busy is running")
        .stderr_has("nothing was forgotten")
        .stdout_is("");
    // All or nothing: the other key still decides.
    env.cmd(["ledger", "show", "other"])
        .run()
        .stdout_has("succeeded");
    env.cmd(["ledger", "forget", "--purge", "busy"])
        .expect_code(75);

    // SIGKILL the wrapper: its command dies with it (parent-death signal),
    // the owner is gone, and the key may be forgotten.
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    eventually(
        "forget to be allowed once the owner is gone",
        Duration::from_secs(30),
        || {
            let forgot = env.cmd(["ledger", "forget", "busy"]).run();
            if forgot.code() == Some(75) {
                return false;
            }
            forgot.expect_code(0).stdout_has("marked abandoned");
            true
        },
    );
    let runs = env.list_json();
    let busy = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["key"] == "busy")
        .unwrap();
    assert_eq!(busy["status"], "abandoned");
    // Forgotten, so the next run is a fresh start, not a recovery.
    env.cmd([
        "run",
        "--key",
        "busy",
        "--shell",
        "--",
        "test -z \"$IDEM_RECOVERED\"",
    ])
    .succeeds();
}

fn prune_keeps_what_decides(backend: &Backend) {
    let env = backend.env();
    let count = env.count_cmd("count");
    // A key that failed, then succeeded: the success decides.
    sh(&env, "ok", "echo first; exit 1").expect_code(1);
    sh(&env, "ok", &count).succeeds();
    // A key that only failed: its last failure decides (it runs again).
    sh(&env, "bad", "exit 2").expect_code(2);
    sh(&env, "bad", "exit 3").expect_code(3);
    // A forgotten key: nothing decides, so all of it may go.
    sh(&env, "old", "true").succeeds();
    env.cmd(["ledger", "forget", "old"]).succeeds();

    env.cmd(["ledger", "prune", "--older-than", "1h"])
        .succeeds()
        .stdout_starts_with("pruned 0 runs (0 attempts, 0 B of output)");

    env.cmd(["ledger", "prune", "--older-than", "0s", "--dry-run"])
        .succeeds()
        .stdout_starts_with(
            "would prune 3 runs (3 attempts, 6 B of output, 1 forgotten key) that finished before ",
        );
    assert_eq!(env.list_json().as_array().unwrap().len(), 5);

    env.cmd(["ledger", "prune", "--older-than", "0s"])
        .succeeds()
        .stdout_starts_with("pruned 3 runs (3 attempts, 6 B of output, 1 forgotten key)")
        .stdout_has("every key's deciding run stays");
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
    sh(&env, "ok", &count).succeeds();
    assert_eq!(env.count("count"), 1);
    sh(&env, "bad", "exit 4").expect_code(4);
    env.cmd(["ledger", "show", "old"]).expect_code(1);
}

fn prune_never_touches_a_running_run(backend: &Backend) {
    let env = backend.env();
    let mut sleeper = start_sleeper(backend, &env, "busy");
    env.cmd(["ledger", "prune", "--older-than", "0s"])
        .succeeds()
        .stdout_starts_with("pruned 0 runs");
    assert_eq!(env.list_json()[0]["status"], "running");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}

/// Forget, prune and metrics on one ledger, one after the other.
fn forget_prune_and_metrics(backend: &Backend) {
    let env = backend.env();
    let count = env.count_cmd("count");
    let run = |key: &str, script: &str| {
        env.cmd([
            "run",
            "--key",
            key,
            "--retries",
            "0",
            "--force",
            "--shell",
            "--",
            script,
        ])
    };
    run("k", &count).succeeds();
    run("k", "exit 1").expect_code(1);
    run("k", "exit 2").expect_code(2);
    run("other", "true").succeeds();

    env.cmd(["ledger", "metrics"])
        .succeeds()
        .stdout_has("idem_consecutive_failures{job=\"k\"} 2")
        .stdout_has("idem_consecutive_failures{job=\"other\"} 0")
        .stdout_has("idem_runs{job=\"k\",status=\"failed\"} 2");

    // Prune keeps each key's deciding run.
    env.cmd(["ledger", "prune", "--older-than", "0s"])
        .succeeds();
    let runs = env.list_json();
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");
    env.cmd(["run", "--key", "other", "--shell", "--", &count])
        .expect_code(65);

    // Forget makes a key run again and keeps its history; --purge drops it.
    env.cmd(["run", "--key", "once", "--shell", "--", &count])
        .succeeds();
    env.cmd(["ledger", "forget", "once"]).succeeds();
    env.cmd(["run", "--key", "once", "--shell", "--", &count])
        .succeeds();
    assert_eq!(env.count("count"), 3);
    env.cmd(["ledger", "forget", "--purge", "once"]).succeeds();
    env.cmd(["ledger", "show", "once"]).expect_code(1);
}

#[track_caller]
fn export(env: &Env) -> Vec<u8> {
    env.cmd(["ledger", "export"])
        .succeeds()
        .into_output()
        .stdout
}

/// `idem ledger import FILE` of `stream`, not yet run.
fn import(env: &Env, stream: &[u8]) -> Idem {
    let path = env.path("import.jsonl");
    std::fs::write(&path, stream).unwrap();
    env.cmd(["ledger", "import"]).arg(path)
}

fn export_then_import_round_trips_into_a_fresh_ledger(backend: &Backend) {
    let source = backend.env();
    // Non-UTF-8 argv and output, a retried failure, a forgotten key.
    source
        .cmd(["run", "--key", "bin", "--", "printf"])
        .arg(OsStr::from_bytes(b"\xff\xfe-out\n"))
        .succeeds();
    source
        .cmd([
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
        ])
        .expect_code(3);
    sh(&source, "done", "echo done").succeeds();
    sh(&source, "dropped", "true").succeeds();
    source.cmd(["ledger", "forget", "dropped"]).succeeds();

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

    let target = backend.env();
    import(&target, &stream).succeeds().stdout_is(
        "imported 4 runs (0 updated, 0 already here); 3 became their keys' deciding runs\n",
    );
    assert_eq!(export(&target), stream, "the round trip is lossless");
    assert_eq!(target.list_json(), source.list_json());
    assert_eq!(target.show_json("bin"), source.show_json("bin"));

    import(&target, &stream).succeeds().stdout_is(
        "imported 0 runs (0 updated, 4 already here); 0 became their keys' deciding runs\n",
    );
    assert_eq!(export(&target), stream, "importing twice changes nothing");

    // Through stdin too.
    let piped = backend.env();
    piped
        .cmd(["ledger", "import"])
        .stdin(stream.clone())
        .succeeds();
    assert_eq!(export(&piped), stream);
}

/// More runs and attempts than the export reads at a time, with the
/// attempts' batches falling out of step with the runs'.
fn a_long_export_comes_whole_and_in_order(backend: &Backend) {
    const RUNS: usize = 700;
    let mut stream = String::new();
    for n in 0..RUNS {
        let attempts: Vec<Value> = (1..=n % 3)
            .map(|attempt| {
                serde_json::json!({
                    "attempt": attempt, "exit_code": 1, "signal": null, "timed_out": false,
                    "output_cut": false,
                    "started_at": format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
                    "finished_at": format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
                    "stdout_tail": format!("run {n} attempt {attempt}\n"), "stderr_tail": "",
                })
            })
            .collect();
        let line = serde_json::json!({
            "key": format!("k{}", n % 40), "job": format!("k{}", n % 40), "head": false,
            "run_id": format!("00000000-0000-7000-8000-{n:012}"),
            "status": "failed", "exit_code": 1, "signal": null, "attempts": n % 3,
            "started_at": format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
            "finished_at": format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
            "host": "h", "pid": 1, "command": ["true"], "shell": false, "recovered": false,
            "attempts_detail": attempts,
        });
        stream.push_str(&line.to_string());
        stream.push('\n');
    }
    let first = backend.env();
    import(&first, stream.as_bytes()).succeeds();
    let exported = export(&first);
    let lines: Vec<Value> = exported
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), RUNS);
    for (n, line) in lines.iter().enumerate() {
        assert_eq!(line["run_id"], format!("00000000-0000-7000-8000-{n:012}"));
        let attempts = line["attempts_detail"].as_array().unwrap();
        assert_eq!(attempts.len(), n % 3, "{line}");
        for (at, attempt) in attempts.iter().enumerate() {
            assert_eq!(
                attempt["stdout_tail"],
                format!("run {n} attempt {}\n", at + 1)
            );
        }
    }
    let second = backend.env();
    import(&second, &exported).succeeds();
    assert_eq!(export(&second), exported, "the round trip is lossless");
}

fn an_imported_success_is_honoured_by_run(backend: &Backend) {
    let source = backend.env();
    let count = source.count_cmd("count");
    let run = |env: &Env| env.cmd(["run", "--key", "k", "--shell", "--", &count]);
    run(&source).succeeds();
    let target = backend.env();
    import(&target, &export(&source)).succeeds();
    // The same command line (the fingerprint covers argv): skipped.
    run(&target).succeeds();
    assert_eq!(source.count("count"), 1);
    // A forgotten key stays forgotten through export and import.
    source.cmd(["ledger", "forget", "k"]).succeeds();
    let again = backend.env();
    import(&again, &export(&source)).succeeds();
    run(&again).succeeds();
    assert_eq!(source.count("count"), 2);
}

fn an_import_never_overrides_a_newer_run(backend: &Backend) {
    let older = backend.env();
    sh(&older, "k", "exit 1").expect_code(1);
    let stream = export(&older);
    let target = backend.env();
    sh(&target, "k", "echo newer").succeeds();
    import(&target, &stream).succeeds().stdout_has("0 became");
    let shown = target.show_json("k");
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["history"][0]["status"], "failed");
    // The newer success still decides.
    sh(&target, "k", "echo newer").succeeds();
    assert_eq!(target.list_json().as_array().unwrap().len(), 2);
}

fn import_refuses_a_bad_line_with_its_number(backend: &Backend) {
    let source = backend.env();
    sh(&source, "a", "true").succeeds();
    let mut stream = export(&source);
    stream.extend_from_slice(b"{\"key\": \"b\"}\n");
    let target = backend.env();
    import(&target, &stream)
        .expect_code(2)
        .stderr_one_line()
        .stderr_has("line 2")
        .stderr_has("run_id");
    // The good line before it is in, so a fixed stream can be imported again.
    assert_eq!(keys_of(&target.list_json()), ["a"]);

    for bad in [
        "not json",
        "[]",
        r#"{"key":"","run_id":"01a22687-a584-7676-8edf-694d9a9fe33c"}"#,
    ] {
        import(&backend.env(), bad.as_bytes())
            .expect_code(2)
            .stderr_has("line 1");
    }
    backend
        .env()
        .cmd(["ledger", "import", "no-such-file"])
        .expect_code(2)
        .stderr_has("no-such-file");
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

fn metrics_are_the_prometheus_text_format(backend: &Backend) {
    let env = backend.env();
    let odd = r#"we"ird\key"#;
    sh(&env, odd, "true").succeeds();
    let force = |script: &str| {
        env.cmd([
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
    force("exit 1").expect_code(1);
    force("exit 2").expect_code(2);
    sh(&env, "fine", "true").succeeds();

    let body = env.cmd(["ledger", "metrics"]).succeeds().stdout();
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
    env.cmd(["ledger", "metrics", "--per-key"])
        .run()
        .stdout_has(r#"idem_key_consecutive_failures{key="we\"ird\\key"} 2"#);

    // An empty ledger: an empty but valid exposition.
    let empty = backend.env();
    empty.cmd(["ledger", "import"]).stdin("").succeeds();
    let none = empty.cmd(["ledger", "metrics"]).succeeds();
    assert!(none.stdout().lines().all(|line| line.starts_with('#')));
}

fn a_run_exported_while_running_takes_its_outcome_on_a_later_import(backend: &Backend) {
    let source = backend.env();
    let sleeper = start_sleeper(backend, &source, "slow");
    let during = export(&source);
    let target = backend.env();
    import(&target, &during).succeeds().stdout_has("0 became");
    assert_eq!(target.list_json()[0]["status"], "running");
    // Its owner is not in this ledger, so it decides nothing here.
    target
        .cmd(["ledger", "show", "slow"])
        .run()
        .stdout_has("forgotten");

    // SIGTERM: idem passes it on and records the run as failed.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sleeper.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_code(&sleeper.wait_with_output().unwrap(), 143);
    import(&target, &export(&source)).succeeds().stdout_is(
        "imported 0 runs (1 updated, 0 already here); 1 became its key's deciding run\n",
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

fn export_into_a_closed_pipe_is_the_readers_choice(backend: &Backend) {
    let source = backend.env();
    sh(&source, "seed", "true").succeeds();
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
    let env = backend.env();
    import(&env, stream.as_bytes()).succeeds();
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

// What only a SQLite file can show: its path, and its bytes edited by hand.

#[test]
fn a_missing_ledger_is_told_and_an_impossible_path_is_an_error() {
    let env = Env::new();
    let missing = env.path("not/yet/ledger.db");
    env.cmd(["ledger", "list"])
        .db(&missing)
        .expect_code(1)
        .stderr_has("no ledger at")
        .stdout_is("");
    assert!(!missing.exists(), "listing creates nothing");
    let file = env.path("a-file");
    std::fs::write(&file, "x").unwrap();
    env.cmd(["ledger", "list"])
        .db(file.join("ledger.db"))
        .expect_code(125)
        .stderr_has("is not a folder");
}

#[test]
fn a_value_that_cannot_be_read_is_an_error_naming_the_ledger() {
    let env = Env::new();
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    // A run id that is not a UUID (a ledger edited by hand, or damaged).
    crate::util::sqlite(&env.db(), "UPDATE runs SET run_id = x'0102';");
    env.cmd(["ledger", "list"])
        .expect_code(125)
        .stderr_has(&env.db().display().to_string())
        .stderr_has("a stored value cannot be read")
        .stderr_one_line();
}
