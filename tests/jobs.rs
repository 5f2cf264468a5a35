//! Jobs: a crontab line's runs across the keys its template makes, `idem
//! status`, per-job metrics, `--catch-up`, `--lock`, and the ledger commands
//! that speak jobs. Days pass under `faketime`, started at a time each test
//! names, so the periods are the test's, not the calendar's.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::pg::Server;
use crate::util::{assert_code, eventually, have_faketime, lives, text, wait_for_file, Env};

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
    assert_code(&backup(&env, days[0], 3, &[]), 3);
    let (code, status) = status_json(&env, days[0]);
    assert_eq!(code, 1, "a failing job fails the check: {status:#}");
    let first = job(&status, "backup-{date}");
    assert_eq!(first["state"], "failing");
    assert_eq!(first["failures"], 1);
    assert_eq!(first["period"], "date");
    let series = samples(&env, days[0], &[]).len();

    assert_code(&backup(&env, days[1], 4, &[]), 4);
    let (code, status) = status_json(&env, days[1]);
    assert_eq!(code, 1);
    let second = job(&status, "backup-{date}");
    assert_eq!(second["failures"], 2, "failures in a row across keys");
    assert_eq!(second["strip"], serde_json::json!(["failed", "failed"]));
    assert_eq!(second["missed"], 1, "day one has no success");
    let metrics = samples(&env, days[1], &[]);
    assert_eq!(metrics.len(), series, "a new day adds no series");
    assert!(
        metrics.contains(&"idem_consecutive_failures{job=\"backup-{date}\"} 2".to_owned()),
        "{metrics:#?}"
    );

    assert_code(&backup(&env, days[2], 0, &[]), 0);
    let (code, status) = status_json(&env, days[2]);
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
        let (code, status) = status_json(&env, when);
        assert_eq!(code, 0, "{when}: {status:#}");
        assert_eq!(job(&status, "backup-{date}")["state"], "ok", "{when}");
    }
    // Its first success adds the job's last-success series, once.
    assert_eq!(samples(&env, days[2], &[]).len(), series + 1);
    assert_code(&backup(&env, "2026-03-04 02:00:00", 0, &[]), 0);
    assert_eq!(samples(&env, "2026-03-04 02:30:00", &[]).len(), series + 1);
    // The next day: yesterday succeeded, all is well.
    let (code, status) = status_json(&env, "2026-03-04 03:00:00");
    assert_eq!(code, 0, "{status:#}");
    assert_eq!(job(&status, "backup-{date}")["state"], "ok");
    // The job is in each run, and the child's environment.
    assert_eq!(
        log(&env),
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
    let per_key = samples(&env, days[2], &["--per-key"]);
    assert!(per_key.len() > series, "{per_key:#?}");
    assert!(per_key
        .iter()
        .any(|line| line.starts_with("idem_key_runs{key=\"backup-2026-03-02\"")));

    // The table: the job that needs a person first.
    assert_code(
        &at(
            &env,
            "2026-03-04 02:10:00",
            &["run", "-k", "vacuum", "--retries", "0", "--", "false"],
        ),
        1,
    );
    let table = at(&env, "2026-03-04 03:00:00", &["status"]);
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
    let only = at(
        &env,
        "2026-03-04 03:00:00",
        &["status", "--job", "backup-*"],
    );
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
    let idem = if is_idem(child.id()) {
        child.id()
    } else {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| parent_of(*pid) == Some(child.id()) && is_idem(*pid))
            .expect("the idem process")
    };
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

