//! The outbox: every ping is an event in the ledger, delivered at most
//! once, by the run that owes it or by the next idem on the ledger, or
//! given up after a day (see `monitor.rs` for the monitor they go to).

pub mod monitor;
mod order;
mod periods;
mod protocols;
mod stops;

use std::time::{Duration, Instant};

use crate::util::{on_every_backend, sqlite, Backend, Env};
use monitor::{Mode, Monitor, SECRET};

on_every_backend!(
    reads_never_send,
    a_failure_while_the_monitor_is_down_arrives_once_at_the_next_idem,
    two_deliverers_at_once_send_each_event_once,
    an_event_a_day_old_is_lost_in_doctor_and_never_sent,
);

/// Runs `sqlite_sql` or `postgres_sql` on the env's ledger.
fn sql(backend: &Backend, env: &Env, sqlite_sql: &str, postgres_sql: &str) {
    if backend.is_postgres() {
        let url = env.ledger().into_string().unwrap();
        let mut client = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
        client.batch_execute(postgres_sql).unwrap();
    } else {
        sqlite(&env.db(), sqlite_sql);
    }
}

/// A run of `key` pinging `monitor`, checked never to print its secret.
fn pinged(env: &Env, monitor: &Monitor, key: &str, command: &[&str]) -> crate::util::Ran {
    let url = monitor.url();
    let mut args = vec!["run", "-k", key, "--retries", "0", "--ping", &url, "--"];
    args.extend_from_slice(command);
    env.cmd(&args)
        .run()
        .stdout_lacks(SECRET)
        .stderr_lacks(SECRET)
}

/// The events of `key`'s latest run not delivered.
fn undelivered(env: &Env, key: &str) -> usize {
    let events = env.show_json(key)["events"].clone();
    let events = events.as_array().unwrap();
    events
        .iter()
        .filter(|event| event["delivered_at"].is_null())
        .count()
}

/// `status --json`'s `owed` of job `job`.
fn owed(env: &Env, job: &str) -> u64 {
    let status = env.cmd(["status", "--json"]).run().json();
    status
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["job"] == job)
        .map_or(0, |row| row["owed"].as_u64().unwrap())
}

/// `status`, `ledger show|list|metrics` and `doctor` read what is owed and
/// send none of it, even with the monitor back: runs and `ledger deliver`
/// deliver.
fn reads_never_send(backend: &Backend) {
    let env = backend.env();
    let monitor = Monitor::start(Mode::Refuse);
    pinged(&env, &monitor, "k", &["false"]).expect_code(1);
    monitor.set(Mode::Ok);
    let tried = monitor.connections();
    let reads: [&[&str]; 6] = [
        &["status"],
        &["status", "--json"],
        &["ledger", "show", "k"],
        &["ledger", "list"],
        &["ledger", "metrics"],
        &["doctor"],
    ];
    for read in reads {
        let _ = env.cmd(read).run();
    }
    assert_eq!(monitor.connections(), tried, "a read sent something");
    assert_eq!(owed(&env, "k"), 2);
    env.cmd(["ledger", "deliver"])
        .run()
        .succeeds()
        .stdout_has("delivered 2, failed 0; 0 still owed");
    assert_eq!(monitor.delivered().len(), 2);
}

/// A monitor that drops the connection unanswered is down: its ping is
/// tried once, not again after a backoff that would only hold the run,
/// and the run's outcome is owed to it without a try.
#[test]
fn a_refused_ping_is_tried_once() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Refuse);
    pinged(&env, &monitor, "k", &["true"])
        .succeeds()
        .stderr_has("the connection was closed without an answer");
    assert_eq!(monitor.connections(), 1, "the start's alone");
    assert_eq!(owed(&env, "k"), 2);
}

