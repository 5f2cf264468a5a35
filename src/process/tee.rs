//! The output tee: each stream of the command's output passed on as it
//! comes (or held for later) while its tail is kept for the ledger.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsFd;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{Builder, Scope, ScopedJoinHandle};

use anyhow::{Context, Result};

use super::buffer::{out_of_memory, zeroed};
use super::stdin::Spool;
use crate::exit;

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

/// Per stream (stdout, stderr): the last byte the command wrote through to
/// idem's own was not a newline, so idem's next line must start a new one.
static OPEN_LINE: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

/// idem's stdout and stderr are one file: the command's last byte on
/// either is the one idem's line follows.
static SHARED: AtomicBool = AtomicBool::new(false);

/// Says whether idem's stdout and stderr are one file, for [`line_owed`].
pub fn share_lines(shared: bool) {
    SHARED.store(shared, Ordering::Relaxed);
}

/// Whether idem owes a newline before its next line on stderr: the
/// command's output there (or on stdout, when both are one file) stopped
/// mid-line. Asking settles it: the caller writes that newline.
pub fn line_owed() -> bool {
    let err = OPEN_LINE[1].swap(false, Ordering::Relaxed);
    let out = SHARED.load(Ordering::Relaxed) && OPEN_LINE[0].swap(false, Ordering::Relaxed);
    err || out
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
pub fn pump(
    mut from: impl Read,
    to: &mut File,
    (mut buffer, mut tail): (Vec<u8>, Tail),
    gone: &AtomicBool,
    open_line: Option<&AtomicBool>,
) -> (Vec<u8>, bool) {
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
        if let Some(open_line) = open_line {
            open_line.store(buffer[read - 1] != b'\n', Ordering::Relaxed);
        }
        // Grown only where memory allows: a refusal (ulimit -v) keeps the
        // small buffer rather than aborting idem mid-run.
        if read == buffer.len()
            && read < READ_CHUNK
            && buffer.try_reserve_exact(READ_CHUNK - read).is_ok()
        {
            buffer.resize(READ_CHUNK, 0);
        }
    }
    tail.into_bytes()
}

/// The last `capacity` bytes of a stream, in a ring of that size.
pub struct Tail {
    capacity: usize,
    bytes: VecDeque<u8>,
    /// Bytes were dropped from the front.
    cut: bool,
}

/// A pump's memory, set aside before its thread starts: its first read
/// buffer and its tail. Refused (ulimit -v), the attempt ends before the
/// command is let in, where an allocation failing in the thread would
/// abort idem and leave its run `running`.
pub fn room(capture: usize) -> io::Result<(Vec<u8>, Tail)> {
    let buffer = zeroed(FIRST_READ)?;
    // Sized once: pages that a short output never reaches stay unmapped.
    let mut bytes = VecDeque::new();
    bytes.try_reserve_exact(capture).map_err(out_of_memory)?;
    let tail = Tail {
        capacity: capture,
        bytes,
        cut: false,
    };
    Ok((buffer, tail))
}

impl Tail {
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

/// An output pump's thread: the tail it kept, and whether it was cut.
pub type Pump<'scope> = ScopedJoinHandle<'scope, (Vec<u8>, bool)>;

/// What an attempt's threads are given: the command's stdin from the
/// spool, and its output streams with where each goes.
pub struct Streams<'env> {
    pub spool: Option<(&'env Spool, OwnedFd)>,
    pub out: (OwnedFd, &'env mut Sink),
    /// None when stderr is merged into stdout.
    pub err: Option<(OwnedFd, &'env mut Sink)>,
    /// Bytes of each stream's tail to keep.
    pub capture: usize,
    /// Set to stop feeding stdin; set by a pump whose reader went away.
    pub fed: &'env AtomicBool,
    pub gone: &'env AtomicBool,
}

/// The threads of an attempt that started, and why one did not.
pub struct Tee<'scope> {
    pub out: Option<Pump<'scope>>,
    pub err: Option<Pump<'scope>>,
    /// The first thread the system refused (ulimit -u, pids.max), said.
    pub refused: Option<String>,
}

impl<'env> Streams<'env> {
    /// Starts the stdin feeder and the output pumps. A refused thread is
    /// said, not a panic: the attempt then ends as idem's failure.
    pub fn start<'scope>(self, scope: &'scope Scope<'scope, 'env>) -> Tee<'scope> {
        let Streams {
            spool,
            out,
            err,
            capture,
            fed,
            gone,
        } = self;
        let mut refused = None;
        if let Some((spool, write)) = spool {
            let feeder = spool
                .start()
                .and_then(|()| super::stdin::chunk())
                .and_then(|buffer| {
                    Builder::new()
                        .spawn_scoped(scope, move || spool.feed(buffer, File::from(write), fed))
                });
            started(feeder, "feed the command's stdin", &mut refused);
        }
        let mut pump_to = |(from, to): (OwnedFd, &'env mut Sink), stream: usize| {
            // Held output is shown whole, later: idem's lines meanwhile
            // follow what it wrote itself.
            let open_line = matches!(to, Sink::Live(_)).then(|| &OPEN_LINE[stream]);
            let pump = room(capture).and_then(|room| {
                Builder::new().spawn_scoped(scope, move || {
                    pump(File::from(from), to.writer(), room, gone, open_line)
                })
            });
            started(pump, "pass the command's output through", &mut refused)
        };
        let out = pump_to(out, 0);
        let err = err.and_then(|err| pump_to(err, 1));
        Tee { out, err, refused }
    }
}

/// A thread's handle, or None: the first refusal is kept in `refused`.
fn started<T>(spawned: io::Result<T>, to: &str, refused: &mut Option<String>) -> Option<T> {
    match spawned {
        Ok(handle) => Some(handle),
        Err(error) => {
            refused.get_or_insert_with(|| {
                format!(
                    "could not start a thread to {to}: {} (raise ulimit -u or ulimit -v, or the cgroup's pids.max)",
                    exit::io_words(&error)
                )
            });
            None
        }
    }
}

/// Raises its flag when dropped.
pub struct RaiseOnDrop<'a>(pub &'a AtomicBool);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::room;

    #[test]
    fn tail_keeps_the_last_bytes() {
        let mut tail = room(4).unwrap().1;
        for chunk in [&b"abc"[..], b"defgh", b"ij", b"klmnopqrstu"] {
            tail.push(chunk);
        }
        assert_eq!(tail.into_bytes(), (b"rstu".to_vec(), true));
        let mut none = room(0).unwrap().1;
        none.push(b"abc");
        assert_eq!(none.into_bytes(), (Vec::new(), true));
        let mut whole = room(8).unwrap().1;
        whole.push(b"12345678");
        assert_eq!(whole.into_bytes(), (b"12345678".to_vec(), false));
    }
}
