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
//!
//! The file can move under a run: a tmp cleaner deletes it, `rsync`
//! replaces it. A lock on a file no longer at the path guards nothing, so a
//! byte is taken only on the file found at the path once it is locked (its
//! device and inode, and a link left), and a claim records which file its
//! run holds ([`Hold::stamp`]): a later judge that finds another file there
//! cannot ask the kernel about that run, and presumes it alive unless the
//! host rebooted since its claim; a claim recorded in another ledger file
//! (this one is a copy) is over. (The bytes
//! are not kept in the ledger file itself: closing any descriptor of that
//! file drops SQLite's own POSIX locks on it, and an idem of this kind and
//! an older one must keep seeing each other's runs.)

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
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
    /// Which file this is, as a claim records it.
    stamp: i64,
    /// Which file this is, for its attempts to open it again: its device
    /// and inode.
    identity: (u64, u64),
    /// Named locks (`--lock`) the run holds besides its key: their own
    /// open files, and their bytes, which each attempt's file holds too.
    named: Vec<(Arc<OwnedFd>, i64)>,
}

/// Named locks live above every key's byte: row ids never reach 2^62.
const NAMED_BASE: i64 = 1 << 62;

/// The most slots a named lock has (`--lock NAME:N`): the bytes after its
/// slot 0 that a take counts.
pub const MAX_NAMED_SLOTS: u32 = 1000;

/// A claim's `owner_lock` that names no lock file: an older idem's, whose
/// run is judged by whatever lock file is at the path.
pub const UNSTAMPED: i64 = 1;

/// How often a take tries again when the file it locked was replaced
/// meanwhile: each retry means someone deleted or renamed it just then.
const TAKE_TRIES: u32 = 8;

/// Which files a claim's run locks, as its `owner_lock` records them: the
/// low 31 bits of the ledger file's inode and of the lock file's, under
/// bit 62, so never 0 (no lock) nor [`UNSTAMPED`]; an older idem reads any
/// value but 0 as "locked". Devices are left out: containers sharing the
/// files may see them on devices numbered apart, and the inode of a file
/// still held open is not reused. Two inodes alike in their low bits only
/// make a judge ask the file at the path, as every judge did before stamps.
fn stamp(ledger: u64, lock: u64) -> i64 {
    const LOW: u64 = (1 << 31) - 1;
    (1 << 62) | ((ledger & LOW) << 31 | lock & LOW) as i64
}

/// What a judge makes of a claim's `stamp` beside the files there now.
#[derive(Debug, PartialEq, Eq)]
enum Stamped {
    /// The files the run locked, or a claim that named none: ask them.
    Here,
    /// Another ledger file's claim: this one is a copy, which no process
    /// of that run records to, so the run is over here.
    Copied,
    /// The ledger's lock file was deleted or replaced since: the kernel
    /// cannot say whether the run lives.
    Moved,
}

/// A ledger part of 0 is a ledger file whose inode could not be read (or
/// ends in 31 zero bits): it tells no copy, so nothing is judged over by it.
fn stamped(recorded: i64, now: i64) -> Stamped {
    const LEDGER: i64 = ((1 << 31) - 1) << 31;
    let (was, is) = (recorded & LEDGER, now & LEDGER);
    if recorded == UNSTAMPED || recorded == now {
        Stamped::Here
    } else if was != is && was != 0 && is != 0 {
        Stamped::Copied
    } else {
        Stamped::Moved
    }
}

