//! Running one attempt of a command: spawning it in its own process group,
//! passing its output through while keeping a tail, forwarding signals,
//! enforcing the timeout, and reaping everything it started.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use jiff::Timestamp;
use nix::libc;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::exit;

/// Something the supervisor waits for.
enum Event {
    Exited(io::Result<ExitStatus>),
    Signal(i32),
    /// Another thread asks to stop the command (see [`Stopper`]).
    Stop {
        reason: String,
        grace: Duration,
    },
}

/// Lets another thread stop the running command: SIGTERM to its group,
/// SIGKILL after `grace` (at most `--kill-after`). Used when a shared
/// ledger's lease cannot be renewed.
#[derive(Clone)]
pub struct Stopper(Sender<Event>);

impl Stopper {
    pub fn stop(&self, reason: String, grace: Duration) {
        let _ = self.0.send(Event::Stop { reason, grace });
    }
}

/// Where a stream of the command's output goes.
pub enum Sink {
    /// Straight through to idem's own stdout or stderr.
    Live(File),
    /// Held in a temporary file, shown only if the run fails (`--quiet-success`).
    Held(File),
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

    pub fn held() -> Result<Sink> {
        Ok(Sink::Held(tempfile::tempfile().context(
            "could not create a temporary file to hold the output",
        )?))
    }

