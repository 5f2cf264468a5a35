//! A downstream run before its upstream: blocked, nothing claimed, no
//! hook; its exit code; `status`; and two jobs that wait for each other.

use std::time::{Duration, Instant};

use crate::util::{on_every_backend, Backend};

use super::{job, ran, status_of};

on_every_backend!(
    a_downstream_before_its_upstream_is_blocked,
    a_cycle_blocks_both_at_once
);

fn a_downstream_before_its_upstream_is_blocked(backend: &Backend) {
    let env = backend.env();
    let hook = format!("--on-failure={}", env.count_cmd("hook"));
    let ping = "--ping=http://127.0.0.1:9/never";
    job(
        &env,
        "report-{date}",
        &["extract-{date}"],
        0,
        &[&hook, ping],
    )
    .succeeds()
    .stderr_is("");
    job(
        &env,
        "report-{date}",
        &["extract-{date}"],
        0,
        &["--blocked-exit-code", "3"],
    )
    .expect_code(3);
    job(&env, "report-{date}", &["extract-{date}"], 0, &["-v"])
        .succeeds()
        .stderr_has("blocked report-")
        .stderr_has("extract-");
    assert_eq!(
        ran(&env, "report-{date}"),
        0,
        "the blocked command never ran"
    );
    assert_eq!(env.count("hook"), 0, "no hook for a blocked run");
    let runs = env.list_json();
    assert_eq!(
        runs.as_array().unwrap().len(),
        0,
        "nothing claimed: {runs:#}"
    );

    let (code, report) = status_of(&env, "report-{date}");
    assert_eq!(code, 0, "a blocked job needs no person: {report:#}");
    assert_eq!(report["state"], "blocked");
    let today = jiff::Zoned::now().strftime("%Y-%m-%d").to_string();
    assert_eq!(
        report["blocked_on"],
        serde_json::json!([format!("extract-{today}")])
    );
    assert_eq!(report["after"], serde_json::json!(["extract-{date}"]));
    env.cmd(["status", "--after"])
        .succeeds()
        .stdout_has("report-{date}  blocked  extract-{date}");

    // The upstream succeeds: the downstream runs, and is no longer blocked.
    job(&env, "extract-{date}", &[], 0, &[]).succeeds();
    job(&env, "report-{date}", &["extract-{date}"], 0, &[]).succeeds();
    assert_eq!(ran(&env, "report-{date}"), 1);
    let (code, report) = status_of(&env, "report-{date}");
    assert_eq!((code, &report["state"]), (0, &serde_json::json!("ok")));
    assert_eq!(report["blocked_on"], serde_json::Value::Null);
}

fn a_cycle_blocks_both_at_once(backend: &Backend) {
    let env = backend.env();
    let started = Instant::now();
    for _ in 0..2 {
        job(&env, "a", &["b"], 0, &["--blocked-exit-code", "4"]).expect_code(4);
        job(&env, "b", &["a"], 0, &["--blocked-exit-code", "4"]).expect_code(4);
    }
    // A blocked run holds nothing, so waiting ones run out and exit too.
    job(&env, "a", &["b"], 0, &["--after-wait", "300ms"]).succeeds();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a cycle exits promptly"
    );
    assert_eq!(ran(&env, "a") + ran(&env, "b"), 0);
    for name in ["a", "b"] {
        assert_eq!(status_of(&env, name).1["state"], "blocked");
    }
    env.cmd(["doctor"]).expect_code(1).stdout_has("a -> b -> a");
}
