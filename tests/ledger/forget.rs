//! `idem ledger forget` and `prune`: what they change, what they refuse,
//! and what the metrics say after them.

use std::time::Duration;

use crate::util::{eventually, on_every_backend, Backend};

use super::{keys_of, sh, start_sleeper};

on_every_backend!(
    forget_makes_a_key_run_again_and_keeps_its_history,
    forget_purge_removes_the_history,
    forget_of_an_unknown_key_exits_1_after_forgetting_the_others,
    forget_refuses_a_key_that_runs_under_a_live_owner,
    prune_keeps_what_decides,
    prune_never_touches_a_running_run,
    forget_prune_and_metrics,
);

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
