//! Sweeps of the limits a host puts on a process, at every value from one
//! that cannot even load idem to one that runs the command: the address
//! space (`ulimit -v`) and the processes of a user (`ulimit -u`). At each
//! value idem runs the command once, or says why it could not and ran
//! none of it; it never panics, never hangs, and never leaves its key
//! `running`. (The open-files sweep is in `guardian_steps`.)

use std::os::unix::process::CommandExt;
use std::process::Output;
use std::time::Duration;

use nix::libc;

use crate::util::{require, text, Env};

/// `idem run --retries 0` of a counted command under `resource` at
/// `limit`, with a backtrace asked for, killed (and failed) if it has not
/// ended within 30 s.
fn under_limit(env: &Env, key: &str, resource: u32, limit: u64, uid: Option<u32>) -> Output {
    let count = env.count_cmd(key);
    let mut idem = env.idem([
        "run",
        "--key",
        key,
        "--retries",
        "0",
        "--shell",
        "--",
        &count,
    ]);
    idem.env("RUST_BACKTRACE", "1");
    if let Some(uid) = uid {
        idem.uid(uid).gid(uid);
    }
    // SAFETY: setrlimit is async-signal-safe and reads the struct we own;
    // the closure allocates nothing.
    unsafe {
        idem.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            match libc::setrlimit(resource as _, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let child = idem
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (sent, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || sent.send(child.wait_with_output().unwrap()));
    match ended.recv_timeout(Duration::from_secs(30)) {
        Ok(output) => output,
        Err(_) => {
            // Not reaped yet: the waiting thread still holds the pid.
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            let output = ended.recv().unwrap();
            panic!("{key}: idem hung at {limit}: {}", text(&output.stderr));
        }
    }
}

/// The outcome at one value: the command ran once and the run succeeded;
/// or idem said why (125) and none of the command ran; or idem could not
/// even be loaded and claimed nothing. Never a panic, never `running`.
fn judge(
    env: &Env,
    key: &str,
    limit: u64,
    output: &Output,
    reader: &dyn Fn() -> serde_json::Value,
) -> i32 {
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("panicked"), "{limit}: {stderr}");
    assert!(!stderr.contains("RUST_BACKTRACE"), "{limit}: {stderr}");
    let runs = reader();
    let run = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["key"] == key)
        .cloned();
    let code = output.status.code().unwrap_or(-1);
    match (code, run) {
        (0, Some(run)) => {
            assert_eq!(env.count(key), 1, "{limit}: ran once");
            assert_eq!(run["status"], "succeeded", "{limit}: {run}");
        }
        (125, Some(run)) => {
            assert_eq!(
                env.count(key),
                0,
                "{limit}: 125 said it could not start, yet the command ran: {stderr}"
            );
            assert_eq!(run["status"], "failed", "{limit}: not left running: {run}");
            assert!(
                stderr.contains("could not"),
                "{limit}: the step is named: {stderr}"
            );
        }
        (_, None) => {
            assert_eq!(env.count(key), 0, "{limit}: nothing claimed, nothing ran");
            assert_ne!(code, 0, "{limit}: exit 0 with no run recorded");
        }
        (code, Some(run)) => panic!("{limit}: exit {code}: {stderr} {run}"),
    }
    code
}

/// Address space from 8 MiB (the loader fails) to 256 MiB: by 128 KiB
/// where the outcomes change (a build loads from about 16 MiB; the room
/// for the last writes, SQLite's maps and idem's threads are refused in
/// the next dozen), by a MiB or more elsewhere. A refusal is never blamed
/// on the disk.
#[test]
fn under_any_address_space_limit_idem_runs_the_command_once_or_none_of_it() {
    let env = Env::new();
    env.cmd(["run", "--key", "made", "--", "true"]).succeeds();
    let reader = || env.list_json();
    let kib: Vec<u64> = (8..16)
        .map(|mib| mib << 10)
        .chain((16 << 10..32 << 10).step_by(128))
        .chain((32..=40).chain([48, 64, 128, 256]).map(|mib| mib << 10))
        .collect();
    let mut outcomes = Vec::new();
    for limit in kib {
        let key = format!("as{limit}k");
        let output = under_limit(&env, &key, libc::RLIMIT_AS, limit << 10, None);
        let stderr = text(&output.stderr);
        assert!(!stderr.contains("check the disk"), "{limit} KiB: {stderr}");
        outcomes.push((limit, judge(&env, &key, limit, &output, &reader)));
    }
    assert_eq!(outcomes.last().unwrap().1, 0, "{outcomes:?}");
    assert!(
        outcomes.iter().any(|(_, code)| *code != 0),
        "no value failed: {outcomes:?}"
    );
}

/// The processes of a user of its own, from 1 to 16: a refused fork or
/// thread ends the run as idem's failure before any of the command runs.
#[test]
fn under_any_process_limit_idem_runs_the_command_once_or_none_of_it() {
    if !require(
        nix::unistd::geteuid().is_root(),
        "root, to run idem as a user of its own",
    ) {
        return;
    }
    let env = Env::new();
    let user = 40_000 + (std::process::id() + 7) % 20_000;
    std::os::unix::fs::chown(env.dir.path(), Some(user), Some(user)).unwrap();
    let reader = || {
        let mut list = env.idem(["ledger", "list", "--json"]);
        list.uid(user).gid(user);
        let output = list.output().unwrap();
        serde_json::from_slice(&output.stdout).unwrap_or(serde_json::json!([]))
    };
    let mut outcomes = Vec::new();
    for limit in 1..=16 {
        let key = format!("nproc{limit}");
        let output = under_limit(&env, &key, libc::RLIMIT_NPROC, limit, Some(user));
        outcomes.push((limit, judge(&env, &key, limit, &output, &reader)));
    }
    assert_eq!(outcomes.last().unwrap().1, 0, "{outcomes:?}");
    assert!(
        outcomes.iter().any(|(_, code)| *code != 0),
        "no value failed: {outcomes:?}"
    );
}
