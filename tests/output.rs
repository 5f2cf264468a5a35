//! What idem prints, to the letter, where one room writes it: the usage
//! line of each kind of command-line error (exit/usage.rs), the summaries
//! of forget and prune and the text of show (render/), the Prometheus
//! families (render.rs).

use crate::util::Env;

/// The one line a bad command line gets, in full.
fn usage(env: &Env, vars: &[(&str, &str)], args: &[&str]) -> String {
    let mut idem = env.cmd(args);
    for (name, value) in vars {
        idem = idem.env(name, value);
    }
    idem.run().expect_code(2).stderr_one_line().stderr()
}

/// Variables set, arguments, and the line they get.
type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], &'a str);

#[test]
fn each_kind_of_usage_error_has_its_line() {
    let env = Env::new();
    let cases: &[Case] = &[
        (
            &[],
            &["run", "--key", "k", "--backoff", "-1s", "--", "true"],
            "invalid value '-1s' for '--backoff': it cannot be negative (see idem run --help)",
        ),
        (
            &[],
            &["run", "--key", "echo", "echo", "hi"],
            "'echo' is taken for the command, which must follow --; put -- before the command: idem run --key echo -- echo hi (see idem run --help)",
        ),
        (
            &[],
            &["run", "--key", "k", "--retry", "3", "--", "true"],
            "unknown option '--retry'; did you mean '--retries'? (see idem run --help)",
        ),
        (
            &[("IDEM_RETRIES", "many")],
            &["run", "--key", "k", "--", "true"],
            "invalid value 'many' for '--retries <N>' from IDEM_RETRIES: many is not a whole number; write one like 3; fix or unset IDEM_RETRIES (see idem run --help)",
        ),
        (
            &[("IDEM_RETRIES", "many")],
            &["run", "--key", "k", "--retries=many", "--", "true"],
            "invalid value 'many' for '--retries <N>': many is not a whole number; write one like 3 (see idem run --help)",
        ),
        (
            &[("IDEM_RETRIES", "1")],
            &["run", "--key", "k", "--retries", "many", "--", "true"],
            "invalid value 'many' for '--retries <N>': many is not a whole number; write one like 3 (see idem run --help)",
        ),
        (
            &[("IDEM_PROGRESS", "sometimes"), ("IDEM_RETRIES", "x")],
            &["run", "--key", "k", "--", "true"],
            "invalid value 'x' for '--retries <N>' from IDEM_RETRIES: x is not a whole number; write one like 3; fix or unset IDEM_RETRIES (see idem run --help)",
        ),
        (
            &[],
            &["ledger", "list", "--limit", "many"],
            "invalid value 'many' for '--limit <N>': many is not a whole number; write one like 3 (see idem ledger list --help)",
        ),
        (
            &[],
            &["--color", "sometimes", "ledger", "list"],
            "invalid value 'sometimes' for '--color <WHEN>' [possible values: auto, always, never] (see idem ledger list --help)",
        ),
        (
            &[],
            &["nosuch"],
            "unrecognized subcommand 'nosuch' (see idem --help)",
        ),
    ];
    for (vars, args, line) in cases {
        assert_eq!(
            usage(&env, vars, args),
            format!("idem: {line}\n"),
            "{args:?}"
        );
    }
}

#[test]
fn an_argument_that_is_not_utf8_is_named() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let env = Env::new();
    let bad = OsString::from_vec(b"1\xffs".to_vec());
    let args: Vec<OsString> = vec![
        "run".into(),
        "--key".into(),
        "k".into(),
        "--timeout".into(),
        bad,
        "--".into(),
        "true".into(),
    ];
    env.cmd(&args)
        .run()
        .expect_code(2)
        .stderr_is("idem: the value of --timeout is not valid UTF-8; write it in UTF-8 (see idem run --help)\n");
}

#[test]
fn summaries_say_what_forget_and_prune_did() {
    let env = Env::new();
    env.cmd(["run", "--key", "a", "--", "true"]).succeeds();
    env.cmd(["run", "--key", "a", "--force", "--", "true"])
        .succeeds();
    env.cmd(["ledger", "forget", "a", "--dry-run"])
        .succeeds()
        .stdout_is("would forget a: was succeeded; it runs next time (2 runs kept)\n");
    env.cmd(["ledger", "forget", "a"])
        .succeeds()
        .stdout_is("forgot a: was succeeded; it runs next time (2 runs kept)\n");
    env.cmd(["ledger", "forget", "a", "--purge"])
        .succeeds()
        .stdout_is("purged a: was forgotten already; 2 runs removed; it runs next time\n");
    env.cmd(["ledger", "prune", "--older-than", "99y"])
        .succeeds()
        .stdout_starts_with("pruned 0 runs (0 attempts, 0 B of output) that finished before ");
}

#[test]
fn show_counts_the_runs_it_leaves_out() {
    let env = Env::new();
    for _ in 0..3 {
        env.cmd(["run", "--key", "a", "--force", "--", "true"])
            .succeeds();
    }
    let shown = env.cmd(["ledger", "show", "a", "--limit", "1"]).succeeds();
    assert!(
        shown
            .stdout()
            .ends_with("\n\n2 earlier runs not shown (--limit N shows more)\n"),
        "{}",
        shown.stdout()
    );
    let shown = env.cmd(["ledger", "show", "a", "--limit", "2"]).succeeds();
    assert!(
        shown
            .stdout()
            .ends_with("\n\n1 earlier run not shown (--limit N shows more)\n"),
        "{}",
        shown.stdout()
    );
}

#[test]
fn metrics_are_nine_families_per_job_and_six_per_key() {
    let env = Env::new();
    env.cmd(["run", "--key", "a", "--job", "j", "--", "true"])
        .succeeds();
    let text = env
        .cmd(["ledger", "metrics", "--per-key"])
        .succeeds()
        .stdout();
    let families: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .collect();
    let names = [
        "last_success_timestamp_seconds",
        "last_run_status",
        "last_run_timestamp_seconds",
        "last_run_exit_code",
        "consecutive_failures",
        "runs",
    ];
    let judged = ["idem_job_state", "idem_events_owed", "idem_events_lost"];
    let expected: Vec<String> = (names.iter().map(|name| format!("idem_{name} gauge")))
        .chain(judged.iter().map(|name| format!("{name} gauge")))
        .chain(names.iter().map(|name| format!("idem_key_{name} gauge")))
        .collect();
    assert_eq!(families, expected);
    for line in [
        "idem_last_run_status{job=\"j\",status=\"succeeded\"} 1",
        "idem_last_run_status{job=\"j\",status=\"failed\"} 0",
        "idem_last_run_exit_code{job=\"j\"} 0",
        "idem_consecutive_failures{job=\"j\"} 0",
        "idem_runs{job=\"j\",status=\"succeeded\"} 1",
        "idem_job_state{job=\"j\",state=\"ok\"} 1",
        "idem_job_state{job=\"j\",state=\"failing\"} 0",
        "idem_events_owed{job=\"j\"} 0",
        "idem_events_lost{job=\"j\"} 0",
        "idem_key_last_run_status{key=\"a\",status=\"running\"} 0",
        "idem_key_runs{key=\"a\",status=\"abandoned\"} 0",
        "# HELP idem_consecutive_failures Failed and abandoned runs of the job in a row, across its keys, since its latest success.",
        "# HELP idem_key_consecutive_failures Failed and abandoned runs of the key since its latest success.",
    ] {
        assert!(text.lines().any(|got| got == line), "no {line}: {text}");
    }
}
