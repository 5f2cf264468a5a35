//! Each monitor ends in the state of the newest run: a Healthchecks, a
//! Sentry and a Cronitor on loopback go down (refusing, then hanging) and
//! come back while runs of one job fail and overlap; each monitor's state,
//! computed by its documented rules from what it was sent, is then the
//! newest run's outcome, with no event sent twice and none lost.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::Duration;

use super::monitor::{Mode, Monitor, Ping, Protocol, SECRET, SENTRY_KEY};
use crate::util::{on_every_backend, wait_for_file, Backend, Env};

on_every_backend!(an_outage_and_overlapping_runs_leave_each_monitor_as_the_newest_run_left_it);

/// Healthchecks' ping handler: `/start` keeps the start and its `rid`; a
/// success (`up`) or `/fail` (`down`) sets the status, and ends the kept
/// start when its `rid` matches (a `/fail` always); `/log` changes
/// nothing. A start left open is down once its grace time passes.
fn healthchecks(pings: &[Ping]) -> String {
    let (mut status, mut started) = ("new", None::<&str>);
    for ping in pings {
        match ping.suffix.as_str() {
            "/start" => started = Some(&ping.rid),
            "/fail" => (status, started) = ("down", None),
            "" => {
                status = "up";
                if started == Some(ping.rid.as_str()) {
                    started = None;
                }
            }
            _ => {}
        }
    }
    match started {
        Some(rid) => format!("down: the start of {rid} is left open"),
        None => status.to_owned(),
    }
}

/// Sentry's cron consumer: a check-in is made by its first envelope (its
/// `date_added`, here its place among them); `ok` or `error` sets the
/// monitor's status unless a newer check-in set it already (Sentry's
/// `last_checkin` guard); a check-in left `in_progress` times out into an
/// error unless a newer check-in is `ok` or `error`.
fn sentry(pings: &[Ping]) -> String {
    let mut added: HashMap<&str, usize> = HashMap::new();
    let mut open: HashSet<&str> = HashSet::new();
    let mut finished: Vec<usize> = Vec::new();
    let (mut status, mut last) = ("new".to_owned(), None::<usize>);
    for (at, ping) in pings.iter().enumerate() {
        let made = *added.entry(&ping.rid).or_insert(at);
        if ping.suffix == "in_progress" {
            open.insert(&ping.rid);
            continue;
        }
        open.remove(ping.rid.as_str());
        finished.push(made);
        if last.is_none_or(|last| made >= last) {
            (status, last) = (ping.suffix.clone(), Some(made));
        }
    }
    for rid in open {
        let made = added[rid];
        if !finished.iter().any(|other| *other > made) {
            status = format!("error: {rid} timed out");
        }
    }
    status
}

/// Cronitor's job monitor: the latest event sets its state (`run`:
/// running, `complete`: passing, `fail`: failing).
fn cronitor(pings: &[Ping]) -> String {
    match pings.last().map(|ping| ping.suffix.as_str()) {
        Some("run") => "running",
        Some("complete") => "passing",
        Some("fail") => "failing",
        _ => "new",
    }
    .to_owned()
}

/// A run of job `nightly` as key `key`, pinging all three monitors.
fn nightly(env: &Env, monitors: &[Monitor; 3], key: &str, script: &str) -> crate::util::Idem {
    let urls: Vec<String> = monitors.iter().map(Monitor::url).collect();
    env.cmd([
        "run",
        "-k",
        key,
        "--job",
        "nightly",
        "--retries",
        "0",
        "--ping",
        &urls[0],
        "--ping",
        &urls[1],
        "--ping",
        &urls[2],
        "--",
        "sh",
        "-c",
        script,
    ])
}

