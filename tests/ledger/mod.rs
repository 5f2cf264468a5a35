//! `idem ledger`: list, show, forget, prune, export/import, metrics, and
//! `idem run --replay`. Each scenario takes its ledgers from a [`Backend`]
//! and runs on SQLite and on PostgreSQL from one body; what only a SQLite
//! file can show comes last.

mod containment;
mod export;
mod forget;
mod list;
mod metrics;
pub(crate) mod prune;

use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::util::{eventually, Backend, Env, Idem};

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
        let listed = env.cmd(["ledger", "list", "--json"]).run();
        listed.code() == Some(0)
            && serde_json::from_str::<serde_json::Value>(&listed.stdout())
                .unwrap()
                .as_array()
                .unwrap()
                .iter()
                .any(|run| run["key"] == key && run["status"] == "running")
    });
    child
}

#[track_caller]
pub(crate) fn export(env: &Env) -> Vec<u8> {
    env.cmd(["ledger", "export"])
        .succeeds()
        .into_output()
        .stdout
}

/// `idem ledger import FILE` of `stream`, not yet run.
pub(crate) fn import(env: &Env, stream: &[u8]) -> Idem {
    let path = env.path("import.jsonl");
    std::fs::write(&path, stream).unwrap();
    env.cmd(["ledger", "import"]).arg(path)
}

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
