//! Whether a run of a local ledger is alive, asked of the kernel.
//!
//! Beside the ledger lies a lock file (`ledger.db-lock`). A run holds an
//! open-file-description lock on one byte of it, the byte at its key's row
//! id, from before its claim commits until the last process of the run is
//! gone: idem, the guardian that outlives idem, and the command (which
//! inherits the descriptor, as under `flock(1)`). The kernel drops the lock
//! when the last descriptor of that open file closes, however its holders
//! die, so "the byte is locked" is exactly "something of the run lives".
//!
//! A claim takes the byte exclusively (under the ledger's writers' lock),
//! then shares it: each attempt's processes hold it through an open file of
//! their own, so idem can tell whether anything of an attempt lives on
//! after its guardian, while any holder at all keeps every claim out.
//!
//! Why this and not pids: a pid means nothing in another PID namespace, under
//! `hidepid`, without `/proc`, after a host is renamed or on a restored
//! copy; open-file-description locks belong to the open file, not to a
//! process, and they cross PID namespaces, users and host names on one
//! kernel. A ledger copied to another machine carries no locks, so its
//! running heads are rightly dead there.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::libc;

/// The lock file of the ledger at `ledger`.
pub fn path_for(ledger: &Path) -> PathBuf {
    super::side_file(ledger, "-lock")
}

/// One claimed run's hold on its key's byte: a shared (read) lock, which
/// each attempt's processes share through an open file of their own, so
/// that idem can ask whether anything of an attempt still holds it. Claims
/// take the byte exclusively, so any holder at all keeps them out.
#[derive(Debug, Clone)]
pub struct Hold {
    file: Arc<OwnedFd>,
    path: PathBuf,
    slot: i64,
    /// Named locks (`--lock`) the run holds besides its key: their own
    /// open files, and their bytes, which each attempt's file holds too.
    named: Vec<(Arc<OwnedFd>, i64)>,
}

/// Named locks live above every key's byte: row ids never reach 2^62.
const NAMED_BASE: i64 = 1 << 62;

/// The byte of the named lock `name`: a pinned hash (SHA-256), so every
/// idem agrees without a table. Two names sharing a byte (one chance in a
/// trillion) would only exclude each other too, never overlap.
pub fn named_slot(name: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("idem-lock-v1\0{name}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    NAMED_BASE + (u64::from_le_bytes(bytes) >> 24) as i64
}

impl Hold {
    /// A new open file holding the byte too, for one attempt's processes
    /// to inherit (idem closes its copy once they have it), with the bytes
    /// of the named locks the run holds, so that they outlive idem with it.
    pub fn for_attempt(&self) -> io::Result<OwnedFd> {
        let file = open(&self.path, true)?;
        set(&file, self.slot, libc::F_RDLCK)?;
        for (_, slot) in &self.named {
            set(&file, *slot, libc::F_RDLCK)?;
        }
        Ok(OwnedFd::from(file))
    }

    /// Makes the named lock `lock` part of this run's hold.
    pub fn join(&mut self, lock: Hold) {
        self.named.push((lock.file, lock.slot));
        self.named.extend(lock.named);
    }

    /// Whether an open file other than idem's own holds the byte: processes
    /// of an attempt that are still alive.
    pub fn others_hold(&self) -> bool {
        let mut lock = byte(self.slot, libc::F_WRLCK);
        // SAFETY: fcntl with F_OFD_GETLK writes into the flock struct we own.
        let result =
            unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_GETLK, &raw mut lock) };
        // Unanswerable: presume they live, so nothing overlaps them.
        result != 0 || lock.l_type != libc::F_UNLCK as libc::c_short
    }
}

fn set(file: &impl AsRawFd, slot: i64, kind: libc::c_int) -> io::Result<()> {
    let mut lock = byte(slot, kind);
    // SAFETY: fcntl with F_OFD_SETLK reads the flock struct we own.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &raw mut lock) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The lock file, opened once per ledger for questions about its runs.
pub struct RunLocks {
    path: PathBuf,
    /// Opened lazily: a ledger on which nothing ever ran has no lock file,
    /// and the skip path never asks.
    probe: std::cell::OnceCell<File>,
}

impl RunLocks {
    pub fn new(ledger: &Path) -> RunLocks {
        RunLocks {
            path: path_for(ledger),
            probe: std::cell::OnceCell::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes key `slot`'s byte on a new open file description of its own;
    /// `None` when another open file (a live run of the key) holds it.
    pub fn take(&self, slot: i64) -> io::Result<Option<Hold>> {
        let file = open(&self.path, true)?;
        match set(&file, slot, libc::F_WRLCK) {
            // Taken alone; now shared, for the attempts to join (an atomic
            // conversion: no claim can slip in between).
            Ok(()) => set(&file, slot, libc::F_RDLCK)?,
            Err(error) if matches!(error.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                return Ok(None)
            }
            Err(error) => return Err(error),
        }
        Ok(Some(Hold {
            file: Arc::new(OwnedFd::from(file)),
            path: self.path.clone(),
            slot,
            named: Vec::new(),
        }))
    }

    /// Whether some run holds key `slot`'s byte. A missing lock file holds
    /// nothing: no idem that locks has run a key of this ledger.
    pub fn held(&self, slot: i64) -> io::Result<bool> {
        let probe = match self.probe.get() {
            Some(file) => file,
            None => match open(&self.path, false) {
                Ok(file) => self.probe.get_or_init(|| file),
                Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(error) => return Err(error),
            },
        };
        let mut lock = byte(slot, libc::F_WRLCK);
        // SAFETY: fcntl with F_OFD_GETLK writes into the flock struct we own.
        let result = unsafe { libc::fcntl(probe.as_raw_fd(), libc::F_OFD_GETLK, &raw mut lock) };
        if result != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
    }
}

fn byte(slot: i64, kind: libc::c_int) -> libc::flock {
    // SAFETY: flock is plain old data; all-zero is a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = slot;
    lock.l_len = 1;
    // l_pid must be 0 for open-file-description locks.
    lock.l_pid = 0;
    lock
}

/// Opens the lock file, never through a symbolic link, creating it 0600
/// when `create` (writers); readers that may not write open it read-only,
/// which is enough to ask who holds a byte.
fn open(path: &Path, create: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if create {
        options.write(true).create(true).truncate(false).mode(0o600);
    }
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_is_held_while_any_holder_lives() {
        let dir = tempfile::tempdir().expect("a tempdir");
        let ledger = dir.path().join("ledger.db");
        let locks = RunLocks::new(&ledger);
        assert!(!locks.held(7).expect("asks"), "no lock file holds nothing");
        let hold = locks.take(7).expect("takes").expect("free");
        assert!(locks.held(7).expect("asks"));
        assert!(!locks.held(8).expect("asks"));
        assert!(
            locks.take(7).expect("asks").is_none(),
            "one holder at a time"
        );
        assert!(!hold.others_hold());
        let attempt = hold.for_attempt().expect("joins");
        assert!(hold.others_hold());
        let shared = hold.clone();
        drop(hold);
        assert!(locks.held(7).expect("asks"), "a clone still holds it");
        drop(shared);
        assert!(locks.held(7).expect("asks"), "the attempt still holds it");
        assert!(locks.take(7).expect("asks").is_none());
        drop(attempt);
        assert!(!locks.held(7).expect("asks"));
        assert!(locks.take(7).expect("takes").is_some());
    }
}
