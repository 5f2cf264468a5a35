//! Each step of an attempt's setup is checked: one that fails for real (a
//! low open-files limit) reaches idem as the step's name and errno, idem
//! exits 125, nothing of the command runs, and the key is not left
//! `running`.
//! A thread the system refuses ends the attempt as idem's failure, not a
//! panic. And a signal that reaches idem twice at once (`timeout -s INT`)
//! is passed on once: the command cleans up as it would without idem.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use nix::libc;

use crate::util::{assert_code, require, text, Env};

/// `idem run` under an open-files limit of `limit`.
fn under_nofile(env: &Env, key: &str, limit: u64) -> std::process::Output {
    let mut idem = env.idem(["run", "--key", key, "--shell", "--", &env.count_cmd(key)]);
    // SAFETY: setrlimit is async-signal-safe and reads the struct we own;
    // the closure allocates nothing.
    unsafe {
        idem.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    idem.output().unwrap()
}

/// Under every open-files limit from 8 up, a run either runs its command
/// once, or names the step that failed, exits 125, runs nothing and leaves
/// its key `failed`, never `running`; from 24 up the command runs (the
/// guardian keeps its descriptors as high as the limit allows, not at a
/// fixed 100).
#[test]
fn under_any_open_files_limit_a_step_that_fails_is_named_and_nothing_is_left_running() {
    let env = Env::new();
    env.cmd(["run", "--key", "made", "--", "true"]).succeeds();
    let mut after_the_fork = 0;
    for limit in 8..=40 {
        let key = format!("k{limit}");
        let output = under_nofile(&env, &key, limit);
        let stderr = text(&output.stderr);
        assert!(!stderr.contains("panicked"), "{limit}: {stderr}");
        let run = env.show_json(&key);
        match output.status.code() {
            Some(0) => {
                assert_eq!(env.count(&key), 1, "{limit}: ran once");
                assert_eq!(run["status"], "succeeded", "{limit}: {run}");
            }
            Some(125) => {
                assert!(limit < 24, "{limit}: the command must run: {stderr}");
                assert!(
                    stderr.contains("could not"),
                    "{limit}: the step named: {stderr}"
                );
                assert_eq!(env.count(&key), 0, "{limit}: nothing of the command ran");
                assert_eq!(run["status"], "failed", "{limit}: not left running: {run}");
                assert_eq!(run["exit_code"], 125, "{limit}");
                // A step after the fork failed once the attempt was
                // recorded started: its row says how it ended.
                for attempt in run["attempts_detail"].as_array().unwrap() {
                    assert_eq!(attempt["exit_code"], 125, "{limit}: {run}");
                    assert!(attempt["finished_at"].is_string(), "{limit}: {run}");
                    after_the_fork += 1;
                }
            }
            code => panic!("{limit}: exit {code:?}: {stderr}"),
        }
    }
    assert!(after_the_fork > 0, "no limit failed a step after the fork");
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
