//! Each step of an attempt's setup after the fork is checked: one that
//! fails for real reaches idem as the step's name and errno, idem exits
//! 125, nothing of the command runs, and the key is not left `running`.
//! A thread the system refuses ends the attempt as idem's failure, not a
//! panic. And a signal that reaches idem twice at once (`timeout -s INT`)
//! is passed on once: the command cleans up as it would without idem.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use nix::libc;

use crate::util::{assert_code, require, text, Env};

/// The guardian moves the descriptors it keeps above 100; under an open
/// files limit of 64 that step fails with EINVAL, before the command may
/// run.
#[test]
fn a_guardian_step_that_fails_is_named_and_nothing_runs() {
    let env = Env::new();
    let mut idem = env.idem(["run", "--key", "k", "--shell", "--", &env.count_cmd("ran")]);
    // SAFETY: setrlimit is async-signal-safe and reads the struct we own;
    // the closure allocates nothing.
    unsafe {
        idem.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let output = idem.output().unwrap();
    assert_code(&output, 125);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(
            "could not move the command's guardian's descriptors above 100: invalid argument"
        ),
        "the failed step is named with its errno: {stderr}"
    );
    assert_eq!(env.count("ran"), 0, "nothing of the command ran");
    let list = env.list_json();
    let run = &list[0];
    assert_eq!(run["key"], "k");
    assert_eq!(run["status"], "failed", "not left running: {run}");
    assert_eq!(run["exit_code"], 125);
}

/// `timeout -s INT` sends SIGINT to idem and then to idem's whole process
/// group: idem hears it twice within a moment, and must pass it on once,
/// not take the copy for a second signal and SIGKILL the command while it
/// cleans up (exit 137).
#[test]
fn a_signal_sent_twice_by_timeout_is_passed_on_once() {
    let env = Env::new();
    let cleaned = env.path("cleaned");
    let script = format!(
        "trap 'sleep 0.5; echo x >> {}; exit 3' INT; while :; do sleep 0.1; done",
        cleaned.display()
    );
    for round in 1..=3 {
        let key = format!("k{round}");
        let idem = env.idem([
            "run",
            "--key",
            &key,
            "--retries",
            "0",
            "--shell",
            "--",
            &script,
        ]);
        let mut timeout = Command::new("timeout");
        timeout
            .args(["--preserve-status", "-s", "INT", "2"])
            .arg(idem.get_program())
            .args(idem.get_args())
            .current_dir(env.dir.path())
            .stdin(Stdio::null());
        for (name, value) in idem.get_envs() {
            match value {
                Some(value) => timeout.env(name, value),
                None => timeout.env_remove(name),
            };
        }
        let output = timeout.output().unwrap();
        assert_code(&output, 3);
        assert_eq!(env.count("cleaned"), round, "the command cleaned up");
    }
}

/// Under a process limit of 3 for its user (idem, its guardian and the
/// command's process), idem cannot start the thread that passes the
/// command's output through: the attempt ends as idem's failure, 125,
/// said, and the key is not left `running`. A user of its own (no other
/// process counts against the limit) needs root.
#[test]
fn a_thread_the_system_refuses_ends_the_attempt_with_125() {
    if !require(
        nix::unistd::geteuid().is_root(),
        "root, to run idem as a user of its own",
    ) {
        return;
    }
    let env = Env::new();
    let user = 40_000 + std::process::id() % 20_000;
    std::os::unix::fs::chown(env.dir.path(), Some(user), Some(user)).unwrap();
    let as_user = |args: &[&str]| {
        let mut idem = env.idem(args);
        idem.uid(user).gid(user);
        idem
    };
    // The command lives on, so that it counts when idem starts its threads;
    // it is killed then.
    let mut idem = as_user(&["run", "--key", "k", "--retries", "0", "--", "sleep", "30"]);
    // SAFETY: setrlimit is async-signal-safe and reads the struct we own;
    // the closure allocates nothing.
    unsafe {
        idem.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 3,
                rlim_max: 3,
            };
            match libc::setrlimit(libc::RLIMIT_NPROC, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let began = std::time::Instant::now();
    let output = idem.output().unwrap();
    assert_code(&output, 125);
    assert!(began.elapsed().as_secs() < 20, "the command was stopped");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(
            "could not start a thread to pass the command's output through: resource temporarily unavailable"
        ),
        "the refused thread is said: {stderr}"
    );
    let list = as_user(&["ledger", "list", "--json"]).output().unwrap();
    assert_code(&list, 0);
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list[0]["status"], "failed", "not left running: {list}");
    assert_eq!(list[0]["exit_code"], 125);
}
