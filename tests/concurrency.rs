//! One run of a key at a time, and recovery by itself after a crash: real
//! racing processes, real SIGKILLs. The stories that hold on a shared
//! ledger too run on every backend.

use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use crate::util::{
    assert_code, code, eventually, integrity_check, on_every_backend, text, trials, wait_for_file,
    Backend, Env,
};

on_every_backend!(waiter_adopts_the_outcome_and_ttl_expires);

/// A command that records an execution in `count`, and an overlap in
/// `overlaps` when another execution holds the lock file.
fn guarded(env: &Env, seconds: &str) -> String {
    format!(
        "flock -n '{lock}' sh -c 'echo x >> {count}; sleep {seconds}' || echo overlap >> '{overlaps}'",
        lock = env.path("lock").display(),
        count = env.path("count").display(),
        overlaps = env.path("overlaps").display(),
    )
}

fn race(env: &Env, racers: usize, args: &[&str]) -> Vec<Output> {
    let children: Vec<Child> = (0..racers)
        .map(|_| {
            env.idem(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect()
}

#[test]
fn racers_on_one_key_run_it_once() {
    let env = Env::new();
    let command = guarded(&env, "0.3");
    let outputs = race(
        &env,
        40,
        &["run", "--key", "race", "--shell", "--", &command],
    );
    assert_eq!(env.count("count"), 1, "exactly one execution");
    assert_eq!(env.count("overlaps"), 0, "no overlap");
    for output in &outputs {
        let stderr = text(&output.stderr);
        assert!(
            matches!(code(output), 0 | 75),
            "exit {}: {stderr}",
            code(output)
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("locked"),
            "{stderr}"
        );
        if code(output) == 75 {
            assert!(stderr.contains("race is running elsewhere: "), "{stderr}");
        }
    }
    assert_eq!(integrity_check(&env.db()), "ok");
}

#[test]
fn waiters_adopt_the_outcome() {
    let env = Env::new();
    let command = guarded(&env, "0.5");
    let outputs = race(
        &env,
        20,
        &[
            "run", "--key", "w", "--wait", "30s", "--shell", "--", &command,
        ],
    );
    for output in &outputs {
        assert_code(output, 0);
    }
    assert_eq!(env.count("count"), 1);
    assert_eq!(env.count("overlaps"), 0);
}

#[test]
fn a_waiter_runs_the_key_when_the_owner_failed() {
    let env = Env::new();
    let owner = env
        .idem([
            "run",
            "--key",
            "w",
            "--retries",
            "0",
            "--shell",
            "--",
            "sleep 0.5; exit 3",
        ])
        .spawn()
        .unwrap();
    wait_for_status(&env, "w", "running");
    let count = env.count_cmd("count");
    env.cmd([
        "run", "--key", "w", "--wait", "30s", "--shell", "--", &count,
    ])
    .succeeds();
    assert_eq!(env.count("count"), 1);
    assert_eq!(owner.wait_with_output().unwrap().status.code(), Some(3));
}

#[test]
fn conflict_exit_codes() {
    let env = Env::new();
    let mut owner = env
        .idem(["run", "--key", "c", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    wait_for_status(&env, "c", "running");
    env.cmd(["run", "--key", "c", "--", "sleep", "30"])
        .expect_code(75)
        .stderr_has("--wait");
    env.cmd([
        "run",
        "--key",
        "c",
        "--conflict-exit-code",
        "9",
        "--",
        "sleep",
        "30",
    ])
    .expect_code(9);
    // 0 turns the conflict into a quiet skip, as under cron.
    env.cmd([
        "run",
        "--key",
        "c",
        "--conflict-exit-code",
        "0",
        "--",
        "sleep",
        "30",
    ])
    .succeeds()
    .stderr_is("");
    // --force never overlaps a live run, and --wait gives up in time.
    env.cmd(["run", "--key", "c", "--force", "--", "sleep", "30"])
        .expect_code(75);
    let started = Instant::now();
    env.cmd(["run", "--key", "c", "--wait", "300ms", "--", "sleep", "30"])
        .expect_code(75);
    assert!(started.elapsed() >= Duration::from_millis(300));
    owner.kill().unwrap();
    owner.wait().unwrap();
}

#[track_caller]
fn wait_for_status(env: &Env, key: &str, status: &str) {
    let what = format!("{key} to become {status}");
    eventually(&what, Duration::from_secs(10), || {
        let shown = env.cmd(["ledger", "show", key, "--json"]).run();
        if !shown.output.status.success() {
            return false;
        }
        shown.json()["status"] == status
    });
}

/// Waits (bounded) until the file at `path` holds a whole line.
#[track_caller]
fn wait_for_line(path: &std::path::Path) {
    let what = format!("a line in {}", path.display());
    eventually(&what, Duration::from_secs(30), || {
        std::fs::read_to_string(path).is_ok_and(|lines| lines.ends_with('\n'))
    });
}

/// Starts idem in a process group of its own, so the test can kill the
/// wrapper and everything it started, as a crash or an OOM kill would.
fn spawn_in_own_group(env: &Env, args: &[&str]) -> Child {
    use std::os::unix::process::CommandExt;
    env.idem(args)
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn an_abandoned_run_is_rerun_with_idem_recovered() {
    let env = Env::new();
    let recovered = env.path("recovered");
    // `exec`: the sleep is the direct child, which dies with its wrapper.
    let script = format!(
        "echo ${{IDEM_RECOVERED:-0}} >> '{}'; exec sleep 30",
        recovered.display()
    );
    let mut first = spawn_in_own_group(&env, &["run", "--key", "a", "--shell", "--", &script]);
    // Killed once its command has run, not while merely claimed.
    wait_for_line(&recovered);
    kill(Pid::from_raw(first.id() as i32), Signal::SIGKILL).unwrap();
    first.wait().unwrap();
    // The command heard of its wrapper's death (PR_SET_PDEATHSIG); once the
    // whole group is gone the next run takes over by itself.
    let script = format!("echo ${{IDEM_RECOVERED:-0}} >> '{}'", recovered.display());
    env.cmd([
        "run", "--key", "a", "--wait", "10s", "--shell", "--", &script,
    ])
    .succeeds();
    assert_eq!(std::fs::read_to_string(&recovered).unwrap(), "0\n1\n");
    let shown = env.show_json("a");
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["history"][0]["status"], "abandoned");
}

#[test]
fn a_key_stays_running_while_its_group_lives() {
    let env = Env::new();
    // The command's own child ignores SIGTERM, so it outlives the wrapper.
    let marker = env.path("started");
    let script = format!(
        "trap '' TERM; sleep 3 & echo x > '{}'; wait",
        marker.display()
    );
    let mut first = spawn_in_own_group(&env, &["run", "--key", "g", "--shell", "--", &script]);
    wait_for_file(&marker, Duration::from_secs(30), &mut first);
    kill(Pid::from_raw(first.id() as i32), Signal::SIGKILL).unwrap();
    first.wait().unwrap();
    env.cmd(["run", "--key", "g", "--", "true"]).expect_code(75);
    env.cmd(["run", "--key", "g", "--wait", "10s", "--", "true"])
        .succeeds();
}

#[test]
fn a_command_that_kills_idem_at_once_keeps_its_key() {
    // idem is SIGKILLed as soon as the command runs. Its group must already
    // be in the ledger by then, or the next run would find idem dead,
    // nothing else to look for, and run the key while this command lives on.
    // The kill comes from here: in a run's PID namespace, nothing of the run
    // can reach idem.
    let env = Env::new();
    let group = env.path("group");
    // The group's pid as `/proc` names it: `$$` is the namespace's there.
    let script = format!(
        "trap '' TERM; read -r me _ < /proc/self/stat; echo $me > '{}'; sleep 5",
        group.display()
    );
    for trial in 0..trials(5) {
        let key = format!("k{trial}");
        let mut first = spawn_in_own_group(&env, &["run", "--key", &key, "--shell", "--", &script]);
        wait_for_line(&group);
        kill(Pid::from_raw(first.id() as i32), Signal::SIGKILL).unwrap();
        first.wait().unwrap();
        let leader: i32 = std::fs::read_to_string(&group)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        std::fs::remove_file(&group).unwrap();
        let next = env.cmd(["run", "--key", &key, "--", "true"]).run();
        killpg(Pid::from_raw(leader), Signal::SIGKILL).unwrap();
        next.expect_code(75);
    }
}

#[test]
fn on_abandoned_fail_leaves_the_key_for_a_person() {
    let env = Env::new();
    let mut first = spawn_in_own_group(&env, &["run", "--key", "p", "--", "sleep", "30"]);
    wait_for_status(&env, "p", "running");
    let group = Pid::from_raw(first.id() as i32);
    killpg(group, Signal::SIGKILL).unwrap();
    first.wait().unwrap();
    let count = env.count_cmd("count");
    for _ in 0..2 {
        // --wait: the command may take a moment to die of its wrapper's death.
        let refused = env
            .cmd([
                "run",
                "--key",
                "p",
                "--wait",
                "10s",
                "--on-abandoned",
                "fail",
                "--shell",
                "--",
                &count,
            ])
            .expect_code(69);
        assert!(
            refused.stderr().contains("abandoned"),
            "{}",
            refused.stderr()
        );
    }
    assert_eq!(env.count("count"), 0);
    assert_eq!(env.show_json("p")["status"], "abandoned");
    env.cmd([
        "run",
        "--key",
        "p",
        "--on-abandoned",
        "fail",
        "--force",
        "--shell",
        "--",
        &count,
    ])
    .succeeds();
    assert_eq!(env.count("count"), 1);
}

#[test]
fn crash_loop_recovers_every_time() {
    let env = Env::new();
    let trials = trials(25);
    let mut rng = fastrand::Rng::new();
    eprintln!("crash loop seed {}", rng.get_seed());
    let command = guarded(&env, "0.2");
    for trial in 0..trials {
        let key = format!("crash-{trial}");
        let mut victim =
            spawn_in_own_group(&env, &["run", "--key", &key, "--shell", "--", &command]);
        std::thread::sleep(Duration::from_millis(rng.u64(0..250)));
        // SIGKILL the wrapper alone at a random instant: before, during or
        // after its claim, while its command runs, or while it records.
        let _ = kill(Pid::from_raw(victim.id() as i32), Signal::SIGKILL);
        victim.wait().unwrap();
        let started = Instant::now();
        env.cmd([
            "run", "--key", &key, "--wait", "20s", "--shell", "--", &command,
        ])
        .succeeds();
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "trial {trial} did not recover"
        );
        let status = env.show_json(&key)["status"].clone();
        assert_eq!(status, "succeeded", "trial {trial}");
    }
    assert_eq!(env.count("overlaps"), 0, "no two executions overlapped");
    assert_eq!(integrity_check(&env.db()), "ok");
}

#[test]
fn many_keys_from_many_processes_on_a_fresh_ledger() {
    let env = Env::new();
    let count = env.count_cmd("count");
    // 50 processes, 4 keys each, all starting on a ledger that does not exist.
    let workers: Vec<Child> = (0..50)
        .map(|worker| {
            let script = (0..4)
                .map(|n| {
                    format!(
                        "'{idem}' run --key k-{worker}-{n} --shell -- \"{count}\" || exit 1",
                        idem = env!("CARGO_BIN_EXE_idem"),
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            env.idem(["run", "--key", &format!("w{worker}")])
                .arg("--db")
                .arg(env.path("outer.db"))
                .args(["--shell", "--", &script])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for worker in workers {
        let output = worker.wait_with_output().unwrap();
        assert_code(&output, 0);
        assert_eq!(text(&output.stderr), "", "no errors");
    }
    assert_eq!(env.count("count"), 200);
    let runs = env.list_json();
    assert_eq!(runs.as_array().unwrap().len(), 200);
    assert!(runs
        .as_array()
        .unwrap()
        .iter()
        .all(|run| run["status"] == "succeeded"));
}

fn waiter_adopts_the_outcome_and_ttl_expires(backend: &Backend) {
    let env = backend.env();
    let started = env.path("started");
    let go = env.path("go");
    let script = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; {}",
        started.display(),
        go.display(),
        env.count_cmd("count")
    );
    let mut owner = env
        .idem(["run", "--key", "k", "--shell", "--", &script])
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(60), &mut owner);
    env.cmd(["run", "--key", "k", "--shell", "--", &script])
        .expect_code(75);
    let waiter = env
        .idem([
            "run", "--key", "k", "--wait", "2m", "--shell", "--", &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::write(&go, "").unwrap();
    assert_code(&owner.wait_with_output().unwrap(), 0);
    assert_code(&waiter.wait_with_output().unwrap(), 0);
    assert_eq!(env.count("count"), 1, "the waiter adopted the success");
    // A success counts for --ttl only.
    std::thread::sleep(Duration::from_millis(1100));
    env.cmd(["run", "--key", "k", "--ttl", "1s", "--shell", "--", &script])
        .succeeds();
    assert_eq!(env.count("count"), 2);
}
