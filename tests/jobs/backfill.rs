//! `idem backfill`: the periods between two times whose key never
//! succeeded, listed by `--dry-run`, run oldest first once each, and taken
//! up where a backfill stopped.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::util::{assert_code, have_faketime, text, wait_for_file, Env};

use super::{at, backup, log};

/// `idem backfill ARGS -- sh -c 'log the key and slot; exit 0'`, now (its
/// bounds are in the past, so no clock needs faking).
fn backfill(env: &Env, args: &[&str]) -> std::process::Output {
    let script = format!(
        "echo \"$IDEM_KEY $IDEM_JOB $IDEM_SLOT\" >> '{}'",
        env.path("log").display()
    );
    let mut all = vec!["backfill"];
    all.extend_from_slice(args);
    all.extend(["--retries", "0", "--shell", "--", &script]);
    env.run(&all)
}

#[test]
fn a_three_day_hole_in_a_daily_job_is_listed_then_run_once_oldest_first() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    for day in ["01", "02", "06"] {
        assert_code(&backup(&env, &format!("2026-03-{day} 02:00:00"), 0, &[]), 0);
    }
    // 03-03 failed; 03-04 and 03-05 never ran.
    assert_code(&backup(&env, "2026-03-03 02:00:00", 3, &[]), 3);
    let bounds = ["--from", "2026-03-01", "--to", "2026-03-06"];
    let mut dry = vec!["backup-{date}"];
    dry.extend(bounds);
    dry.push("--dry-run");
    let listed = backfill(&env, &dry);
    assert_code(&listed, 0);
    assert_eq!(
        text(&listed.stdout),
        "2026-03-03T00:00:00+00:00  backup-2026-03-03  failed\n\
         2026-03-04T00:00:00+00:00  backup-2026-03-04  never ran\n\
         2026-03-05T00:00:00+00:00  backup-2026-03-05  never ran\n"
    );
    assert_eq!(
        text(&listed.stderr),
        "idem: dry run: 3 periods due, oldest first; nothing ran\n"
    );
    assert_eq!(log(&env).len(), 4, "a dry run runs nothing");

    let mut run = vec!["backup-{date}"];
    run.extend(bounds);
    let ran = backfill(&env, &run);
    assert_code(&ran, 0);
    assert_eq!(
        log(&env)[4..],
        [
            "backup-2026-03-03 backup-{date} 2026-03-03T00:00:00+00:00",
            "backup-2026-03-04 backup-{date} 2026-03-04T00:00:00+00:00",
            "backup-2026-03-05 backup-{date} 2026-03-05T00:00:00+00:00",
        ]
    );
    assert_eq!(
        text(&ran.stderr),
        "idem: backfill 1/3 backup-2026-03-03: succeeded\n\
         idem: backfill 2/3 backup-2026-03-04: succeeded\n\
         idem: backfill 3/3 backup-2026-03-05: succeeded\n"
    );
    // A second backfill finds nothing to run, and --all runs every day.
    let again = backfill(&env, &run);
    assert_code(&again, 0);
    assert_eq!(log(&env).len(), 7, "{:?}", log(&env));
    assert!(text(&again.stderr).contains("succeeded; nothing to run"));
    let mut every = run.clone();
    every.extend(["--all", "--dry-run"]);
    let listed = text(&backfill(&env, &every).stdout);
    assert_eq!(listed.lines().count(), 6, "{listed}");
    assert!(listed
        .lines()
        .all(|line| line.ends_with("succeeded; --all runs it again")));
}

#[test]
fn a_five_minute_job_backfills_its_missing_periods_by_its_job_name() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    let runs = |when: &str| {
        let args = ["run", "-k", "s-{minute/5}", "--job", "sync", "--", "true"];
        assert_code(&at(&env, when, &args), 0);
    };
    runs("2026-03-04 10:02:00");
    runs("2026-03-04 10:27:00");
    // A success marked by hand is a success.
    let mark = env.run([
        "ledger",
        "mark",
        "s-2026-03-04T10:15",
        "--succeeded",
        "--reason",
        "ran by hand",
    ]);
    assert_code(&mark, 0);
    // The job is named; its template comes from the ledger.
    let bounds = [
        "sync",
        "--from",
        "2026-03-04 10:00",
        "--to",
        "2026-03-04 10:29",
    ];
    let mut dry = bounds.to_vec();
    dry.push("--dry-run");
    let listed = backfill(&env, &dry);
    assert_code(&listed, 0);
    assert_eq!(
        text(&listed.stdout),
        "2026-03-04T10:05:00+00:00  s-2026-03-04T10:05  never ran\n\
         2026-03-04T10:10:00+00:00  s-2026-03-04T10:10  never ran\n\
         2026-03-04T10:20:00+00:00  s-2026-03-04T10:20  never ran\n"
    );
    assert_code(&backfill(&env, &bounds), 0);
    assert_eq!(
        log(&env),
        [
            "s-2026-03-04T10:05 sync 2026-03-04T10:05:00+00:00",
            "s-2026-03-04T10:10 sync 2026-03-04T10:10:00+00:00",
            "s-2026-03-04T10:20 sync 2026-03-04T10:20:00+00:00",
        ]
    );
    assert_code(&backfill(&env, &bounds), 0);
    assert_eq!(log(&env).len(), 3, "a second backfill runs nothing");
}