#[test]
fn a_lock_shared_by_two_jobs_never_overlaps() {
    let env = Env::new();
    let lockfile = env.path("detector");
    let overlaps = env.path("overlaps");
    let script = format!(
        "flock -n '{lock}' sleep 0.05 || echo overlap >> '{overlaps}'; echo x >> '{count}'",
        lock = lockfile.display(),
        overlaps = overlaps.display(),
        count = env.path("count").display()
    );
    let mut children = Vec::new();
    for racer in 0..12 {
        let job = if racer % 2 == 0 { "backup" } else { "vacuum" };
        let key = format!("{job}-{racer}");
        let child = env
            .idem([
                "run", "--key", &key, "--lock", "db", "--wait", "60s", "--shell", "--", &script,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("idem starts");
        children.push(child);
    }
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert_code(&output, 0);
    }
    assert_eq!(env.count("count"), 12);
    assert!(
        !overlaps.exists(),
        "two runs holding lock db overlapped: {}",
        std::fs::read_to_string(&overlaps).unwrap_or_default()
    );

    // Held, without --wait: the conflict exit code, said; nothing ran.
    let started = env.path("started");
    let mut holder = env
        .idem([
            "run",
            "--key",
            "holder",
            "--lock",
            "db",
            "--shell",
            "--",
            &format!("touch '{}'; sleep 30", started.display()),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut holder);
    let busy = env.run(["run", "--key", "other", "--lock", "db", "--", "true"]);
    assert_code(&busy, 75);
    assert!(
        text(&busy.stderr).contains("lock db is held"),
        "{}",
        text(&busy.stderr)
    );
    let quiet = env.run([
        "run",
        "--key",
        "other",
        "--lock",
        "db",
        "--conflict-exit-code",
        "0",
        "--",
        "true",
    ]);
    assert_code(&quiet, 0);
    let waited = env.run([
        "run", "--key", "other", "--lock", "db", "--wait", "300ms", "--", "true",
    ]);
    assert_code(&waited, 75);
    assert!(text(&waited.stderr).contains("--wait ran out"));
    // Another lock is free; from the environment too.
    let other = env
        .idem(["run", "--key", "free", "--", "true"])
        .env("IDEM_LOCK", "disk,net")
        .output()
        .unwrap();
    assert_code(&other, 0);
    holder.kill().unwrap();
    let _ = holder.wait();
    // Once its holder is gone, the lock is free.
    eventually("the lock to be free", Duration::from_secs(30), || {
        env.run(["run", "--key", "other", "--lock", "db", "--", "true"])
            .status
            .success()
    });
    assert_code(&env.run(["run", "-k", "x", "--lock", "", "--", "true"]), 2);
}

#[test]
fn ledger_commands_take_templates_globs_and_dates() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    for day in ["2026-03-01", "2026-03-02", "2026-03-03"] {
        assert_code(&backup(&env, &format!("{day} 08:15:00"), 0, &[]), 0);
    }
    assert_code(
        &at(
            &env,
            "2026-03-03 09:00:00",
            &["run", "-k", "report", "--", "true"],
        ),
        0,
    );
    let list = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["ledger", "list", "--json"];
        all.extend_from_slice(args);
        let output = at(&env, "2026-03-03 10:00:00", &all);
        assert_code(&output, 0);
        let runs: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        runs.as_array()
            .unwrap()
            .iter()
            .map(|run| run["key"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        list(&["--job", "backup-*"]),
        [
            "backup-2026-03-03",
            "backup-2026-03-02",
            "backup-2026-03-01"
        ]
    );
    assert_eq!(
        list(&["--since", "2026-03-02", "--until", "2026-03-02"]),
        ["backup-2026-03-02"]
    );
    assert_eq!(
        list(&["--since", "2026-03-02 08:15", "--until", "2026-03-03 08:15"]),
        ["backup-2026-03-03", "backup-2026-03-02"]
    );
    assert_eq!(
        list(&["--until", "2026-03-01T23:00:00Z"]),
        ["backup-2026-03-01"]
    );
    assert_eq!(list(&["--until", "36h"]), ["backup-2026-03-01"]);
    let bad = env.run(["ledger", "list", "--until", "tomorrow-ish"]);
    assert_code(&bad, 2);
    assert!(text(&bad.stderr).contains("invalid --until"));
    // More runs match than are shown: said on stderr.
    let limited = env.run(["ledger", "list", "--limit", "2"]);
    assert_code(&limited, 0);
    assert!(
        text(&limited.stderr).contains("more runs match"),
        "{}",
        text(&limited.stderr)
    );
    assert!(!text(&env.run(["ledger", "list"]).stderr).contains("more runs"));

    // show expands a template now.
    let show = at(
        &env,
        "2026-03-02 12:00:00",
        &["ledger", "show", "backup-{date}", "--json"],
    );
    assert_code(&show, 0);
    let shown: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["key"], "backup-2026-03-02");
    assert_eq!(shown["job"], "backup-{date}");

    // forget takes globs; --dry-run lists the matches.
    let dry = env.run(["ledger", "forget", "backup-2026-03-0[12]", "--dry-run"]);
    assert_code(&dry, 0);
    let said = text(&dry.stdout);
    assert!(said.contains("would forget backup-2026-03-01"), "{said}");
    assert!(said.contains("would forget backup-2026-03-02"), "{said}");
    assert!(!said.contains("backup-2026-03-03"), "{said}");
    let forgot = env.run(["ledger", "forget", "backup-*"]);
    assert_code(&forgot, 0);
    assert_eq!(text(&forgot.stdout).lines().count(), 3);
    assert_code(&env.run(["ledger", "forget", "nothing-*"]), 1);

    // All or nothing when a matched key is running.
    let started = env.path("started");
    let mut running = env
        .idem([
            "run",
            "--key",
            "backup-live",
            "--shell",
            "--",
            &format!("touch '{}'; sleep 30", started.display()),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut running);
    assert_code(&env.run(["run", "-k", "backup-done", "--", "true"]), 0);
    let refused = env.run(["ledger", "forget", "backup-*"]);
    assert_code(&refused, 75);
    assert!(text(&refused.stderr).contains("backup-live"));
    let show = env.show_json("backup-done");
    assert_eq!(show["status"], "succeeded");
    assert_code(&env.run(["run", "-k", "backup-done", "--", "true"]), 0);
    assert_eq!(
        env.list_json().as_array().unwrap().len(),
        6,
        "nothing was forgotten"
    );
    running.kill().unwrap();
    let _ = running.wait();
}

#[test]
fn export_and_import_carry_jobs() {
    if !have_faketime() {
        return;
    }
    let source = Env::new();
    assert_code(&backup(&source, "2026-03-01 02:00:00", 1, &[]), 1);
    assert_code(&backup(&source, "2026-03-02 02:00:00", 0, &[]), 0);
    assert_code(
        &at(
            &source,
            "2026-03-02 03:00:00",
            &["run", "-k", "n-{hour}", "--job", "nightly", "--", "true"],
        ),
        0,
    );
    let exported = source.run(["ledger", "export"]);
    assert_code(&exported, 0);
    let mut lines = text(&exported.stdout);
    assert!(lines.contains("\"job\":\"nightly\""), "{lines}");
    // A line of an idem before jobs: its key is its job.
    lines.push_str(
        r#"{"key":"legacy","run_id":"01900000-0000-7000-8000-000000000001","status":"succeeded","exit_code":0,"attempts":1,"started_at":"2026-03-01T01:00:00Z","finished_at":"2026-03-01T01:00:01Z","host":"old","pid":1,"command":["true"],"shell":false,"head":true}"#,
    );
    lines.push('\n');
    let target = Env::new();
    let file = target.path("export.jsonl");
    std::fs::write(&file, &lines).unwrap();
    assert_code(&target.run(["ledger", "import", file.to_str().unwrap()]), 0);
    let jobs = |env: &Env| {
        let (_, status) = status_json(env, "2026-03-02 04:00:00");
        let mut names: Vec<(String, String, u64)> = status
            .as_array()
            .unwrap()
            .iter()
            .map(|job| {
                (
                    job["job"].as_str().unwrap().to_owned(),
                    job["state"].as_str().unwrap().to_owned(),
                    job["failures"].as_u64().unwrap(),
                )
            })
            .collect();
        names.sort();
        names
    };
    let mut expected = jobs(&source);
    expected.push(("legacy".into(), "ok".into(), 0));
    expected.sort();
    assert_eq!(jobs(&target), expected);
    let runs = target.list_json();
    let nightly = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["job"] == "nightly")
        .expect("the nightly run");
    assert_eq!(nightly["key"], "n-2026-03-02T03");
    // Imported again: nothing changes.
    assert_code(&target.run(["ledger", "import", file.to_str().unwrap()]), 0);
    assert_eq!(jobs(&target), expected);
}

#[test]
fn jobs_on_a_shared_ledger() {
    let Some(server) = Server::start("jobs_on_a_shared_ledger") else {
        return;
    };
    let env = Env::new();
    let url = server.url();
    // A shared ledger's times are the database's: the days are real ones.
    let pg = |args: &[&str]| {
        let mut command = env.idem(args);
        command.env("IDEM_DB", &url);
        command.output().expect("idem runs")
    };
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    let day = |back: i64| {
        today
            .checked_sub(jiff::Span::new().days(back))
            .unwrap()
            .to_string()
    };
    // Yesterday's run failed (written as an older idem would have).
    let line = format!(
        r#"{{"key":"backup-{d}","job":"backup-{{date}}","run_id":"01900000-0000-7000-8000-0000000000aa","status":"failed","exit_code":5,"attempts":1,"started_at":"{d}T02:00:00Z","finished_at":"{d}T02:00:01Z","host":"h","pid":1,"command":["true"],"shell":false,"head":true}}"#,
        d = day(1)
    );
    let file = env.path("old.jsonl");
    std::fs::write(&file, line + "\n").unwrap();
    assert_code(&pg(&["ledger", "import", file.to_str().unwrap()]), 0);
    let status = pg(&["status", "--json"]);
    assert_code(&status, 1);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let backup = job(&json, "backup-{date}");
    assert_eq!(backup["state"], "failing");
    assert_eq!(backup["failures"], 1);
    let script = format!(
        "echo \"$IDEM_KEY ${{IDEM_SLOT:-none}}\" >> '{}'",
        env.path("log").display()
    );
    let catch_up = [
        "run",
        "--key",
        "backup-{date}",
        "--catch-up",
        "3",
        "--shell",
        "--",
        &script,
    ];
    assert_code(&pg(&catch_up), 0);
    assert_code(&pg(&catch_up), 0);
    assert_eq!(
        log(&env),
        [
            format!("backup-{} {}T00:00:00+00:00", day(1), day(1)),
            format!("backup-{} {}T00:00:00+00:00", day(0), day(0)),
        ],
        "the failed day caught up once, none before the job's first run"
    );
    let status = pg(&["status", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let backup = job(&json, "backup-{date}");
    assert_eq!(backup["state"], "ok", "{json:#}");
    assert_eq!(backup["failures"], 0);
    assert_eq!(backup["missed"], 0);
    assert_code(&status, 0);
    let metrics = pg(&["ledger", "metrics"]);
    assert_code(&metrics, 0);
    let body = text(&metrics.stdout);
    assert!(
        body.contains("idem_runs{job=\"backup-{date}\",status=\"succeeded\"} 2"),
        "{body}"
    );
    assert!(
        body.contains("idem_runs{job=\"backup-{date}\",status=\"failed\"} 1"),
        "{body}"
    );
    assert!(!body.contains("key=\""), "{body}");

    // A named lock is fleet-wide: held, the other job's run conflicts.
    let started = env.path("started");
    let mut holder = env
        .idem([
            "run",
            "--key",
            "vacuum",
            "--lock",
            "db",
            "--shell",
            "--",
            &format!("touch '{}'; sleep 30", started.display()),
        ])
        .env("IDEM_DB", &url)
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut holder);
    let busy = pg(&["run", "--key", "other", "--lock", "db", "--", "true"]);
    assert_code(&busy, 75);
    assert!(text(&busy.stderr).contains("lock db is held"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = holder.wait();
    // Its outcome released it.
    eventually("the lock to be released", Duration::from_secs(30), || {
        pg(&["run", "--key", "other", "--lock", "db", "--", "true"])
            .status
            .success()
    });
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