    pub fn writer(&mut self) -> &mut File {
        match self {
            Sink::Live(file) | Sink::Held(file) => file,
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
}

impl AttemptEnd {
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

/// Owns the signal handlers and the event queue for one `idem run`.
pub struct Supervisor {
    sender: Sender<Event>,
    events: Receiver<Event>,
    /// The first reason a [`Stopper`] gave; no attempt starts after it.
    stopped: std::cell::RefCell<Option<String>>,
}

impl Supervisor {
    /// Installs handlers for SIGINT, SIGTERM and SIGHUP: from now on they are
    /// passed to the command instead of ending idem.
    pub fn new() -> Result<Supervisor> {
        let (sender, events) = mpsc::channel();
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
            .context("could not install signal handlers")?;
        let forward = sender.clone();
        std::thread::spawn(move || {
            for signal in signals.forever() {
                if forward.send(Event::Signal(signal)).is_err() {
                    break;
                }
            }
        });
        Ok(Supervisor {
            sender,
            events,
            stopped: Default::default(),
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
            match self.events.recv_timeout(left.min(every)) {
                Ok(Event::Signal(signal)) => return Some(signal),
                Ok(Event::Stop { reason, .. }) => {
                    self.note_stop(reason);
                    return None;
                }
                Ok(Event::Exited(_)) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Takes a signal that arrived while idem was busy elsewhere.
    pub fn pending_signal(&self) -> Option<i32> {
        self.events.try_iter().find_map(|event| match event {
            Event::Signal(signal) => Some(signal),
            Event::Stop { reason, .. } => {
                self.note_stop(reason);
                None
            }
            Event::Exited(_) => None,
        })
    }

    /// A handle for another thread to stop the command.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.sender.clone())
    }

    /// Why a [`Stopper`] asked to stop, if one did.
    pub fn stopped(&self) -> Option<String> {
        self.stopped.borrow().clone()
    }

    fn note_stop(&self, reason: String) {
        self.stopped.borrow_mut().get_or_insert(reason);
    }

    /// Runs one attempt to its end. `started` is told the process group
    /// before the command runs, so its owner is recorded first: if that
    /// fails, the command never starts and the error is returned.
    pub fn attempt(
        &self,
        spec: &Spec<'_>,
        stdout: &mut Sink,
        stderr: &mut Sink,
        started: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<AttemptEnd> {
        let started_at = Timestamp::now();
        let (mut gate, door) =
            UnixStream::pair().context("could not create a socket pair to start the command")?;
        let mut command = build(spec, gate.as_raw_fd(), door.as_raw_fd());
        let capture = spec.capture;
        std::thread::scope(|scope| {
            let (hand_over, handed) = mpsc::sync_channel(1);
            let sender = self.sender.clone();
            // std's spawn returns only once the child has exec'd, so it runs
            // here while this thread lets the child in. The thread that forks
            // is the child's parent for PR_SET_PDEATHSIG, whose signal comes
            // when that thread ends: so it also waits for the command.
            scope.spawn(move || {
                let spawned = command.spawn();
                // With our copy closed, a child that never reached the door
                // ends the read in `admit`.
                drop(door);
                match spawned {
                    Ok(mut child) => {
                        let pipes = (child.id(), child.stdout.take(), child.stderr.take());
                        let _ = hand_over.send(Ok(pipes));
                        let _ = sender.send(Event::Exited(child.wait()));
                    }
                    Err(error) => {
                        let _ = hand_over.send(Err(error));
                    }
                }
            });
            let admitted = admit(&mut gate, started);
            drop(gate);
            let spawned = handed
                .recv()
                .unwrap_or_else(|_| Err(io::Error::other("the thread starting it failed")));
            admitted?;
            let (pgid, child_out, child_err) = match spawned {
                Ok(spawned) => spawned,
                Err(error) => {
                    let (code, reason) = spawn_failure(spec, &error);
                    return Ok(AttemptEnd {
                        started_at,
                        finished_at: Timestamp::now(),
                        end: End::NotStarted { code, reason },
                        timed_out: false,
                        interrupted: None,
                        stopped: None,
                        stdout_tail: Vec::new(),
                        stderr_tail: Vec::new(),
                    });
                }
            };
            let out =
                child_out.map(|pipe| scope.spawn(move || pump(pipe, stdout.writer(), capture)));
            let err =
                child_err.map(|pipe| scope.spawn(move || pump(pipe, stderr.writer(), capture)));
            let (status, timed_out, interrupted) = self.supervise(pgid, spec)?;
            let join = |handle: Option<std::thread::ScopedJoinHandle<'_, Vec<u8>>>| {
                handle
                    .map(|handle| handle.join().unwrap_or_default())
                    .unwrap_or_default()
            };
            let end = match status.signal() {
                Some(signal) => End::Signaled(signal),
                None => End::Exited(status.code().unwrap_or(exit::IDEM_FAILED.into())),
            };
            Ok(AttemptEnd {
                started_at,
                stdout_tail: join(out),
                stderr_tail: join(err),
                finished_at: Timestamp::now(),
                end,
                timed_out,
                interrupted,
                stopped: self.stopped(),
            })
        })
    }

    /// Waits for the command's leader to exit while enforcing the timeout
    /// and passing signals on; then makes sure nothing of a killed group
    /// lives on.
    fn supervise(&self, pgid: u32, spec: &Spec<'_>) -> Result<(ExitStatus, bool, Option<i32>)> {
        let group = Pid::from_raw(pgid as i32);
        let send = |signal: Signal| {
            // ESRCH: the group is already gone, which is what we wanted.
            let _ = killpg(group, signal);
        };
        let mut deadline = spec.timeout.map(|timeout| Instant::now() + timeout);
        let mut kill_at: Option<Instant> = None;
        let mut timed_out = false;
        let mut interrupted = None;
        let status = loop {
            let next = match (deadline, kill_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let event = match next {
                Some(at) => self
                    .events
                    .recv_timeout(at.saturating_duration_since(Instant::now())),
                None => self
                    .events
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
            };
            match event {
                Ok(Event::Exited(status)) => {
                    break status.context("could not wait for the command")?
                }
                Ok(Event::Stop { reason, grace }) => {
                    if self.stopped().is_none() {
                        self.note_stop(reason);
                        send(Signal::SIGTERM);
                        kill_at = Some(Instant::now() + grace.min(spec.kill_after));
                        deadline = None;
                    }
                }
                Ok(Event::Signal(signal)) => {
                    if interrupted.is_some() {
                        // A second signal: the operator means it.
                        send(Signal::SIGKILL);
                    } else {
                        interrupted = Some(signal);
                        if let Ok(signal) = Signal::try_from(signal) {
                            send(signal);
                        }
                    }
                    deadline = None;
                }
                Err(RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    if deadline.is_some_and(|at| at <= now) {
                        timed_out = true;
                        deadline = None;
                        send(Signal::SIGTERM);
                        kill_at = Some(now + spec.kill_after);
                    } else if kill_at.is_some_and(|at| at <= now) {
                        send(Signal::SIGKILL);
                        kill_at = None;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    anyhow::bail!("lost track of the command (event queue closed)")
                }
            }
        };
        if timed_out || interrupted.is_some() || self.stopped().is_some() {
            // The leader is gone; members of its group that shrugged off the
            // signal get until the kill deadline, then SIGKILL.
            let until = kill_at.unwrap_or_else(|| Instant::now() + spec.kill_after);
            while crate::host::group_has_live_members(pgid) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            send(Signal::SIGKILL);
        }
        Ok((status, timed_out, interrupted))
    }
}

/// Lets in the command, held between fork and exec, once `started` has
/// recorded its pid, which is its process group.
///
/// Why held: were idem killed after the command started but before the
/// ledger knew its group, the next run would find idem gone and nothing to
/// look for, and run the key again while the first command (which may
/// ignore the SIGTERM it gets on idem's death) runs on. So the child tells
/// its pid through a socket pair and waits for one byte; at end of file
/// (the recording failed, or idem died) it exits without running anything.
fn admit(gate: &mut UnixStream, started: &mut dyn FnMut(u32) -> Result<()>) -> Result<()> {
    let mut pid = [0u8; 4];
    if gate.read_exact(&mut pid).is_err() {
        // The child never reached the door: spawn says why.
        return Ok(());
    }
    started(u32::from_ne_bytes(pid))?;
    // Should this fail, the child is gone, and spawn says why.
    let _ = gate.write_all(&[1]);
    Ok(())
}

fn build(spec: &Spec<'_>, gate: RawFd, door: RawFd) -> Command {
    let mut command = if spec.shell {
        let script = spec
            .argv
            .iter()
            .map(|word| word.as_os_str())
            .collect::<Vec<_>>()
            .join(std::ffi::OsStr::new(" "));
        let mut command = Command::new("/bin/sh");
        command.arg("-c").arg(script);
        command
    } else {
        let mut command = Command::new(&spec.argv[0]);
        command.args(&spec.argv[1..]);
        command
    };
    for (name, value) in &spec.env {
        command.env(name, value);
    }
    for name in &spec.env_remove {
        command.env_remove(name);
    }
    command
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group, so a timeout or a signal reaches everything
    // the command started, and so liveness can be checked for the group.
    command.process_group(0);
    // SAFETY: the closure runs between fork and exec and makes only
    // async-signal-safe system calls (prctl, close, getpid, write, read).
    unsafe {
        command.pre_exec(move || {
            // If idem dies (even by SIGKILL), the command is told to stop
            // rather than run on unobserved.
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)?;
            // Only idem's end stays open, so its death reads as end of file.
            libc::close(gate);
            let pid = (libc::getpid() as u32).to_ne_bytes();
            if libc::write(door, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
                return Err(io::Error::last_os_error());
            }
            let mut go = 0u8;
            loop {
                match libc::read(door, (&raw mut go).cast(), 1) {
                    1 => return Ok(()),
                    -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                    _ => return Err(io::Error::from_raw_os_error(libc::ECANCELED)),
                }
            }
        });
    }
    command
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

/// The most one read of the command's output takes.
const READ_CHUNK: usize = 64 * 1024;

/// Copies a pipe to `to` as it comes, keeping the last `capture` bytes.
/// Memory stays bounded: one read buffer plus the capture.
fn pump(mut from: impl Read, to: &mut File, capture: usize) -> Vec<u8> {
    let mut buffer = vec![0u8; READ_CHUNK];
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
            break;
        }
    }
    tail.into_bytes()
}

/// The last `capacity` bytes of a stream, in a ring of that size.
struct Tail {
    capacity: usize,
    bytes: VecDeque<u8>,
}

impl Tail {
    fn new(capacity: usize) -> Tail {
        // Sized once: pages that a short output never reaches stay unmapped.
        Tail {
            capacity,
            bytes: VecDeque::with_capacity(capacity),
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let chunk = &chunk[chunk.len().saturating_sub(self.capacity)..];
        let excess = (self.bytes.len() + chunk.len()).saturating_sub(self.capacity);
        self.bytes.drain(..excess);
        self.bytes.extend(chunk);
    }

    fn into_bytes(self) -> Vec<u8> {
        self.bytes.into()
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
        assert_eq!(tail.into_bytes(), b"rstu");
        let mut none = Tail::new(0);
        none.push(b"abc");
        assert!(none.into_bytes().is_empty());
    }
}