/// A ping's failure names the run's key, the start's as the outcome's,
/// and says what the monitor did in words.
#[test]
fn ping_failures_name_the_key_and_say_what_happened() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Fail);
    let url = monitor.url();
    let args = [
        "run",
        "-k",
        "night-1",
        "--job",
        "night",
        "--retries",
        "0",
        "--ping",
        &url,
        "--",
        "true",
    ];
    let ran = env.cmd(args).run().succeeds().stderr_lacks(SECRET);
    let stderr = ran.stderr();
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(!lines.is_empty(), "{stderr}");
    for line in &lines {
        assert!(line.starts_with("idem: night-1: "), "{stderr}");
        assert!(line.contains("it answered HTTP 500"), "{stderr}");
    }
}

#[test]
fn ledger_deliver_tells_its_own_exit_codes() {
    let env = Env::new();
    env.cmd(["ledger", "deliver", "--help"])
        .run()
        .succeeds()
        .stdout_has("1    an event could not be delivered (it stays owed")
        .stdout_lacks("forget: a key is not");
}

fn a_failure_while_the_monitor_is_down_arrives_once_at_the_next_idem(backend: &Backend) {
    let env = backend.env();
    let monitor = Monitor::start(Mode::Refuse);
    // More output than a ping carries: its tail goes.
    let script = "head -c 30000 /dev/zero | tr '\\0' a; echo; echo last-line; exit 3";
    pinged(&env, &monitor, "k", &["sh", "-c", script]).expect_code(3);
    let run_id = env.show_json("k")["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        undelivered(&env, "k"),
        2,
        "the start and the failure are owed"
    );
    let events = env.show_json("k")["events"].clone();
    assert_eq!(events.as_array().unwrap().len(), 2, "{events}");
    assert!(events[1]["delivered_at"].is_null(), "{events}");
    assert!(!events.to_string().contains(SECRET), "{events}");
    env.cmd(["doctor"])
        .run()
        .stdout_has("notifications: 2 events owed, not yet delivered")
        .stdout_lacks(SECRET);
    // The monitor back up: the next idem on the ledger (a run of another
    // key, with no ping of its own) delivers them, once each, in order.
    monitor.set(Mode::Ok);
    env.cmd(["run", "-k", "other", "--", "true"])
        .run()
        .succeeds()
        .stderr_is("");
    let pings = monitor.delivered();
    let seen: Vec<(&str, &str)> = pings
        .iter()
        .map(|p| (p.suffix.as_str(), p.rid.as_str()))
        .collect();
    assert_eq!(
        seen,
        [("/start", run_id.as_str()), ("/fail", run_id.as_str())]
    );
    let body = String::from_utf8_lossy(&pings[1].body).into_owned();
    assert!(
        body.len() <= monitor::BODY_LIMIT && body.ends_with("last-line\n"),
        "{}",
        body.len()
    );
    assert_eq!(owed(&env, "k"), 0);
    // Nothing is sent twice.
    env.cmd(["ledger", "deliver"])
        .run()
        .succeeds()
        .stdout_has("delivered 0, failed 0; 0 still owed");
    assert_eq!(monitor.delivered().len(), 2);
    let events = env.show_json("k")["events"].clone();
    assert!(
        events[0]["delivered_at"].is_string() && events[1]["delivered_at"].is_string(),
        "{events}"
    );
    assert_eq!(events[1]["kind"], "failure");
    // Delivered, an event keeps the record of it, not its address.
    if !backend.is_postgres() {
        let kept = sqlite(&env.db(), "SELECT count(*) FROM outbox WHERE address <> ''");
        assert_eq!(kept, "0");
    }
    env.cmd(["ledger", "prune", "--older-than", "0s"])
        .run()
        .succeeds()
        .stdout_has("dropped 2 notification events delivered or lost");
    assert_eq!(env.show_json("k")["events"], serde_json::json!([]));
}

