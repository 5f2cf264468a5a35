//! A small builder for running the real `idem` binary in an isolated
//! tempdir: `IDEM_DB`, `HOME` and `XDG_DATA_HOME` all point inside it.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        Env {
            dir: tempfile::tempdir().expect("a tempdir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The ledger every command of this Env uses.
    pub fn db(&self) -> PathBuf {
        self.path("ledger.db")
    }

    /// `idem ARGS` with the isolated environment, not yet run.
    pub fn idem<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
        // Run options' defaults (IDEM_RETRIES, ...) from the caller's shell
        // would change what every test sees.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("IDEM_") {
                command.env_remove(name);
            }
        }
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("IDEM_DB", self.db())
            .env("HOME", self.dir.path())
            .env("XDG_DATA_HOME", self.path("data"))
            .env("TZ", "UTC")
            .env_remove("IDEM_PROGRESS")
            // Under CI idem tells its skips; a test asks for that itself.
            .env_remove("CI")
            .env_remove("IDEM_RECOVERED")
            .stdin(Stdio::null());
        command
    }

    /// Runs `idem ARGS` to its end.
    pub fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.idem(args).output().expect("idem runs")
    }

    /// A shell snippet that appends one line to the counter file `name`.
    pub fn count_cmd(&self, name: &str) -> String {
        format!("echo x >> '{}'", self.path(name).display())
    }

    /// How many lines the counter file `name` holds (0 when missing).
    pub fn count(&self, name: &str) -> usize {
        std::fs::read_to_string(self.path(name))
            .map(|text| text.lines().count())
            .unwrap_or(0)
    }

    /// `idem ledger list --json` as parsed JSON.
    pub fn list_json(&self) -> serde_json::Value {
        let output = self.run(["ledger", "list", "--json", "--limit", "100000"]);
        assert!(
            output.status.success(),
            "ledger list failed: {}",
            text(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("ledger list --json prints JSON")
    }

    /// `idem ledger show KEY --json` as parsed JSON.
    pub fn show_json(&self, key: &str) -> serde_json::Value {
        let output = self.run(["ledger", "show", key, "--json"]);
        assert!(
            output.status.success(),
            "ledger show failed: {}",
            text(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("ledger show --json prints JSON")
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn code(output: &Output) -> i32 {
    output.status.code().expect("idem exited, not killed")
}

/// Asserts that idem exited `expected`, showing its stderr if not, and
/// that no Rust panic message reached stderr.
#[track_caller]
pub fn assert_code(output: &Output, expected: i32) {
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("panicked"), "idem panicked: {stderr}");
    assert_eq!(
        code(output),
        expected,
        "stderr: {stderr}\nstdout: {}",
        text(&output.stdout)
    );
}

/// PRAGMA integrity_check of a SQLite ledger, by the sqlite3 command line.
pub fn integrity_check(db: &Path) -> String {
    let output = Command::new("sqlite3")
        .arg(db)
        .arg("PRAGMA integrity_check;")
        .output()
        .expect("sqlite3 is installed (.ci/run installs it)");
    text(&output.stdout).trim().to_owned()
}

/// How many trials a randomized test makes: `IDEM_TEST_TRIALS`, else `default`.
pub fn trials(default: usize) -> usize {
    std::env::var("IDEM_TEST_TRIALS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// A shell command that counts one execution in the counter file `count`
/// while holding the lock file `lock` for `seconds`, and writes `overlap`
/// to `overlaps` when another execution holds it: the "never at once"
/// detector (`flock -n`).
pub fn guarded(env: &Env, seconds: u32) -> String {
    format!(
        "flock -n '{lock}' sh -c 'echo x >> {count}; sleep {seconds}' || echo overlap >> '{overlaps}'",
        lock = env.path("lock").display(),
        count = env.path("count").display(),
        overlaps = env.path("overlaps").display(),
    )
}

/// Waits (bounded) until the counter file holds `n` lines, failing if
/// `child` ends first.
pub fn wait_for_count(env: &Env, n: usize, child: &mut std::process::Child) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while env.count("count") < n {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the first run ended early: {status}");
        }
        assert!(
            std::time::Instant::now() < until,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `template` run under `prefix` (a command that runs the rest of its
/// argv: `unshare ...`, `faketime T`, `bash -c ...`), with the template's
/// environment and folder.
pub fn wrapped(template: &Command, prefix: &[&str]) -> Command {
    let mut command = Command::new(prefix[0]);
    command
        .args(&prefix[1..])
        .arg(template.get_program())
        .args(template.get_args())
        .stdin(Stdio::null());
    if let Some(dir) = template.get_current_dir() {
        command.current_dir(dir);
    }
    for (name, value) in template.get_envs() {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    command
}

/// Fails under CI, and says why outside it, when `ok` is false: a test
/// that did not run did not pass.
pub fn require(ok: bool, what: &str) -> bool {
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!("{what} is needed and missing here");
        }
        eprintln!("not run: {what} is missing");
    }
    ok
}
