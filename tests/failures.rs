//! When the command fails: retries with backoff, which codes are retried,
//! timeouts that reap the whole process group, signals passed on, and the
//! output rules for cron and for terminals.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::util::{code, lives, text, wait_for_file, Env};

/// A command that fails until it has run `n` times, then succeeds.
fn flaky(env: &Env, n: usize) -> String {
    let counter = env.path("count");
    format!(
        "echo x >> '{0}'; [ $(wc -l < '{0}') -ge {n} ]",
        counter.display()
    )
}

#[test]
fn a_flaky_command_is_retried_until_it_succeeds() {
    let env = Env::new();
    let output = env
        .cmd([
            "run",
            "--key",
            "f",
            "--retries",
            "3",
            "--backoff",
            "0s",
            "--shell",
            "--",
            &flaky(&env, 3),
        ])
        .succeeds();
    assert_eq!(env.count("count"), 3);
    let run = &env.list_json()[0];
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["attempts"], 3);
    let attempts = &env.show_json("f")["attempts_detail"];
    let codes: Vec<i64> = attempts
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["exit_code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, [1, 1, 0]);
    // Two retry lines, plain, naming the key, the attempt and the code.
    let stderr = output.stderr();
    assert!(
        stderr.contains("idem: f: attempt 1/4 exited 1; retrying in"),
        "{stderr}"
    );
    assert!(
        stderr.contains("idem: f: attempt 2/4 exited 1; retrying in"),
        "{stderr}"
    );
    assert!(
        !stderr.contains('\r') && !stderr.contains('\u{1b}'),
        "no terminal codes: {stderr:?}"
    );
}

#[test]
fn exhausted_retries_return_the_last_code() {
    let env = Env::new();
    let script = format!("{}; exit 5", env.count_cmd("count"));
    let output = env
        .cmd([
            "run",
            "--key",
            "x",
            "--retries",
            "2",
            "--backoff",
            "0s",
            "--shell",
            "--",
            &script,
        ])
        .expect_code(5);
    assert_eq!(env.count("count"), 3);
    assert_eq!(env.list_json()[0]["attempts"], 3);
    output.stderr_has("idem: x failed: attempt 3/3 exited 5");
}

