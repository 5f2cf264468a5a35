//! Running one attempt of a command: spawning it in its own process group,
//! passing its output through while keeping a tail, forwarding signals,
//! enforcing the timeout, and reaping everything it started.

mod events;
mod guardian;
mod stdin;

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use jiff::Timestamp;
use nix::libc;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use crate::exit;
pub use events::ignore_sigpipe;
use events::{Event, Events, Requester, Watched};
pub use guardian::monotonic_ms;
pub use stdin::Spool;

/// The current attempt's guardian, and the lease deadline it must enforce.
#[derive(Default)]
struct Link {
    guardian: Option<UnixStream>,
    /// Monotonic ms to stop the run at, and the grace before SIGKILL.
    deadline: Option<(i64, i64)>,
}

impl Link {
    fn tell(&mut self, kind: u8, a: i64, b: i64) {
        if let Some(guardian) = &mut self.guardian {
            // A guardian that is gone has nothing left to stop.
            let _ = guardian.write_all(&guardian::encode_to(kind, a, b));
        }
    }
}

/// Lets another thread stop the running command: SIGTERM to its group,
/// SIGKILL after `grace` (at most `--kill-after`). Used when a shared
/// ledger's lease cannot be renewed; and it tells the guardian of each
/// renewal, so that the guardian stops the run by itself should idem be
/// frozen or killed before the lease runs out.
#[derive(Clone)]
pub struct Stopper {
    requests: Requester,
    link: Arc<Mutex<Link>>,
}

impl Stopper {
    pub fn stop(&self, reason: String, grace: Duration) {
        self.requests.send(Event::Stop { reason, grace });
    }

    /// The lease holds until monotonic ms `until`; past it the guardian
    /// stops the run, and SIGKILLs it `grace` later.
    pub fn renewed(&self, until: i64, grace: Duration) {
        let grace = grace.as_millis() as i64;
        if let Ok(mut link) = self.link.lock() {
            link.deadline = Some((until, grace));
            link.tell(guardian::DEADLINE, until, grace);
        }
    }
}

/// Where a stream of the command's output goes.
pub enum Sink {
    /// Straight through to idem's own stdout or stderr.
    Live(File),
    /// Held in a temporary file, shown only if the run fails (`--quiet-success`).
    Held(File),
    /// Another handle on a held file, sharing its offset: what goes here
    /// lands in order with what goes there, and is released with it.
    Alias(File),
}

impl Sink {
    /// idem's own stdout or stderr; /dev/null where that stream is closed.
    pub fn live(stream: impl AsFd) -> Result<Sink> {
        let file = match stream.as_fd().try_clone_to_owned() {
            Ok(fd) => File::from(fd),
            Err(_) => File::options()
                .write(true)
                .open("/dev/null")
                .context("could not open /dev/null for a closed output stream")?,
        };
        Ok(Sink::Live(file))
    }

    /// A second handle on this sink's file (one open file, one offset).
    pub fn alias(&self) -> Result<Sink> {
        let (Sink::Live(file) | Sink::Held(file) | Sink::Alias(file)) = self;
        Ok(Sink::Alias(
            file.try_clone()
                .context("could not share the held output file")?,
        ))
    }

    pub fn held() -> Result<Sink> {
        Ok(Sink::Held(tempfile::tempfile().context(
            "could not create a temporary file to hold the output",
        )?))
    }

    pub fn writer(&mut self) -> &mut File {
        match self {
            Sink::Live(file) | Sink::Held(file) | Sink::Alias(file) => file,
        }
    }

    /// Sends held output on to `target` (after a failed run).
    pub fn release(&mut self, target: &mut dyn Write) -> io::Result<()> {
        if let Sink::Held(file) = self {
            file.rewind()?;
            io::copy(file, target)?;
            target.flush()?;
        }
        Ok(())
    }
}

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
}