/// The first byte of the named lock `name`, its slot 0 (its slot i is the
/// i-th byte after): a pinned hash (SHA-256), so every idem agrees without
/// a table. Two names whose slots share bytes (about one chance in 500 million)
/// would only exclude each other too, never overlap.
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
        let file = self.reopen()?;
        set(&file, self.slot, libc::F_RDLCK)?;
        for (_, slot) in &self.named {
            set(&file, *slot, libc::F_RDLCK)?;
        }
        Ok(OwnedFd::from(file))
    }

    /// Which lock file the hold is on, for its claim to record.
    pub fn stamp(&self) -> i64 {
        self.stamp
    }

    /// A new open file of the very file this hold is on: by its path while
    /// it is still there, else through the kernel's link to the open file
    /// (a lock file deleted or replaced during the run).
    fn reopen(&self) -> io::Result<File> {
        let same = |(file, metadata): (File, Metadata)| {
            ((metadata.dev(), metadata.ino()) == self.identity).then_some(file)
        };
        // Whatever is at the path now (nothing, another file, another
        // user's plant), the kernel's link still leads to the run's file.
        let me = nix::unistd::geteuid().as_raw();
        if let Some(file) = open_checked(&self.path, false, me).ok().and_then(same) {
            return Ok(file);
        }
        let link = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(link)?;
        let metadata = file.metadata()?;
        same((file, metadata)).ok_or_else(|| {
            io::Error::other("the lock file was replaced during the run and cannot be reopened")
        })
    }

    /// Makes the named lock `lock` part of this run's hold.
    pub fn join(&mut self, lock: Hold) {
        self.named.push((lock.file, lock.slot));
        self.named.extend(lock.named);
    }

    /// The processes other than idem holding the byte through a descriptor
    /// (see [`lockers`](crate::process::lockers)), to name who keeps the
    /// run's lock once its attempt ended.
    pub fn holders(&self) -> Vec<crate::process::holders::Living> {
        crate::process::lockers::lockers(self.identity.0, self.identity.1, Some(self.slot))
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
    ledger: PathBuf,
    /// Opened lazily: a ledger on which nothing ever ran has no lock file,
    /// and the skip path never asks.
    probe: std::cell::OnceCell<File>,
    /// The ledger file's inode, read once it is needed.
    ledger_inode: std::cell::OnceCell<u64>,
    /// Who besides root may own the lock file: this user, or for a
    /// reader the ledger's owner, whose runs lock it.
    trusted: u32,
    /// Whether a lock file this user may not read leaves a run unjudged
    /// (a reader of another user's ledger) rather than failing.
    reader: bool,
}

impl RunLocks {
    pub fn new(ledger: &Path) -> RunLocks {
        RunLocks {
            path: path_for(ledger),
            ledger: ledger.to_owned(),
            probe: std::cell::OnceCell::new(),
            ledger_inode: std::cell::OnceCell::new(),
            trusted: nix::unistd::geteuid().as_raw(),
            reader: false,
        }
    }

    /// The locks of a ledger that `owner` owns, as another user that only
    /// reads it sees them: a lock file of the owner's is trusted, and one
    /// this user may not read leaves its runs unjudged.
    pub fn for_reader(ledger: &Path, owner: u32) -> RunLocks {
        RunLocks {
            trusted: owner,
            reader: true,
            ..RunLocks::new(ledger)
        }
    }

