//! `idem stop`: a run stopped wholly wherever it runs, recorded failed
//! with who stopped it, never retried; on a local ledger even when its
//! idem is frozen, and marked abandoned when its owner is gone.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::pg::Server;
use crate::util::{eventually, host_prefix, wait_for_file, wrapped, Env};

/// A command that starts a child and a grandchild in the background
/// (detached into a session of their own), touches `started` and waits.
fn family(env: &Env) -> String {
    format!(
        "setsid sh -c 'sleep 300 & sleep 300' & sleep 300 & touch '{}'; wait",
        env.path("started").display()
    )
}

/// The run id of the key's latest run.
fn run_id(env: &Env, key: &str) -> String {
    env.show_json(key)["run_id"].as_str().unwrap().to_owned()
}

/// Waits until the run's command and the processes it started (`at
/// least` of them) all run.
fn wait_for_family(run_id: &str, at_least: usize) -> Vec<i32> {
    eventually("the run's processes", Duration::from_secs(30), || {
        let found = crate::util::processes_of(run_id);
        (found.len() >= at_least).then_some(found)
    })
}

/// Spawns `idem run --key KEY --retries 2` of [`family`] and waits until
/// its processes run; its stderr is piped.
fn start_family(env: &Env, key: &str) -> (Child, String, Vec<i32>) {
    let script = family(env);
    let mut owner = env
        .idem([
            "run",
            "--key",
            key,
            "--retries",
            "2",
            "--shell",
            "--",
            &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&env.path("started"), Duration::from_secs(30), &mut owner);
    let run_id = run_id(env, key);
    let pids = wait_for_family(&run_id, 5);
    (owner, run_id, pids)
}

/// The key's latest run was stopped and recorded so, once, by this user.
fn recorded_stopped(env: &Env, key: &str) {
    let run = env.show_json(key);
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["attempts"], 1, "a stopped run is not retried: {run}");
    assert_eq!(run["exit_code"], 143, "{run}");
    assert_eq!(run["stop"]["signal"], 15, "{run}");
    assert!(run["stop"]["by"].as_str().unwrap().contains('@'), "{run}");
    assert!(run["stop"]["seen_at"].is_string(), "{run}");
    let shown = env.cmd(["ledger", "show", key]).succeeds().stdout();
    assert!(shown.contains("stopped by "), "{shown}");
    let runs = env
        .cmd(["ledger", "list", "--key", key, "--json"])
        .succeeds()
        .json();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
}

#[test]
fn stop_with_nothing_running_exits_1() {
    let env = Env::new();
    env.cmd(["stop", "k"])
        .expect_code(1)
        .stderr_has("nothing running: k");
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    env.cmd(["stop", "k", "k*"])
        .expect_code(1)
        .stderr_has("nothing running");
}

#[test]
fn a_stopped_run_ends_wholly_recorded_failed_and_not_retried() {
    let env = Env::new();
    let (owner, _, pids) = start_family(&env, "k");
    env.cmd(["stop", "k"])
        .succeeds()
        .stderr_has("k: stopped, recorded failed");
    for pid in pids {
        assert!(!crate::util::lives(pid), "pid {pid} outlived the stop");
    }
    let ended = owner.wait_with_output().unwrap();
    assert_eq!(ended.status.code(), Some(143));
    let said = crate::util::text(&ended.stderr);
    assert!(said.contains("stopped by "), "{said}");
    recorded_stopped(&env, "k");
}

#[test]
fn a_run_whose_idem_is_frozen_still_stops() {
    let env = Env::new();
    let (mut owner, _, pids) = start_family(&env, "k");
    let idem = Pid::from_raw(owner.id() as i32);
    kill(idem, Signal::SIGSTOP).unwrap();
    env.cmd(["stop", "k", "--wait", "1s"])
        .succeeds()
        .stderr_has("has not recorded it");
    eventually(
        "the run's processes to end",
        Duration::from_secs(10),
        || pids.iter().all(|pid| !crate::util::lives(*pid)),
    );
    assert_eq!(env.show_json("k")["status"], "running");
    let doctor = crate::util::text(&env.run(["doctor"]).stdout);
    assert!(
        doctor.contains("1 stop request(s) not yet seen by the run's owner: k (by "),
        "{doctor}"
    );
    kill(idem, Signal::SIGCONT).unwrap();
    let ended = eventually("idem to end", Duration::from_secs(30), || {
        owner.try_wait().unwrap()
    });
    assert_eq!(ended.code(), Some(143));
    recorded_stopped(&env, "k");
    let doctor = crate::util::text(&env.run(["doctor"]).stdout);
    assert!(doctor.contains("none pending"), "{doctor}");
}

