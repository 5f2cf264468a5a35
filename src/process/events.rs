//! What the supervisor waits for, in the supervisor's own thread: idem's
//! signals, the guardian's reports and other threads' requests to stop,
//! all waking one `poll`. Signals and requests ring a self-pipe (one byte:
//! the signal's number, or 0 for a request in the queue); the guardian's
//! reports come on its socket. A thread for each source would cost about
//! 0.1 ms a run apiece to start and end (a static binary with four idle
//! threads: 1.00 ms, against 0.57 ms with none).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::libc;
use nix::sys::wait::WaitStatus;
use signal_hook::consts::SIGCONT;

use super::signals::{self, CAUGHT};
use super::wire::{self, Report};

/// Something the supervisor waits for.
pub enum Event {
    /// The guardian exited: every process of the attempt is gone.
    Ended(WaitStatus),
    /// The guardian told something (see `wire`).
    Told(Report),
    Signal(i32),
    /// idem was continued after a stop (Ctrl-Z, then `fg`).
    Continued,
    /// Another thread asks to stop the command (see `Stopper`).
    Stop {
        reason: String,
        grace: Duration,
    },
    /// A person asked, through the ledger, to stop the run (`idem stop`):
    /// `signal`, then SIGKILL after `--kill-after`, as a forwarded signal.
    Requested {
        signal: i32,
    },
}

/// The byte that says a request waits in the queue.
const REQUEST: u8 = 0;

/// The self-pipe, made once: the handlers write to it for the rest of the
/// process's life, so neither end is ever closed.
fn self_pipe() -> io::Result<(RawFd, RawFd)> {
    static PIPE: OnceLock<Result<(RawFd, RawFd), i32>> = OnceLock::new();
    let made = PIPE.get_or_init(|| {
        let (read, write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|errno| errno as i32)?;
        let ends = (read.as_raw_fd(), write.as_raw_fd());
        std::mem::forget((read, write));
        for signal in CAUGHT {
            // SIGCONT is only watched for: ignoring it never stops a
            // continue, so there is nothing to keep.
            if signal != SIGCONT && signals::keep_if_ignored(signal) {
                continue;
            }
            let write = ends.1;
            // SAFETY: the handler makes one write(2), async-signal-safe,
            // to a descriptor that stays open until the process ends.
            unsafe { signal_hook::low_level::register(signal, move || ring(write, signal as u8)) }
                .map_err(|error| error.raw_os_error().unwrap_or(libc::EINVAL))?;
        }
        Ok(ends)
    });
    made.map_err(io::Error::from_raw_os_error)
}

/// Writes `byte` to the self-pipe; a full pipe already wakes the reader.
fn ring(write: RawFd, byte: u8) {
    // SAFETY: a one-byte write from a live buffer.
    unsafe { libc::write(write, (&raw const byte).cast(), 1) };
}

/// The guardian followed while its command runs: its socket, read for
/// reports until it closes, and its pid, reaped then.
pub struct Watched {
    reader: Option<UnixStream>,
    pid: i32,
    /// What the attempt used, once the guardian is reaped.
    pub usage: super::Usage,
}

impl Watched {
    pub fn new(reader: UnixStream, pid: i32) -> Watched {
        Watched {
            reader: Some(reader),
            pid,
            usage: super::Usage::default(),
        }
    }

    /// The guardian's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

pub struct Events {
    /// The self-pipe's ends (see `self_pipe`).
    wake: RawFd,
    bell: RawFd,
    sender: Sender<Event>,
    requests: Receiver<Event>,
    /// Events read but not yet handed out.
    queue: RefCell<VecDeque<Event>>,
}

impl Events {
    /// Installs handlers for SIGINT, SIGTERM, SIGHUP and SIGCONT: from now
    /// on they are events here instead of ending idem (but for those idem
    /// was started with ignored, see [`ignored_at_start`]).
    pub fn new() -> Result<Events> {
        let (wake, bell) = self_pipe().context("could not install signal handlers")?;
        let (sender, requests) = mpsc::channel();
        Ok(Events {
            wake,
            bell,
            sender,
            requests,
            queue: Default::default(),
        })
    }

    /// A handle for another thread to queue a request.
    pub fn requester(&self) -> Requester {
        Requester {
            sender: self.sender.clone(),
            bell: self.bell,
        }
    }

    /// The next event, waiting until `at` at the most (None then, or with
    /// `at` None, never). With `watched`, the guardian's reports and end are
    /// events too.
    pub fn next(&self, at: Option<Instant>, mut watched: Option<&mut Watched>) -> Option<Event> {
        loop {
            if let Some(event) = self.ready() {
                return Some(event);
            }
            let timeout = match at {
                None => -1,
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    // Rounded up, so that waking finds `at` passed.
                    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
                }
            };
            let reader = watched
                .as_deref()
                .and_then(|watched| watched.reader.as_ref())
                .map_or(-1, AsRawFd::as_raw_fd);
            let mut polled = [
                libc::pollfd {
                    fd: self.wake,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: reader,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two pollfd structs we own.
            let ready = unsafe { libc::poll(polled.as_mut_ptr(), 2, timeout) };
            if ready == 0 {
                return None;
            }
            // An error is a signal's arrival (EINTR): its byte is in the pipe.
            if ready > 0 && polled[1].revents != 0 {
                if let Some(watched) = watched.as_deref_mut() {
                    self.follow(watched);
                }
            }
        }
    }

    /// An event that needs no waiting, if there is one.
    pub fn ready(&self) -> Option<Event> {
        self.drain();
        let queued = self.queue.borrow_mut().pop_front();
        queued.or_else(|| self.requests.try_recv().ok())
    }

    /// Turns what the self-pipe holds into events.
    fn drain(&self) {
        let mut bytes = [0u8; 64];
        // SAFETY: the read end is open for the process's life.
        let wake = unsafe { BorrowedFd::borrow_raw(self.wake) };
        while let Ok(read @ 1..) = nix::unistd::read(wake, &mut bytes) {
            let mut queue = self.queue.borrow_mut();
            for byte in bytes[..read].iter().filter(|byte| **byte != REQUEST) {
                queue.push_back(match i32::from(*byte) {
                    SIGCONT => Event::Continued,
                    signal => Event::Signal(signal),
                });
            }
        }
    }

    /// Reads the guardian's next report, or its end: reports first, then
    /// its exit (its socket closes only as it exits), so the main process's
    /// status is known when the attempt ends.
    fn follow(&self, watched: &mut Watched) {
        let Some(reader) = watched.reader.as_mut() else {
            return;
        };
        let event = match wire::read_report(reader) {
            Some(report) => Event::Told(report),
            None => {
                watched.reader = None;
                let (status, usage) = super::spawn::reap_with_usage(watched.pid);
                watched.usage = usage;
                Event::Ended(status)
            }
        };
        self.queue.borrow_mut().push_back(event);
    }
}

/// Queues requests for the supervisor from another thread.
#[derive(Clone)]
pub struct Requester {
    sender: Sender<Event>,
    bell: RawFd,
}

impl Requester {
    pub fn send(&self, event: Event) {
        if self.sender.send(event).is_ok() {
            ring(self.bell, REQUEST);
        }
    }
}