fn two_deliverers_at_once_send_each_event_once(backend: &Backend) {
    let env = backend.env();
    let monitor = Monitor::start(Mode::Refuse);
    pinged(&env, &monitor, "k", &["false"]).expect_code(1);
    // A hundred copies of each owed event, each its own run id and its
    // own target (so that none overtakes another).
    sql(
        backend,
        &env,
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 99)
         INSERT INTO outbox (event_id, run_id, job, kind, target, address, payload, body,
             created_at, next_try_at, attempts, dest, run_started)
         SELECT randomblob(16), randomblob(16), job, kind, target, address, payload, body,
             created_at, next_try_at, attempts, hex(randomblob(16)), run_started
         FROM outbox, n;",
        "INSERT INTO idem.outbox (event_id, run_id, job, kind, target, address, payload, body,
             created_at, next_try_at, attempts, dest, run_started)
         SELECT gen_random_uuid(), gen_random_uuid(), job, kind, target, address, payload, body,
             created_at, next_try_at, attempts, gen_random_uuid()::text, run_started
         FROM idem.outbox, generate_series(1, 99);",
    );
    monitor.set(Mode::Ok);
    let deliverers: Vec<_> = (0..2)
        .map(|_| {
            env.cmd(["ledger", "deliver", "--json"])
                .command()
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut delivered = 0;
    for deliverer in deliverers {
        let output = deliverer.wait_with_output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let counts: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        eprintln!("a deliverer: {counts}");
        delivered += counts["delivered"].as_u64().unwrap();
    }
    let pings = monitor.delivered();
    let mut each: Vec<(String, String)> = pings
        .iter()
        .map(|p| (p.rid.clone(), p.suffix.clone()))
        .collect();
    each.sort();
    each.dedup();
    assert_eq!((pings.len(), each.len(), delivered), (200, 200, 200));
    assert_eq!(owed(&env, "k"), 0);
}

fn an_event_a_day_old_is_lost_in_doctor_and_never_sent(backend: &Backend) {
    let env = backend.env();
    let monitor = Monitor::start(Mode::Fail);
    pinged(&env, &monitor, "k", &["true"]).succeeds();
    sql(
        backend,
        &env,
        "UPDATE outbox SET created_at = created_at - 25 * 3600 * 1000;",
        "UPDATE idem.outbox SET created_at = created_at - interval '25 hours';",
    );
    monitor.set(Mode::Ok);
    env.cmd(["ledger", "deliver"])
        .run()
        .succeeds()
        .stdout_has("0 still owed, 2 lost");
    env.cmd(["run", "-k", "other", "--", "true"])
        .run()
        .succeeds();
    assert_eq!(monitor.delivered(), []);
    assert_eq!(owed(&env, "k"), 0);
    let events = env.show_json("k")["events"].clone();
    assert_eq!(events[0]["lost"], true, "{events}");
    env.cmd(["doctor"])
        .run()
        .stdout_has("2 events lost, never delivered within a day")
        .stdout_lacks(SECRET);
}

#[test]
fn a_hanging_monitor_leaves_the_run_within_its_five_seconds() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Hang);
    let began = Instant::now();
    pinged(&env, &monitor, "k", &["sh", "-c", "exit 4"])
        .expect_code(4)
        .stderr_has("no answer within 2s")
        .stderr_lacks("timeout: global");
    let took = began.elapsed();
    eprintln!("a hanging monitor: the run took {took:?}");
    assert!(took < Duration::from_secs(7), "took {took:?}");
    assert_eq!(undelivered(&env, "k"), 2);
    assert_eq!(owed(&env, "k"), 2);
}

#[test]
fn warn_every_repeats_the_slow_warning_while_the_attempt_runs() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Ok);
    let url = monitor.url();
    let hooks = env.path("hooks");
    let hook = format!("echo $IDEM_EVENT >> '{}'", hooks.display());
    // The attempt runs until it has been told slow three times: the test
    // waits on that, not on a clock (the timeout fails it instead).
    let script = format!(
        "while [ \"$(cat '{}' 2>/dev/null | wc -l)\" -lt 3 ]; do sleep 0.05; done",
        hooks.display()
    );
    let args = [
        "run",
        "-k",
        "slow",
        "--retries",
        "0",
        "--timeout",
        "20s",
        "--warn-after",
        "200ms",
        "--warn-every",
        "200ms",
        "--on-failure",
        &hook,
        "--ping",
        &url,
        "--",
        "sh",
        "-c",
        &script,
    ];
    let output = env.cmd(args).run().succeeds().stderr_lacks(SECRET);
    let stderr = output.stderr();
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines.len() >= 3, "{stderr}");
    assert_eq!(
        lines[0],
        "idem: slow: attempt 1 is still running after 200ms; it keeps running (--warn-after)"
    );
    assert_eq!(
        lines[1],
        "idem: slow: attempt 1 is still running after 400ms; it keeps running (--warn-every)"
    );
    let logs = monitor
        .delivered()
        .iter()
        .filter(|ping| ping.suffix == "/log")
        .count();
    assert!(logs >= 3, "{:?}", monitor.delivered());
    // Without --warn-after there is nothing to repeat.
    env.cmd(["run", "-k", "x", "--warn-every", "1s", "--", "true"])
        .run()
        .expect_code(2)
        .stderr_has("--warn-after");
}

