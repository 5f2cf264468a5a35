//! A run a person stops (`idem stop`) is no failure: its job is
//! `stopped`, its failures in a row and `--alert-after` do not count it,
//! no `--on-failure` hook runs, and each monitor is told the run ended
//! without a failure (Healthchecks' success signal, Sentry's `ok`,
//! Cronitor's `complete`), so that no check stays started.

use std::process::Stdio;
use std::time::Duration;

use super::monitor::{Mode, Monitor, Protocol};
use crate::util::{wait_for_file, Env};

/// Runs a command under `key` that waits to be stopped, stops it with
/// `idem stop`, and waits for its idem to end; its exit code.
fn stopped_run(env: &Env, key: &str, extra: &[&str]) -> Option<i32> {
    let started = env.path("started");
    let _ = std::fs::remove_file(&started);
    let script = format!("touch '{}'; sleep 300", started.display());
    let mut args = vec!["run", "--key", key];
    args.extend_from_slice(extra);
    args.extend(["--shell", "--", &script]);
    let mut owner = env
        .idem(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("idem run starts");
    wait_for_file(&started, Duration::from_secs(30), &mut owner);
    env.cmd(["stop", key]).succeeds();
    owner.wait().expect("idem run ends").code()
}

/// What each monitor was told of the stopped run, in order.
fn told(protocol: Protocol) -> [&'static str; 2] {
    match protocol {
        Protocol::Healthchecks => ["/start", ""],
        Protocol::Sentry => ["in_progress", "ok"],
        Protocol::Cronitor => ["run", "complete"],
    }
}

#[test]
fn a_stopped_run_is_no_failure_and_ends_each_monitors_run() {
    for protocol in [Protocol::Healthchecks, Protocol::Sentry, Protocol::Cronitor] {
        let env = Env::new();
        let monitor = Monitor::speaking(protocol, Mode::Ok);
        let ping = format!("--ping={}", monitor.url());
        let hook = format!("--on-failure={}", env.count_cmd("hook"));
        let code = stopped_run(&env, "nightly", &[&ping, &hook]);
        assert_eq!(code, Some(143), "a stop ends the run as SIGTERM would");
        assert_eq!(
            env.count("hook"),
            0,
            "{protocol:?}: no failure hook for a stop"
        );
        let suffixes: Vec<String> = monitor
            .delivered()
            .into_iter()
            .map(|ping| ping.suffix)
            .collect();
        assert_eq!(suffixes, told(protocol), "{protocol:?}");
        let status = env.cmd(["status", "--json"]).succeeds().json();
        assert_eq!(status[0]["state"], "stopped", "{status:#}");
        assert_eq!(status[0]["failures"], 0, "{status:#}");
        assert_eq!(status[0]["strip"], serde_json::json!(["stopped"]));
        env.cmd(["status"])
            .succeeds()
            .stdout_has("nightly  stopped");
    }
}

#[test]
fn a_stop_counts_toward_no_alert_after() {
    let env = Env::new();
    let hook = format!("--on-failure={}", env.count_cmd("hook"));
    let alert = ["--alert-after", "3"];
    let failing = |env: &Env| {
        env.cmd([
            "run", "--key", "sync", "--force", alert[0], alert[1], &hook, "--", "false",
        ])
        .expect_code(1);
    };
    failing(&env);
    assert_eq!(
        stopped_run(&env, "sync", &["--force", alert[0], alert[1], &hook]),
        Some(143)
    );
    let status = env.cmd(["status", "--json"]).succeeds().json();
    assert_eq!(status[0]["state"], "stopped", "{status:#}");
    assert_eq!(
        status[0]["failures"], 1,
        "the stop is not a failure: {status:#}"
    );
    assert_eq!(env.count("hook"), 0, "no hook for a stop");
    failing(&env);
    assert_eq!(
        env.count("hook"),
        0,
        "the failure after a stop is the second in a row, not the third"
    );
    failing(&env);
    assert_eq!(env.count("hook"), 1, "the third failure in a row alerts");
}
