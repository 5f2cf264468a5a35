//! Never twice, anywhere: a run is alive while the kernel says so, every
//! process of it counts, and whatever kills or hides idem, two runs of a
//! key never overlap. Real namespaces (`unshare`), real SIGKILLs, and the
//! `flock -n` detector: an execution that finds the lock taken writes
//! `overlap`.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::util::{
    assert_code, guarded, text, trials, wait_for_count, wait_for_file, wrapped, Env,
};

pub use crate::util::require;

/// Namespaces need root (CI runs as root).
pub fn require_root_namespaces() -> bool {
    let works = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "--uts",
            "--mount",
            "true",
        ])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    require(works, "`unshare` with PID, UTS and mount namespaces (root)")
}

/// `template` as it would run in a container of its own: a new PID
/// namespace with its own /proc, which sees none of the host's processes.
/// Killing the returned process kills everything in the namespace.
pub fn in_pid_namespace(template: &Command) -> Command {
    wrapped(
        template,
        &["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"],
    )
}

fn overlaps(env: &Env) -> usize {
    env.count("overlaps")
}

fn finish(child: Child) -> Output {
    child.wait_with_output().expect("idem ends")
}

#[test]
fn runs_in_separate_pid_namespaces_never_overlap() {
    if !require_root_namespaces() {
        return;
    }
    let env = Env::new();
    for trial in 0..trials(3) {
        let key = format!("k{trial}");
        let before = env.count("count");
        let script = guarded(&env, 2);
        let mut first =
            in_pid_namespace(&env.idem(["run", "--key", &key, "--shell", "--", &script]))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
        wait_for_count(&env, before + 1, &mut first);
        let second = in_pid_namespace(&env.idem(["run", "--key", &key, "--shell", "--", &script]))
            .output()
            .unwrap();
        assert_code(&second, 75);
        assert_code(&finish(first), 0);
        assert_eq!(env.count("count"), before + 1);
    }
    assert_eq!(overlaps(&env), 0);
}

#[test]
fn an_owner_hidden_by_a_private_proc_is_still_alive() {
    if !require_root_namespaces() {
        return;
    }
    let env = Env::new();
    let script = guarded(&env, 2);
    let mut first = env
        .idem(["run", "--key", "k", "--shell", "--", &script])
        .spawn()
        .unwrap();
    wait_for_count(&env, 1, &mut first);
    // A sandbox whose /proc shows nothing (a tmpfs over it).
    let hidden = wrapped(
        &env.idem(["run", "--key", "k", "--shell", "--", &script]),
        &[
            "unshare",
            "--mount",
            "sh",
            "-c",
            "mount -t tmpfs none /proc && exec \"$@\"",
            "hide",
        ],
    )
    .output()
    .unwrap();
    assert_code(&hidden, 75);
    assert!(first.wait().unwrap().success());
    assert_eq!(env.count("count"), 1);
    assert_eq!(overlaps(&env), 0);
}

#[test]
fn a_run_on_a_renamed_host_is_judged_dead_once_it_is_gone() {
    if !require_root_namespaces() {
        return;
    }
    let env = Env::new();
    let started = env.path("started");
    let script = format!("touch '{}'; exec sleep 600", started.display());
    // Recorded under a host name this machine no longer has.
    let mut first = wrapped(
        &env.idem(["run", "--key", "k", "--shell", "--", &script]),
        &[
            "unshare",
            "--uts",
            "sh",
            "-c",
            "hostname old-name && exec \"$@\"",
            "rename",
        ],
    )
    .spawn()
    .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut first);
    // idem alone is killed; its guardian stops the command.
    kill(Pid::from_raw(first.id() as i32), Signal::SIGKILL).unwrap();
    first.wait().unwrap();
    let count = env.count_cmd("count");
    env.cmd([
        "run", "--key", "k", "--wait", "20s", "--shell", "--", &count,
    ])
    .succeeds();
    assert_eq!(env.count("count"), 1);
    let runs = env.list_json();
    assert_eq!(runs[1]["status"], "abandoned");
    assert_eq!(runs[1]["host"], "old-name");
    env.cmd(["doctor"]).succeeds();
    env.cmd(["ledger", "forget", "--purge", "k"]).succeeds();
}

