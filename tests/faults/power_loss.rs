//! Power loss: a ledger cut at any instant is consistent, because the
//! claim and the outcome are synced in order.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{list_keys, status_of};
use crate::util::{integrity_check, require, Env};

/// Freezes a run at a random instant, copies the ledger files as a power
/// cut would leave them (no process writes while they are copied), and
/// checks every copy: it opens, passes integrity_check, holds every
/// success reported before the instant, and lets the next run go on.
#[test]
fn a_ledger_cut_at_any_instant_is_consistent() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let env = Env::new();
    let copies = env.path("copies");
    fs::create_dir(&copies).unwrap();
    let mut reported: Vec<String> = Vec::new();
    let mut snapshots = Vec::new();
    for index in 0..40 {
        let key = format!("k{index}");
        let mut child = env
            .idem(["run", "--key", &key, "--retries", "0", "--", "true"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(fastrand::u64(0..25_000)));
        let pid = Pid::from_raw(child.id() as i32);
        let _ = kill(pid, Signal::SIGSTOP);
        let copy = copies.join(index.to_string());
        fs::create_dir(&copy).unwrap();
        for suffix in ["", "-wal"] {
            let from = PathBuf::from(format!("{}{suffix}", env.db().display()));
            let _ = fs::copy(&from, copy.join(format!("ledger.db{suffix}")));
        }
        let _ = kill(pid, Signal::SIGCONT);
        let status = child.wait().unwrap();
        snapshots.push((copy.join("ledger.db"), key.clone(), reported.clone()));
        if status.success() {
            reported.push(key);
        }
    }
    assert_eq!(reported.len(), 40, "every run succeeded");
    for (db, key, before) in snapshots {
        if !db.exists() {
            assert!(
                before.is_empty(),
                "{}: no ledger after a success",
                db.display()
            );
            continue;
        }
        assert_eq!(integrity_check(&db), "ok", "{}", db.display());
        if fs::metadata(&db).unwrap().len() == 0 {
            assert!(before.is_empty());
            continue;
        }
        let runs = list_keys(&env, &db);
        for done in &before {
            assert_eq!(
                status_of(&runs, done).as_deref(),
                Some("succeeded"),
                "{}: lost the success of {done}",
                db.display()
            );
        }
        let state = status_of(&runs, &key);
        assert!(
            matches!(state.as_deref(), None | Some("running") | Some("succeeded")),
            "{key}: {state:?}"
        );
        // The next run decides by itself: skip, or take over the dead run.
        env.cmd(["run", "--key", &key, "--retries", "0", "--", "true"])
            .db(&db)
            .succeeds();
    }
}

/// The other half of the power-loss argument: the claim is synced to disk
/// before the command starts, and the outcome before idem exits. Watched
/// with strace, when it is installed.
#[test]
fn the_claim_and_the_outcome_are_synced_in_order() {
    let env = Env::new();
    let Some(trace) = strace_run(&env, "fsync,fdatasync,execve,exit_group") else {
        return;
    };
    let lines = strace_lines(&trace);
    let exec_at = exec_of_true(&lines, &trace);
    let child = lines[exec_at].0;
    let child_exit = exec_at
        + lines[exec_at..]
            .iter()
            .position(|(pid, call)| *pid == child && call.starts_with("exit_group"))
            .unwrap();
    let idem_exit = lines
        .iter()
        .rposition(|(pid, call)| *pid != child && call.starts_with("exit_group"))
        .unwrap();
    let wal_synced = |range: std::ops::Range<usize>| {
        lines[range]
            .iter()
            .any(|(pid, call)| *pid != child && syncs(call, WAL))
    };
    assert!(
        wal_synced(0..exec_at),
        "the claim was not synced before the command ran:\n{trace}"
    );
    assert!(
        wal_synced(child_exit..idem_exit),
        "the outcome was not synced before idem exited:\n{trace}"
    );
}

/// idem's SQLite leaves the folder's sync to idem (a WAL it has just made
/// must stay after a power cut), and the claim's sync waits for no other
/// writer: it is made once the writers' lock is released, and both before
/// the command starts.
#[test]
fn the_claim_is_synced_outside_the_writers_lock_with_the_folder() {
    let env = Env::new();
    let Some(trace) = strace_run(&env, "fsync,fdatasync,flock,execve") else {
        return;
    };
    let lines = strace_lines(&trace);
    let exec_at = exec_of_true(&lines, &trace);
    let locked = |call: &str| call.starts_with("flock(") && call.contains("LOCK_EX");
    let claim_from = lines.iter().position(|(_, call)| locked(call)).unwrap();
    let claim_to = claim_from
        + lines[claim_from..]
            .iter()
            .position(|(_, call)| call.starts_with("flock(") && call.contains("LOCK_UN"))
            .unwrap();
    let synced = |range: std::ops::Range<usize>, what: &str| {
        lines[range].iter().any(|(_, call)| syncs(call, what))
    };
    assert!(
        !synced(claim_from..claim_to, WAL),
        "the claim was synced under the writers' lock:\n{trace}"
    );
    assert!(
        synced(claim_to..exec_at, WAL),
        "the claim was not synced before the command ran:\n{trace}"
    );
    let folder = format!("<{}>", env.dir.path().display());
    assert!(
        synced(0..exec_at, &folder),
        "the ledger's folder was not synced before the command ran:\n{trace}"
    );
}

