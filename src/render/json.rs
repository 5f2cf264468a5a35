//! The JSON idem prints for scripts, one derived type per shape: a run
//! (`ledger list --json`, `show --json`, each line of `export`), an
//! attempt, a hook that ran. The type is the contract: its fields are
//! written in the order they are declared here.

use std::borrow::Cow;
use std::os::unix::ffi::OsStrExt;

use jiff::Timestamp;
use serde::Serialize;

use crate::ledger::{Attempt, HookRun, Run};
use crate::process::Containment;

/// A timestamp as RFC 3339 UTC with milliseconds: the one format of every
/// time idem writes for scripts.
pub fn rfc3339(time: Timestamp) -> String {
    format!("{time:.3}")
}

/// A run's fields, as the SPEC names them.
#[derive(Debug, Serialize)]
pub struct RunJson<'a> {
    /// The key as expanded.
    pub key: &'a str,
    /// The job the run belongs to (`--job`, else the key as typed).
    pub job: &'a str,
    /// The run decides its key.
    pub head: bool,
    /// The run's UUID.
    pub run_id: String,
    /// `running`, `succeeded`, `failed` or `abandoned`.
    pub status: &'static str,
    /// The code idem reported for the run: the command's, 124 on a
    /// timeout, or 128+N for signal N; null while running.
    pub exit_code: Option<i32>,
    /// The signal that ended the command, if one did.
    pub signal: Option<i32>,
    /// Attempts made so far.
    pub attempts: u32,
    /// When the run started (RFC 3339 UTC, with milliseconds).
    pub started_at: String,
    /// When it finished; null while running.
    pub finished_at: Option<String>,
    /// `finished_at - started_at` in milliseconds; null while running.
    pub duration_ms: Option<i64>,
    /// The host that ran it.
    pub host: &'a str,
    /// idem's process id on that host: for people to read (a pid means
    /// nothing in another PID namespace).
    pub pid: u32,
    /// argv, lossy where an argument is not UTF-8 (JSON strings are
    /// Unicode).
    pub command: Vec<Cow<'a, str>>,
    /// The words after `--` ran as one `/bin/sh -c` script.
    pub shell: bool,
    /// The previous run of the key was abandoned when this one started
    /// (`IDEM_RECOVERED=1`).
    pub recovered: bool,
    /// A success marked by hand (`ledger mark`), not a run of the command.
    pub marked: bool,
    /// For a marked success: by whom and why; null for a run.
    pub note: Option<&'a str>,
}

impl<'a> From<&'a Run> for RunJson<'a> {
    fn from(run: &'a Run) -> RunJson<'a> {
        RunJson {
            key: &run.key,
            job: &run.job,
            head: run.head,
            run_id: run.run_id.to_string(),
            status: run.status.as_str(),
            exit_code: run.exit_code,
            signal: run.signal,
            attempts: run.attempts,
            started_at: rfc3339(run.started_at),
            finished_at: run.finished_at.map(rfc3339),
            duration_ms: super::duration_ms(run),
            host: &run.host,
            pid: run.pid,
            command: run
                .command
                .iter()
                .map(|arg| String::from_utf8_lossy(arg.as_bytes()))
                .collect(),
            shell: run.shell,
            recovered: run.recovered,
            marked: run.note.is_some(),
            note: run.note.as_deref(),
        }
    }
}

/// An attempt of a run, with its output tails.
#[derive(Debug, Serialize)]
pub struct AttemptJson<'a> {
    /// Its number within the run, from 1.
    pub attempt: u32,
    /// The command's exit code (128+N for signal N); null while running.
    pub exit_code: Option<i32>,
    /// The signal that ended the command, if one did.
    pub signal: Option<i32>,
    /// `--timeout` stopped it.
    pub timed_out: bool,
    /// The output was longer than its tails: they lack its start.
    pub output_cut: bool,
    /// When it started (RFC 3339 UTC), if recorded.
    pub started_at: Option<String>,
    /// When it finished; null while running.
    pub finished_at: Option<String>,
    /// What held its processes together: `cgroup` (a cgroup of the
    /// attempt's own), `pid-namespace` (the guardian is the init of a PID
    /// namespace of the run's own) or `guardian` (the guardian alone); null
    /// where not recorded (an older idem's attempt).
    pub containment: Option<&'static str>,
    /// What it died of: `exit N`, `signal N`, `timeout`, `killed for
    /// memory`, `stopped: WHY`; null while running.
    pub cause: Option<String>,
    /// Its peak memory in bytes; null where not recorded.
    pub peak_memory_bytes: Option<i64>,
    /// Its CPU time (user and system) in ms; null where not recorded.
    pub cpu_ms: Option<i64>,
    /// The end of its stdout, lossy where it is not UTF-8 (JSON strings
    /// are Unicode: invalid sequences become U+FFFD).
    pub stdout_tail: Cow<'a, str>,
    /// The end of its stderr, as `stdout_tail`.
    pub stderr_tail: Cow<'a, str>,
}

impl<'a> From<&'a Attempt> for AttemptJson<'a> {
    fn from(attempt: &'a Attempt) -> AttemptJson<'a> {
        AttemptJson {
            attempt: attempt.number,
            exit_code: attempt.exit_code,
            signal: attempt.signal,
            timed_out: attempt.timed_out,
            output_cut: attempt.cut,
            started_at: attempt.started_at.map(rfc3339),
            finished_at: attempt.finished_at.map(rfc3339),
            containment: attempt.containment.map(Containment::name),
            cause: attempt.cause(),
            peak_memory_bytes: attempt.peak_memory,
            cpu_ms: attempt.cpu_ms,
            stdout_tail: String::from_utf8_lossy(&attempt.stdout_tail),
            stderr_tail: String::from_utf8_lossy(&attempt.stderr_tail),
        }
    }
}

/// A hook that ran for a run (`show --json`).
#[derive(Debug, Serialize)]
pub struct HookJson<'a> {
    /// `failure`, `recovery` or `slow`.
    pub event: &'a str,
    /// Its exit code (128+N for signal N); null: it could not start.
    pub exit_code: Option<i32>,
    /// When it ran (RFC 3339 UTC).
    pub at: String,
}

impl<'a> From<&'a HookRun> for HookJson<'a> {
    fn from(hook: &'a HookRun) -> HookJson<'a> {
        HookJson {
            event: &hook.event,
            exit_code: hook.exit_code,
            at: rfc3339(hook.at),
        }
    }
}