fn an_outage_and_overlapping_runs_leave_each_monitor_as_the_newest_run_left_it(backend: &Backend) {
    let env = backend.env();
    let monitors = [
        Monitor::start(Mode::Ok),
        Monitor::speaking(Protocol::Sentry, Mode::Ok),
        Monitor::speaking(Protocol::Cronitor, Mode::Ok),
    ];
    let set = |mode| monitors.iter().for_each(|monitor| monitor.set(mode));
    nightly(&env, &monitors, "n-1", "exit 0").succeeds();
    // Down, refusing: the failure is owed, and each monitor said once.
    set(Mode::Refuse);
    let said = nightly(&env, &monitors, "n-2", "exit 3")
        .expect_code(3)
        .stderr();
    let owed_lines = said
        .lines()
        .filter(|line| line.contains("owed to it"))
        .count();
    assert_eq!(owed_lines, 3, "{said}");
    // Hanging: another failure, tried and owed, and said no more.
    set(Mode::Hang);
    nightly(&env, &monitors, "n-3", "exit 4")
        .expect_code(4)
        .stderr_lacks("could not send");
    // Back: a slow run starts, a newer one overtakes it and succeeds, then
    // the slow one fails.
    set(Mode::Ok);
    let (entered, release) = (env.path("entered"), env.path("release"));
    let slow = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done; exit 5",
        entered.display(),
        release.display()
    );
    let mut older = nightly(&env, &monitors, "n-5", &slow)
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&entered, Duration::from_secs(30), &mut older);
    nightly(&env, &monitors, "n-6", "exit 0")
        .succeeds()
        .stderr_is("");
    std::fs::write(&release, "").unwrap();
    let older = older.wait_with_output().unwrap();
    assert_eq!(older.status.code(), Some(5), "{older:?}");
    let stderr = String::from_utf8_lossy(&older.stderr).into_owned();
    assert!(
        !stderr.contains(SECRET) && !stderr.contains(SENTRY_KEY),
        "{stderr}"
    );
    env.cmd(["ledger", "deliver"])
        .run()
        .succeeds()
        .stdout_has("0 still owed, 0 lost");

    let states: Vec<String> = vec![
        healthchecks(&monitors[0].delivered()),
        sentry(&monitors[1].delivered()),
        cronitor(&monitors[2].delivered()),
    ];
    assert_eq!(
        states,
        ["up", "ok", "passing"],
        "the newest run, n-6, succeeded"
    );
    // Runs by start: no monitor heard an older run after a newer run's
    // outcome, nor anything twice.
    let mut runs: Vec<(String, String)> = env
        .list_json()
        .as_array()
        .unwrap()
        .iter()
        .map(|run| {
            let started = run["started_at"].as_str().unwrap().to_owned();
            (started, run["run_id"].as_str().unwrap().replace('-', ""))
        })
        .collect();
    runs.sort();
    let place = |rid: &str| {
        let rid = rid.replace('-', "");
        runs.iter().position(|(_, run)| *run == rid).unwrap()
    };
    for monitor in &monitors {
        let pings = monitor.delivered();
        let heard: Vec<(usize, &str)> = pings
            .iter()
            .map(|ping| (place(&ping.rid), ping.suffix.as_str()))
            .collect();
        let unique: HashSet<&(usize, &str)> = heard.iter().collect();
        assert_eq!(unique.len(), heard.len(), "sent twice: {heard:?}");
        for (at, (run, what)) in heard.iter().enumerate() {
            let outcome = !matches!(*what, "/start" | "in_progress" | "run");
            let later_older = heard[at + 1..].iter().any(|(other, _)| other < run);
            assert!(
                !(outcome && later_older),
                "an older run after {at}: {heard:?}"
            );
        }
    }
    // Every event of every run went out or was overtaken: none is owed or
    // lost; the slow run's failure was overtaken at each monitor.
    for key in ["n-1", "n-2", "n-3", "n-5", "n-6"] {
        let events = env.show_json(key)["events"].clone();
        for event in events.as_array().unwrap() {
            let went = event["delivered_at"].is_string() || event["superseded"] == true;
            assert!(went && event["lost"] == false, "{key}: {event}");
        }
    }
    let overtaken = env.show_json("n-5")["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["superseded"] == true && event["kind"] == "failure")
        .count();
    assert_eq!(overtaken, 3);
    env.cmd(["ledger", "show", "n-5"])
        .run()
        .succeeds()
        .stdout_has("superseded: a newer run's outcome reached its target first; not sent");
}
