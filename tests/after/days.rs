//! Days that pass under `faketime`: an upstream that fails for three days
//! alerts while its downstream stays blocked and quiet, and `--catch-up`
//! runs each missed slot after its own upstream slot.

use std::process::{Output, Stdio};

use crate::util::{assert_code, have_faketime, on_every_backend, Backend, Env};

on_every_backend!(an_upstream_failing_for_days_alerts_and_its_downstream_stays_quiet);

/// `idem ARGS` as if started at `when` (UTC).
fn at(env: &Env, when: &str, args: &[&str]) -> Output {
    let template = env.idem(args);
    crate::util::wrapped(&template, &["faketime", "-f", &format!("@{when}")])
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .stdin(Stdio::null())
        .output()
        .expect("idem runs")
}

/// A daily job KEY-{date} after `after`, exiting `code`; its command logs
/// its key and slot to `log`, its failure hook to `hooks`.
fn daily(
    env: &Env,
    when: &str,
    job: &str,
    after: Option<&str>,
    code: &str,
    extra: &[&str],
) -> Output {
    let log = env.path("log");
    let hooks = env.path("hooks");
    let key = format!("{job}-{{date}}");
    let script = format!(
        "echo \"$IDEM_KEY ${{IDEM_SLOT:-none}}\" >> '{}'; exit {code}",
        log.display()
    );
    let hook = format!("echo \"{job} $IDEM_EVENT\" >> '{}'", hooks.display());
    let mut args = vec![
        "run",
        "--key",
        &key,
        "--retries",
        "0",
        "--on-failure",
        &hook,
    ];
    if let Some(after) = after {
        args.extend(["--after", after]);
    }
    args.extend_from_slice(extra);
    args.extend(["--shell", "--", &script]);
    at(env, when, &args)
}

fn lines(env: &Env, name: &str) -> Vec<String> {
    std::fs::read_to_string(env.path(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn an_upstream_failing_for_days_alerts_and_its_downstream_stays_quiet(backend: &Backend) {
    if !have_faketime() {
        return;
    }
    let env = backend.env();
    for day in ["2026-03-01", "2026-03-02", "2026-03-03"] {
        assert_code(
            &daily(&env, &format!("{day} 02:00:00"), "extract", None, "1", &[]),
            1,
        );
        let report = daily(
            &env,
            &format!("{day} 03:00:00"),
            "report",
            Some("extract-{date}"),
            "0",
            &[],
        );
        assert_code(&report, 0);
    }
    assert_eq!(
        lines(&env, "hooks"),
        ["extract failure"; 3],
        "only the upstream alerts"
    );
    assert!(
        lines(&env, "log")
            .iter()
            .all(|line| line.starts_with("extract-")),
        "the downstream never ran"
    );
    let status = at(&env, "2026-03-03 04:00:00", &["status", "--json"]);
    assert_code(&status, 1);
    let jobs: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let state = |name: &str| {
        jobs.as_array()
            .unwrap()
            .iter()
            .find(|job| job["job"] == name)
            .map(|job| job["state"].clone())
    };
    assert_eq!(state("extract-{date}").unwrap(), "failing");
    assert_eq!(state("report-{date}").unwrap(), "blocked", "{jobs:#}");
}

/// On SQLite alone: a shared ledger stamps runs by the server's clock,
/// which faketime does not move, and catch-up goes back no further than
/// the job's first run by that clock.
#[test]
fn catch_up_waits_for_each_slot_of_its_upstream() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    let report = |when: &str| {
        daily(
            &env,
            when,
            "report",
            Some("extract-{date}"),
            "0",
            &["--catch-up", "3"],
        )
    };
    // Day one: both run, so that both jobs have a history to catch up.
    assert_code(
        &daily(&env, "2026-03-01 02:00:00", "extract", None, "0", &[]),
        0,
    );
    assert_code(&report("2026-03-01 03:00:00"), 0);
    // 03-02 and 03-03 are missed by both; on 03-04 the upstream catches
    // them up, and its 03-03 fails.
    let fails_0303 = "$([ \"$IDEM_KEY\" = extract-2026-03-03 ] && echo 1 || echo 0)";
    let extract = daily(
        &env,
        "2026-03-04 02:00:00",
        "extract",
        None,
        fails_0303,
        &["--catch-up", "3"],
    );
    assert_code(&extract, 1);
    let before = lines(&env, "log").len();
    assert_code(&report("2026-03-04 03:00:00"), 0);
    assert_eq!(
        lines(&env, "log")[before..],
        [
            "report-2026-03-02 2026-03-02T00:00:00+00:00",
            "report-2026-03-04 2026-03-04T00:00:00+00:00",
        ],
        "each slot waited for its own upstream slot: 03-03 is blocked"
    );
    // The 03-03 extract is done by hand and marked: the next call catches
    // up the report of 03-03 alone.
    let mark = at(
        &env,
        "2026-03-04 04:00:00",
        &[
            "ledger",
            "mark",
            "extract-2026-03-03",
            "--succeeded",
            "--reason",
            "by hand",
        ],
    );
    assert_code(&mark, 0);
    let before = lines(&env, "log").len();
    assert_code(&report("2026-03-04 05:00:00"), 0);
    assert_eq!(
        lines(&env, "log")[before..],
        ["report-2026-03-03 2026-03-03T00:00:00+00:00"]
    );
}
