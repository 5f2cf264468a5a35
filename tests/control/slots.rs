//! `--lock NAME:N`: a lock with N slots, a semaphore over the runs that
//! share a ledger (on PostgreSQL, across hosts). Each scenario holds on
//! both ledgers; the commands count themselves how many run at once.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::util::{
    assert_code, eventually, host_prefix, on_every_backend, trials, wait_for_file, wrapped,
    Backend, Env,
};

on_every_backend!(
    racing_runs_never_exceed_the_slots,
    a_killed_run_frees_its_slot,
    a_waiting_run_holds_no_slot,
    runs_giving_other_slots_each_keep_their_own,
);

/// A shell command that notes its key in the folder `running` while it
/// runs, logs how many it found there (itself included) to `seen`, and
/// counts itself in `count`: the most lines of `seen` is the most runs
/// seen at once. Its note is gone before it exits, so before its run ends.
fn counted(env: &Env, seconds: &str) -> String {
    let running = env.path("running");
    std::fs::create_dir_all(&running).unwrap();
    format!(
        "d='{running}'; touch \"$d/$IDEM_KEY\"; ls \"$d\" | wc -l >> '{seen}'; sleep {seconds}; rm \"$d/$IDEM_KEY\"; {count}",
        running = running.display(),
        seen = env.path("seen").display(),
        count = env.count_cmd("count"),
    )
}

