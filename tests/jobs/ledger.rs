//! The ledger commands that speak jobs, export and import of jobs, and
//! jobs on a shared ledger.

use std::time::Duration;

use crate::pg::Server;
use crate::util::{assert_code, eventually, have_faketime, wait_for_file, Env};

use super::{at, backup, job, log, status_json};

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
    list_takes_jobs_and_dates(&env);
    show_and_forget_take_templates_and_globs(&env);
    forget_is_all_or_nothing(&env);
}

/// `ledger list --job` takes a glob, `--since` and `--until` a date, a
/// time or a duration.
fn list_takes_jobs_and_dates(env: &Env) {
    let list = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["ledger", "list", "--json"];
        all.extend_from_slice(args);
        let output = at(env, "2026-03-03 10:00:00", &all);
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
    env.cmd(["ledger", "list", "--until", "tomorrow-ish"])
        .expect_code(2)
        .stderr_has("invalid --until");
    // More runs match than are shown: said on stderr.
    env.cmd(["ledger", "list", "--limit", "2"])
        .succeeds()
        .stderr_has("more runs match");
    env.cmd(["ledger", "list"]).run().stderr_lacks("more runs");
}

fn show_and_forget_take_templates_and_globs(env: &Env) {
    // show expands a template now.
    let show = at(
        env,
        "2026-03-02 12:00:00",
        &["ledger", "show", "backup-{date}", "--json"],
    );
    assert_code(&show, 0);
    let shown: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["key"], "backup-2026-03-02");
    assert_eq!(shown["job"], "backup-{date}");

    // forget takes globs; --dry-run lists the matches.
    env.cmd(["ledger", "forget", "backup-2026-03-0[12]", "--dry-run"])
        .succeeds()
        .stdout_has("would forget backup-2026-03-01")
        .stdout_has("would forget backup-2026-03-02")
        .stdout_lacks("backup-2026-03-03");
    let forgot = env.cmd(["ledger", "forget", "backup-*"]).succeeds();
    assert_eq!(forgot.stdout().lines().count(), 3);
    env.cmd(["ledger", "forget", "nothing-*"]).expect_code(1);
}

fn forget_is_all_or_nothing(env: &Env) {
    // A matched key is running: nothing is forgotten.
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
    env.cmd(["run", "-k", "backup-done", "--", "true"])
        .succeeds();
    env.cmd(["ledger", "forget", "backup-*"])
        .expect_code(75)
        .stderr_has("backup-live");
    let show = env.show_json("backup-done");
    assert_eq!(show["status"], "succeeded");
    env.cmd(["run", "-k", "backup-done", "--", "true"])
        .succeeds();
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
    let exported = source.cmd(["ledger", "export"]).succeeds();
    let mut lines = exported.stdout();
    assert!(lines.contains("\"job\":\"nightly\""), "{lines}");
    // A line of an idem before jobs: its key is its job.
    lines.push_str(
        r#"{"key":"legacy","run_id":"01900000-0000-7000-8000-000000000001","status":"succeeded","exit_code":0,"attempts":1,"started_at":"2026-03-01T01:00:00Z","finished_at":"2026-03-01T01:00:01Z","host":"old","pid":1,"command":["true"],"shell":false,"head":true}"#,
    );
    lines.push('\n');
    let target = Env::new();
    let file = target.path("export.jsonl");
    std::fs::write(&file, &lines).unwrap();
    target
        .cmd(["ledger", "import", file.to_str().unwrap()])
        .succeeds();
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
    target
        .cmd(["ledger", "import", file.to_str().unwrap()])
        .succeeds();
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
    let pg = |args: &[&str]| env.cmd(args).db(&url);
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
    pg(&["ledger", "import", file.to_str().unwrap()]).succeeds();
    let status = pg(&["status", "--json"]).expect_code(1);
    let json: serde_json::Value = status.json();
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
    pg(&catch_up).succeeds();
    pg(&catch_up).succeeds();
    assert_eq!(
        log(&env),
        [
            format!("backup-{} {}T00:00:00+00:00", day(1), day(1)),
            format!("backup-{} {}T00:00:00+00:00", day(0), day(0)),
        ],
        "the failed day caught up once, none before the job's first run"
    );
    let status = pg(&["status", "--json"]).run();
    let json = status.json();
    let backup = job(&json, "backup-{date}");
    assert_eq!(backup["state"], "ok", "{json:#}");
    assert_eq!(backup["failures"], 0);
    assert_eq!(backup["missed"], 0);
    status.expect_code(0);
    pg(&["ledger", "metrics"])
        .succeeds()
        .stdout_has("idem_runs{job=\"backup-{date}\",status=\"succeeded\"} 2")
        .stdout_has("idem_runs{job=\"backup-{date}\",status=\"failed\"} 1")
        .stdout_lacks("key=\"");

    a_named_lock_is_fleet_wide(&env, &url);
}

/// A named lock is fleet-wide: held, the other job's run conflicts.
fn a_named_lock_is_fleet_wide(env: &Env, url: &str) {
    let pg = |args: &[&str]| env.cmd(args).db(url);
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
        .env("IDEM_DB", url)
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut holder);
    pg(&["run", "--key", "other", "--lock", "db", "--", "true"])
        .expect_code(75)
        .stderr_has("lock db is held");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = holder.wait();
    // Its outcome released it.
    eventually("the lock to be released", Duration::from_secs(30), || {
        pg(&["run", "--key", "other", "--lock", "db", "--", "true"])
            .run()
            .output
            .status
            .success()
    });
}
