//! `idem status` and the job's figures: failures in a row, overdue jobs,
//! runs that overlap.

use std::process::Stdio;
use std::time::Duration;

use crate::util::{assert_code, have_faketime, text, wait_for_file, Env};

use super::{at, backup, job, log, samples, status_json};

#[test]
fn a_daily_job_fails_two_days_then_succeeds() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    let days = [
        "2026-03-01 02:00:00",
        "2026-03-02 02:00:00",
        "2026-03-03 02:00:00",
    ];
    let series = two_failed_days(&env, &days);
    a_success_and_after(&env, &days, series);
    status_puts_the_job_that_needs_a_person_first(&env);
}

/// The first two days fail: the job is failing, its failures count across
/// its keys, and a new day adds no metric series. Returns the job's count
/// of series.
fn two_failed_days(env: &Env, days: &[&str; 3]) -> usize {
    assert_code(&backup(env, days[0], 3, &[]), 3);
    let (code, status) = status_json(env, days[0]);
    assert_eq!(code, 1, "a failing job fails the check: {status:#}");
    let first = job(&status, "backup-{date}");
    assert_eq!(first["state"], "failing");
    assert_eq!(first["failures"], 1);
    assert_eq!(first["period"], "date");
    let series = samples(env, days[0], &[]).len();

    assert_code(&backup(env, days[1], 4, &[]), 4);
    let (code, status) = status_json(env, days[1]);
    assert_eq!(code, 1);
    let second = job(&status, "backup-{date}");
    assert_eq!(second["failures"], 2, "failures in a row across keys");
    assert_eq!(second["strip"], serde_json::json!(["failed", "failed"]));
    assert_eq!(second["missed"], 1, "day one has no success");
    let metrics = samples(env, days[1], &[]);
    assert_eq!(metrics.len(), series, "a new day adds no series");
    assert!(
        metrics.contains(&"idem_consecutive_failures{job=\"backup-{date}\"} 2".to_owned()),
        "{metrics:#?}"
    );
    series
}

/// The third day succeeds: the job is ok from then on; each run and the
/// command's environment carry the job; metrics per key on request.
fn a_success_and_after(env: &Env, days: &[&str; 3], series: usize) {
    assert_code(&backup(env, days[2], 0, &[]), 0);
    let (code, status) = status_json(env, days[2]);
    assert_eq!(code, 0, "{status:#}");
    let third = job(&status, "backup-{date}");
    assert_eq!(
        third["state"], "ok",
        "a success since the start of yesterday: not overdue, though the \
         two days before it stay missed"
    );
    assert_eq!(third["failures"], 0);
    assert_eq!(third["missed"], 2);
    // Nor later that day, nor after midnight: nothing changed.
    for when in ["2026-03-03 23:30:00", "2026-03-04 00:30:00"] {
        let (code, status) = status_json(env, when);
        assert_eq!(code, 0, "{when}: {status:#}");
        assert_eq!(job(&status, "backup-{date}")["state"], "ok", "{when}");
    }
    // Its first success adds the job's last-success series, once.
    assert_eq!(samples(env, days[2], &[]).len(), series + 1);
    assert_code(&backup(env, "2026-03-04 02:00:00", 0, &[]), 0);
    assert_eq!(samples(env, "2026-03-04 02:30:00", &[]).len(), series + 1);
    // The next day: yesterday succeeded, all is well.
    let (code, status) = status_json(env, "2026-03-04 03:00:00");
    assert_eq!(code, 0, "{status:#}");
    assert_eq!(job(&status, "backup-{date}")["state"], "ok");
    // The job is in each run, and the child's environment.
    assert_eq!(
        log(env),
        [
            "backup-2026-03-01 backup-{date} none",
            "backup-2026-03-02 backup-{date} none",
            "backup-2026-03-03 backup-{date} none",
            "backup-2026-03-04 backup-{date} none"
        ]
    );
    let runs = env.list_json();
    assert!(runs
        .as_array()
        .unwrap()
        .iter()
        .all(|run| run["job"] == "backup-{date}" && run["head"] == true));
    // Per key, on request: a series set per day.
    let per_key = samples(env, days[2], &["--per-key"]);
    assert!(per_key.len() > series, "{per_key:#?}");
    assert!(per_key
        .iter()
        .any(|line| line.starts_with("idem_key_runs{key=\"backup-2026-03-02\"")));
}

/// The table: the job that needs a person first.
fn status_puts_the_job_that_needs_a_person_first(env: &Env) {
    assert_code(
        &at(
            env,
            "2026-03-04 02:10:00",
            &["run", "-k", "vacuum", "--retries", "0", "--", "false"],
        ),
        1,
    );
    let table = at(env, "2026-03-04 03:00:00", &["status"]);
    assert_code(&table, 1);
    let lines: Vec<String> = text(&table.stdout).lines().map(str::to_owned).collect();
    assert!(lines[0].starts_with("JOB"), "{lines:#?}");
    assert!(
        lines[1].starts_with("vacuum") && lines[1].contains("failing"),
        "{lines:#?}"
    );
    assert!(
        lines[2].starts_with("backup-{date}") && lines[2].contains(" ok "),
        "{lines:#?}"
    );
    assert!(
        lines[2].contains("xx++"),
        "the strip, oldest first: {lines:#?}"
    );
    let only = at(env, "2026-03-04 03:00:00", &["status", "--job", "backup-*"]);
    assert_code(&only, 0);
    assert_eq!(text(&only.stdout).lines().count(), 2);
}

