//! A small builder for running the real `idem` binary in an isolated
//! tempdir: `IDEM_DB`, `HOME` and `XDG_DATA_HOME` all point inside it.
//! [`Env::cmd`] runs it with its expected result, [`eventually`] is every
//! poll, and [`Backend`] runs one ledger scenario on SQLite and PostgreSQL.

#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use crate::pg::Server;

pub struct Env {
    pub dir: tempfile::TempDir,
    /// What `IDEM_DB` names: the SQLite file [`Env::db`], or a database.
    ledger: Option<OsString>,
}

impl Env {
    pub fn new() -> Env {
        default_signals_for_children();
        Env {
            dir: tempfile::tempdir().expect("a tempdir"),
            ledger: None,
        }
    }

    /// An Env whose commands use the ledger `url` (a PostgreSQL database)
    /// instead of the SQLite file in its tempdir.
    pub fn on_ledger(url: impl Into<OsString>) -> Env {
        Env {
            ledger: Some(url.into()),
            ..Env::new()
        }
    }

    /// What `IDEM_DB` is for every command of this Env.
    pub fn ledger(&self) -> OsString {
        self.ledger
            .clone()
            .unwrap_or_else(|| self.db().into_os_string())
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The SQLite ledger in this Env's tempdir (what every command uses
    /// unless the Env was made [`Env::on_ledger`]).
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
            .env("IDEM_DB", self.ledger())
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
    #[must_use = "check its exit: assert_code, or use Env::cmd"]
    pub fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.idem(args).output().expect("idem runs")
    }

    /// `idem ARGS`, to be run and checked:
    /// `env.cmd(["ledger", "forget", "k"]).expect_code(75).stderr_has("busy")`.
    pub fn cmd<I, S>(&self, args: I) -> Idem
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Idem {
            command: self.idem(args),
            stdin: None,
        }
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
    #[track_caller]
    pub fn list_json(&self) -> serde_json::Value {
        self.cmd(["ledger", "list", "--json", "--limit", "100000"])
            .succeeds()
            .json()
    }

    /// `idem ledger show KEY --json` as parsed JSON.
    #[track_caller]
    pub fn show_json(&self, key: &str) -> serde_json::Value {
        self.cmd(["ledger", "show", key, "--json"])
            .succeeds()
            .json()
    }
}

/// `idem ARGS` in an [`Env`], not yet run: add to it, then run it with
/// the result it must have ([`Idem::expect_code`], [`Idem::succeeds`]).
#[must_use = "run it and check it: .expect_code(N), .succeeds() or .run() then a check"]
pub struct Idem {
    command: Command,
    stdin: Option<Vec<u8>>,
}

impl Idem {
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Idem {
        self.command.arg(arg);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Idem
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command.args(args);
        self
    }

    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Idem {
        self.command.env(name, value);
        self
    }

    pub fn env_remove(mut self, name: impl AsRef<OsStr>) -> Idem {
        self.command.env_remove(name);
        self
    }

    /// Starts from an empty environment (as cron does): only what is set
    /// after this reaches idem.
    pub fn env_clear(mut self) -> Idem {
        self.command.env_clear();
        self
    }

    /// Runs against the ledger `db` instead of the Env's.
    pub fn db(self, db: impl AsRef<OsStr>) -> Idem {
        self.env("IDEM_DB", db)
    }

    /// Feeds `bytes` to idem's stdin (else it reads /dev/null).
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Idem {
        self.stdin = Some(bytes.into());
        self
    }

    /// The std command, to spawn it or to wrap it in another.
    pub fn command(self) -> Command {
        self.command
    }

