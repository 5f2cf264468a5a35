//! `--catch-up`: missed periods run once each, in their own zone, and a
//! catch-up killed midway.

use std::time::Duration;

use crate::util::{assert_code, eventually, have_faketime, lives, text, wait_for_file, Env};

use super::{at, at_with, backup, job, log, status_json};

#[test]
fn catch_up_runs_a_missed_day_once_with_its_slot() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    // A new job does not replay history.
    assert_code(
        &backup(&env, "2026-03-01 02:00:00", 0, &["--catch-up", "5"]),
        0,
    );
    assert_eq!(
        log(&env),
        ["backup-2026-03-01 backup-{date} 2026-03-01T00:00:00+00:00"]
    );
    // 03-02 was missed (the host was down); 03-03 catches it up first.
    assert_code(
        &backup(&env, "2026-03-03 02:00:00", 0, &["--catch-up", "5"]),
        0,
    );
    assert_code(
        &backup(&env, "2026-03-03 03:00:00", 0, &["--catch-up", "5"]),
        0,
    );
    assert_eq!(
        log(&env)[1..],
        [
            "backup-2026-03-02 backup-{date} 2026-03-02T00:00:00+00:00",
            "backup-2026-03-03 backup-{date} 2026-03-03T00:00:00+00:00"
        ],
        "the missed day ran once, oldest first, and nothing ran twice"
    );
    let (code, status) = status_json(&env, "2026-03-03 04:00:00");
    assert_eq!(code, 0, "{status:#}");
    assert_eq!(job(&status, "backup-{date}")["missed"], 0);

    // A failed past day is run again by the next catch-up, within N.
    assert_code(&backup(&env, "2026-03-05 02:00:00", 0, &[]), 0);
    assert_code(
        &backup(&env, "2026-03-06 02:00:00", 0, &["--catch-up", "1"]),
        0,
    );
    assert!(
        !log(&env)
            .iter()
            .any(|line| line.starts_with("backup-2026-03-04")),
        "03-04 is older than the last 1 period"
    );
    // Without a period, --catch-up is a usage error.
    let plain = at(
        &env,
        "2026-03-06 02:00:00",
        &["run", "-k", "plain", "--catch-up", "2", "--", "true"],
    );
    assert_code(&plain, 2);
    assert!(text(&plain.stderr).contains("--catch-up needs a key template"));
}

#[test]
fn a_catch_up_killed_midway_recovers() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    assert_code(&backup(&env, "2026-03-01 02:00:00", 0, &[]), 0);
    let started = env.path("started");
    // The killed day's command and its guardian (its parent) say who they
    // are, so that the test can wait for the whole run to be gone.
    let script = format!(
        "echo \"$IDEM_KEY ${{IDEM_RECOVERED:-0}}\" >> '{log}'; \
         if [ \"$IDEM_KEY\" = backup-2026-03-02 ] && [ ! -e '{started}' ]; then \
           read -r me _ _ ppid _ < /proc/self/stat; \
           echo $me $ppid > '{started}.new'; mv '{started}.new' '{started}'; sleep 60; fi",
        log = env.path("log").display(),
        started = started.display()
    );
    let args = [
        "run",
        "--key",
        "backup-{date}",
        "--catch-up",
        "3",
        "--shell",
        "--",
        &script,
    ];
    let mut child = at_with(&env, None, "2026-03-03 02:00:00", &args)
        .spawn()
        .expect("idem starts");
    wait_for_file(&started, Duration::from_secs(30), &mut child);
    // faketime may run idem as its child: kill idem itself.
    let idem = idem_of(&child);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(idem as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait();
    // The guardian stops the run once idem is gone. Until then the day is
    // still running, and a catch-up would pass it by as busy (quietly: it
    // runs elsewhere) and go on to today.
    let run: Vec<i32> = std::fs::read_to_string(&started)
        .unwrap()
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    eventually("the killed run to be gone", Duration::from_secs(30), || {
        !run.iter().any(|pid| lives(*pid))
    });
    // The next call finds the killed run abandoned and runs the day again.
    let output = at(&env, "2026-03-03 02:10:00", &args);
    assert_code(&output, 0);
    let lines = log(&env);
    assert_eq!(
        lines[1..],
        [
            "backup-2026-03-02 0",
            "backup-2026-03-02 1",
            "backup-2026-03-03 0"
        ],
        "{lines:#?}"
    );
    let show = env.show_json("backup-2026-03-02");
    assert_eq!(show["status"], "succeeded");
    assert_eq!(show["history"][0]["status"], "abandoned");
}

/// The idem process of `child`, a run under faketime: `child` itself, or
/// its child when faketime runs idem as one.
fn idem_of(child: &std::process::Child) -> u32 {
    let is_idem = |pid: u32| {
        std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe.ends_with("idem"))
    };
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    if is_idem(child.id()) {
        child.id()
    } else {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| parent_of(*pid) == Some(child.id()) && is_idem(*pid))
            .expect("the idem process")
    }
}

#[test]
fn catch_up_judges_past_periods_in_the_zone_their_keys_were_made_in() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    let script = format!("echo \"$IDEM_KEY\" >> '{}'", env.path("log").display());
    let hourly = |when: &str, zone: &str| {
        let args = [
            "run",
            "-k",
            "h-{hour}",
            "--catch-up",
            "5",
            "--shell",
            "--",
            &script,
        ];
        let output = at_with(&env, None, when, &args)
            .env("TZ", zone)
            .output()
            .expect("idem runs");
        assert_code(&output, 0);
    };
    for hour in 10..=13 {
        hourly(&format!("2026-03-01 {hour}:05:00"), "UTC");
    }
    assert_eq!(log(&env).len(), 4, "{:?}", log(&env));
    // The host moves to UTC+4 (faketime reads the time in the new zone:
    // 14:05 UTC): the hours that succeeded are still the hours of the keys
    // made in UTC, and only this hour's key runs.
    hourly("2026-03-01 18:05:00", "Asia/Dubai");
    assert_eq!(
        log(&env)[4..],
        ["h-2026-03-01T18"],
        "a period that succeeded ran again after the zone changed"
    );
}