#[test]
fn a_grandchild_in_its_own_session_is_stopped_with_a_killed_idem() {
    let env = Env::new();
    let script = format!("setsid sh -c \"{}\" & sleep 600", guarded(&env, 60));
    let mut first = env
        .idem(["run", "--key", "k", "--shell", "--", &script])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_count(&env, 1, &mut first);
    let killed_at = Instant::now();
    kill(Pid::from_raw(first.id() as i32), Signal::SIGKILL).unwrap();
    first.wait().unwrap();
    env.cmd([
        "run",
        "--key",
        "k",
        "--wait",
        "30s",
        "--shell",
        "--",
        &guarded(&env, 0),
    ])
    .succeeds();
    eprintln!("taken over {:?} after the SIGKILL", killed_at.elapsed());
    assert!(
        killed_at.elapsed() < Duration::from_secs(30),
        "the grandchild ran on"
    );
    assert_eq!(env.count("count"), 2);
    assert_eq!(overlaps(&env), 0);
}

#[test]
fn what_a_command_leaves_running_is_part_of_its_attempt() {
    let env = Env::new();
    // Attempt 1 fails leaving a detached process that holds the lock;
    // attempt 2 must wait for it.
    let once = env.path("once");
    let retried = format!(
        "if [ ! -e '{once}' ]; then touch '{once}'; setsid sh -c \"{hold}\" & exit 1; fi; {check}",
        once = once.display(),
        hold = guarded(&env, 2),
        check = guarded(&env, 0),
    );
    let output = env
        .cmd([
            "run",
            "--key",
            "r",
            "--backoff",
            "10ms",
            "--shell",
            "--",
            &retried,
        ])
        .succeeds();
    // How many of the detached processes had started by the command's exit
    // depends on the scheduler (the shell, then flock, then its child), so
    // the line is checked for a count, not for one count.
    let stderr = output.stderr();
    let left = stderr
        .split("waiting for ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|count| count.parse::<u32>().ok());
    assert!(
        left.is_some_and(|count| count >= 1) && stderr.contains("process(es) it left running"),
        "{stderr}"
    );
    // A success that leaves a process behind is over only when it is gone,
    // so a --force run right after never meets it.
    let left = format!("setsid sh -c \"{}\" &", guarded(&env, 2));
    env.cmd(["run", "--key", "f", "--shell", "--", &left])
        .succeeds();
    let check = guarded(&env, 0);
    env.cmd(["run", "--key", "f", "--force", "--shell", "--", &check])
        .succeeds();
    assert_eq!(env.count("count"), 4);
    assert_eq!(overlaps(&env), 0);
}

#[test]
fn a_killed_guardian_leaves_the_key_held_by_what_still_runs() {
    let env = Env::new();
    // The command kills its guardian, then goes on. The init of a PID
    // namespace cannot be killed from inside it: where a run has one, the
    // guardian lives on, and so does the command.
    let group = env.path("group");
    let script = format!(
        "trap '' TERM; kill -KILL $PPID; echo $$ > '{}'; {}",
        group.display(),
        guarded(&env, 3)
    );
    let mut first = env
        .idem([
            "-v",
            "run",
            "--key",
            "k",
            "--retries",
            "0",
            "--shell",
            "--",
            &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_count(&env, 1, &mut first);
    env.cmd(["run", "--key", "k", "--shell", "--", &guarded(&env, 0)])
        .expect_code(75);
    let output = finish(first);
    let namespace = text(&output.stderr).contains("containment: pid namespace");
    assert_code(&output, if namespace { 0 } else { 137 });
    assert_eq!(env.count("count"), 1);
    assert_eq!(overlaps(&env), 0);
}

#[test]
fn timeout_and_signals_reach_a_background_child_holding_stdout() {
    let env = Env::new();
    let began = Instant::now();
    env.cmd([
        "run",
        "--key",
        "t",
        "--timeout",
        "1s",
        "--retries",
        "0",
        "--shell",
        "--",
        "sleep 30 & echo started",
    ])
    .expect_code(124);
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "waited for the child"
    );

    let started = env.path("started");
    let script = format!("sleep 30 & touch '{}'", started.display());
    let mut run = env
        .idem(["run", "--key", "s", "--shell", "--", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut run);
    std::thread::sleep(Duration::from_millis(200));
    let sent = Instant::now();
    kill(Pid::from_raw(run.id() as i32), Signal::SIGTERM).unwrap();
    let output = finish(run);
    assert!(sent.elapsed() < Duration::from_secs(10), "ignored SIGTERM");
    assert_code(&output, 143);
    assert_eq!(env.list_json()[0]["status"], "failed");
}

/// Holds SQLite's write lock on `db` for `seconds`, as another program might.
fn hold_ledger(db: &Path, seconds: u32) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "(echo 'BEGIN EXCLUSIVE;'; echo 'SELECT count(*) FROM runs;'; sleep {seconds}; echo 'COMMIT;') | sqlite3 '{}'",
            db.display()
        ))
        .stdout(Stdio::null())
        .spawn()
        .expect("sqlite3 runs (.ci/run installs it)")
}