    /// Runs it to its end; checks nothing yet.
    #[must_use = "check the run: .expect_code(N), .succeeds() or another check"]
    pub fn run(mut self) -> Ran {
        let line = command_line(&self.command);
        let output = match self.stdin {
            None => self.command.output(),
            Some(bytes) => {
                let mut child = self
                    .command
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("idem starts");
                let mut stdin = child.stdin.take().expect("a piped stdin");
                // A reader that stops early closes the pipe: that is its
                // business, and what the test checks.
                let _ = std::io::Write::write_all(&mut stdin, &bytes);
                drop(stdin);
                child.wait_with_output()
            }
        };
        Ran {
            line,
            output: output.unwrap_or_else(|error| panic!("could not run idem: {error}")),
        }
    }

    /// Runs it and checks that it exited `code`, without a panic.
    #[track_caller]
    pub fn expect_code(self, code: i32) -> Ran {
        self.run().expect_code(code)
    }

    /// Runs it and checks that it exited 0, without a panic.
    #[track_caller]
    pub fn succeeds(self) -> Ran {
        self.expect_code(0)
    }
}

/// A command line as a person would type it, and the ledger it used.
fn command_line(command: &Command) -> String {
    let mut line = String::from("idem");
    for arg in command.get_args() {
        let arg = arg.to_string_lossy();
        let plain = !arg.is_empty()
            && arg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_=.,:/@%+".contains(c));
        if plain {
            let _ = write!(line, " {arg}");
        } else {
            let _ = write!(line, " {arg:?}");
        }
    }
    let ledger = command
        .get_envs()
        .find(|(name, _)| *name == "IDEM_DB")
        .and_then(|(_, value)| value);
    if let Some(ledger) = ledger {
        let _ = write!(line, "  (IDEM_DB={})", ledger.to_string_lossy());
    }
    line
}

/// A finished run of idem and the checks on it. Each check that fails
/// shows the command line, the exit, stdout and stderr.
pub struct Ran {
    line: String,
    pub output: Output,
}

impl Ran {
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    pub fn stdout(&self) -> String {
        text(&self.output.stdout)
    }

    pub fn stderr(&self) -> String {
        text(&self.output.stderr)
    }

    /// stdout, parsed as JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.output.stdout)
            .unwrap_or_else(|error| self.fail(&format!("stdout is not JSON ({error})")))
    }

    pub fn into_output(self) -> Output {
        self.output
    }

    /// Fails the test with `why` and everything about this run.
    #[track_caller]
    pub fn fail(&self, why: &str) -> ! {
        panic!(
            "{why}\n  command: {}\n  exit: {}\n  stdout: {}\n  stderr: {}",
            self.line,
            self.output.status,
            quoted(&self.output.stdout),
            quoted(&self.output.stderr)
        )
    }

    #[track_caller]
    fn check(self, ok: bool, why: impl FnOnce() -> String) -> Ran {
        if !ok {
            self.fail(&why());
        }
        self
    }

    /// Exited `code`, and no Rust panic message reached stderr.
    #[track_caller]
    pub fn expect_code(self, code: i32) -> Ran {
        let panicked = self.stderr().contains("panicked");
        let ran = self.check(!panicked, || "idem panicked".to_owned());
        let exited = ran.code();
        ran.check(exited == Some(code), || format!("expected exit {code}"))
    }

    #[track_caller]
    pub fn succeeds(self) -> Ran {
        self.expect_code(0)
    }

    #[track_caller]
    pub fn stdout_is(self, expected: &str) -> Ran {
        let ok = self.stdout() == expected;
        self.check(ok, || format!("expected stdout {expected:?}"))
    }

    #[track_caller]
    pub fn stdout_has(self, part: &str) -> Ran {
        let ok = self.stdout().contains(part);
        self.check(ok, || format!("stdout lacks {part:?}"))
    }

    #[track_caller]
    pub fn stdout_lacks(self, part: &str) -> Ran {
        let ok = !self.stdout().contains(part);
        self.check(ok, || format!("stdout holds {part:?}"))
    }

    #[track_caller]
    pub fn stdout_starts_with(self, start: &str) -> Ran {
        let ok = self.stdout().starts_with(start);
        self.check(ok, || format!("stdout does not start with {start:?}"))
    }

    #[track_caller]
    pub fn stderr_is(self, expected: &str) -> Ran {
        let ok = self.stderr() == expected;
        self.check(ok, || format!("expected stderr {expected:?}"))
    }

    #[track_caller]
    pub fn stderr_has(self, part: &str) -> Ran {
        let ok = self.stderr().contains(part);
        self.check(ok, || format!("stderr lacks {part:?}"))
    }

    #[track_caller]
    pub fn stderr_lacks(self, part: &str) -> Ran {
        let ok = !self.stderr().contains(part);
        self.check(ok, || format!("stderr holds {part:?}"))
    }

    #[track_caller]
    pub fn stderr_starts_with(self, start: &str) -> Ran {
        let ok = self.stderr().starts_with(start);
        self.check(ok, || format!("stderr does not start with {start:?}"))
    }

    /// stderr is exactly one line (idem's errors are).
    #[track_caller]
    pub fn stderr_one_line(self) -> Ran {
        let ok = self.stderr().lines().count() == 1;
        self.check(ok, || "expected one line on stderr".to_owned())
    }
}

