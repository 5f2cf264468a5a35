//! A small builder for running the real `idem` binary in an isolated
//! tempdir: `IDEM_DB`, `HOME` and `XDG_DATA_HOME` all point inside it.
//! [`Env::cmd`] runs it with its expected result (the builder and its
//! checks are in `util/idem.rs`), [`eventually`] is every poll, and
//! [`Backend`] runs one ledger scenario on SQLite and PostgreSQL.

#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use crate::pg::Server;

mod idem;
pub use idem::{Idem, Ran};

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

/// The processes started with `IDEM_RUN_ID=<run_id>`: what the run's
/// command started, however it detached.
pub fn processes_of(run_id: &str) -> Vec<i32> {
    let wanted = format!("IDEM_RUN_ID={run_id}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| lives(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|byte| *byte == 0)
                    .any(|pair| pair == wanted.as_bytes())
            })
        })
        .collect()
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

/// The prefix (for [`wrapped`]) that runs a command as if on host `host`:
/// a UTS namespace of its own, renamed, as the tests make a fleet on one
/// machine. Needs root (CI runs as root); without it the test fails,
/// naming it.
pub fn host_prefix(host: &str) -> Option<[&str; 6]> {
    let works = Command::new("unshare")
        .args(["--uts", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !require(works, "`unshare --uts` (it needs root)") {
        return None;
    }
    Some([
        "unshare",
        "--uts",
        "sh",
        "-c",
        "hostname \"$0\" && exec \"$@\"",
        host,
    ])
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

/// Idem as `nobody` (uid 65534), from a copy of the binary it can reach,
/// on the ledger `db`; `None` (the test failed, naming why) where this
/// process cannot switch users.
pub fn as_nobody(env: &Env, db: &Path, args: &[&str]) -> Option<Output> {
    if !require(
        nix::unistd::geteuid().is_root(),
        "root (to run idem as nobody)",
    ) {
        return None;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let binary = env.path("idem");
    if !binary.exists() {
        // cp(1), not fs::copy: a command another test forks while this
        // process holds the copy open for writing would make its exec fail
        // "text file busy".
        let copied = Command::new("cp")
            .arg(env!("CARGO_BIN_EXE_idem"))
            .arg(&binary)
            .status()
            .unwrap();
        assert!(copied.success(), "cp of the idem binary failed");
    }
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&binary)
        .args(args)
        .env("IDEM_DB", db)
        .env("HOME", env.dir.path())
        .env("TZ", "UTC")
        .current_dir("/")
        .stdin(Stdio::null())
        .output();
    match output {
        Ok(output) => Some(output),
        Err(error) => {
            require(false, &format!("setpriv ({error})"));
            None
        }
    }
}

/// `text` as a terminal shows it: without its colour escapes (CSI: ESC [
/// parameters, then a final letter).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
