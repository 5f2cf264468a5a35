//! Where nothing but the guardian holds a run together (an unprivileged
//! user: no PID namespace), a worker that closed its inherited descriptors
//! holds no lock of its run; once idem and its guardian are killed, the
//! run is still found alive by the `IDEM_RUN_ID` its worker inherited, and
//! named. Run as root, the runs as `nobody`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::util::{as_nobody, assert_code, eventually, lives, text, Env};

/// A folder of `nobody`'s own in `env`, for its ledger and files; `None`
/// (the test failed, naming why) where this process cannot switch users.
fn nobody_folder(env: &Env) -> Option<PathBuf> {
    as_nobody(env, &env.db(), &["ledger", "path"])?;
    let folder = env.path("nobody");
    std::fs::create_dir(&folder).unwrap();
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
    nix::unistd::chown(&folder, Some(65534.into()), Some(65534.into())).unwrap();
    Some(folder)
}

/// Idem as `nobody` on the ledger in `folder` (the binary copied by
/// [`nobody_folder`]).
fn nobody(env: &Env, folder: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env.path("idem"))
        .args(args)
        .env_clear()
        .env("IDEM_DB", folder.join("ledger.db"))
        .env("HOME", folder)
        .env("TZ", "UTC")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir("/")
        .stdin(Stdio::null());
    command
}

/// A Python command that starts `worker` as `subprocess.Popen` does with
/// `close_fds=True, start_new_session=True` (nothing inherited but
/// /dev/null, so not the run's lock), then exits.
fn python_leaving(worker: &str) -> Vec<String> {
    let script = format!(
        "import subprocess\n\
         subprocess.Popen(['sh', '-c', {worker:?}], close_fds=True, start_new_session=True,\n\
         \x20   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    );
    vec!["python3".into(), "-c".into(), script]
}

/// The pids of `pid`'s children, from every thread of it.
fn children_of(pid: u32) -> Vec<i32> {
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

/// `pkill -9 idem` under a run whose worker left: idem and its guardian
/// SIGKILLed together; the worker's pid.
fn worker_left_by_a_killed_run(env: &Env, folder: &Path) -> i32 {
    let pid_file = folder.join("worker.pid");
    let worker = format!("echo $$ > '{}'; exec sleep 600", pid_file.display());
    let log = env.path("first.log");
    let mut argv = vec!["-v", "run", "--key", "k", "--retries", "0", "--"];
    let command = python_leaving(&worker);
    argv.extend(command.iter().map(String::as_str));
    let mut first = nobody(env, folder, &argv)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let worker = eventually("the worker", Duration::from_secs(30), || {
        if let Ok(Some(status)) = first.try_wait() {
            panic!("the first run ended early: {status}");
        }
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|pid| pid.trim().parse::<i32>().ok())
    });
    let guardian = eventually("the guardian", Duration::from_secs(10), || {
        children_of(first.id()).first().copied()
    });
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("containment: guardian only"), "{said}");
    kill(Pid::from_raw(first.id() as i32), Signal::SIGKILL).unwrap();
    kill(Pid::from_raw(guardian), Signal::SIGKILL).unwrap();
    first.wait().unwrap();
    eventually("the guardian to be gone", Duration::from_secs(10), || {
        !lives(guardian)
    });
    worker
}

#[test]
fn a_worker_that_closed_its_descriptors_keeps_its_key_without_a_pid_namespace() {
    let env = Env::new();
    let Some(folder) = nobody_folder(&env) else {
        return;
    };
    let worker = worker_left_by_a_killed_run(&env, &folder);
    assert!(lives(worker), "the worker died with its guardian");

    let next = nobody(&env, &folder, &["run", "--key", "k", "--", "true"])
        .output()
        .unwrap();
    let doctor = nobody(&env, &folder, &["doctor", "--json"])
        .output()
        .unwrap();
    let forget = nobody(&env, &folder, &["ledger", "forget", "k"])
        .output()
        .unwrap();
    let _ = kill(Pid::from_raw(worker), Signal::SIGKILL);
    assert_code(&next, 75);
    assert_code(&forget, 75);
    let said = text(&forget.stderr);
    assert!(said.contains(&format!("pid {worker} (sleep)")), "{said}");
    let said = text(&next.stderr);
    assert!(said.contains(&format!("pid {worker} (sleep)")), "{said}");
    let found: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    assert_eq!(found["stuck_keys"], serde_json::json!([]), "{found}");
    assert_eq!(found["running_keys"], 1, "{found}");

    eventually("the worker to be gone", Duration::from_secs(10), || {
        !lives(worker)
    });
    let after = nobody(&env, &folder, &["run", "--key", "k", "--", "true"])
        .output()
        .unwrap();
    assert_code(&after, 0);
    let list = nobody(&env, &folder, &["ledger", "list", "--json"])
        .output()
        .unwrap();
    let runs: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let statuses: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["succeeded", "abandoned"], "{runs}");
}