/// Bytes for a failure message: text where they are text, quoted so that
/// empty output and trailing blanks show.
fn quoted(bytes: &[u8]) -> String {
    format!("{:?}", text(bytes))
}

/// What a poll of [`eventually`] may return: `true`, or `Some(value)`,
/// once it is done.
pub trait Done {
    type Value;
    fn done(self) -> Option<Self::Value>;
}

impl Done for bool {
    type Value = ();
    fn done(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Done for Option<T> {
    type Value = T;
    fn done(self) -> Option<T> {
        self
    }
}

/// Polls `poll` until it is done, and returns what it found; fails,
/// naming `what`, once `timeout` has passed. Every wait of the tests goes
/// through here, so none can hang a run of the suite.
#[track_caller]
pub fn eventually<D: Done>(what: &str, timeout: Duration, mut poll: impl FnMut() -> D) -> D::Value {
    let start = Instant::now();
    loop {
        if let Some(value) = poll().done() {
            return value;
        }
        assert!(
            start.elapsed() < timeout,
            "gave up after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
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

/// Runs `sql` on the SQLite file `db` with the sqlite3 command line, which
/// must succeed; its output, trimmed.
pub fn sqlite(db: &Path, sql: &str) -> String {
    let output = Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output()
        .expect("sqlite3 is installed (.ci/run installs it)");
    assert!(output.status.success(), "sqlite3: {}", text(&output.stderr));
    text(&output.stdout).trim().to_owned()
}

/// The names in `dir`, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
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
#[track_caller]
pub fn wait_for_count(env: &Env, n: usize, child: &mut std::process::Child) {
    eventually("the command to start", Duration::from_secs(30), || {
        if env.count("count") >= n {
            return true;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the first run ended early: {status}");
        }
        false
    });
}

/// Whether `pid` is a live (not zombie) process.
pub fn lives(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Waits (bounded) until `path` exists, failing if `child` (which is to
/// make it) ends first.
#[track_caller]
pub fn wait_for_file(path: &Path, timeout: Duration, child: &mut std::process::Child) {
    let what = format!("{} to appear", path.display());
    eventually(&what, timeout, || {
        if path.exists() {
            return true;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("it exited ({status}) before {} appeared", path.display());
        }
        false
    });
}

/// A ledger backend, for the scenarios that must hold on each (as atuin
/// runs one database story test on SQLite and on PostgreSQL): see
/// [`on_every_backend`].
pub enum Backend {
    Sqlite,
    /// A server of the test's own; each [`Backend::env`] is a database.
    Postgres(Server),
}

impl Backend {
    /// PostgreSQL on a fresh server; where no server is installed the test
    /// fails, naming it (see `pg.rs`).
    pub fn postgres(test: &str) -> Option<Backend> {
        Server::start(test).map(Backend::Postgres)
    }

    /// A fresh [`Env`] whose ledger is new and empty, on this backend.
    pub fn env(&self) -> Env {
        match self {
            Backend::Sqlite => Env::new(),
            Backend::Postgres(server) => {
                static DATABASES: std::sync::atomic::AtomicUsize =
                    std::sync::atomic::AtomicUsize::new(0);
                let n = DATABASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let name = format!("ledger{n}");
                server.sql("postgres", &format!("CREATE DATABASE {name}"));
                Env::on_ledger(server.url_of(&name))
            }
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, Backend::Postgres(_))
    }
}

/// Makes each scenario `fn NAME(backend: &Backend)` of the calling module
/// two tests, `sqlite::NAME` and `postgres::NAME`, so that one body states
/// what holds on either ledger and a failure names the backend.
macro_rules! on_every_backend {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(&$crate::util::Backend::Sqlite);
                }
            )+
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if let Some(backend) = $crate::util::Backend::postgres(stringify!($name)) {
                        super::$name(&backend);
                    }
                }
            )+
        }
    };
}
pub(crate) use on_every_backend;

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

/// Fails the test, naming what is missing, when `ok` is false: a test that
/// did not run did not pass. `scripts/test` installs every tool a test
/// asks for, or stops before the tests and names it.
pub fn require(ok: bool, what: &str) -> bool {
    assert!(
        ok,
        "{what} is needed and missing here (scripts/test installs it)"
    );
    ok
}

/// The signals a shell may hand the suite ignored: a non-interactive shell
/// ignores SIGINT and SIGQUIT for a command it starts with `&`, `nohup`
/// ignores SIGHUP. An ignored signal stays ignored across exec, so idem
/// and its commands would start with it ignored and every test of
/// forwarding would see what the suite's parent chose.
const INHERITED_IGNORED: [Signal; 5] = [
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGHUP,
    Signal::SIGTERM,
    Signal::SIGTSTP,
];

extern "C" fn ignore(_: nix::libc::c_int) {}

/// Gives each signal the suite started with ignored a handler that does
/// nothing instead: the suite itself still lives through it, as its
/// parent asked, while every process it starts begins with the signal's
/// default (exec resets a handled signal, not an ignored one). A test
/// that wants a signal ignored sets that itself.
pub fn default_signals_for_children() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let handler = SigAction::new(
            SigHandler::Handler(ignore),
            SaFlags::SA_RESTART,
            SigSet::empty(),
        );
        for signal in INHERITED_IGNORED {
            if ignored(signal) {
                // SAFETY: `ignore` does nothing, so it is async-signal-safe.
                unsafe { sigaction(signal, &handler) }.expect("sigaction");
            }
        }
    });
}

