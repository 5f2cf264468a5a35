//! The `--on-failure` and `--on-recovery` hooks themselves: what they get,
//! what a failing or hanging hook changes, and that they run under
//! `--quiet-success` (when they are called is in `alerts.rs`).

use std::time::{Duration, Instant};

use crate::alerts::{lines, run};
use crate::util::Env;

#[test]
fn a_failure_hook_gets_its_environment_and_a_private_output_file() {
    let env = Env::new();
    let record = env.path("env");
    let hook = format!(
        "env | grep ^IDEM_ | grep -v ^IDEM_DB | sort > '{r}'; stat -c 'mode=%a' \"$IDEM_OUTPUT\" >> '{r}'; cat \"$IDEM_OUTPUT\" >> '{r}'",
        r = record.display()
    );
    run(
        &env,
        None,
        &[
            "-k",
            "night-1",
            "--job",
            "night",
            "--retries",
            "0",
            "--on-failure",
            &hook,
        ],
        &["sh", "-c", "echo partial; exit 3"],
    )
    .expect_code(3);
    let run_id = env.show_json("night-1")["run_id"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default();
    let seen = std::fs::read_to_string(&record).unwrap();
    let output_line = seen
        .lines()
        .find(|line| line.starts_with("IDEM_OUTPUT="))
        .unwrap()
        .to_owned();
    let mut expected = vec![output_line.clone()];
    expected.extend([
        "IDEM_CAUSE=exit 3".to_owned(),
        "IDEM_EVENT=failure".to_owned(),
        "IDEM_EXIT_CODE=3".to_owned(),
        "IDEM_FAILURES=1".to_owned(),
        "IDEM_JOB=night".to_owned(),
        "IDEM_KEY=night-1".to_owned(),
        format!("IDEM_RUN_ID={run_id}"),
    ]);
    expected.sort();
    expected.extend(["mode=600".to_owned(), "partial".to_owned()]);
    assert_eq!(seen.lines().collect::<Vec<_>>(), expected);
    // The output file is gone once the hook is done.
    let path = output_line.trim_start_matches("IDEM_OUTPUT=");
    assert!(!std::path::Path::new(path).exists());
}

#[test]
fn a_failing_or_missing_hook_is_one_line_and_changes_nothing() {
    let env = Env::new();
    for (hook, said) in [
        ("exit 7", "the --on-failure hook exited 7"),
        (
            "no-such-hook-command",
            "the --on-failure hook exited 127 (is its command installed and on PATH?)",
        ),
    ] {
        let output = run(
            &env,
            None,
            &["-k", "k", "--force", "--retries", "0", "--on-failure", hook],
            &["sh", "-c", "exit 3"],
        )
        .expect_code(3);
        let stderr = output.stderr();
        assert!(
            stderr.contains(&format!("idem: k: {said}; the run's outcome stands\n")),
            "{stderr}"
        );
        assert_eq!(env.show_json("k")["status"], "failed");
        assert_eq!(env.show_json("k")["exit_code"], 3);
    }
    // A recovery hook that fails leaves the success a success.
    run(
        &env,
        None,
        &["-k", "k", "--retries", "0", "--on-recovery", "exit 9"],
        &["true"],
    )
    .succeeds()
    .stderr_has("the --on-recovery hook exited 9");
    assert_eq!(env.show_json("k")["status"], "succeeded");
}

#[test]
fn a_hook_that_hangs_is_killed_with_its_group_at_the_limit() {
    let env = Env::new();
    let pid_file = env.path("hook.pid");
    // Ignores TERM and leaves a child behind: only a KILL of its group ends both.
    let hook = format!(
        "trap '' TERM; sleep 300 & echo $! > '{}'; wait",
        pid_file.display()
    );
    let began = Instant::now();
    let output = run(
        &env,
        None,
        &["-k", "k", "--retries", "0", "--on-failure", &hook],
        &["false"],
    );
    let took = began.elapsed();
    let output = output.expect_code(1);
    assert!(took >= Duration::from_secs(30), "took {took:?}");
    assert!(took < Duration::from_secs(35), "took {took:?}");
    output.stderr_has("the --on-failure hook ran past 30s and was killed");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !crate::util::lives(pid),
        "the hook's child {pid} outlived it"
    );
}

#[test]
fn hooks_run_under_quiet_success() {
    let env = Env::new();
    let hooks = env.path("hooks");
    let hook = format!("echo $IDEM_EVENT >> '{}'", hooks.display());
    let args = |key: &'static str| {
        vec![
            "-k",
            key,
            "--job",
            "j",
            "--retries",
            "0",
            "--quiet-success",
            "--on-failure",
            &hook,
            "--on-recovery",
            &hook,
        ]
    };
    let output = run(&env, None, &args("a"), &["sh", "-c", "echo said; exit 2"]).expect_code(2);
    assert_eq!(output.stdout(), "said\n", "a failure shows its output");
    let output = run(&env, None, &args("b"), &["echo", "said"]).succeeds();
    assert_eq!(output.stdout(), "", "a success's output is held");
    assert_eq!(output.stderr(), "");
    assert_eq!(lines(&env, "hooks"), ["failure", "recovery"]);
}

/// A run frees its key and its named locks once its outcome is recorded,
/// before it delivers: a hook (or a monitor) that is slow to answer holds
/// neither the next run of the key nor a run sharing its lock.
#[test]
fn a_run_delivering_its_events_holds_neither_its_key_nor_its_locks() {
    let env = Env::new();
    let entered = env.path("entered");
    let release = env.path("release");
    // The hook says it is running, then waits for the test.
    let hook = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done",
        entered.display(),
        release.display()
    );
    let mut first = env
        .cmd([
            "run",
            "-k",
            "k",
            "--retries",
            "0",
            "--lock",
            "disk",
            "--on-failure",
            &hook,
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .command()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::util::wait_for_file(&entered, Duration::from_secs(30), &mut first);
    // The first run is still delivering: its key runs again, and another
    // key under its lock runs, each at once.
    env.cmd(["run", "-k", "k", "--", "true"]).succeeds();
    env.cmd(["run", "-k", "other", "--lock", "disk", "--", "true"])
        .succeeds();
    assert!(first.try_wait().unwrap().is_none(), "the hook still runs");
    std::fs::write(&release, "").unwrap();
    let output = first.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{output:?}");
}