    /// The stamp of the lock file `metadata` is of, on this ledger.
    fn stamp_of(&self, metadata: &Metadata) -> io::Result<i64> {
        let ledger = match self.ledger_inode.get() {
            Some(inode) => *inode,
            None => *self.ledger_inode.get_or_init(|| ledger_inode(&self.ledger)),
        };
        Ok(stamp(ledger, metadata.ino()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes key `slot`'s byte on a new open file description of its own;
    /// `None` when another open file (a live run of the key) holds it.
    pub fn take(&self, slot: i64) -> io::Result<Option<Hold>> {
        for _ in 0..TAKE_TRIES {
            let me = nix::unistd::geteuid().as_raw();
            let (file, locked) = open_checked(&self.path, true, me)?;
            match set(&file, slot, libc::F_WRLCK) {
                Ok(()) => {}
                Err(error) if matches!(error.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                    return Ok(None)
                }
                Err(error) => return Err(error),
            }
            // Locked: but a lock on a file deleted or replaced since it was
            // opened guards nothing, so take it again on the one there now.
            if !still_at(&locked, &self.path)? {
                continue;
            }
            let stamp = self.stamp_of(&locked)?;
            let identity = (locked.dev(), locked.ino());
            // Taken alone; now shared, for the attempts to join (an atomic
            // conversion: no claim can slip in between).
            set(&file, slot, libc::F_RDLCK)?;
            return Ok(Some(Hold {
                file: Arc::new(OwnedFd::from(file)),
                path: self.path.clone(),
                slot,
                stamp,
                identity,
                named: Vec::new(),
            }));
        }
        Err(io::Error::other(
            "it was deleted or replaced each time it was locked; find what removes it",
        ))
    }

    /// Takes a slot of the named lock whose slot 0 is byte `first`: the
    /// first free byte of its `slots`, kept only while fewer than `slots`
    /// other runs hold one of its bytes (runs that gave it more slots may
    /// hold bytes past ours). `None` when it is full.
    pub fn take_named(&self, first: i64, slots: u32) -> io::Result<Option<Hold>> {
        for slot in 0..i64::from(slots) {
            let Some(hold) = self.take(first + slot)? else {
                continue;
            };
            // Counted on the hold's own file, whose byte is not counted:
            // with it, at most `slots` runs hold the lock.
            let range = first..first + i64::from(MAX_NAMED_SLOTS);
            if bytes_held(&*hold.file, range, slots)? >= slots {
                return Ok(None);
            }
            return Ok(Some(hold));
        }
        Ok(None)
    }

    /// Whether some run holds key `slot`'s byte. A missing lock file holds
    /// nothing: no idem that locks has run a key of this ledger.
    pub fn held(&self, slot: i64) -> io::Result<bool> {
        match self.probe()? {
            Some(probe) => byte_held(probe, slot),
            None => Ok(false),
        }
    }

    /// Whether the run whose claim recorded `stamp` holds key `slot`'s
    /// byte; `None` when the lock file it held is gone or replaced, so the
    /// kernel cannot say.
    pub fn judge(&self, slot: i64, stamp: i64) -> io::Result<Option<bool>> {
        let probe = match self.probe() {
            Err(error) if self.reader && error.kind() == io::ErrorKind::PermissionDenied => {
                return Ok(None)
            }
            probe => probe?,
        };
        let Some(probe) = probe else {
            // No lock file: the ledger's own inode still tells a copy.
            let now = self.stamp_of_none()?;
            return Ok(match stamped(stamp, now) {
                Stamped::Here | Stamped::Copied => Some(false),
                Stamped::Moved => None,
            });
        };
        match stamped(stamp, self.stamp_of(&probe.metadata()?)?) {
            Stamped::Here => byte_held(probe, slot).map(Some),
            Stamped::Copied => Ok(Some(false)),
            Stamped::Moved => Ok(None),
        }
    }

    /// The stamp a claim would make on this ledger with no lock file: it
    /// matches no claim's lock file, only its ledger.
    fn stamp_of_none(&self) -> io::Result<i64> {
        Ok(stamp(ledger_inode(&self.ledger), 0))
    }

    /// What a claim that took a byte on the file of stamp `taken` makes of
    /// a head claimed with `recorded`: whether that run is over (`Some`),
    /// or cannot be judged by the kernel (`None`).
    pub fn judge_taken(taken: i64, recorded: i64) -> Option<bool> {
        match stamped(recorded, taken) {
            Stamped::Here | Stamped::Copied => Some(false),
            Stamped::Moved => None,
        }
    }

    /// The lock file opened to ask about bytes; `None` when there is none.
    fn probe(&self) -> io::Result<Option<&File>> {
        if let Some(file) = self.probe.get() {
            return Ok(Some(file));
        }
        match open_checked(&self.path, false, self.trusted) {
            Ok((file, _)) => Ok(Some(self.probe.get_or_init(|| file))),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }
}

/// The ledger file's inode; 0 when it cannot be read (then no stamp tells
/// a copy, and judges ask the lock file at the path).
fn ledger_inode(ledger: &Path) -> u64 {
    std::fs::metadata(ledger).map_or(0, |metadata| metadata.ino())
}

/// How many bytes of `range` open files other than `file` lock, counting
/// up to `cap`: one question per held byte and per gap between them, as
/// the kernel answers with one conflicting lock at a time.
fn bytes_held(file: &impl AsRawFd, range: std::ops::Range<i64>, cap: u32) -> io::Result<u32> {
    let mut held = 0u32;
    let mut gaps = vec![range];
    while let Some(gap) = gaps.pop() {
        if gap.is_empty() || held >= cap {
            continue;
        }
        let mut lock = byte(gap.start, libc::F_WRLCK);
        lock.l_len = gap.end - gap.start;
        // SAFETY: fcntl with F_OFD_GETLK writes into the flock struct we own.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &raw mut lock) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if lock.l_type == libc::F_UNLCK as libc::c_short {
            continue;
        }
        // A lock reaching past the range (or to the end, l_len 0) is
        // counted within it; several bytes of one holder count as several,
        // which only keeps a run out.
        let start = lock.l_start.max(gap.start);
        let end = match lock.l_len {
            0 => gap.end,
            len => (lock.l_start + len).min(gap.end),
        };
        held = held.saturating_add(u32::try_from(end - start).unwrap_or(u32::MAX).max(1));
        gaps.push(gap.start..start);
        gaps.push(end.max(start + 1)..gap.end);
    }
    Ok(held)
}

fn byte_held(probe: &File, slot: i64) -> io::Result<bool> {
    let mut lock = byte(slot, libc::F_WRLCK);
    // SAFETY: fcntl with F_OFD_GETLK writes into the flock struct we own.
    let result = unsafe { libc::fcntl(probe.as_raw_fd(), libc::F_OFD_GETLK, &raw mut lock) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
}

/// Whether the file opened as `opened` is still the one at `path`: not
/// deleted or replaced since. While it is open its inode cannot be reused,
/// so the same device and inode at the path are the same, linked file.
fn still_at(opened: &Metadata, path: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(there) => Ok(opened.dev() == there.dev() && opened.ino() == there.ino()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
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
/// which is enough to ask who holds a byte. Like the ledger's -wal and
/// -shm, it must be this user's own (or root's, who could anything) and
/// writable by no one else: whoever can lock its bytes can keep keys busy,
/// or let two runs of one key overlap: owned by root or by `trusted`.
/// Returns what the file was found to be.
fn open_checked(path: &Path, create: bool, trusted: u32) -> io::Result<(File, Metadata)> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK);
    if create {
        options.write(true).create(true).truncate(false).mode(0o600);
    }
    let file = options.open(path)?;
    let metadata = file.metadata()?;
    let wrong = if !metadata.is_file() {
        Some("it is not a regular file".to_owned())
    } else if metadata.uid() != trusted && metadata.uid() != 0 {
        Some(format!(
            "it belongs to uid {}, not to uid {trusted}",
            metadata.uid()
        ))
    } else if metadata.mode() & 0o022 != 0 {
        Some(format!(
            "it is mode {:04o}: others can write it",
            metadata.mode() & 0o7777
        ))
    } else {
        None
    };
    match wrong {
        Some(wrong) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{wrong}; remove it (idem makes its own, private)"),
        )),
        None => Ok((file, metadata)),
    }
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

    /// A named lock's slots: the first free byte of its N, none once N
    /// runs hold it, whatever N those runs gave.
    #[test]
    fn a_named_lock_has_as_many_holders_as_its_slots() {
        let dir = tempfile::tempdir().expect("a tempdir");
        let locks = RunLocks::new(&dir.path().join("ledger.db"));
        let first = named_slot("backup");
        let one = locks.take_named(first, 2).expect("takes").expect("free");
        let two = locks.take_named(first, 2).expect("takes").expect("free");
        assert_eq!((one.slot, two.slot), (first, first + 1));
        assert!(locks.take_named(first, 2).expect("asks").is_none());
        assert!(locks.take_named(first, 1).expect("asks").is_none());
        let three = locks.take_named(first, 3).expect("takes").expect("free");
        assert_eq!(three.slot, first + 2);
        drop(one);
        // Slot 0 is free, but two runs hold the lock: a run of 2 waits,
        // a run of 3 takes it.
        assert!(locks.take_named(first, 2).expect("asks").is_none());
        let four = locks.take_named(first, 3).expect("takes").expect("free");
        assert_eq!(four.slot, first);
        drop((two, four));
        assert!(locks.take_named(first, 1).expect("asks").is_none());
        let again = locks.take_named(first, 2).expect("takes").expect("free");
        assert_eq!(again.slot, first);
        drop(three);
        assert!(locks.take_named(first + 1, 1).expect("asks").is_some());
    }

    /// A lock file deleted, then made anew by another claim, cannot judge
    /// the run that held the old one; the run's attempts still join the
    /// file it holds.
    #[test]
    fn a_lock_file_deleted_under_a_hold_says_nothing_of_it() {
        let dir = tempfile::tempdir().expect("a tempdir");
        let ledger = dir.path().join("ledger.db");
        std::fs::write(&ledger, b"").expect("a ledger");
        let hold = RunLocks::new(&ledger)
            .take(7)
            .expect("takes")
            .expect("free");
        std::fs::remove_file(path_for(&ledger)).expect("deletes");
        let locks = RunLocks::new(&ledger);
        assert_eq!(locks.judge(7, hold.stamp()).expect("asks"), None);
        assert_eq!(locks.judge(7, UNSTAMPED).expect("asks"), Some(false));
        let other = locks.take(7).expect("takes").expect("a new file's byte");
        assert_ne!(other.stamp(), hold.stamp());
        let locks = RunLocks::new(&ledger);
        assert_eq!(locks.judge(7, hold.stamp()).expect("asks"), None);
        assert_eq!(locks.judge(7, other.stamp()).expect("asks"), Some(true));
        // A copy of the ledger elsewhere: the run's locks are not its own.
        let copy = dir.path().join("copy.db");
        std::fs::write(&copy, b"").expect("a copy");
        assert_eq!(
            RunLocks::new(&copy).judge(7, hold.stamp()).expect("asks"),
            Some(false)
        );
        let attempt = hold.for_attempt().expect("joins the deleted file");
        assert!(hold.others_hold());
        drop(attempt);
        assert!(!hold.others_hold());
    }
}