/// The most runs the counted commands saw at once.
fn most_at_once(env: &Env) -> usize {
    std::fs::read_to_string(env.path("seen"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

/// `idem ARGS`, on PostgreSQL as if on host `host` (a UTS namespace of
/// its own), so that the fleet's hosts share the lock.
fn on_host(backend: &Backend, env: &Env, host: &str, args: &[&str]) -> Command {
    let command = env.idem(args);
    if !backend.is_postgres() {
        return command;
    }
    match host_prefix(host) {
        Some(prefix) => wrapped(&command, &prefix),
        None => command,
    }
}

/// Ten racing keys with `--lock backup:2 --wait`: all ten run, never more
/// than two at once, and two do run at once (a semaphore, not a mutex).
fn racing_runs_never_exceed_the_slots(backend: &Backend) {
    const RACERS: usize = 10;
    let rounds = trials(3);
    let mut most = 0;
    for round in 0..rounds {
        let env = backend.env();
        let script = counted(&env, "0.3");
        let children: Vec<Child> = (0..RACERS)
            .map(|racer| {
                let key = format!("backup-{round}-{racer}");
                let host = format!("host-{}", racer % 3);
                let args = [
                    "run", "--key", &key, "--lock", "backup:2", "--wait", "120s", "--shell", "--",
                    &script,
                ];
                on_host(backend, &env, &host, &args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("idem starts")
            })
            .collect();
        for child in children {
            assert_code(&child.wait_with_output().unwrap(), 0);
        }
        assert_eq!(env.count("count"), RACERS, "every racer ran once");
        let seen = most_at_once(&env);
        assert!(seen <= 2, "{seen} runs holding backup:2 ran at once");
        most = most.max(seen);
        if backend.is_postgres() {
            let hosts: BTreeSet<String> = env
                .list_json()
                .as_array()
                .unwrap()
                .iter()
                .map(|run| run["host"].as_str().unwrap_or_default().to_owned())
                .collect();
            assert_eq!(hosts.len(), 3, "the racers ran on three hosts: {hosts:?}");
        }
    }
    eprintln!("slots: {rounds} rounds of {RACERS} racers on backup:2, at most {most} at once");
    assert_eq!(most, 2, "two slots let two runs overlap");
}

/// Starts `idem run --key KEY --lock LOCK` in a group of its own, whose
/// command touches a file of its own, then sleeps; returned once it ran.
fn holder(env: &Env, key: &str, lock: &str, extra: &[&str]) -> Child {
    let started = env.path(&format!("started-{key}"));
    let script = format!("touch '{}'; exec sleep 60", started.display());
    let mut args = vec!["run", "--key", key, "--lock", lock];
    args.extend_from_slice(extra);
    args.extend(["--shell", "--", &script]);
    let mut child = env
        .idem(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("idem starts");
    wait_for_file(&started, Duration::from_secs(60), &mut child);
    child
}

/// SIGKILLs idem: its run dies with it, leaving its slot to the kernel
/// (SQLite) or to its lease (PostgreSQL).
fn stop(mut child: Child) {
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
    let _ = child.wait();
}

/// Ends a holder as a person would (SIGTERM): its outcome recorded, its
/// slot given back at once on either ledger.
fn end(mut child: Child) {
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    let _ = child.wait();
}

/// A run killed with SIGKILL frees its slot: on SQLite as soon as its
/// processes are gone, on PostgreSQL once its lease has run out.
fn a_killed_run_frees_its_slot(backend: &Backend) {
    let env = backend.env();
    let lease = ["--lease", "10s"];
    let first = holder(&env, "a", "backup:2", &lease);
    let second = holder(&env, "b", "backup:2", &lease);
    env.cmd(["run", "--key", "c", "--lock", "backup:2", "--", "true"])
        .expect_code(75)
        .stderr_has("lock backup is held by other runs in all its 2 slots");
    let killed = Instant::now();
    stop(first);
    if backend.is_postgres() {
        // Its lease still holds the slot.
        env.cmd(["run", "--key", "c", "--lock", "backup:2", "--", "true"])
            .expect_code(75);
    }
    let third = holder(&env, "c", "backup:2", &["--wait", "60s"]);
    eprintln!(
        "slots: a killed run's slot taken again after {:?}",
        killed.elapsed()
    );
    // The other slot is still held, and the killed run's is taken again.
    env.cmd(["run", "--key", "d", "--lock", "backup:2", "--", "true"])
        .expect_code(75);
    stop(second);
    stop(third);
}

/// A run that waits for one of its locks holds no slot of the others: it
/// takes all or none, so another run gets the slot it does not hold.
fn a_waiting_run_holds_no_slot(backend: &Backend) {
    let env = backend.env();
    let first = holder(&env, "a", "backup:2", &[]);
    let net = holder(&env, "n", "net", &[]);
    let ran = env.path("waiter-ran");
    let mut waiter = env
        .idem([
            "run",
            "--key",
            "w",
            "--lock",
            "backup:2",
            "--lock",
            "net",
            "--wait",
            "120s",
            "--",
            "touch",
            ran.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Runs on the free slot while the waiter keeps trying: had it kept a
    // slot, with `a` in the other they would be refused until --wait ends.
    let since = Instant::now();
    let mut runs = 0;
    while runs < 3 || since.elapsed() < Duration::from_millis(1500) {
        let key = format!("y{runs}");
        env.cmd([
            "run", "--key", &key, "--lock", "backup:2", "--wait", "10s", "--", "true",
        ])
        .succeeds();
        runs += 1;
        assert!(!ran.exists(), "the waiter ran while lock net was held");
        assert!(waiter.try_wait().unwrap().is_none(), "the waiter gave up");
    }
    end(net);
    eventually("the waiter to run", Duration::from_secs(60), || {
        ran.exists()
    });
    let output = waiter.wait_with_output().unwrap();
    assert_code(&output, 0);
    end(first);
}

/// Runs that give one lock different slots each keep their own bound: a
/// run of `backup:2` does not start beside two runs of `backup:3`, a third
/// run of `backup:3` does.
fn runs_giving_other_slots_each_keep_their_own(backend: &Backend) {
    let env = backend.env();
    let first = holder(&env, "a", "backup:3", &[]);
    let second = holder(&env, "b", "backup:3", &[]);
    env.cmd(["run", "--key", "c", "--lock", "backup:2", "--", "true"])
        .expect_code(75);
    env.cmd(["run", "--key", "c", "--lock", "backup", "--", "true"])
        .expect_code(75);
    env.cmd(["run", "--key", "d", "--lock", "backup:3", "--", "true"])
        .succeeds();
    end(first);
    env.cmd([
        "run", "--key", "c", "--lock", "backup:2", "--wait", "60s", "--", "true",
    ])
    .succeeds();
    end(second);
}

/// Slots that are not a number from 1 to 1000, or a lock without a name,
/// are usage errors, said in one line.
#[test]
fn bad_slots_are_usage_errors() {
    let env = Env::new();
    for (value, says) in [
        (
            "backup:0",
            "invalid --lock backup:0: its slots must be a number from 1 to 1000",
        ),
        (
            "backup:x",
            "invalid --lock backup:x: its slots must be a number",
        ),
        (
            "backup:",
            "invalid --lock backup:: its slots must be a number",
        ),
        ("backup:1001", "from 1 to 1000"),
        ("backup:+2", "its slots must be a number"),
        (":2", "invalid --lock :2: name the lock before its slots"),
    ] {
        let ran = env
            .cmd(["run", "--key", "k", "--lock", value, "--", "true"])
            .expect_code(2)
            .stderr_has(says);
        assert_eq!(ran.stderr().lines().count(), 1, "{}", ran.stderr());
    }
    env.cmd([
        "run", "--key", "k", "--lock", "a:2", "--lock", "a:3", "--", "true",
    ])
    .expect_code(2)
    .stderr_has("--lock a is given with 2 and with 3 slots; give it once");
    // From the environment too; a name with a colon gives its slots.
    env.cmd(["run", "--key", "k", "--", "true"])
        .env("IDEM_LOCK", "backup:x")
        .expect_code(2);
    env.cmd(["run", "--key", "k", "--", "true"])
        .env("IDEM_LOCK", "db:main:1,backup:2")
        .succeeds();
}