/// What happens during an attempt that a person should hear of.
pub enum Notice<'a> {
    /// The command's main process ended; `count` processes it started
    /// still run (the first of them are `pids`).
    LeftRunning { count: i32, pids: &'a [i32] },
    /// idem was sent `signal` and passed it on; a second one kills.
    Interrupted(i32),
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
    /// `started` failed: the command was held and never ran.
    Unrecorded(anyhow::Error),
    /// idem could not start the command, or lost track of it.
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for AttemptError {
    fn from(error: anyhow::Error) -> AttemptError {
        AttemptError::Failed(error)
    }
}

/// Owns the signal handlers and the event queue for one `idem run`.
pub struct Supervisor {
    events: Events,
    /// The first reason a [`Stopper`] gave; no attempt starts after it.
    stopped: std::cell::RefCell<Option<String>>,
    link: Arc<Mutex<Link>>,
}

impl Supervisor {
    /// Installs handlers for SIGINT, SIGTERM and SIGHUP: from now on they are
    /// passed to the command instead of ending idem, but for those idem was
    /// started with ignored, which stay ignored.
    pub fn new() -> Result<Supervisor> {
        Ok(Supervisor {
            events: Events::new()?,
            stopped: Default::default(),
            link: Default::default(),
        })
    }

    /// Sleeps for `duration`, calling `tick` with the time left every
    /// `every`; returns early with the signal that interrupted the wait.
    pub fn sleep(
        &self,
        duration: Duration,
        every: Duration,
        tick: &mut dyn FnMut(Duration),
    ) -> Option<i32> {
        let until = Instant::now() + duration;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            tick(left);
            match self
                .events
                .next(Some(Instant::now() + left.min(every)), None)
            {
                Some(Event::Signal(signal)) => return Some(signal),
                Some(Event::Stop { reason, .. }) => {
                    self.note_stop(reason);
                    return None;
                }
                Some(_) | None => {}
            }
        }
    }

    /// Takes a signal that arrived while idem was busy elsewhere.
    pub fn pending_signal(&self) -> Option<i32> {
        std::iter::from_fn(|| self.events.ready()).find_map(|event| match event {
            Event::Signal(signal) => Some(signal),
            Event::Stop { reason, .. } => {
                self.note_stop(reason);
                None
            }
            _ => None,
        })
    }

    /// A handle for another thread to stop the command.
    pub fn stopper(&self) -> Stopper {
        Stopper {
            requests: self.events.requester(),
            link: self.link.clone(),
        }
    }

    /// Why a [`Stopper`] asked to stop, if one did.
    pub fn stopped(&self) -> Option<String> {
        self.stopped.borrow().clone()
    }

    fn note_stop(&self, reason: String) {
        self.stopped.borrow_mut().get_or_insert(reason);
    }

    /// Runs one attempt to its end: until every process it started is gone.
    /// `started` is told the guardian's pid (the attempt's first process)
    /// before the command runs, so its owner is recorded first: if that
    /// fails, the command never starts ([`AttemptError::Unrecorded`]).
    /// `waiting` is told what a person should hear of meanwhile (see
    /// [`Notice`]).
    pub fn attempt(
        &self,
        spec: &Spec<'_>,
        stdout: &mut Sink,
        stderr: &mut Sink,
        hold: Option<OwnedFd>,
        started: &mut dyn FnMut(u32) -> Result<()>,
        waiting: &mut dyn FnMut(Notice<'_>),
    ) -> Result<AttemptEnd, AttemptError> {
        let started_at = Timestamp::now();
        let (argv, env) = command_line(spec);
        let prepared = match guardian::Prepared::new(&argv, &env, &spec.env_remove) {
            Ok(prepared) => prepared,
            Err(error) => return Ok(not_started(spec, started_at, &error)),
        };
        let Forked {
            pid,
            mut gate,
            out,
            err,
            stdin,
        } = fork(spec, &prepared, hold)?;
        // Recorded at once, while the guardian starts on another CPU, and
        // before this attempt's threads start: idem's writes after the fork
        // copy pages it shares with the guardian, and while another thread
        // of idem runs, each copy also interrupts that thread's CPU to
        // flush its TLB.
        let admitted = started(pid as u32)
            .map_err(AttemptError::Unrecorded)
            .and_then(|()| self.admit(&mut gate, spec.kill_after));
        if let Err(error) = admitted {
            // The guardian reads end of file and leaves, running nothing.
            drop(gate);
            reap(pid);
            return Err(error);
        }
        // The threads start once the command is let in, while it execs on
        // another CPU: what it writes meanwhile waits in its pipes.
        let capture = spec.capture;
        let gone = AtomicBool::new(false);
        let fed = AtomicBool::new(false);
        let (fed, gone) = (&fed, &gone);
        std::thread::scope(|scope| {
            // Set as this closure returns, before the scope joins the feeder.
            let _stop_feeding = RaiseOnDrop(fed);
            if let (Some(spool), Some(write)) = (spec.stdin, stdin) {
                scope.spawn(move || spool.feed(File::from(write), fed));
            }
            let out = scope.spawn(move || pump(File::from(out), stdout.writer(), capture, gone));
            let err = err.map(|err| {
                scope.spawn(move || pump(File::from(err), stderr.writer(), capture, gone))
            });
            let followed = self.follow_admitted(spec, gate, pid, waiting);
            let join = |handle: std::thread::ScopedJoinHandle<'_, (Vec<u8>, bool)>| {
                handle.join().unwrap_or_default()
            };
            let (stdout_tail, stdout_cut) = join(out);
            let (stderr_tail, stderr_cut) = err.map(join).unwrap_or_default();
            let ended = match followed? {
                Followed::NotExecuted(errno) => {
                    let error = io::Error::from_raw_os_error(errno);
                    return Ok(not_started(spec, started_at, &error));
                }
                Followed::Ended(ended) => ended,
            };
            Ok(AttemptEnd {
                started_at,
                stdout_tail,
                stderr_tail,
                cut: stdout_cut || stderr_cut,
                reader_gone: gone.load(Ordering::Relaxed),
                finished_at: Timestamp::now(),
                end: ended.end,
                timed_out: ended.timed_out,
                interrupted: ended.interrupted,
                stopped: self.stopped(),
            })
        })
    }

    /// Follows a command let in (see [`Supervisor::admit`]) to its end; a
    /// guardian that ran nothing is reaped at once.
    fn follow_admitted(
        &self,
        spec: &Spec<'_>,
        mut gate: UnixStream,
        pid: i32,
        waiting: &mut dyn FnMut(Notice<'_>),
    ) -> Result<Followed, AttemptError> {
        match executed(&mut gate) {
            (_, Some(errno)) => {
                reap(pid);
                Ok(Followed::NotExecuted(errno))
            }
            (command, None) => {
                let reader = gate.try_clone().context("could not watch the command")?;
                let mut watched = Watched::new(reader, pid);
                Ok(Followed::Ended(self.follow(
                    spec,
                    gate,
                    &mut watched,
                    command,
                    waiting,
                )?))
            }
        }
    }

    /// The gate, once the attempt is recorded: hears from the guardian,
    /// and lets the command in, unless the lease already ran out.
    fn admit(&self, gate: &mut UnixStream, kill_after: Duration) -> Result<(), AttemptError> {
        read_report(gate)
            .filter(|report| report.kind == guardian::RUNNING)
            .context("the command's guardian did not start")?;
        let deadline = self
            .link
            .lock()
            .ok()
            .and_then(|link| link.deadline)
            .map_or(0, |(until, _)| until);
        if deadline != 0 && monotonic_ms() >= deadline {
            return Err(anyhow::anyhow!(
                "the claim's lease ran out before the command could start"
            )
            .into());
        }
        let grace = kill_after.as_millis() as i64;
        gate.write_all(&guardian::encode_to(guardian::GO, deadline, grace))
            .context("could not start the command: its guardian is gone")?;
        Ok(())
    }

    /// Follows an admitted command (see [`Supervisor::admit`]) to its end,
    /// its guardian linked for the while, so that a [`Stopper`] reaches it.
    fn follow(
        &self,
        spec: &Spec<'_>,
        gate: UnixStream,
        watched: &mut Watched,
        command: i32,
        waiting: &mut dyn FnMut(Notice<'_>),
    ) -> Result<Supervised> {
        if let Ok(mut link) = self.link.lock() {
            link.guardian = Some(gate);
        }
        let ended = self.supervise(spec, watched, command, waiting);
        if let Ok(mut link) = self.link.lock() {
            link.guardian = None;
        }
        if spec.terminal {
            take_the_terminal_back();
        }
        ended
    }

    /// Waits for the guardian to end (every process of the attempt gone)
    /// while enforcing the timeout and passing signals on to all of them.
    fn supervise(
        &self,
        spec: &Spec<'_>,
        watched: &mut Watched,
        command: i32,
        waiting: &mut dyn FnMut(Notice<'_>),
    ) -> Result<Supervised> {
        let held = || spec.still_held.is_some_and(|held| held());
        let mut watch = Supervision {
            command,
            deadline: spec.timeout.map(|timeout| Instant::now() + timeout),
            ..Supervision::default()
        };
        let guardian = loop {
            match self.events.next(watch.next_look(), Some(watched)) {
                Some(Event::Ended(status)) => {
                    // A guardian that ended while processes of the attempt
                    // still hold the run's lock was killed: the attempt is
                    // over only once nothing of it holds the lock.
                    if !held() {
                        break status;
                    }
                    watch.guardian_gone = Some(status);
                }
                None if watch.guardian_gone.is_some() && !held() => {
                    if let Some(status) = watch.guardian_gone {
                        break status;
                    }
                }
                Some(Event::Told(report)) => self.on_report(&report, &mut watch.main, waiting),
                Some(Event::Continued) => self.tell(guardian::RESUME, 0, 0),
                Some(Event::Stop { reason, grace }) => {
                    self.on_stop(&mut watch, reason, grace.min(spec.kill_after));
                }
                Some(Event::Signal(signal)) => self.on_signal(&mut watch, signal, waiting),
                None => self.on_time(&mut watch, spec),
            }
        };
        Ok(Supervised {
            end: end_of(watch.main, guardian),
            timed_out: watch.timed_out,
            interrupted: watch.interrupted,
        })
    }

    /// A [`Stopper`] asks to stop the command: SIGTERM, SIGKILL `grace`
    /// later; the first reason is the one told.
    fn on_stop(&self, watch: &mut Supervision, reason: String, grace: Duration) {
        if self.stopped().is_none() {
            self.note_stop(reason);
            self.signal_attempt(watch, libc::SIGTERM, true);
            watch.kill_at = Some(Instant::now() + grace);
            watch.deadline = None;
        }
    }

    /// idem was sent `signal`: passed on, and a second one kills.
    fn on_signal(&self, watch: &mut Supervision, signal: i32, waiting: &mut dyn FnMut(Notice<'_>)) {
        if watch.interrupted.is_some() {
            // A second signal: the operator means it.
            self.signal_attempt(watch, libc::SIGKILL, false);
        } else {
            watch.interrupted = Some(signal);
            self.signal_attempt(watch, signal, false);
            waiting(Notice::Interrupted(signal));
        }
        watch.deadline = None;
    }

    /// The timeout ran out, or it is time to SIGKILL.
    fn on_time(&self, watch: &mut Supervision, spec: &Spec<'_>) {
        let now = Instant::now();
        if watch.deadline.is_some_and(|at| at <= now) {
            watch.timed_out = true;
            watch.deadline = None;
            self.signal_attempt(watch, spec.timeout_signal, true);
            watch.kill_at = Some(now + spec.kill_after);
        } else if watch.kill_at.is_some_and(|at| at <= now) {
            self.signal_attempt(watch, libc::SIGKILL, false);
            // Again soon, for what forked meanwhile.
            watch.kill_at = Some(now + Duration::from_millis(100));
        }
    }

    /// Tells the current attempt's guardian, if it still listens.
    fn tell(&self, kind: u8, a: i64, b: i64) {
        if let Ok(mut link) = self.link.lock() {
            link.tell(kind, a, b);
        }
    }

    /// Sends `signal` (and SIGCONT after it, with `cont`) to every process
    /// of the attempt, through its guardian; without it (killed), only the
    /// command's group is reached.
    fn signal_attempt(&self, watch: &Supervision, signal: i32, cont: bool) {
        if watch.guardian_gone.is_none() {
            self.tell(guardian::SIGNAL, signal.into(), cont.into());
        } else if watch.command > 0 {
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(-watch.command, signal) };
        }
    }

    fn on_report(
        &self,
        report: &guardian::Report,
        main: &mut Option<i32>,
        waiting: &mut dyn FnMut(Notice<'_>),
    ) {
        match report.kind {
            guardian::EXITED => *main = Some(report.a),
            guardian::LEFT_RUNNING => waiting(Notice::LeftRunning {
                count: report.a,
                pids: &report.pids,
            }),
            guardian::LEASE_RAN_OUT => self.note_stop(
                "the lease was not renewed in time (idem was frozen or cut off from the ledger), so the command's guardian stopped it so that it does not run unowned"
                    .to_owned(),
            ),
            _ => {}
        }
    }
}

/// What supervising an attempt keeps track of.
#[derive(Default)]
struct Supervision {
    /// The command's process group (0: unknown).
    command: i32,
    /// `--timeout` runs out then.
    deadline: Option<Instant>,
    /// SIGKILL then.
    kill_at: Option<Instant>,
    timed_out: bool,
    /// The signal idem received and passed on.
    interrupted: Option<i32>,
    /// The main process's wait status, as the guardian told it.
    main: Option<i32>,
    /// The guardian's end, when it ended while processes of the attempt
    /// still held the run's lock (it was killed).
    guardian_gone: Option<WaitStatus>,
}

impl Supervision {
    /// When to look again without an event: at the timeout, at the
    /// SIGKILL, and now and then at the lock once the guardian is gone.
    fn next_look(&self) -> Option<Instant> {
        let look = self
            .guardian_gone
            .map(|_| Instant::now() + Duration::from_millis(50));
        [self.deadline, self.kill_at, look]
            .into_iter()
            .flatten()
            .min()
    }
}

/// How a supervised attempt ended.
struct Supervised {
    end: End,
    timed_out: bool,
    interrupted: Option<i32>,
}

/// What came of an admitted command.
enum Followed {
    /// It could not be executed (the errno).
    NotExecuted(i32),
    Ended(Supervised),
}

/// An attempt's first process, forked, and idem's ends of its pipes.
struct Forked {
    /// The guardian's pid.
    pid: i32,
    /// idem's end of the socket to the guardian.
    gate: UnixStream,
    out: OwnedFd,
    /// None when stderr is merged into stdout.
    err: Option<OwnedFd>,
    /// Where the spool feeds the command's stdin.
    stdin: Option<OwnedFd>,
}

/// Forks the attempt's guardian with its ends of the pipes and `hold`;
/// idem keeps only its own ends.
fn fork(spec: &Spec<'_>, prepared: &guardian::Prepared, hold: Option<OwnedFd>) -> Result<Forked> {
    let Pipes {
        out: (out_read, out_write),
        err: (err_read, err_write),
        stdin: (stdin_read, stdin_write),
    } = Pipes::open(spec)?;
    let (gate, door) =
        UnixStream::pair().context("could not create a socket pair to start the command")?;
    let fds = guardian::Fds {
        door: door.as_raw_fd(),
        stdin: stdin_read.as_ref().map(AsRawFd::as_raw_fd),
        stdout: out_write.as_raw_fd(),
        stderr: err_write.as_ref().unwrap_or(&out_write).as_raw_fd(),
        hold: hold.as_ref().map(AsRawFd::as_raw_fd),
        foreground: spec
            .terminal
            .then(|| (libc::STDIN_FILENO, nix::unistd::getpgrp().as_raw())),
    };
    // SAFETY: `prepared` and `fds` outlive the fork; the child runs only
    // the guardian's async-signal-safe code.
    let pid = unsafe { guardian::start(prepared, &fds) }
        .context("could not start the command (fork failed)")?;
    // The attempt's processes hold the lock now; idem has its own.
    drop((out_write, err_write, door, hold, stdin_read));
    Ok(Forked {
        pid,
        gate,
        out: out_read,
        err: err_read,
        stdin: stdin_write,
    })
}

/// Whether the command let in could be executed, as its guardian tells:
/// the command's pid (0: unknown), and `Some(errno)` if it was not. No
/// answer: the guardian was killed as the command started, or found the
/// lease run out; what it ran, if anything, is waited for.
fn executed(gate: &mut UnixStream) -> (i32, Option<i32>) {
    match read_report(gate) {
        Some(report) if report.kind == guardian::NOT_EXECUTED => (0, Some(report.a)),
        Some(report) if report.kind == guardian::RUNNING => (report.a, None),
        _ => (0, None),
    }
}

/// An attempt whose command could not be executed: 126 or 127, said.
fn not_started(spec: &Spec<'_>, started_at: Timestamp, error: &io::Error) -> AttemptEnd {
    let (code, reason) = spawn_failure(spec, error);
    AttemptEnd::not_started(started_at, code, reason)
}

/// The main process's status (`main`, as the guardian told it), as a shell
/// reports it; if the guardian itself was killed before it could tell, its
/// own death stands in.
fn end_of(main: Option<i32>, guardian: WaitStatus) -> End {
    match (main, guardian) {
        (Some(status), _) if libc::WIFSIGNALED(status) => End::Signaled(libc::WTERMSIG(status)),
        (Some(status), _) => End::Exited(libc::WEXITSTATUS(status)),
        (None, WaitStatus::Signaled(_, signal, _)) => End::Signaled(signal as i32),
        (None, WaitStatus::Exited(_, code)) => End::Exited(code),
        (None, _) => End::Exited(exit::IDEM_FAILED.into()),
    }
}

/// The command's ends and idem's: stdout (a pseudo-terminal at a terminal),
/// stderr unless merged into stdout, stdin when fed from the spool.
struct Pipes {
    out: (OwnedFd, OwnedFd),
    err: (Option<OwnedFd>, Option<OwnedFd>),
    stdin: (Option<OwnedFd>, Option<OwnedFd>),
}

impl Pipes {
    fn open(spec: &Spec<'_>) -> Result<Pipes> {
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(io::Error::from)
                .context("could not create a pipe for the command")
        };
        let out = if spec.terminal {
            pseudo_terminal().context("could not open a pseudo-terminal for the command")?
        } else {
            pipe()?
        };
        let split = |(read, write): (OwnedFd, OwnedFd)| (Some(read), Some(write));
        let err = if spec.merged {
            (None, None)
        } else {
            split(pipe()?)
        };
        let stdin = match spec.stdin {
            Some(_) => split(pipe()?),
            None => (None, None),
        };
        Ok(Pipes { out, err, stdin })
    }
}

/// A pseudo-terminal for the command's output, sized and set as the real
/// one, except that output is not post-processed (no `\n` to `\r\n`): the
/// real terminal does that for what idem copies to it.
fn pseudo_terminal() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::termios::{tcgetattr, OutputFlags};
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize into the struct we own.
    let sized = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &raw mut size) } == 0;
    let mut modes = tcgetattr(std::io::stdin()).map_err(io::Error::from)?;
    modes.output_flags.remove(OutputFlags::OPOST);
    let size = nix::pty::Winsize {
        ws_row: size.ws_row,
        ws_col: size.ws_col,
        ws_xpixel: size.ws_xpixel,
        ws_ypixel: size.ws_ypixel,
    };
    let pty = nix::pty::openpty(sized.then_some(&size), &modes).map_err(io::Error::from)?;
    for fd in [&pty.master, &pty.slave] {
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .map_err(io::Error::from)?;
    }
    Ok((pty.master, pty.slave))
}

