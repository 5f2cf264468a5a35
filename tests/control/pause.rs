//! `idem pause` and `idem resume`: a paused job's runs start nothing and
//! claim nothing, on whichever host, until resumed or until `--until`;
//! `--pause-after` pauses a job by itself, with one alert.

use std::time::Duration;

use super::on_host;
use crate::util::{eventually, on_every_backend, Backend, Env};

on_every_backend!(
    a_pause_on_one_host_holds_back_every_run_on_another,
    a_pause_until_a_time_ends_by_itself,
    pause_after_three_failures_pauses_the_job_and_alerts_once,
    a_glob_that_matches_no_job_is_an_error_and_a_new_job_may_be_paused,
    a_bad_until_is_a_usage_error_and_pauses_nothing,
    two_hosts_failing_at_once_pause_their_job_once,
);

/// `idem run --key KEY ... -- sh -c 'append to the counter n'`.
fn run_args<'a>(env: &'a Env, key: &'a str, extra: &[&'a str]) -> Vec<String> {
    let mut args = vec!["run", "--key", key];
    args.extend_from_slice(extra);
    let mut args: Vec<String> = args.into_iter().map(str::to_owned).collect();
    args.extend(["--", "sh", "-c"].map(str::to_owned));
    args.push(env.count_cmd("n"));
    args
}

fn a_pause_on_one_host_holds_back_every_run_on_another(backend: &Backend) {
    let env = backend.env();
    env.cmd(run_args(&env, "backup", &[])).succeeds();
    let Some(pause) = on_host(
        env.cmd(["pause", "backup", "--reason", "disk swap"]),
        "host-a",
    ) else {
        return;
    };
    pause.succeeds().stderr_has("paused backup");
    let on_b = |extra: &[&str]| on_host(env.cmd(run_args(&env, "backup", extra)), "host-b");
    // Quiet under cron, as a skip is; said with -v.
    on_b(&["--force"]).unwrap().succeeds().stderr_is("");
    let said = on_b(&["--force", "-v"]).unwrap().succeeds().stderr();
    assert!(
        said.contains("paused backup: by ")
            && said.contains("@host-a since ")
            && said.contains(": disk swap; idem resume backup runs it"),
        "{said}"
    );
    on_b(&["--force", "--paused-exit-code", "3"])
        .unwrap()
        .expect_code(3);
    on_b(&["--force"])
        .unwrap()
        .env("IDEM_PAUSED_EXIT_CODE", "4")
        .expect_code(4);
    assert_eq!(env.count("n"), 1, "a paused job's command ran");
    // Nothing was claimed either: the ledger holds the first run alone.
    assert_eq!(env.list_json().as_array().map(Vec::len), Some(1));

    env.cmd(["status"])
        .succeeds()
        .stdout_has("paused")
        .stdout_has("backup paused by ")
        .stdout_has("@host-a ")
        .stdout_has(": disk swap");
    let status = env.cmd(["status", "--json"]).succeeds().json();
    let job = &status[0];
    assert_eq!(job["state"], "paused", "{status}");
    assert!(job["paused"]["by"]
        .as_str()
        .is_some_and(|by| by.ends_with("@host-a")));
    assert_eq!(job["paused"]["reason"], "disk swap");
    assert!(job["paused"]["since"].is_string());
    assert!(job["paused"]["until"].is_null());
    env.cmd(["doctor"])
        .succeeds()
        .stdout_has("paused jobs: 1 job(s) paused: backup (by ");

    on_host(env.cmd(["resume", "backup"]), "host-b")
        .unwrap()
        .succeeds()
        .stderr_has("resumed backup");
    on_b(&["--force"]).unwrap().succeeds();
    assert_eq!(env.count("n"), 2, "a resumed job runs");
    let status = env.cmd(["status", "--json"]).succeeds().json();
    assert_eq!(status[0]["state"], "ok");
    assert!(status[0]["paused"].is_null());
    env.cmd(["resume", "backup"])
        .succeeds()
        .stderr_has("backup was not paused");
}

