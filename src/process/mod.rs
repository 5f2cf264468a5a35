//! Running one attempt of a command: spawning it in its own process group,
//! passing its output through while keeping a tail, forwarding signals,
//! enforcing the timeout, and reaping everything it started.
//!
//! In idem's process: `supervise` (the attempt, its event loop), `events`
//! (what wakes it), `spawn` (pipes, pseudo-terminal, the guardian's fork),
//! `tee` and `stdin` (the threads that carry output and stdin), `prepare`
//! (what the fork needs made ahead). After the fork, async-signal-safe
//! code only: `guardian` (its setup and the gate), `command` (the
//! command's process up to its exec), `watch` and `tree` (the run until
//! its end). Shared by both: `wire` (their frames), `steps` (the named
//! steps after the fork), `signals` (dispositions, and when a signal is
//! a second one) and `contain` (the PID namespace the guardian may be the
//! init of, and the forks). `scan` finds a run's processes by the
//! `IDEM_RUN_ID` they inherit, where nothing else can; `lockers` finds who
//! holds a byte of a lock file by their descriptors.

mod buffer;
mod cgroup;
mod command;
mod contain;
mod events;
mod guardian;
pub mod holders;
pub mod lockers;
mod prepare;
mod scan;
mod signals;
mod spawn;
mod stdin;
mod steps;
mod stopper;
mod supervise;
mod tee;
mod tree;
mod watch;
mod wire;

use std::ffi::OsString;
use std::time::Duration;

use jiff::Timestamp;

use crate::exit;
pub use cgroup::{describe as cgroup_base, kill_run};
pub use contain::{pid_namespaces, resolve, Choice, Containment};
pub use scan::{processes_of_run, run_lives, run_of};
pub use signals::ignore_sigpipe;
pub use stdin::Spool;
pub use stopper::Stopper;
pub use supervise::Supervisor;
pub use tee::{line_owed, same_file, Sink};
pub use wire::monotonic_ms;

/// What to run, and how.
pub struct Spec<'a> {
    pub argv: &'a [OsString],
    pub shell: bool,
    pub env: Vec<(&'static str, OsString)>,
    pub env_remove: Vec<&'static str>,
    pub timeout: Option<Duration>,
    pub kill_after: Duration,
    /// Bytes of each stream's tail to keep.
    pub capture: usize,
    /// Whether processes of the attempt still hold the run's kernel lock:
    /// asked when the guardian died before they did (someone killed it).
    pub still_held: Option<&'a dyn Fn() -> bool>,
    /// What `--timeout` sends first.
    pub timeout_signal: i32,
    /// idem's stdout and stderr are one file: the command gets one pipe for
    /// both, so their order is kept; its tail is one stream (`stdout_tail`).
    pub merged: bool,
    /// stdin kept for retries; `None`: the command reads idem's own.
    pub stdin: Option<&'a Spool>,
    /// idem runs in the foreground of the terminal that is its stdin,
    /// stdout and stderr: the command gets that foreground, and a
    /// pseudo-terminal for its output (so it sees a terminal), which idem
    /// copies to the real one while keeping the tail. Implies `merged`.
    pub terminal: bool,
    /// What holds the attempt's processes together, as `--contain` was
    /// resolved for this host (see `contain`).
    pub contain: Containment,
    /// The attempt's cgroup under `contain` cgroup: `<run id>-<attempt>`.
    pub cgroup_name: String,
    pub priority: Priority,
}

/// The command's CPU and I/O priority, set before its exec.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Priority {
    /// Its nice value (setpriority(2)).
    pub nice: Option<i32>,
    /// Its I/O priority as ioprio_set(2) takes it.
    pub ionice: Option<i32>,
}

/// What happens during an attempt that a person should hear of.
pub enum Notice<'a> {
    /// The command's main process ended; `count` processes it started
    /// still run (the first of them are `pids`). `ending`: the attempt is
    /// being stopped (a timeout, a signal, a stop), so they are waited for
    /// to end, not left running.
    LeftRunning {
        count: i32,
        pids: &'a [i32],
        ending: bool,
    },
    /// idem was sent `signal` and passed it on; a second one kills.
    Interrupted(i32),
    /// What holds the attempt's processes together (see `contain`).
    Contained(Containment),
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    Exited(i32),
    Signaled(i32),
    /// The command could not be started: 126 or 127, with the reason.
    NotStarted {
        code: u8,
        reason: String,
    },
}

/// What an attempt's processes used, and whether the kernel killed one
/// for want of memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// The largest resident set, in bytes: the cgroup's peak where it
    /// counts memory, else the largest of any one process (wait4(2)).
    pub peak_memory: Option<u64>,
    /// User and system CPU time, in milliseconds.
    pub cpu_ms: Option<u64>,
    /// The cgroup's memory limit killed a process of the attempt.
    pub oom_killed: bool,
}

impl Usage {
    /// From the rusage wait4(2) gave for the guardian (its own and that of
    /// every process it reaped).
    pub fn of(used: &nix::libc::rusage) -> Usage {
        let ms = |time: nix::libc::timeval| {
            u64::try_from(time.tv_sec).unwrap_or(0) * 1000
                + u64::try_from(time.tv_usec).unwrap_or(0) / 1000
        };
        Usage {
            // ru_maxrss is in KiB.
            peak_memory: u64::try_from(used.ru_maxrss).ok().map(|kib| kib * 1024),
            cpu_ms: Some(ms(used.ru_utime) + ms(used.ru_stime)),
            oom_killed: false,
        }
    }
}

pub struct AttemptEnd {
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub end: End,
    pub timed_out: bool,
    /// A signal idem received and passed on to the command.
    pub interrupted: Option<i32>,
    /// Why a [`Stopper`] stopped the command.
    pub stopped: Option<String>,
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
    /// The output was longer than the tails: their start is cut.
    pub cut: bool,
    /// The reader of idem's stdout or stderr went away (a closed pipe).
    pub reader_gone: bool,
    /// What its processes used.
    pub usage: Usage,
}

impl AttemptEnd {
    fn not_started(started_at: Timestamp, code: u8, reason: String) -> AttemptEnd {
        AttemptEnd {
            started_at,
            finished_at: Timestamp::now(),
            end: End::NotStarted { code, reason },
            timed_out: false,
            interrupted: None,
            stopped: None,
            stdout_tail: Vec::new(),
            stderr_tail: Vec::new(),
            cut: false,
            reader_gone: false,
            usage: Usage::default(),
        }
    }

    /// The exit code this attempt stands for, by the SPEC's table.
    pub fn code(&self) -> u8 {
        if self.timed_out {
            return exit::TIMED_OUT;
        }
        match &self.end {
            End::Exited(code) => u8::try_from(*code).unwrap_or(exit::IDEM_FAILED),
            End::Signaled(signal) => exit::for_signal(*signal),
            End::NotStarted { code, .. } => *code,
        }
    }

    pub fn signal(&self) -> Option<i32> {
        match self.end {
            End::Signaled(signal) => Some(signal),
            _ => None,
        }
    }
}

/// Why an attempt has no end to tell.
#[derive(Debug)]
pub enum AttemptError {
    /// The command was held and never ran: `started` failed.
    Unrecorded(anyhow::Error),
    /// The attempt was recorded as started at `started_at`, then a step of
    /// its setup after the fork failed (the error names it): the command
    /// never ran.
    SetupFailed {
        started_at: Timestamp,
        error: anyhow::Error,
    },
    /// idem could not start the command, or lost track of it.
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for AttemptError {
    fn from(error: anyhow::Error) -> AttemptError {
        AttemptError::Failed(error)
    }
}