/// Makes idem's group the terminal's foreground again, as a shell does
/// after a job (the guardian does it first; this covers a killed one).
fn take_the_terminal_back() {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    // From the background, tcsetpgrp raises SIGTTOU unless it is blocked.
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), None);
    let _ = nix::unistd::tcsetpgrp(std::io::stdin(), nix::unistd::getpgrp());
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&ttou), None);
}

/// Raises its flag when dropped.
struct RaiseOnDrop<'a>(&'a AtomicBool);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn reap(pid: i32) -> WaitStatus {
    loop {
        match waitpid(Pid::from_raw(pid), None) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(status) => return status,
            Err(_) => return WaitStatus::Exited(Pid::from_raw(pid), exit::IDEM_FAILED.into()),
        }
    }
}

fn read_report(from: &mut UnixStream) -> Option<guardian::Report> {
    let mut frame = [0u8; guardian::FROM_GUARDIAN];
    from.read_exact(&mut frame).ok()?;
    Some(guardian::decode_from(&frame))
}

/// The argv to execute and the variables to set.
fn command_line(spec: &Spec<'_>) -> (Vec<OsString>, Vec<(&'static str, OsString)>) {
    let argv = if spec.shell {
        let script = spec
            .argv
            .iter()
            .map(|word| word.as_os_str())
            .collect::<Vec<_>>()
            .join(std::ffi::OsStr::new(" "));
        vec!["/bin/sh".into(), "-c".into(), script]
    } else {
        spec.argv.to_vec()
    };
    (argv, spec.env.clone())
}

