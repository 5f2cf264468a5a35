//! The supervisor: idem's side of an attempt. It records the attempt, lets
//! the command in, then follows it to its end through one event loop:
//! signals passed on, the timeout, a [`Stopper`]'s request, the guardian's
//! reports.

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use jiff::Timestamp;
use nix::libc;
use nix::sys::wait::WaitStatus;

use super::events::{Event, Events, Watched};
use super::prepare::Prepared;
use super::signals::{heard, Heard};
use super::spawn::{
    command_line, executed, fork, not_started, reap, take_the_terminal_back, Forked, LetIn,
};
use super::steps::Failed;
use super::stopper::{Link, Stopper};
use super::tee::{Pump, RaiseOnDrop, Sink, Streams};
use super::tree;
use super::wire::{self, monotonic_ms, read_report};
use super::{AttemptEnd, AttemptError, Containment, End, Notice, Spec};
use crate::exit;

/// Owns the signal handlers and the event queue for one `idem run`.
pub struct Supervisor {
    events: Events,
    /// The first reason a [`Stopper`] gave; no attempt starts after it.
    stopped: std::cell::RefCell<Option<String>>,
    /// The signal of a stop a person requested; no attempt starts after it.
    requested: std::cell::Cell<Option<i32>>,
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
            requested: Default::default(),
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
                Some(Event::Requested { signal }) => {
                    self.note_request(signal);
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
            Event::Requested { signal } => {
                self.note_request(signal);
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

    /// The signal of a stop a person requested (see [`Stopper::request`]).
    pub fn requested(&self) -> Option<i32> {
        self.requested.get()
    }

    fn note_request(&self, signal: i32) {
        self.requested.set(self.requested.get().or(Some(signal)));
    }

    fn note_stop(&self, reason: String) {
        self.stopped.borrow_mut().get_or_insert(reason);
    }

    /// Runs one attempt to its end: until every process it started is gone.
    /// `started` is told the guardian's pid (the attempt's first process)
    /// and its containment before the command runs, so its owner is
    /// recorded first: if that
    /// fails, the command never starts ([`AttemptError::Unrecorded`]).
    /// `waiting` is told what a person should hear of meanwhile (see
    /// [`Notice`]).
    pub fn attempt(
        &self,
        spec: &Spec<'_>,
        stdout: &mut Sink,
        stderr: &mut Sink,
        hold: Option<OwnedFd>,
        started: &mut dyn FnMut(u32, Containment) -> Result<()>,
        waiting: &mut dyn FnMut(Notice<'_>),
    ) -> Result<AttemptEnd, AttemptError> {
        let started_at = Timestamp::now();
        let (argv, env) = command_line(spec);
        let prepared = match Prepared::new(&argv, &env, &spec.env_remove) {
            Ok(mut prepared) => {
                prepared.priority = spec.priority;
                prepared
            }
            Err(error) => return Ok(not_started(spec, started_at, &error)),
        };
        // Nothing ran when the fork (or what it needs) fails.
        let forked = fork(spec, &prepared, hold).map_err(AttemptError::Unrecorded)?;
        let pid = forked.pid;
        waiting(Notice::Contained(forked.contained));
        // Recorded at once, while the guardian starts on another CPU, and
        // before this attempt's threads start: idem's writes after the fork
        // copy pages it shares with the guardian, and while another thread
        // of idem runs, each copy also interrupts that thread's CPU to
        // flush its TLB.
        if let Err(error) = started(pid as u32, forked.contained) {
            // The guardian reads end of file and leaves, running nothing.
            drop(forked);
            reap(pid);
            return Err(AttemptError::Unrecorded(error));
        }
        self.pass_through(spec, forked, started_at, stdout, stderr, waiting)
    }

    /// A step of the setup after the fork failed, said in `words`, once the
    /// attempt was recorded as started at `started_at`.
    fn setup_failed(started_at: Timestamp, words: String) -> AttemptError {
        AttemptError::SetupFailed {
            started_at,
            error: anyhow::anyhow!(words),
        }
    }

    /// Follows an admitted command to its end while its output is passed
    /// through and its stdin fed, each by a thread of its own.
    fn pass_through(
        &self,
        spec: &Spec<'_>,
        mut forked: Forked,
        started_at: Timestamp,
        stdout: &mut Sink,
        stderr: &mut Sink,
        waiting: &mut dyn FnMut(Notice<'_>),
    ) -> Result<AttemptEnd, AttemptError> {
        super::tee::share_lines(spec.merged);
        // The threads start before the command is let in, so that a thread
        // the system refuses (ulimit -u, -v) ends the attempt before any of
        // the command ran, not a command that had begun its work.
        let gone = AtomicBool::new(false);
        let fed = AtomicBool::new(false);
        let (fed, gone) = (&fed, &gone);
        std::thread::scope(|scope| {
            // Set as this closure returns, before the scope joins the feeder.
            let _stop_feeding = RaiseOnDrop(fed);
            let streams = Streams {
                spool: spec.stdin.zip(forked.stdin),
                out: (forked.out, stdout),
                err: forked.err.zip(Some(stderr)),
                capture: spec.capture,
                fed,
                gone,
            };
            let tee = streams.start(scope);
            if let Some(refusal) =
                self.let_in(spec, tee.refused, &mut forked.gate, forked.pid, started_at)
            {
                return refusal;
            }
            let followed = self.follow_admitted(spec, forked.gate, forked.pid, started_at, waiting);
            let join = |handle: Pump<'_>| handle.join().unwrap_or_default();
            let (stdout_tail, stdout_cut) = tee.out.map(join).unwrap_or_default();
            let (stderr_tail, stderr_cut) = tee.err.map(join).unwrap_or_default();
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
                usage: match &forked.cgroup {
                    Some(cgroup) => cgroup.usage(ended.usage),
                    None => ended.usage,
                },
            })
        })
    }

    /// Lets the command in once its threads started; or, when a thread was
    /// refused or the gate failed, how the attempt ends: the guardian then
    /// reads end of file and leaves, running nothing.
    fn let_in(
        &self,
        spec: &Spec<'_>,
        refused: Option<String>,
        gate: &mut UnixStream,
        pid: i32,
        started_at: Timestamp,
    ) -> Option<Result<AttemptEnd, AttemptError>> {
        let refusal = match refused {
            Some(reason) => Ok(AttemptEnd::not_started(
                started_at,
                exit::IDEM_FAILED,
                reason,
            )),
            None => Err(self.admit(gate, spec.kill_after, started_at).err()?),
        };
        let _ = gate.shutdown(std::net::Shutdown::Both);
        reap(pid);
        Some(refusal)
    }

    /// Follows a command let in (see [`Supervisor::admit`]) to its end; a
    /// guardian that ran nothing is reaped at once.
    fn follow_admitted(
        &self,
        spec: &Spec<'_>,
        mut gate: UnixStream,
        pid: i32,
        started_at: Timestamp,
        waiting: &mut dyn FnMut(Notice<'_>),
    ) -> Result<Followed, AttemptError> {
        match executed(&mut gate) {
            LetIn::NotExecuted(errno) => {
                reap(pid);
                Ok(Followed::NotExecuted(errno))
            }
            LetIn::SetupFailed(words) => {
                reap(pid);
                Err(Self::setup_failed(started_at, words))
            }
            LetIn::Running(command) => {
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
    fn admit(
        &self,
        gate: &mut UnixStream,
        kill_after: Duration,
        started_at: Timestamp,
    ) -> Result<(), AttemptError> {
        let report = read_report(gate).context("the command's guardian did not start")?;
        if report.kind == wire::SETUP_FAILED {
            // Nothing ran: the attempt ends as one that never started.
            let words = Failed::words(report.a, report.b);
            return Err(Self::setup_failed(started_at, words));
        }
        if report.kind != wire::RUNNING {
            return Err(anyhow::anyhow!("the command's guardian did not start").into());
        }
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
        gate.write_all(&wire::encode_to(wire::GO, deadline, grace))
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
            guardian: watched.pid(),
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
                Some(Event::Told(report)) => self.on_report(&report, &mut watch, waiting),
                Some(Event::Continued) => self.tell(wire::RESUME, 0, 0),
                Some(Event::Stop { reason, grace }) => {
                    self.on_stop(&mut watch, reason, grace.min(spec.kill_after));
                }
                Some(Event::Requested { signal }) => {
                    self.on_request(&mut watch, signal, spec.kill_after);
                }
                Some(Event::Signal(signal)) => self.on_signal(&mut watch, signal, waiting),
                None => self.on_time(&mut watch, spec),
            }
        };
        Ok(Supervised {
            end: end_of(watch.main, guardian),
            timed_out: watch.timed_out,
            interrupted: watch.interrupted,
            // wait4's figures count the guardian too: the fallback.
            usage: watch.used.unwrap_or(watched.usage),
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

    /// A person asked to stop the run: `signal` to all of it, SIGKILL `grace` later.
    fn on_request(&self, watch: &mut Supervision, signal: i32, grace: Duration) {
        if self.requested().is_none() {
            self.note_request(signal);
            self.signal_attempt(watch, signal, true);
            watch.kill_at = Some(Instant::now() + grace);
            watch.deadline = None;
        }
    }

    /// idem was sent `signal`: passed on, and a second one kills (but a
    /// copy of the first, see [`heard`]).
    fn on_signal(&self, watch: &mut Supervision, signal: i32, waiting: &mut dyn FnMut(Notice<'_>)) {
        let now = Instant::now();
        match heard(watch.interrupted.zip(watch.interrupted_at), signal, now) {
            Heard::First => {
                watch.interrupted = Some(signal);
                watch.interrupted_at = Some(now);
                self.signal_attempt(watch, signal, false);
                waiting(Notice::Interrupted(signal));
            }
            Heard::Again => {}
            // A second signal: the operator means it.
            Heard::Second => self.signal_attempt(watch, libc::SIGKILL, false),
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
    /// of the attempt, through its guardian; idem sends it itself when the
    /// guardian is stopped (else a stopped guardian would stop `--timeout`
    /// too); without a guardian (killed), only the command's group is
    /// reached.
    fn signal_attempt(&self, watch: &Supervision, signal: i32, cont: bool) {
        if watch.guardian_gone.is_none() && tree::stopped(watch.guardian) {
            tree::signal_past(watch.guardian, watch.command, signal, cont);
        } else if watch.guardian_gone.is_none() {
            self.tell(wire::SIGNAL, signal.into(), cont.into());
        } else if watch.command > 0 {
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(-watch.command, signal) };
        }
    }

    fn on_report(
        &self,
        report: &wire::Report,
        watch: &mut Supervision,
        waiting: &mut dyn FnMut(Notice<'_>),
    ) {
        match report.kind {
            wire::EXITED => watch.main = Some(report.a),
            wire::USED => {
                watch.used = Some(super::Usage {
                    peak_memory: u64::try_from(report.a).ok().map(|kib| kib * 1024),
                    cpu_ms: u64::try_from(report.b).ok(),
                    oom_killed: false,
                });
            }
            wire::LEFT_RUNNING => waiting(Notice::LeftRunning {
                count: report.a,
                pids: &report.pids,
                ending: watch.kill_at.is_some() || watch.interrupted.is_some(),
            }),
            wire::LEASE_RAN_OUT => self.note_stop(
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
    /// The guardian's pid.
    guardian: i32,
    /// The command's process group (0: unknown).
    command: i32,
    /// `--timeout` runs out then.
    deadline: Option<Instant>,
    /// SIGKILL then.
    kill_at: Option<Instant>,
    timed_out: bool,
    /// The signal idem received and passed on, and when.
    interrupted: Option<i32>,
    interrupted_at: Option<Instant>,
    /// The main process's wait status, as the guardian told it.
    main: Option<i32>,
    /// The guardian's end, when it ended while processes of the attempt
    /// still held the run's lock (it was killed).
    guardian_gone: Option<WaitStatus>,
    /// What the run's processes used, as the guardian told it.
    used: Option<super::Usage>,
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
    usage: super::Usage,
}

/// What came of an admitted command.
enum Followed {
    /// It could not be executed (the errno).
    NotExecuted(i32),
    Ended(Supervised),
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