#[test]
fn retry_on_and_no_retry_on_choose_what_is_retried() {
    let env = Env::new();
    let exit_with = |code: u8| format!("{}; exit {code}", env.count_cmd("count"));
    let run = |key: &str, flags: &[&str], code: u8| {
        let script = exit_with(code);
        let mut args = vec!["run", "--key", key, "--retries", "2", "--backoff", "0s"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--shell", "--", &script]);
        env.cmd(args)
    };
    let before = env.count("count");
    run("a", &["--retry-on", "3,10-20"], 4).expect_code(4);
    assert_eq!(env.count("count") - before, 1, "4 is not in 3,10-20");
    let before = env.count("count");
    run("b", &["--retry-on", "3,10-20"], 15).expect_code(15);
    assert_eq!(env.count("count") - before, 3, "15 is in 10-20");
    let before = env.count("count");
    run("c", &["--no-retry-on", "9"], 9).expect_code(9);
    assert_eq!(env.count("count") - before, 1, "9 is never retried");
    // 127 is permanent by default: a missing command will not appear.
    env.cmd([
        "run",
        "--key",
        "d",
        "--retries",
        "3",
        "--backoff",
        "0s",
        "--",
        "no-such-command-idem",
    ])
    .expect_code(127);
    assert_eq!(env.list_json()[0]["attempts"], 1);
    // A malformed list is a usage error.
    for bad in ["1,,2", "5-3", "300", "a"] {
        env.cmd(["run", "--key", "e", "--retry-on", bad, "--", "true"])
            .expect_code(2);
    }
}

#[test]
fn backoff_waits_within_its_bounds() {
    let env = Env::new();
    // Attempt 2 waits [100, 200] ms, attempt 3 waits [200, 400] ms.
    let started = Instant::now();
    env.cmd([
        "run",
        "--key",
        "b",
        "--retries",
        "2",
        "--backoff",
        "200ms",
        "--",
        "false",
    ])
    .expect_code(1);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "waited only {took:?}");
    assert!(took < Duration::from_secs(10), "waited {took:?}");
    // The cap holds: a 1h base capped at 100ms waits at most 100ms a time.
    let started = Instant::now();
    env.cmd([
        "run",
        "--key",
        "c",
        "--retries",
        "3",
        "--backoff",
        "1h",
        "--max-backoff",
        "100ms",
        "--",
        "false",
    ])
    .expect_code(1);
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Process ids a test command wrote down, one a line.
/// Shell words that append the pid of the shell running them to `file`,
/// as `/proc` names it: in a run's PID namespace, `$$` and `$!` are the
/// namespace's pids.
fn host_pid_to(file: &Path) -> String {
    format!(
        "read -r p _ < /proc/self/stat; echo $p >> '{}';",
        file.display()
    )
}

fn pids(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

#[test]
fn a_timeout_kills_the_whole_group() {
    let env = Env::new();
    let file = env.path("pids");
    let host = host_pid_to(&file);
    let script = format!("({host} exec sleep 100) & ({host} exec sleep 100) & {host} wait");
    let started = Instant::now();
    let output = env
        .cmd([
            "run",
            "--key",
            "t",
            "--retries",
            "0",
            // Long enough for a loaded machine to start all three.
            "--timeout",
            "1s",
            "--shell",
            "--",
            &script,
        ])
        .expect_code(124);
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "no kill-after wait was needed"
    );
    assert_eq!(pids(&file).len(), 3);
    for pid in pids(&file) {
        assert!(!lives(pid), "process {pid} outlived the timeout");
    }
    let run = &env.list_json()[0];
    assert_eq!(run["exit_code"], 124);
    assert_eq!(env.show_json("t")["attempts_detail"][0]["timed_out"], true);
    assert!(output.stderr().contains("timed out"));
}

#[test]
fn a_timeout_kills_a_group_that_ignores_sigterm() {
    let env = Env::new();
    let file = env.path("pids");
    let host = host_pid_to(&file);
    let script = format!("trap '' TERM; ({host} exec sleep 100) & {host} wait; wait");
    let started = Instant::now();
    env.cmd([
        "run",
        "--key",
        "t",
        "--retries",
        "0",
        // Long enough for a loaded machine to reach the trap.
        "--timeout",
        "1s",
        "--kill-after",
        "300ms",
        "--shell",
        "--",
        &script,
    ])
    .expect_code(124);
    assert!(
        started.elapsed() >= Duration::from_millis(1300),
        "SIGKILL came only after --kill-after"
    );
    for pid in pids(&file) {
        assert!(!lives(pid), "process {pid} outlived the timeout");
    }
    assert_eq!(env.list_json()[0]["signal"], 9);
}

#[test]
fn a_timed_out_attempt_is_retried() {
    let env = Env::new();
    let script = format!("{}; sleep 100", env.count_cmd("count"));
    env.cmd([
        "run",
        "--key",
        "t",
        "--retries",
        "1",
        "--backoff",
        "0s",
        // Long enough for a loaded machine to count each attempt.
        "--timeout",
        "1s",
        "--shell",
        "--",
        &script,
    ])
    .expect_code(124);
    assert_eq!(env.count("count"), 2);
}

/// Starts `idem run` on a command that marks `started` then sleeps.
fn start_sleeper(env: &Env, key: &str, body: &str) -> Child {
    let marker = env.path(&format!("{key}.started"));
    let script = format!("{body} echo x > '{}'; sleep 100", marker.display());
    let mut child = env
        .idem([
            "run",
            "--key",
            key,
            "--retries",
            "3",
            "--backoff",
            "0s",
            "--shell",
            "--",
            &script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&marker, Duration::from_secs(10), &mut child);
    child
}

#[test]
fn sigterm_to_idem_reaches_the_command_and_is_not_retried() {
    let env = Env::new();
    let child = start_sleeper(&env, "s", "");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(code(&output), 128 + 15, "{}", text(&output.stderr));
    let run = &env.list_json()[0];
    assert_eq!(run["status"], "failed");
    assert_eq!(run["signal"], 15);
    assert_eq!(run["attempts"], 1, "an operator's signal is never retried");
    assert!(text(&output.stderr).contains("interrupted by signal 15"));
}

#[test]
fn a_second_sigint_escalates_to_sigkill() {
    let env = Env::new();
    let child = start_sleeper(&env, "i", "trap '' INT;");
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    kill(pid, Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(code(&output), 128 + 9, "{}", text(&output.stderr));
    assert_eq!(env.list_json()[0]["signal"], 2);
}

#[test]
fn quiet_success_holds_output_until_a_failure() {
    let env = Env::new();
    let ok = env
        .cmd([
            "run",
            "--key",
            "ok",
            "--quiet-success",
            "--shell",
            "--",
            "echo out; echo err >&2",
        ])
        .succeeds();
    assert_eq!(ok.stdout(), "");
    assert_eq!(ok.stderr(), "");
    // A success after a retry is silent too, retry line included.
    env.cmd([
        "run",
        "--key",
        "fl",
        "--quiet-success",
        "--backoff",
        "0s",
        "--shell",
        "--",
        &flaky(&env, 2),
    ])
    .succeeds()
    .stderr_is("");
    let bad = env
        .cmd([
            "run",
            "--key",
            "bad",
            "--quiet-success",
            "--retries",
            "1",
            "--backoff",
            "0s",
            "--shell",
            "--",
            "echo out; echo err >&2; exit 3",
        ])
        .expect_code(3);
    assert_eq!(bad.stdout(), "out\nout\n");
    let stderr = bad.stderr();
    assert!(
        stderr.starts_with("err\nidem: bad: attempt 1/2 exited 3; retrying in"),
        "{stderr}"
    );
    assert!(
        stderr.ends_with("err\nidem: bad failed: attempt 2/2 exited 3\n"),
        "{stderr}"
    );
}

#[test]
fn quiet_silences_idem_but_not_the_command() {
    let env = Env::new();
    let output = env
        .cmd([
            "-q",
            "run",
            "--key",
            "q",
            "--retries",
            "1",
            "--backoff",
            "0s",
            "--shell",
            "--",
            "echo err >&2; exit 4",
        ])
        .expect_code(4);
    assert_eq!(output.stderr(), "err\nerr\n");
    // Errors that stop idem itself still print.
    let usage = env
        .cmd(["-q", "run", "--key", "{nope}", "--", "true"])
        .expect_code(2);
    assert!(!usage.stderr().is_empty());
}

#[test]
fn a_terminal_gets_a_spinner_for_the_backoff() {
    let env = Env::new();
    // `script` gives idem a pseudo-terminal, as an operator's shell would.
    let idem = env!("CARGO_BIN_EXE_idem");
    let line = format!("{idem} run --key sp --retries 1 --backoff 1s --max-backoff 1s -- false");
    let output = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("IDEM_DB", env.db())
        .env("HOME", env.dir.path())
        .env("TZ", "UTC")
        // A terminal's session names its kind, whatever ran the tests.
        .env("TERM", "xterm-256color")
        .output();
    let Ok(output) = output else {
        crate::util::require(false, "`script` (util-linux)");
        return;
    };
    let screen = text(&output.stdout);
    assert!(screen.contains("retry 2/2 of sp in"), "{screen:?}");
    assert_eq!(output.status.code(), Some(1));
}

#[test]
fn a_signal_during_the_wait_to_retry_ends_the_run_at_once() {
    let env = Env::new();
    let script = format!("{}; exit 1", env.count_cmd("count"));
    let said = env.path("stderr");
    let mut child = env
        .idem([
            "run",
            "--key",
            "w",
            "--retries",
            "3",
            "--backoff",
            "60s",
            "--shell",
            "--",
            &script,
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&said).unwrap())
        .spawn()
        .unwrap();
    let stderr = || std::fs::read_to_string(&said).unwrap_or_default();
    // The signal goes once idem says it waits.
    crate::util::eventually("idem to wait to retry", Duration::from_secs(20), || {
        stderr().contains("retrying in")
    });
    let sent = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "the 60s wait was not cut short"
    );
    assert_eq!(status.code(), Some(128 + 15), "{}", stderr());
    assert!(
        stderr().contains("interrupted by signal 15 while waiting to retry"),
        "{}",
        stderr()
    );
    assert_eq!(env.count("count"), 1, "no attempt after the signal");
    let run = &env.list_json()[0];
    assert_eq!(run["status"], "failed");
    assert_eq!(run["attempts"], 1);
}

/// What outlives a timeout's first signal is waited for as the attempt
/// ending, not told as if the command had left it running.
#[test]
fn a_process_that_outlives_the_timeouts_signal_is_told_as_ending_not_left_running() {
    let env = Env::new();
    let script = "(trap '' TERM; sleep 300) & wait";
    let ran = env
        .cmd([
            "run",
            "--key",
            "k",
            "--retries",
            "0",
            "--timeout",
            "1s",
            "--kill-after",
            "1s",
            "--shell",
            "--",
            script,
        ])
        .expect_code(124);
    let said = ran.stderr();
    assert!(
        said.contains("process(es) of the attempt to end: pid "),
        "{said}"
    );
    assert!(!said.contains("left running"), "{said}");
}