#[test]
fn a_backfill_stopped_by_sigint_resumes_where_it_stopped() {
    let env = Env::new();
    let started = env.path("started");
    // The second day takes long the first time only: it is interrupted.
    let script = format!(
        "echo \"$IDEM_KEY\" >> '{log}'; \
         if [ \"$IDEM_KEY\" = d-2026-03-02 ] && [ ! -e '{started}' ]; then touch '{started}'; sleep 60; fi",
        log = env.path("log").display(),
        started = started.display()
    );
    let args = [
        "backfill",
        "d-{date}",
        "--from",
        "2026-03-01",
        "--to",
        "2026-03-04",
        "--retries",
        "0",
        "--shell",
        "--",
        &script,
    ];
    let mut child = env.idem(args).stderr(Stdio::piped()).spawn().unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut child);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_code(&output, 130);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("backfill stopped at d-2026-03-02 by a signal"),
        "{stderr}"
    );
    assert_eq!(log(&env), ["d-2026-03-01", "d-2026-03-02"]);
    // The next backfill starts from the interrupted day, and runs each
    // day after it once.
    let output = env.run(args);
    assert_code(&output, 0);
    assert_eq!(
        log(&env),
        [
            "d-2026-03-01",
            "d-2026-03-02",
            "d-2026-03-02",
            "d-2026-03-03",
            "d-2026-03-04"
        ]
    );
    assert_eq!(env.show_json("d-2026-03-02")["history"][0]["signal"], 2);
}

#[test]
fn a_backfill_passes_a_running_period_by_and_stops_at_a_pause() {
    let env = Env::new();
    let started = env.path("started");
    let hold = format!("touch '{}'; sleep 60", started.display());
    let mut running = env
        .idem(["run", "-k", "d-2026-03-02", "--shell", "--", &hold])
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut running);
    let bounds = ["d-{date}", "--from", "2026-03-01", "--to", "2026-03-03"];
    let output = backfill(&env, &bounds);
    // The running day is said and passed by; the others run; 75 tells it.
    assert_code(&output, 75);
    assert_eq!(
        text(&output.stderr),
        "idem: backfill 1/3 d-2026-03-01: succeeded\n\
         idem: backfill 2/3 d-2026-03-02: running elsewhere; passed by\n\
         idem: backfill 3/3 d-2026-03-03: succeeded\n"
    );
    let keys: Vec<String> = log(&env)
        .iter()
        .map(|line| line.split(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["d-2026-03-01", "d-2026-03-03"]);
    kill(Pid::from_raw(running.id() as i32), Signal::SIGTERM).unwrap();
    let _ = running.wait();

    // A paused job's backfill runs nothing and says why.
    assert_code(&env.run(["pause", "d-{date}", "--reason", "disk swap"]), 0);
    let paused = backfill(&env, &bounds);
    assert_code(&paused, 0);
    assert!(
        text(&paused.stderr).contains("d-{date} is paused"),
        "{}",
        text(&paused.stderr)
    );
    assert_eq!(log(&env).len(), 2, "a paused job ran");
}

#[test]
fn each_backfilled_period_waits_for_its_upstreams_same_period() {
    let env = Env::new();
    // The upstream succeeded on the 1st and the 3rd, not on the 2nd.
    for day in ["01", "03"] {
        let key = format!("extract-2026-03-{day}");
        assert_code(&env.run(["run", "-k", &key, "--", "true"]), 0);
    }
    let args = [
        "report-{date}",
        "--from",
        "2026-03-01",
        "--to",
        "2026-03-03",
        "--after",
        "extract-{date}",
    ];
    let output = backfill(&env, &args);
    assert_code(&output, 0);
    let keys: Vec<String> = log(&env)
        .iter()
        .map(|line| line.split(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["report-2026-03-01", "report-2026-03-03"]);
    assert!(
        text(&output.stderr).contains(
            "backfill 2/3 report-2026-03-02: nothing ran (exit 0: blocked, paused or skipped)"
        ),
        "{}",
        text(&output.stderr)
    );
    // Once the upstream's 2nd succeeded, the same backfill runs it alone.
    assert_code(
        &env.run(["run", "-k", "extract-2026-03-02", "--", "true"]),
        0,
    );
    assert_code(&backfill(&env, &args), 0);
    assert_eq!(log(&env).len(), 3);
    assert!(log(&env)[2].starts_with("report-2026-03-02 "));
}