#[test]
fn an_outcome_waits_out_a_ledger_locked_for_longer_than_a_claim_would() {
    let env = Env::new();
    let started = env.path("started");
    let script = format!(
        "touch '{}'; sleep 1; {}",
        started.display(),
        env.count_cmd("count")
    );
    let mut run = env
        .idem(["run", "--key", "k", "--shell", "--", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut run);
    let mut holder = hold_ledger(&env.db(), 13);
    let output = finish(run);
    holder.wait().unwrap();
    assert_code(&output, 0);
    assert!(
        text(&output.stderr).contains("trying again for up to 5m"),
        "{}",
        text(&output.stderr)
    );
    env.cmd(["run", "--key", "k", "--shell", "--", &script])
        .succeeds();
    assert_eq!(env.count("count"), 1);
}

#[test]
fn an_import_never_overrides_a_run_that_goes_on() {
    let env = Env::new();
    let script = guarded(&env, 3);
    let mut first = env
        .idem(["run", "--key", "k", "--shell", "--", &script])
        .spawn()
        .unwrap();
    wait_for_count(&env, 1, &mut first);
    let export = env.cmd(["ledger", "export"]).succeeds();
    // A finished copy of the running run, as a crafted stream could hold.
    let mut line: serde_json::Value =
        serde_json::from_slice(export.output.stdout.split(|b| *b == b'\n').next().unwrap())
            .unwrap();
    assert_eq!(line["status"], "running");
    line["status"] = "succeeded".into();
    line["exit_code"] = 0.into();
    line["finished_at"] = line["started_at"].clone();
    let stream = env.path("stream.jsonl");
    std::fs::write(&stream, format!("{line}\n")).unwrap();
    env.cmd(["ledger", "import", stream.to_str().unwrap()])
        .succeeds();
    env.cmd(["run", "--key", "k", "--shell", "--", &script])
        .expect_code(75);
    assert!(first.wait().unwrap().success());
    assert_eq!(env.count("count"), 1);
    assert_eq!(overlaps(&env), 0);
}

#[test]
fn every_claim_gets_a_larger_fence_even_after_a_purge() {
    let env = Env::new();
    let fences = env.path("fences");
    let record = format!("echo $IDEM_FENCE >> '{}'", fences.display());
    for _ in 0..2 {
        env.cmd(["run", "--key", "k", "--force", "--shell", "--", &record])
            .succeeds();
    }
    env.cmd(["ledger", "forget", "--purge", "k"]).succeeds();
    env.cmd(["run", "--key", "k", "--shell", "--", &record])
        .succeeds();
    let seen: Vec<i64> = std::fs::read_to_string(&fences)
        .unwrap()
        .lines()
        .map(|line| line.parse().expect("IDEM_FENCE is an integer"))
        .collect();
    assert_eq!(seen.len(), 3);
    assert!(seen.windows(2).all(|pair| pair[0] < pair[1]), "{seen:?}");
}