#[test]
fn a_job_cron_stopped_calling_is_overdue() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    assert_code(&backup(&env, "2026-03-01 02:00:00", 0, &[]), 0);
    assert_code(&backup(&env, "2026-03-02 02:00:00", 0, &[]), 0);
    // Before it is usually called, the day is not owed yet.
    let (code, status) = status_json(&env, "2026-03-03 01:00:00");
    assert_eq!(code, 0, "{status:#}");
    assert_eq!(job(&status, "backup-{date}")["state"], "ok");
    // Past its usual time (and its grace), nothing called it: overdue.
    let (code, status) = status_json(&env, "2026-03-03 04:00:00");
    assert_eq!(code, 1, "{status:#}");
    assert_eq!(job(&status, "backup-{date}")["state"], "overdue");
    // A day later the missed day shows too.
    let (code, status) = status_json(&env, "2026-03-04 01:00:00");
    assert_eq!(code, 1);
    let late = job(&status, "backup-{date}");
    assert_eq!(late["state"], "overdue");
    assert_eq!(late["missed"], 1);
    // A skip stamps the call: an hourly cron line of a daily key.
    let env = Env::new();
    assert_code(&backup(&env, "2026-03-01 00:00:10", 0, &[]), 0);
    assert_code(&backup(&env, "2026-03-01 23:00:00", 0, &[]), 0);
    let (code, status) = status_json(&env, "2026-03-02 20:00:00");
    assert_eq!(
        code, 0,
        "called at 23:00 yesterday, so not owed before 23:00: {status:#}"
    );
    let called = job(&status, "backup-{date}")["last_called"].clone();
    assert!(
        called.as_str().unwrap().starts_with("2026-03-01T23:00"),
        "{called}"
    );
}

/// A run of job `slow` under key `key` that waits for the file `go-KEY`,
/// then exits `code`; started, and waited for until its command runs.
fn held_run(env: &Env, key: &str, code: i32) -> std::process::Child {
    let hooks = env.path("hooks");
    let script = format!(
        "touch '{started}'; while [ ! -e '{go}' ]; do sleep 0.02; done; exit {code}",
        started = env.path(&format!("started-{key}")).display(),
        go = env.path(&format!("go-{key}")).display(),
    );
    let on_failure = format!("echo \"$IDEM_KEY $IDEM_FAILURES\" >> '{}'", hooks.display());
    let on_recovery = format!("echo \"$IDEM_KEY recovered\" >> '{}'", hooks.display());
    let args = [
        "run",
        "--key",
        key,
        "--job",
        "slow",
        "--retries",
        "0",
        "--alert-after",
        "2",
        "--on-failure",
        &on_failure,
        "--on-recovery",
        &on_recovery,
        "--shell",
        "--",
        &script,
    ];
    let mut child = env
        .idem(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("idem runs");
    let started = env.path(&format!("started-{key}"));
    wait_for_file(&started, Duration::from_secs(10), &mut child);
    child
}

/// Lets run `key` of [`held_run`] end, and waits for its idem.
fn release(env: &Env, key: &str, mut child: std::process::Child) {
    std::fs::write(env.path(&format!("go-{key}")), "").unwrap();
    child.wait().unwrap();
}

#[test]
fn a_job_whose_runs_overlap_counts_them_in_the_order_they_finish() {
    let env = Env::new();
    // Each run starts before the one before it ends, as a slow {minute}
    // job's do, and fails: every failure counts, in a row.
    let a = held_run(&env, "a", 1);
    let b = held_run(&env, "b", 1);
    release(&env, "a", a);
    let c = held_run(&env, "c", 1);
    release(&env, "b", b);
    let status = env.cmd(["status", "--json"]).expect_code(1).json();
    let slow = &status[0];
    assert_eq!(slow["state"], "failing", "{status:#}");
    assert_eq!(slow["failures"], 2, "{status:#}");
    assert_eq!(
        slow["strip"],
        serde_json::json!(["failed", "failed", "running"]),
        "{status:#}"
    );
    let metrics = env.cmd(["ledger", "metrics"]).expect_code(0).stdout();
    assert!(
        metrics.contains("idem_consecutive_failures{job=\"slow\"} 2"),
        "{metrics}"
    );
    // The second failure in a row is the alert; the success after it, which
    // finishes after a later run started, is the recovery.
    let d = held_run(&env, "d", 0);
    let e = held_run(&env, "e", 1);
    release(&env, "c", c);
    release(&env, "d", d);
    release(&env, "e", e);
    let hooks = std::fs::read_to_string(env.path("hooks")).unwrap_or_default();
    assert_eq!(hooks, "b 2\nc 3\nd recovered\n", "the hooks, in order");
    let status = env.cmd(["status", "--json"]).expect_code(1).json();
    assert_eq!(status[0]["failures"], 1, "{status:#}");
}