#[test]
fn a_hook_that_failed_is_run_again_by_ledger_deliver_alone() {
    let env = Env::new();
    let ready = env.path("ready");
    let told = env.path("told");
    // The hook fails until the file `ready` is there.
    let hook = format!(
        "test -e '{}' && echo \"$IDEM_EVENT $IDEM_RUN_ID $IDEM_EXIT_CODE\" >> '{}'",
        ready.display(),
        told.display()
    );
    let args = [
        "run",
        "-k",
        "k",
        "--retries",
        "0",
        "--on-failure",
        &hook,
        "--",
        "sh",
        "-c",
        "exit 6",
    ];
    env.cmd(args)
        .run()
        .expect_code(6)
        .stderr_has("the --on-failure hook exited 1");
    let run_id = env.show_json("k")["run_id"].as_str().unwrap().to_owned();
    std::fs::write(&ready, "").unwrap();
    // A run and a status deliver pings, never another run's hook.
    env.cmd(["run", "-k", "other", "--", "true"])
        .run()
        .succeeds();
    assert_eq!(owed(&env, "k"), 1);
    assert!(!told.exists());
    env.cmd(["ledger", "deliver"])
        .run()
        .succeeds()
        .stdout_has("delivered 1, failed 0; 0 still owed");
    let lines = std::fs::read_to_string(&told).unwrap();
    assert_eq!(lines, format!("failure {run_id} 6\n"));
    env.cmd(["ledger", "deliver"])
        .run()
        .succeeds()
        .stdout_has("delivered 0");
    assert_eq!(std::fs::read_to_string(&told).unwrap(), lines);
}

/// Owed means not delivered: a start ping that went out is recorded
/// delivered then, not when the run ends, so nothing shows it owed while
/// its run lasts.
#[test]
fn a_start_ping_sent_is_not_owed_while_its_run_lasts() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Ok);
    let release = env.path("release");
    let url = monitor.url();
    let script = format!(
        "while [ ! -e '{}' ]; do sleep 0.02; done",
        release.display()
    );
    let mut run = env
        .cmd([
            "run",
            "-k",
            "k",
            "--retries",
            "0",
            "--ping",
            &url,
            "--",
            "sh",
            "-c",
            &script,
        ])
        .command()
        .spawn()
        .unwrap();
    crate::util::eventually(
        "the start to be recorded delivered",
        Duration::from_secs(30),
        || {
            if let Ok(Some(status)) = run.try_wait() {
                panic!("the run ended early: {status}");
            }
            // Before its claim there is no ledger, nor the key in it.
            let shown = env
                .idem(["ledger", "show", "k", "--json"])
                .output()
                .unwrap();
            shown.status.success()
                && serde_json::from_slice::<serde_json::Value>(&shown.stdout).unwrap()["events"][0]
                    ["delivered_at"]
                    .is_string()
        },
    );
    assert_eq!(monitor.delivered().len(), 1);
    assert_eq!(owed(&env, "k"), 0);
    env.cmd(["ledger", "show", "k"])
        .run()
        .succeeds()
        .stdout_has("event start to ping 1 ")
        .stdout_lacks("owed");
    std::fs::write(&release, "").unwrap();
    assert!(run.wait().unwrap().success());
    assert_eq!(undelivered(&env, "k"), 0);
}
