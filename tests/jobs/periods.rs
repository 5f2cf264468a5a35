//! Periods of N minutes and hours: `{minute/5}` names the start of its
//! five minutes, and the job's period (catch-up, missed, overdue) follows.

use crate::util::{assert_code, have_faketime, text, Env};

use super::{at, job, log, status_json};

/// `idem run` of the five-minute job `sync-{minute/5}` at `when` (UTC);
/// the command logs its key and slot.
fn sync(env: &Env, when: &str, extra: &[&str]) -> std::process::Output {
    let script = format!(
        "echo \"$IDEM_KEY ${{IDEM_SLOT:-none}}\" >> '{}'",
        env.path("log").display()
    );
    let mut args = vec!["run", "--key", "sync-{minute/5}", "--retries", "0"];
    args.extend_from_slice(extra);
    args.extend(["--shell", "--", &script]);
    at(env, when, &args)
}

#[test]
fn a_five_minute_job_makes_one_key_per_five_minutes() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    for when in ["10:07:00", "10:09:30", "10:10:00", "10:14:59"] {
        assert_code(&sync(&env, &format!("2026-03-04 {when}"), &[]), 0);
    }
    assert_eq!(
        log(&env),
        ["sync-2026-03-04T10:05 none", "sync-2026-03-04T10:10 none"],
        "10:09:30 is the period of 10:07, 10:14:59 that of 10:10"
    );
    let show = env.show_json("sync-2026-03-04T10:05");
    assert_eq!(show["job"], "sync-{minute/5}");
    // An hour's worth of steps is refused in one line, naming the fix.
    let bad = at(
        &env,
        "2026-03-04 10:15:00",
        &["run", "--key", "sync-{minute/7}", "--", "true"],
    );
    assert_code(&bad, 2);
    assert_eq!(
        text(&bad.stderr),
        "idem: invalid --key: {minute/7}: a step of minutes must divide an hour \
         (2 3 4 5 6 10 12 15 20 30), or use {hour}\n"
    );
}

#[test]
fn a_five_minute_job_catches_up_its_missed_periods_oldest_first() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    assert_code(&sync(&env, "2026-03-04 10:07:00", &["--catch-up", "10"]), 0);
    // Twenty minutes with no call, then a catch-up of the last 3 periods.
    assert_code(&sync(&env, "2026-03-04 10:31:00", &["--catch-up", "3"]), 0);
    assert_code(&sync(&env, "2026-03-04 10:33:00", &["--catch-up", "3"]), 0);
    assert_eq!(
        log(&env),
        [
            "sync-2026-03-04T10:05 2026-03-04T10:05:00+00:00",
            "sync-2026-03-04T10:15 2026-03-04T10:15:00+00:00",
            "sync-2026-03-04T10:20 2026-03-04T10:20:00+00:00",
            "sync-2026-03-04T10:25 2026-03-04T10:25:00+00:00",
            "sync-2026-03-04T10:30 2026-03-04T10:30:00+00:00",
        ],
        "the three periods before 10:30, oldest first, each once, then 10:30"
    );
}

#[test]
fn a_five_minute_job_is_overdue_after_a_period_with_no_success() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    assert_code(&sync(&env, "2026-03-04 10:06:00", &[]), 0);
    assert_code(&sync(&env, "2026-03-04 10:11:00", &[]), 0);
    // 10:14: the 10:05 period succeeded, the 10:10 one too.
    let (code, status) = status_json(&env, "2026-03-04 10:14:00");
    assert_eq!(code, 0, "{status:#}");
    let sync_job = job(&status, "sync-{minute/5}");
    assert_eq!(sync_job["period"], "minute/5");
    assert_eq!(sync_job["state"], "ok");
    assert_eq!(sync_job["missed"], 0);
    // 10:21: the 10:15 period passed with no run; an hourly judge would
    // call it fine, a five-minute one overdue.
    let (code, status) = status_json(&env, "2026-03-04 10:21:00");
    assert_eq!(code, 1, "{status:#}");
    let sync_job = job(&status, "sync-{minute/5}");
    assert_eq!(sync_job["state"], "overdue");
    assert_eq!(sync_job["missed"], 1);
    // Called again in the 10:20 period: a success there pays for 10:15.
    assert_code(&sync(&env, "2026-03-04 10:22:00", &[]), 0);
    let (code, status) = status_json(&env, "2026-03-04 10:23:00");
    assert_eq!(code, 0, "{status:#}");
    assert_eq!(job(&status, "sync-{minute/5}")["state"], "ok");
}

#[test]
fn a_six_hour_job_names_and_judges_its_quarters_of_a_day() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    let script = format!("echo \"$IDEM_KEY\" >> '{}'", env.path("log").display());
    let run = |when: &str| {
        let args = [
            "run",
            "-k",
            "q-{hour/6}",
            "--catch-up",
            "4",
            "--shell",
            "--",
            &script,
        ];
        assert_code(&at(&env, when, &args), 0);
    };
    run("2026-03-04 01:00:00");
    run("2026-03-04 05:59:00");
    run("2026-03-04 19:00:00");
    assert_eq!(
        log(&env),
        [
            "q-2026-03-04T00",
            "q-2026-03-04T06",
            "q-2026-03-04T12",
            "q-2026-03-04T18"
        ]
    );
    let (_, status) = status_json(&env, "2026-03-04 19:30:00");
    assert_eq!(job(&status, "q-{hour/6}")["period"], "hour/6");
}