/// Whether `signal` is ignored in the suite's process now.
fn ignored(signal: Signal) -> bool {
    // SAFETY: sigaction with no new action only reads the current one into
    // a zeroed struct that outlives the call.
    unsafe {
        let mut old: nix::libc::sigaction = std::mem::zeroed();
        nix::libc::sigaction(signal as nix::libc::c_int, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == nix::libc::SIG_IGN
    }
}

/// Whether faketime is here (required, as `require` says).
pub fn have_faketime() -> bool {
    let found = Command::new("faketime")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    require(
        found,
        "faketime (apt-get install faketime; .ci/run installs it)",
    )
}

/// `command` run under GNU time, with its stdout going to `stdout`: its
/// output, and its peak resident set size in KiB.
pub fn max_rss_kib(command: Command, stdout: Stdio) -> (Output, u64) {
    assert!(
        Path::new("/usr/bin/time").exists(),
        "/usr/bin/time is missing (apt-get install time)"
    );
    let mut timed = Command::new("/usr/bin/time");
    timed
        .arg("-v")
        .arg(command.get_program())
        .args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => timed.env(name, value),
            None => timed.env_remove(name),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        timed.current_dir(dir);
    }
    let output = timed.stdout(stdout).stdin(Stdio::null()).output().unwrap();
    let stderr = text(&output.stderr);
    let rss = stderr
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak memory in: {stderr}"));
    (output, rss)
}
