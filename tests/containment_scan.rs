//! Where nothing but the guardian holds a run together (an unprivileged
//! user: no PID namespace), a worker that closed its inherited descriptors
//! holds no lock of its run; once idem and its guardian are killed, the
//! run is still found alive by the `IDEM_RUN_ID` its worker inherited, and
//! named. Run as root, the runs as `nobody`.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::util::{as_nobody, assert_code, eventually, lives, text, Env};

/// A folder of `nobody`'s own in `env`, for its ledger and files; `None`
/// (the test failed, naming why) where this process cannot switch users.
pub(crate) fn nobody_folder(env: &Env) -> Option<PathBuf> {
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
    nobody_on(env, folder.join("ledger.db").as_os_str(), folder, args)
}

/// Idem as `nobody` on `ledger` (a file or a database's URL), at home in
/// `folder`, in a clean environment.
pub(crate) fn nobody_on(env: &Env, ledger: &OsStr, folder: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env.path("idem"))
        .args(args)
        .env_clear()
        .env("IDEM_DB", ledger)
        .env("HOME", folder)
        .env("TZ", "UTC")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir("/")
        .stdin(Stdio::null());
    command
}

/// `pkill -9 idem` under a run whose worker left: idem and its guardian
/// SIGKILLed together; the worker's pid.
fn worker_left_by_a_killed_run(env: &Env, folder: &Path) -> i32 {
    let pid_file = folder.join("worker.pid");
    // Deaf to the SIGTERM a guardian may still send as idem dies: killed
    // together, neither stops the run, as `pkill -9 idem` finds it.
    let worker = format!(
        "trap '' TERM HUP INT; echo $$ > '{}'; exec sleep 600",
        pid_file.display()
    );
    let log = env.path("first.log");
    let mut argv = vec!["-v", "run", "--key", "k", "--retries", "0", "--"];
    let command = crate::containment::python_leaving(&worker, "");
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
        crate::containment::children_of(first.id()).first().copied()
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

/// A Python process outside any run that takes one descriptor over the
/// Unix socket `socket` and keeps it until its stdin closes.
fn receiver(socket: &Path) -> Outsider {
    let script = format!(
        "import socket, sys\n\
         server = socket.socket(socket.AF_UNIX)\n\
         server.bind({socket:?})\n\
         server.listen(1)\n\
         print('ready', flush=True)\n\
         conn, _ = server.accept()\n\
         _, fds, _, _ = socket.recv_fds(conn, 1, 4)\n\
         conn.send(b'k')\n\
         conn.close()\n\
         sys.stdin.read()\n",
        socket = socket.display().to_string()
    );
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .env_remove("IDEM_RUN_ID")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    Outsider(child)
}

/// The outsider, killed if a test fails before it lets it go.
struct Outsider(std::process::Child);

impl Drop for Outsider {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The command: hands its descriptor of the run's lock file to the
/// process at `socket`, then exits.
fn handing_the_lock_to(socket: &Path) -> Vec<String> {
    let script = format!(
        "import os, socket\n\
         def lock(n):\n\
         \x20   try:\n\
         \x20       return os.readlink('/proc/self/fd/' + n).endswith('.db-lock')\n\
         \x20   except OSError:\n\
         \x20       return False\n\
         fd = next(int(n) for n in os.listdir('/proc/self/fd') if lock(n))\n\
         conn = socket.socket(socket.AF_UNIX)\n\
         conn.connect({socket:?})\n\
         socket.send_fds(conn, [b'x'], [fd])\n\
         conn.recv(1)\n",
        socket = socket.display().to_string()
    );
    vec!["python3".into(), "-c".into(), script]
}

#[test]
fn a_lock_handed_to_a_process_outside_the_run_is_named_while_idem_waits() {
    let env = Env::new();
    let socket = env.path("socket");
    let mut outsider = receiver(&socket);
    let log = env.path("run.log");
    let mut argv = vec!["run", "--key", "h", "--retries", "0", "--"];
    let command = handing_the_lock_to(&socket);
    argv.extend(command.iter().map(String::as_str));
    let mut run = env
        .idem(&argv)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let named = format!("pid {} (python3)", outsider.0.id());
    eventually("idem to name the outsider", Duration::from_secs(30), || {
        if let Ok(Some(status)) = run.try_wait() {
            let said = std::fs::read_to_string(&log).unwrap();
            panic!("the run ended while its lock was held: {status}: {said}");
        }
        std::fs::read_to_string(&log).unwrap().contains(&named)
    });
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("outside the run"), "{said}");

    let doctor = env.run(["doctor", "--json"]);
    let found: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    assert_eq!(
        found["lock_holders_outside_runs"],
        serde_json::json!([outsider.0.id()]),
        "{found}"
    );
    let doctor = env.run(["doctor"]);
    assert!(
        text(&doctor.stdout).contains(&named),
        "{}",
        text(&doctor.stdout)
    );

    drop(outsider.0.stdin.take());
    outsider.0.wait().unwrap();
    let ended = eventually("idem to end", Duration::from_secs(30), || {
        run.try_wait().unwrap()
    });
    assert_eq!(
        ended.code(),
        Some(0),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let doctor = env.run(["doctor", "--json"]);
    let found: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    assert!(found.get("lock_holders_outside_runs").is_none(), "{found}");
}

#[test]
fn stop_ends_a_worker_that_closed_its_descriptors_after_its_idem_was_killed() {
    let env = Env::new();
    let Some(folder) = nobody_folder(&env) else {
        return;
    };
    let worker = worker_left_by_a_killed_run(&env, &folder);
    let stop = nobody(&env, &folder, &["stop", "k", "--kill-after", "1s"])
        .output()
        .unwrap();
    let gone = !lives(worker);
    let _ = kill(Pid::from_raw(worker), Signal::SIGKILL);
    assert!(gone, "stop left the worker running: {}", text(&stop.stderr));
    let after = nobody(&env, &folder, &["run", "--key", "k", "--", "true"])
        .output()
        .unwrap();
    assert_code(&after, 0);
}
