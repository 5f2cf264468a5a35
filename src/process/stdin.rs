//! stdin that is not a terminal, kept for retries: what idem reads of it
//! goes, as it is read, to a private temporary file, and each attempt is fed
//! the whole of it from the start, then whatever still comes, as `retry(1)`
//! does. Memory stays bounded (one buffer per thread) whatever its size.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};

const CHUNK: usize = 64 * 1024;

/// A buffer of [`CHUNK`] bytes, set aside before the thread that uses it
/// starts: refused (ulimit -v), the thread is not started and the attempt
/// ends before its command is let in, where an allocation failing in the
/// thread would abort idem.
pub fn chunk() -> io::Result<Vec<u8>> {
    super::buffer::zeroed(CHUNK)
}

/// How much of stdin is in the spool, and whether it has ended.
#[derive(Default)]
struct Spooled {
    bytes: u64,
    ended: bool,
}

pub struct Spool {
    file: Arc<File>,
    state: Arc<(Mutex<Spooled>, Condvar)>,
    /// Set once the reader thread runs.
    reading: OnceLock<()>,
}

impl Spool {
    /// Makes the spool's file (before the claim, so that a failure leaves
    /// nothing claimed); stdin is read from the first attempt on.
    pub fn new() -> Result<Spool> {
        let file = Arc::new(
            tempfile::tempfile()
                .context("could not create a temporary file to keep stdin for retries")?,
        );
        Ok(Spool {
            file,
            state: Arc::default(),
            reading: OnceLock::new(),
        })
    }

    /// Starts spooling idem's stdin, once (before the first feed); an
    /// error when the system refuses the thread, and a later attempt asks
    /// again.
    pub fn start(&self) -> io::Result<()> {
        if self.reading.get().is_none() {
            self.start_reading()?;
            let _ = self.reading.set(());
        }
        Ok(())
    }

    /// Starts spooling idem's stdin. The reader thread lives as long as
    /// stdin does; it never holds idem up at exit.
    fn start_reading(&self) -> io::Result<()> {
        let (spool, shared) = (Arc::clone(&self.file), Arc::clone(&self.state));
        let mut buffer = chunk()?;
        std::thread::Builder::new().spawn(move || {
            let mut stdin = io::stdin().lock();
            let mut at = 0u64;
            loop {
                let read = match stdin.read(&mut buffer) {
                    Ok(0) | Err(_) => 0,
                    Ok(read) => read,
                };
                // A spool that cannot be written ends stdin for the command
                // rather than feed it a gap.
                let kept = read > 0 && spool.write_all_at(&buffer[..read], at).is_ok();
                let (lock, changed) = &*shared;
                if let Ok(mut spooled) = lock.lock() {
                    if kept {
                        at += read as u64;
                        spooled.bytes = at;
                    } else {
                        spooled.ended = true;
                    }
                }
                changed.notify_all();
                if !kept {
                    return;
                }
            }
        })?;
        Ok(())
    }

    /// Feeds one attempt through `to` (the write end of its stdin pipe)
    /// from the start, until stdin ends, the command closes its end, or
    /// `stop` is set. The spool is read once [`Spool::start`] has begun.
    /// `buffer`: from [`chunk`].
    pub fn feed(&self, mut buffer: Vec<u8>, mut to: File, stop: &AtomicBool) {
        let mut at = 0u64;
        let (lock, changed) = &*self.state;
        loop {
            let (available, ended) = {
                let Ok(mut spooled) = lock.lock() else { return };
                while spooled.bytes <= at && !spooled.ended && !stop.load(Ordering::Relaxed) {
                    spooled = match changed.wait_timeout(spooled, Duration::from_millis(100)) {
                        Ok((spooled, _)) => spooled,
                        Err(_) => return,
                    };
                }
                (spooled.bytes, spooled.ended)
            };
            if at < available {
                let want = ((available - at) as usize).min(CHUNK);
                let Ok(read) = self.file.read_at(&mut buffer[..want], at) else {
                    return;
                };
                if read == 0 || to.write_all(&buffer[..read]).is_err() {
                    return; // the command closed its stdin
                }
                at += read as u64;
            } else if ended || stop.load(Ordering::Relaxed) {
                return; // dropping `to` ends the command's stdin
            }
        }
    }
}
