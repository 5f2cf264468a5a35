//! Jobs: a crontab line's runs across the keys its template makes, `idem
//! status`, per-job metrics, `--catch-up`, `--lock`, and the ledger commands
//! that speak jobs. Days pass under `faketime`, started at a time each test
//! names, so the periods are the test's, not the calendar's.

mod backfill;
mod catch_up;
mod ledger;
mod locks;
mod misfire;
mod periods;
mod status;
mod truth;

use std::process::{Command, Output, Stdio};

use crate::util::{assert_code, text, Env};

/// `idem ARGS` as if started at `when` (UTC), the clock running on from
/// there; `db` overrides the ledger (a PostgreSQL URL).
fn at_with(env: &Env, db: Option<&str>, when: &str, args: &[&str]) -> Command {
    let template = env.idem(args);
    let mut command = Command::new("faketime");
    command
        .arg("-f")
        .arg(format!("@{when}"))
        .arg(template.get_program())
        .args(template.get_args())
        .current_dir(env.dir.path())
        .stdin(Stdio::null())
        // Deadlines (timeouts, leases) stay on the real monotonic clock.
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    for (name, value) in template.get_envs() {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    if let Some(db) = db {
        command.env("IDEM_DB", db);
    }
    command
}

fn at(env: &Env, when: &str, args: &[&str]) -> Output {
    at_with(env, None, when, args).output().expect("idem runs")
}

/// `idem run` of the daily job `backup-{date}` at `when`, exiting `code`;
/// the command logs its key, job and slot to `log`.
fn backup(env: &Env, when: &str, code: i32, extra: &[&str]) -> Output {
    let log = env.path("log");
    let script = format!(
        "echo \"$IDEM_KEY $IDEM_JOB ${{IDEM_SLOT:-none}}\" >> '{}'; exit {code}",
        log.display()
    );
    let mut args = vec!["run", "--key", "backup-{date}", "--retries", "0"];
    args.extend_from_slice(extra);
    args.extend(["--shell", "--", &script]);
    at(env, when, &args)
}

fn log(env: &Env) -> Vec<String> {
    std::fs::read_to_string(env.path("log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn status_json(env: &Env, when: &str) -> (i32, serde_json::Value) {
    let output = at(env, when, &["status", "--json"]);
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let json = serde_json::from_slice(&output.stdout).expect("status --json prints JSON");
    (output.status.code().expect("exited"), json)
}

fn job<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status
        .as_array()
        .expect("an array")
        .iter()
        .find(|job| job["job"] == name)
        .unwrap_or_else(|| panic!("no job {name} in {status:#}"))
}

/// The samples of `metrics` (lines that are not comments).
fn samples(env: &Env, when: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["ledger", "metrics"];
    args.extend_from_slice(extra);
    let output = at(env, when, &args);
    assert_code(&output, 0);
    text(&output.stdout)
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}
