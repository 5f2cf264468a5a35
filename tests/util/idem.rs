//! One idem command of an [`Env`]: [`Idem`] builds it, runs it and checks
//! its exit; [`Ran`] is its finished run and the checks on its output.
//! Each check that fails shows the command line, exit, stdout and stderr.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::process::{Command, Output, Stdio};

use super::text;

/// `idem ARGS` in an [`Env`], not yet run: add to it, then run it with
/// the result it must have ([`Idem::expect_code`], [`Idem::succeeds`]).
#[must_use = "run it and check it: .expect_code(N), .succeeds() or .run() then a check"]
pub struct Idem {
    pub(super) command: Command,
    pub(super) stdin: Option<Vec<u8>>,
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

    /// The same, run under `prefix` (see [`super::wrapped`]): another
    /// host's namespace, a fake clock.
    pub fn under(self, prefix: &[&str]) -> Idem {
        Idem {
            command: super::wrapped(&self.command, prefix),
            stdin: self.stdin,
        }
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