fn a_pause_until_a_time_ends_by_itself(backend: &Backend) {
    let env = backend.env();
    env.cmd(["pause", "nightly", "--until", "2s"])
        .succeeds()
        .stderr_has("paused nightly until ");
    env.cmd(run_args(&env, "nightly", &["--paused-exit-code", "9"]))
        .expect_code(9);
    assert_eq!(env.count("n"), 0);
    let status = env.cmd(["status", "--json"]).succeeds().json();
    assert_eq!(status[0]["job"], "nightly", "{status}");
    assert_eq!(status[0]["state"], "paused", "{status}");
    assert!(status[0]["paused"]["until"].is_string(), "{status}");
    // Once the until passes, the next run runs, with nothing resumed.
    eventually(
        "the pause to end by itself",
        Duration::from_secs(20),
        || {
            let ran = env
                .cmd(run_args(&env, "nightly", &["--paused-exit-code", "9"]))
                .run();
            match ran.code() {
                Some(9) => false,
                _ => {
                    ran.expect_code(0);
                    true
                }
            }
        },
    );
    assert_eq!(env.count("n"), 1);
    env.cmd(["doctor"])
        .succeeds()
        .stdout_has("paused jobs: none");
}

fn pause_after_three_failures_pauses_the_job_and_alerts_once(backend: &Backend) {
    let env = backend.env();
    let events = env.path("events");
    let hook = format!(
        "echo \"$IDEM_EVENT $IDEM_FAILURES\" >> '{}'",
        events.display()
    );
    let fail = format!("{}; exit 1", env.count_cmd("n"));
    let run = |code: i32| {
        env.cmd([
            "run",
            "--key",
            "etl",
            "--retries",
            "0",
            "--pause-after",
            "3",
        ])
        .args(["--on-failure", &hook, "--", "sh", "-c", &fail])
        .expect_code(code)
    };
    run(1);
    run(1);
    run(1).stderr_has(
        "paused etl: 3 failures in a row (--pause-after 3); idem resume etl runs it again",
    );
    // Paused now: the fourth run starts nothing, and alerts nothing.
    run(0);
    assert_eq!(env.count("n"), 3);
    let told = std::fs::read_to_string(&events).unwrap();
    assert_eq!(told, "failure 1\nfailure 2\npaused 3\n");
    let status = env.cmd(["status", "--json"]).succeeds().json();
    assert_eq!(status[0]["state"], "paused", "{status}");
    assert_eq!(
        status[0]["paused"]["reason"],
        "3 failures in a row (--pause-after 3)"
    );
    env.cmd(["resume", "etl"]).succeeds();
    // Resumed, it runs; still failing, it pauses again at once.
    run(1).stderr_has("paused etl: 4 failures in a row");
    assert_eq!(env.count("n"), 4);
    let told = std::fs::read_to_string(&events).unwrap();
    assert!(told.ends_with("paused 3\npaused 4\n"), "{told}");
}

fn a_glob_that_matches_no_job_is_an_error_and_a_new_job_may_be_paused(backend: &Backend) {
    let env = backend.env();
    env.cmd(run_args(&env, "etl-load", &[])).succeeds();
    env.cmd(["pause", "report-*"])
        .expect_code(1)
        .stderr_is("idem: no job matches report-*; see `idem status` for the jobs there are\n");
    env.cmd(["resume", "report-*"]).expect_code(1);
    env.cmd(["pause", "etl-*"])
        .succeeds()
        .stderr_has("paused etl-load");
    // A job paused before its first run runs nothing, under --catch-up
    // neither.
    env.cmd(["pause", "report-{date}"]).succeeds();
    env.cmd(run_args(&env, "report-{date}", &["--catch-up", "3"]))
        .succeeds();
    env.cmd(run_args(&env, "etl-load", &["--force"])).succeeds();
    assert_eq!(env.count("n"), 1);
    env.cmd(["resume", "*"])
        .succeeds()
        .stderr_has("resumed etl-load")
        .stderr_has("resumed report-{date}");
    env.cmd(run_args(&env, "report-{date}", &[])).succeeds();
    assert_eq!(env.count("n"), 2);
}

fn a_bad_until_is_a_usage_error_and_pauses_nothing(backend: &Backend) {
    let env = backend.env();
    env.cmd(["pause", "backup", "--until", "someday"])
        .expect_code(2)
        .stderr_has("invalid --until 'someday'");
    env.cmd(["pause", "backup", "--until", "2020-01-01"])
        .expect_code(2)
        .stderr_has("--until 2020-01-01 has passed");
    env.cmd(run_args(&env, "backup", &[])).succeeds();
    assert_eq!(env.count("n"), 1);
}

/// `idem ARGS` as if started at `when` (UTC), under faketime.
fn at(env: &Env, when: &str, args: &[&str]) -> crate::util::Idem {
    env.cmd(args)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .under(&["faketime", "-f", &format!("@{when}")])
}

