//! The environment twins of `run` options, set the way a crontab sets them:
//! idem starts in a clean environment holding only PATH, HOME and the
//! `IDEM_` lines at the top of the crontab. A default from a variable
//! applies, a flag on the command line wins, and a bad value is a usage
//! error naming the variable, before anything runs.

use clap::CommandFactory;
use idem::cli::Cli;

use crate::util::{Env, Idem};

/// `idem ARGS` as cron would start it, with `vars` from the crontab's
/// `NAME=value` lines and nothing else from the test's environment.
fn cron(env: &Env, vars: &[(&str, &str)], args: &[&str]) -> Idem {
    let idem = env
        .cmd(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", env.dir.path())
        .env("IDEM_DB", env.db());
    vars.iter()
        .fold(idem, |idem, (name, value)| idem.env(name, value))
}

/// `sh -c` words that count a start in `counter`, print, and exit `code`.
fn counted(env: &Env, code: i32) -> String {
    format!("{}; echo out; exit {code}", env.count_cmd("counter"))
}

#[test]
fn defaults_from_the_environment_apply() {
    let env = Env::new();
    let defaults = [("IDEM_RETRIES", "2"), ("IDEM_BACKOFF", "0s")];
    let failing = counted(&env, 1);
    cron(
        &env,
        &defaults,
        &["run", "-k", "a", "--shell", "--", &failing],
    )
    .expect_code(1);
    assert_eq!(env.count("counter"), 3, "IDEM_RETRIES=2: three attempts");

    // A switch from the environment: the output of a success is held.
    let env = Env::new();
    let quiet = [("IDEM_QUIET_SUCCESS", "1"), ("IDEM_SHELL", "1")];
    let succeeding = counted(&env, 0);
    let ran = cron(&env, &quiet, &["run", "-k", "b", "--", &succeeding]).succeeds();
    assert_eq!(env.count("counter"), 1);
    assert_eq!(ran.stdout(), "", "IDEM_QUIET_SUCCESS=1 holds output");

    // The skip's exit code: the second run is skipped, the command ran once.
    let skipped = [("IDEM_SKIPPED_EXIT_CODE", "3"), ("IDEM_SHELL", "yes")];
    cron(&env, &skipped, &["run", "-k", "c", "--", &succeeding]).succeeds();
    cron(&env, &skipped, &["run", "-k", "c", "--", &succeeding]).expect_code(3);
    assert_eq!(env.count("counter"), 2, "key c ran exactly once");

    // A timeout from the environment ends the attempt as a timeout.
    let timeout = [("IDEM_TIMEOUT", "200ms"), ("IDEM_RETRIES", "0")];
    cron(&env, &timeout, &["run", "-k", "d", "--", "sleep", "30"]).expect_code(124);
}

#[test]
fn a_flag_on_the_command_line_wins_over_its_variable() {
    let env = Env::new();
    let defaults = [("IDEM_RETRIES", "5"), ("IDEM_BACKOFF", "0s")];
    let failing = counted(&env, 1);
    let args = [
        "run",
        "-k",
        "a",
        "--retries",
        "0",
        "--shell",
        "--",
        &failing,
    ];
    cron(&env, &defaults, &args).expect_code(1);
    assert_eq!(
        env.count("counter"),
        1,
        "--retries 0 wins over IDEM_RETRIES=5"
    );

    // A switch given on the command line wins over the variable's 0.
    let env = Env::new();
    let succeeding = counted(&env, 0);
    let off = [("IDEM_QUIET_SUCCESS", "0")];
    let args = [
        "run",
        "-k",
        "b",
        "--quiet-success",
        "--shell",
        "--",
        &succeeding,
    ];
    cron(&env, &off, &args).succeeds().stdout_is("");
    let ran = cron(
        &env,
        &off,
        &["run", "-k", "c", "--shell", "--", &succeeding],
    )
    .succeeds();
    assert_eq!(ran.stdout(), "out\n", "IDEM_QUIET_SUCCESS=0 is off");

    // The flag wins even over a variable that could not be read: it is
    // never parsed.
    let bad = [("IDEM_RETRIES", "many")];
    let args = [
        "run",
        "-k",
        "d",
        "--retries",
        "1",
        "--shell",
        "--",
        &succeeding,
    ];
    cron(&env, &bad, &args).succeeds();
    assert_eq!(env.count("counter"), 3);
}

#[test]
fn a_malformed_variable_is_a_usage_error_naming_it() {
    for (variable, value) in [
        ("IDEM_RETRIES", "many"),
        ("IDEM_RETRIES", "-1"),
        ("IDEM_BACKOFF", "soon"),
        ("IDEM_TIMEOUT", "-5s"),
        ("IDEM_NO_RETRY_ON", "1-x"),
        ("IDEM_CONFLICT_EXIT_CODE", "300"),
        ("IDEM_ON_ABANDONED", "never"),
        ("IDEM_QUIET_SUCCESS", "maybe"),
        ("IDEM_QUIET_SUCCESS", ""),
        ("IDEM_CAPTURE", "2MiB"),
        ("IDEM_LEASE", "1 fortnight"),
    ] {
        let env = Env::new();
        let command = env.count_cmd("counter");
        cron(
            &env,
            &[(variable, value)],
            &["run", "-k", "a", "--shell", "--", &command],
        )
        .expect_code(2)
        .stderr_one_line()
        .stderr_starts_with("idem: invalid value")
        .stderr_has(&format!("from {variable}"))
        .stderr_has(&format!("fix or unset {variable}"));
        assert_eq!(env.count("counter"), 0, "{variable}={value}: nothing runs");
    }
}

#[test]
fn a_malformed_flag_is_not_blamed_on_its_variable() {
    let env = Env::new();
    cron(
        &env,
        &[("IDEM_RETRIES", "many")],
        &["run", "-k", "a", "--retries", "many", "--", "true"],
    )
    .expect_code(2)
    .stderr_lacks("IDEM_RETRIES")
    .stderr_has("'--retries <N>'");
}

/// The twin of a flag: `IDEM_` and its name in upper snake case.
fn twin(long: &str) -> String {
    format!("IDEM_{}", long.replace('-', "_").to_uppercase())
}

/// Flags of `run` that have no twin, and why.
const NO_TWIN: [(&str, &str); 4] = [
    (
        "key",
        "the command gets IDEM_KEY; a nested idem must not take it",
    ),
    (
        "job",
        "the command gets IDEM_JOB; a nested idem must not take it",
    ),
    ("help", "not an option of the run"),
    ("version", "not an option of the run"),
];

/// Flags of `run` whose twin has another name, and why.
const OTHER_TWIN: [(&str, &str, &str); 1] = [(
    "ping",
    "IDEM_PING_URL",
    "the contract's name: it holds a URL, as the crontab line reads",
)];

#[test]
fn every_run_option_has_its_environment_twin() {
    let mut command = Cli::command();
    command.build();
    let run = command.find_subcommand("run").expect("a run subcommand");
    let mut twins = Vec::new();
    for arg in run.get_arguments().filter(|arg| !arg.is_global_set()) {
        let Some(long) = arg.get_long() else {
            continue;
        };
        if NO_TWIN.iter().any(|(flag, _)| *flag == long) {
            assert!(arg.get_env().is_none(), "--{long} should have no twin");
            continue;
        }
        let expected = OTHER_TWIN
            .iter()
            .find(|(flag, _, _)| *flag == long)
            .map_or_else(|| twin(long), |(_, name, _)| (*name).to_owned());
        let env = arg
            .get_env()
            .map(|name| name.to_string_lossy().into_owned());
        assert_eq!(
            env.as_deref(),
            Some(expected.as_str()),
            "--{long} needs env = \"{expected}\""
        );
        assert!(
            arg.is_hide_env_values_set(),
            "--{long}: hide_env_values (a value may be a secret)"
        );
        if !arg.is_hide_set() {
            twins.push(expected);
        }
    }
    assert!(twins.len() >= 18, "{twins:?}");

    // Shown by --help and by the man page.
    let env = Env::new();
    let help = env.cmd(["run", "--help"]).succeeds().stdout();
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/idem-run.1"))
        .expect("man/idem-run.1");
    for name in &twins {
        assert!(
            help.contains(&format!("[env: {name}]")),
            "--help lacks {name}"
        );
        assert!(page.contains(name), "idem-run.1 lacks {name}");
    }
}

#[test]
fn help_never_prints_a_variables_value() {
    let env = Env::new();
    env.cmd(["run", "--help"])
        .env("IDEM_DB", "postgres://idem:hunter2@db.internal/idem")
        .env("IDEM_RETRIES", "7")
        .succeeds()
        .stdout_lacks("hunter2")
        .stdout_has("[env: IDEM_DB]")
        .stdout_has("[env: IDEM_RETRIES]");
}

#[test]
fn a_nested_idem_inherits_the_defaults_not_the_outer_jobs_identity() {
    let env = Env::new();
    let idem = env!("CARGO_BIN_EXE_idem");
    let hooks = env.path("hooks");
    let seen = env.path("seen");
    // What makes the outer run's identity and its notifications.
    let header = [
        ("IDEM_LOCK", "db"),
        ("IDEM_ALERT_AFTER", "1"),
        ("IDEM_WARN_AFTER", "1h"),
        ("IDEM_PING_URL", "http://127.0.0.1:9/ping/outer"),
        ("IDEM_ON_RECOVERY", "true"),
    ];
    let on_failure = format!("echo \"$IDEM_KEY\" >> '{}'", hooks.display());
    let mut vars = header.to_vec();
    vars.push(("IDEM_ON_FAILURE", &on_failure));
    vars.push(("IDEM_RETRIES", "0"));
    // The job's command runs an idem of its own, whose command fails.
    let inner = format!(
        "env | grep ^IDEM_ | sort > '{}'; {idem} run --key inner -- sh -c '{}; exit 3'; echo inner=$?",
        seen.display(),
        env.count_cmd("inner"),
    );
    let ran = cron(
        &env,
        &vars,
        &["run", "-k", "outer", "--shell", "--", &inner],
    )
    .succeeds();
    assert_eq!(
        env.count("inner"),
        1,
        "the inner run was let in: {}",
        ran.stdout()
    );
    ran.stdout_has("inner=3");
    assert!(
        !hooks.exists(),
        "the inner failure ran the outer job's hook: {}",
        std::fs::read_to_string(&hooks).unwrap_or_default()
    );
    let seen = std::fs::read_to_string(&seen).unwrap();
    for (name, _) in header {
        assert!(
            !seen.contains(&format!("{name}=")),
            "{name} passed on: {seen}"
        );
    }
    assert!(!seen.contains("IDEM_ON_FAILURE="), "{seen}");
    for passed in ["IDEM_RETRIES=0", "IDEM_DB="] {
        assert!(seen.contains(passed), "{passed} not passed on: {seen}");
    }
}