fn spawn_failure(spec: &Spec<'_>, error: &io::Error) -> (u8, String) {
    let program = if spec.shell {
        "/bin/sh".into()
    } else {
        String::from_utf8_lossy(spec.argv[0].as_bytes()).into_owned()
    };
    match error.kind() {
        io::ErrorKind::NotFound => (
            exit::NOT_FOUND_COMMAND,
            format!("command not found: {program} (check the name and PATH)"),
        ),
        io::ErrorKind::PermissionDenied => (
            exit::CANNOT_EXECUTE,
            format!("cannot execute {program}: permission denied (chmod +x it?)"),
        ),
        _ => (
            exit::CANNOT_EXECUTE,
            format!("cannot execute {program}: {}", exit::io_words(error)),
        ),
    }
}

/// Whether two streams are one open file or pipe (`cmd >log 2>&1`, `2>&1 |`).
pub fn same_file(a: &impl AsFd, b: &impl AsFd) -> bool {
    use nix::sys::stat::fstat;
    match (fstat(a.as_fd()), fstat(b.as_fd())) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    }
}

/// The most one read of the command's output takes.
const READ_CHUNK: usize = 64 * 1024;

/// The first read's buffer. Most commands print little or nothing, and a
/// buffer of [`READ_CHUNK`] from the start was zeroed and faulted in for
/// each stream of every run (16 pages each, 4% of a first run's
/// instructions); a read that fills this one grows it.
const FIRST_READ: usize = 4096;