/// The pid of the guardian idem `idem` forked.
fn guardian_of(idem: u32) -> i32 {
    eventually("the guardian", Duration::from_secs(10), || {
        std::fs::read_dir(format!("/proc/{idem}/task"))
            .ok()?
            .flatten()
            .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
            .flat_map(|children| {
                children
                    .split_whitespace()
                    .filter_map(|pid| pid.parse::<i32>().ok())
                    .collect::<Vec<_>>()
            })
            .next()
    })
}

#[test]
fn a_run_whose_owner_was_killed_with_its_guardian_is_marked_abandoned() {
    let env = Env::new();
    let (mut owner, run_id, _) = start_family(&env, "k");
    let guardian = guardian_of(owner.id());
    kill(Pid::from_raw(guardian), Signal::SIGKILL).unwrap();
    kill(Pid::from_raw(owner.id() as i32), Signal::SIGKILL).unwrap();
    owner.wait().unwrap();
    env.cmd(["stop", "k"])
        .succeeds()
        .stderr_has("was gone; marked abandoned");
    assert!(crate::util::processes_of(&run_id).is_empty());
    assert_eq!(env.show_json("k")["status"], "abandoned");
    env.cmd(["stop", "k"]).expect_code(1);
}

/// `idem ARGS` on the PostgreSQL ledger `url` as if on another host: its
/// own UTS namespace, renamed (needs root, as the other shared-ledger
/// tests of hosts).
fn on_host(env: &Env, url: &str, host: &str, args: &[&str]) -> Option<std::process::Command> {
    Some(wrapped(
        &env.cmd(args).db(url).command(),
        &host_prefix(host)?,
    ))
}

/// Stops a run of [`family`] owned on another host under a lease of
/// `lease`, `delay` after its processes run: how long from the stop to the
/// last of its processes gone.
pub(super) fn stop_on_another_host(
    server: &Server,
    lease: &str,
    delay: Duration,
) -> Option<Duration> {
    static TRIAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let key = format!(
        "k{}",
        TRIAL.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    let key = key.as_str();
    let env = Env::on_ledger(server.url());
    let script = family(&env);
    let args = [
        "run",
        "--key",
        key,
        "--retries",
        "2",
        "--lease",
        lease,
        "--shell",
        "--",
        &script,
    ];
    let mut owner = on_host(&env, &server.url(), "host-a", &args)?
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&env.path("started"), Duration::from_secs(30), &mut owner);
    let run_id = run_id(&env, key);
    let pids = wait_for_family(&run_id, 5);
    std::thread::sleep(delay);
    let asked = Instant::now();
    let stop = env
        .idem(["stop", key])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let gone = eventually(
        "the run's processes to end",
        Duration::from_secs(120),
        || {
            pids.iter()
                .all(|pid| !crate::util::lives(*pid))
                .then(|| asked.elapsed())
        },
    );
    let stopped = stop.wait_with_output().unwrap();
    assert_eq!(
        stopped.status.code(),
        Some(0),
        "{}",
        crate::util::text(&stopped.stderr)
    );
    let ended = owner.wait_with_output().unwrap();
    assert_eq!(
        ended.status.code(),
        Some(143),
        "{}",
        crate::util::text(&ended.stderr)
    );
    recorded_stopped(&env, key);
    let run = env.show_json(key);
    assert_eq!(run["host"], "host-a");
    Some(gone)
}

#[test]
fn a_run_on_another_host_stops_within_a_third_of_its_lease() {
    let Some(server) = Server::start("a_run_on_another_host_stops_within_a_third_of_its_lease")
    else {
        return;
    };
    let Some(took) = stop_on_another_host(&server, "3s", Duration::ZERO) else {
        return;
    };
    // The heartbeat comes every second; its request is acted on at once.
    assert!(took < Duration::from_millis(1800), "took {took:?}");
}

/// Not a check but a measure (`--ignored --nocapture`): the median time
/// from `idem stop` to the last process of a run on another host gone,
/// under leases of 3 s and 30 s, the stop sent at a random moment of the
/// heartbeat's period.
#[test]
#[ignore]
fn measure_stop_on_another_host() {
    let Some(server) = Server::start("measure_stop_on_another_host") else {
        return;
    };
    for (lease, period) in [("3s", 1.0), ("30s", 10.0)] {
        let mut took: Vec<Duration> = (0..crate::util::trials(5))
            .filter_map(|_| {
                let delay = Duration::from_secs_f64(period * fastrand::f64());
                stop_on_another_host(&server, lease, delay)
            })
            .collect();
        took.sort();
        eprintln!(
            "lease {lease}: median {:?} of {} (min {:?}, max {:?})",
            took[took.len() / 2],
            took.len(),
            took[0],
            took[took.len() - 1]
        );
    }
}
