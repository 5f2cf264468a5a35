//! What holds a run together when everything of idem is killed: a worker
//! that closed every inherited descriptor (so holds no lock of the run)
//! and left for a session of its own still belongs to its run, and the
//! next run of the key never executes beside it. Here under a PID
//! namespace, chosen (`--contain pid-namespace`), whose worker dies with
//! the guardian; under a cgroup, whose worker lives on and keeps the key,
//! see `containment_cgroup`. The `flock -n` detector (see
//! `util::guarded`) counts overlaps.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::util::{assert_code, eventually, guarded, text, wait_for_count, Env};

/// A Python command that starts `worker` as `subprocess.Popen` does with
/// `close_fds=True, start_new_session=True` (nothing inherited but
/// /dev/null, so not the run's lock), then runs `then` (a sleep, a
/// failure, or nothing).
pub(crate) fn python_leaving(worker: &str, then: &str) -> Vec<String> {
    let script = format!(
        "import subprocess, sys, time\n\
         subprocess.Popen(['sh', '-c', {worker:?}], close_fds=True, start_new_session=True,\n\
         \x20   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n\
         {then}\n"
    );
    vec!["python3".into(), "-c".into(), script]
}

/// The pids of `pid`'s children, from every thread of it.
pub(crate) fn children_of(pid: u32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|children| {
            children
                .split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

#[test]
fn a_worker_that_closed_its_descriptors_dies_with_idem_and_its_guardian() {
    worker_dies_with_idem(&Env::new(), &["--contain", "pid-namespace"]);
}

/// On a shared ledger the next run takes the key once its lease has run
/// out; the worker must be gone by then.
#[test]
fn on_postgresql_a_worker_that_closed_its_descriptors_dies_with_idem() {
    let Some(server) = crate::pg::Server::start("containment_on_postgresql") else {
        return;
    };
    worker_dies_with_idem(
        &Env::on_ledger(server.url()),
        &["--lease", "3s", "--contain", "pid-namespace"],
    );
}

/// A run whose worker closed its descriptors and left its session, then
/// `pkill -9 idem`: the next run waits for the key (or refuses it), and
/// never runs beside the worker.
fn worker_dies_with_idem(env: &Env, lease: &[&str]) {
    let mut argv = vec!["run", "--key", "k", "--retries", "0"];
    argv.extend_from_slice(lease);
    argv.push("--");
    let command = python_leaving(&guarded(env, 60), "time.sleep(600)");
    argv.extend(command.iter().map(String::as_str));
    let mut first = env.idem(&argv).stderr(Stdio::null()).spawn().unwrap();
    wait_for_count(env, 1, &mut first);
    let guardian = eventually("the guardian", Duration::from_secs(10), || {
        children_of(first.id()).first().copied()
    });
    // As `pkill -9 idem` does: both at once.
    kill(Pid::from_raw(first.id() as i32), Signal::SIGKILL).unwrap();
    kill(Pid::from_raw(guardian), Signal::SIGKILL).unwrap();
    first.wait().unwrap();
    let check = guarded(env, 0);
    let mut next = vec!["run", "--key", "k", "--wait", "10s"];
    next.extend_from_slice(lease);
    next.extend(["--shell", "--", &check]);
    let next = env.run(&next);
    // The next run waits until the key is free (the lease passed, on a
    // shared ledger), then runs; never beside the worker.
    assert_code(&next, 0);
    assert_eq!(env.count("count"), 2, "{}", text(&next.stderr));
    assert_eq!(
        env.count("overlaps"),
        0,
        "the next run ran beside the worker"
    );
}

#[test]
fn a_retry_never_overlaps_the_worker_its_first_attempt_left() {
    let env = Env::new();
    let once = env.path("once");
    let first = python_leaving(&guarded(&env, 2), "sys.exit(1)");
    let script = format!(
        "if [ ! -e '{once}' ]; then touch '{once}'; exec \"$@\"; fi; {check}",
        once = once.display(),
        check = guarded(&env, 0),
    );
    let mut argv = vec![
        "run",
        "--key",
        "r",
        "--backoff",
        "10ms",
        "--",
        "sh",
        "-c",
        &script,
        "sh",
    ];
    argv.extend(first.iter().map(String::as_str));
    let output = env.run(&argv);
    assert_code(&output, 0);
    assert_eq!(env.count("count"), 2);
    assert_eq!(env.count("overlaps"), 0);
}

#[test]
fn the_timeout_holds_with_the_guardian_stopped() {
    let env = Env::new();
    let pid_file = env.path("pid");
    let script = format!("echo $$ > '{}'; exec sleep 60", pid_file.display());
    let mut run = env
        .idem([
            "run",
            "--key",
            "t",
            "--retries",
            "0",
            "--timeout",
            "1s",
            "--kill-after",
            "1s",
            "--shell",
            "--",
            &script,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    eventually("the command to start", Duration::from_secs(10), || {
        pid_file.exists()
    });
    let guardian = eventually("the guardian", Duration::from_secs(10), || {
        children_of(run.id()).first().copied()
    });
    let sleeper = eventually("the sleep", Duration::from_secs(10), || {
        children_of(guardian as u32).first().copied()
    });
    // Once the guardian has told idem the command runs: stopped before,
    // it would keep idem waiting for that word, which has no deadline yet.
    std::thread::sleep(Duration::from_millis(300));
    kill(Pid::from_raw(guardian), Signal::SIGSTOP).unwrap();
    let ended = eventually("idem to end", Duration::from_secs(20), || {
        run.try_wait().unwrap()
    });
    assert_eq!(ended.code(), Some(124));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !crate::util::lives(sleeper),
        "the command outlived its timeout"
    );
    // A guardian still there would be stopped for ever: idem ended it.
    let _ = kill(Pid::from_raw(guardian), Signal::SIGKILL);
}

#[test]
fn doctor_and_a_verbose_run_say_what_holds_a_run() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "k", "--", "true"]), 0);
    let doctor = env.run(["doctor", "--json"]);
    let found: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let writable = found["cgroup2"]["writable"].as_bool().unwrap_or(false);
    let check = found["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["check"] == "containment")
        .unwrap();
    assert_eq!(check["status"], if writable { "ok" } else { "warn" });
    let (name, said) = if writable {
        ("cgroup", "containment: cgroup")
    } else {
        ("guardian", "containment: guardian only")
    };
    assert_eq!(found["containment"], name, "{found}");
    let run = env.run(["-v", "run", "--key", "k", "--force", "--", "true"]);
    assert_code(&run, 0);
    assert!(text(&run.stderr).contains(said), "{}", text(&run.stderr));
    let quiet = env.run(["run", "--key", "k", "--force", "--", "true"]);
    assert!(!text(&quiet.stderr).contains("containment"));
}