/// Copies a pipe to `to` as it comes, keeping the last `capture` bytes.
/// Memory stays bounded: one read buffer plus the capture.
fn pump(mut from: impl Read, to: &mut File, capture: usize, gone: &AtomicBool) -> (Vec<u8>, bool) {
    let mut buffer = vec![0u8; FIRST_READ];
    let mut tail = Tail::new(capture);
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        tail.push(&buffer[..read]);
        if to.write_all(&buffer[..read]).is_err() {
            // Our reader went away (EPIPE): close the pipe so the command
            // learns it too, as it would writing to that reader directly.
            gone.store(true, Ordering::Relaxed);
            break;
        }
        if read == buffer.len() && read < READ_CHUNK {
            buffer.resize(READ_CHUNK, 0);
        }
    }
    tail.into_bytes()
}

/// The last `capacity` bytes of a stream, in a ring of that size.
struct Tail {
    capacity: usize,
    bytes: VecDeque<u8>,
    /// Bytes were dropped from the front.
    cut: bool,
}

impl Tail {
    fn new(capacity: usize) -> Tail {
        // Sized once: pages that a short output never reaches stay unmapped.
        Tail {
            capacity,
            bytes: VecDeque::with_capacity(capacity),
            cut: false,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        self.cut |= self.bytes.len() + chunk.len() > self.capacity;
        let chunk = &chunk[chunk.len().saturating_sub(self.capacity)..];
        let excess = (self.bytes.len() + chunk.len()).saturating_sub(self.capacity);
        self.bytes.drain(..excess);
        self.bytes.extend(chunk);
    }

    fn into_bytes(self) -> (Vec<u8>, bool) {
        (self.bytes.into(), self.cut)
    }
}

#[cfg(test)]
mod tests {
    use super::Tail;

    #[test]
    fn tail_keeps_the_last_bytes() {
        let mut tail = Tail::new(4);
        for chunk in [&b"abc"[..], b"defgh", b"ij", b"klmnopqrstu"] {
            tail.push(chunk);
        }
        assert_eq!(tail.into_bytes(), (b"rstu".to_vec(), true));
        let mut none = Tail::new(0);
        none.push(b"abc");
        assert_eq!(none.into_bytes(), (Vec::new(), true));
        let mut whole = Tail::new(8);
        whole.push(b"12345678");
        assert_eq!(whole.into_bytes(), (b"12345678".to_vec(), false));
    }
}