#[test]
fn the_command_runs_only_once_its_group_is_recorded() {
    // The attempt's process group is written in the run's second write
    // transaction, after the claim's, and the WAL is synced after it: the
    // command must not exec before that write is on disk, or an idem
    // killed in between would leave a command nobody can find, and a power
    // cut a command that ran under no claim.
    let env = Env::new();
    let Some(trace) = strace_run(&env, "fsync,fdatasync,pwrite64,write,flock,execve") else {
        return;
    };
    let lines = strace_lines(&trace);
    let exec_at = exec_of_true(&lines, &trace);
    let before = &lines[..exec_at];
    let transactions: Vec<usize> = (0..exec_at)
        .filter(|&at| before[at].1.starts_with("flock(") && before[at].1.contains("LOCK_EX"))
        .collect();
    assert_eq!(
        transactions.len(),
        2,
        "not the claim's and the attempt's write transactions before the command:\n{trace}"
    );
    let written = before
        .iter()
        .rposition(|(_, call)| {
            (call.starts_with("pwrite64(") || call.starts_with("write(")) && call.contains(WAL)
        })
        .filter(|&at| at > transactions[1])
        .unwrap_or_else(|| {
            panic!("the command ran before its process group was written:\n{trace}")
        });
    assert!(
        before[written..].iter().any(|(_, call)| syncs(call, WAL)),
        "the command ran before its process group and its claim were synced:\n{trace}"
    );
}

/// A checkpoint copies frames of the WAL into the ledger file. Frames a
/// commit wrote without syncing them (an attempt's start, a job's stamp)
/// must be on disk before any page made from them is written, or a power
/// cut could leave the file holding part of a transaction the WAL lost: a
/// corrupt ledger. Runs are traced one by one from a fresh ledger, through
/// enough of them that the WAL's checkpoints fall in each of a run's
/// transactions, the attempt's start (its second) among them.
#[test]
fn no_ledger_page_is_written_from_frames_not_yet_on_disk() {
    let env = Env::new();
    env.cmd(["run", "--key", "first", "--", "true"]).succeeds();
    let mut in_the_attempts_start = false;
    for index in 0..24 {
        // Every run writes as many frames, so the checkpoints would fall
        // in the same transaction of every fourth run, wherever the
        // schema's migrations left the WAL: a purge now and then (a write
        // of another size) moves them through each of a run's.
        if index % 3 == 2 {
            let key = format!("k{}", index - 1);
            env.cmd(["ledger", "forget", "--purge", &key]).succeeds();
        }
        let calls = "pwrite64,fsync,fdatasync,flock";
        let Some(trace) = traced(&env, calls, &format!("k{index}")) else {
            return;
        };
        let (mut unsynced, mut transaction) = (false, 0);
        for (_, call) in strace_lines(&trace) {
            let wal = call.contains(WAL);
            if call.starts_with("flock(") && call.contains("LOCK_EX") {
                transaction += 1;
            } else if call.starts_with("pwrite64(") && wal {
                unsynced = true;
            } else if syncs(call, WAL) {
                unsynced = false;
            } else if call.starts_with("pwrite64(") && call.contains("ledger.db>") {
                assert!(
                    !unsynced,
                    "a page of the ledger was written from WAL frames not yet synced:\n{trace}"
                );
                in_the_attempts_start |= transaction == 2;
            }
        }
    }
    assert!(
        in_the_attempts_start,
        "no checkpoint fell in an attempt's start in 24 runs"
    );
}

/// Runs `idem run --key k -- /bin/true` on a ledger that exists, under
/// `strace -f` for `calls`; None (and a note) where strace cannot trace.
fn strace_run(env: &Env, calls: &str) -> Option<String> {
    env.cmd(["run", "--key", "first", "--", "true"]).succeeds();
    traced(env, calls, "k")
}

/// Runs `idem run --key KEY -- /bin/true` under `strace -f` for `calls`.
fn traced(env: &Env, calls: &str, key: &str) -> Option<String> {
    let trace = env.path("trace");
    let mut command = Command::new("strace");
    command
        .args(["-f", "-y", "-qq", "-e", &format!("trace={calls}"), "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_idem"))
        .args(["run", "--key", key, "--", "/bin/true"])
        .env("IDEM_DB", env.db())
        .env("HOME", env.dir.path())
        .stdin(Stdio::null());
    match command.output() {
        Ok(output) if output.status.success() => Some(fs::read_to_string(trace).unwrap()),
        other => {
            require(false, &format!("tracing idem with strace ({other:?})"));
            None
        }
    }
}

/// The WAL as `strace -y` names its descriptor.
const WAL: &str = "ledger.db-wal>";

/// Whether a traced `call` syncs the file whose name holds `what`.
fn syncs(call: &str, what: &str) -> bool {
    (call.starts_with("fsync(") || call.starts_with("fdatasync(")) && call.contains(what)
}

/// A trace's lines as (pid, call).
fn strace_lines(trace: &str) -> Vec<(&str, &str)> {
    trace
        .lines()
        .filter_map(|line| line.split_once(' '))
        // strace pads the pid column: "123  call(...)".
        .map(|(pid, call)| (pid, call.trim_start()))
        .collect()
}

fn exec_of_true(lines: &[(&str, &str)], trace: &str) -> usize {
    lines
        .iter()
        .position(|(_, call)| call.starts_with("execve(\"/bin/true\""))
        .unwrap_or_else(|| panic!("no exec of the command in:\n{trace}"))
}