/// A daily job paused on 3 December: on the 6th it is paused, not
/// overdue, and only the periods that began before its pause are missed;
/// resumed, it is judged from its resume: the days it was paused are never
/// missed, and it is overdue only once a whole day after it went by with
/// no success. (The SQLite ledger alone:
/// a shared one stamps times by the database's clock, which faketime
/// does not move.)
#[test]
fn a_paused_or_resumed_job_is_not_overdue_and_its_paused_periods_are_not_missed() {
    if !crate::util::have_faketime() {
        return;
    }
    let env = Env::new();
    let daily = ["run", "--key", "d-{date}", "--", "true"];
    at(&env, "2026-12-01 08:00:00", &daily).succeeds();
    at(&env, "2026-12-03 08:00:00", &["pause", "d-{date}"]).succeeds();
    let status = at(&env, "2026-12-06 12:00:00", &["status", "--json"])
        .succeeds()
        .json();
    assert_eq!(status[0]["state"], "paused", "{status}");
    // 2 and 3 December (which began before the pause); not the 4th or 5th.
    assert_eq!(status[0]["missed"], 2, "{status}");
    // Resumed, the job is judged from its resume: the days that began
    // while it was paused (the 4th to the 6th) are not missed, and it is
    // not overdue before a whole day has begun since.
    at(&env, "2026-12-06 12:00:00", &["resume", "d-{date}"]).succeeds();
    let status = at(&env, "2026-12-06 12:00:01", &["status", "--json"])
        .succeeds()
        .json();
    assert_eq!(status[0]["state"], "ok", "{status}");
    assert_eq!(status[0]["missed"], 2, "{status}");
    let status = at(&env, "2026-12-07 23:00:00", &["status", "--json"])
        .succeeds()
        .json();
    assert_eq!(status[0]["state"], "ok", "the 7th is under way: {status}");
    // The 7th, a whole day after the resume, went by with no success.
    let status = at(&env, "2026-12-08 09:00:00", &["status", "--json"])
        .expect_code(1)
        .json();
    assert_eq!(status[0]["state"], "overdue", "{status}");
    assert_eq!(status[0]["missed"], 3, "the 2nd, 3rd and 7th: {status}");
    let table = at(&env, "2026-12-08 09:00:00", &["status"]).expect_code(1);
    assert!(table.stdout().contains("overdue"), "{}", table.stdout());
}

/// Two hosts whose runs of one job fail at once, past `--pause-after`:
/// the job is paused once, and one of them alerts, whichever it is.
fn two_hosts_failing_at_once_pause_their_job_once(backend: &Backend) {
    let env = backend.env();
    let events = env.path("events");
    let hook = format!("echo \"$IDEM_EVENT\" >> '{}'", events.display());
    let args = |key: &str, script: &str| {
        let mut args: Vec<String> = ["run", "--job", "sync", "--key", key, "--retries", "0"]
            .map(str::to_owned)
            .to_vec();
        args.extend(
            [
                "--pause-after",
                "3",
                "--on-failure",
                &hook,
                "--",
                "sh",
                "-c",
                script,
            ]
            .map(str::to_owned),
        );
        args
    };
    env.cmd(args("sync-0", "exit 1")).expect_code(1);
    env.cmd(args("sync-0", "exit 1")).expect_code(1);
    // Each run says it started, then fails once both have.
    let (a, b) = (env.path("a"), env.path("b"));
    let script = |mine: &std::path::Path| {
        format!(
            "touch '{}'; i=0; while [ ! -e '{}' ] || [ ! -e '{}' ]; do i=$((i+1)); [ $i -gt 500 ] && exit 7; sleep 0.02; done; exit 1",
            mine.display(),
            a.display(),
            b.display()
        )
    };
    let Some(on_a) = on_host(env.cmd(args("sync-a", &script(&a))), "host-a") else {
        return;
    };
    let on_b = on_host(env.cmd(args("sync-b", &script(&b))), "host-b").unwrap();
    let mut spawned: Vec<std::process::Child> = [on_a, on_b]
        .into_iter()
        .map(|idem| {
            idem.command()
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<Option<i32>> = spawned
        .iter_mut()
        .map(|child| child.wait().unwrap().code())
        .collect();
    assert_eq!(codes, [Some(1), Some(1)], "both ran and failed together");
    let told = std::fs::read_to_string(&events).unwrap();
    assert_eq!(told.matches("paused").count(), 1, "{told}");
    let status = env.cmd(["status", "--json"]).succeeds().json();
    assert_eq!(status[0]["state"], "paused", "{status}");
    assert_eq!(status[0]["failures"], 4, "{status}");
}
