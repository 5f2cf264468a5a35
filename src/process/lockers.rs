//! Who holds a byte of a lock file: the processes with an open file of it
//! that locks that byte. An open-file-description lock belongs to the open
//! file, not to a pid (`/proc/locks` shows its pid as -1), so each
//! process's descriptors are looked at instead: `/proc/<pid>/fd/<n>` says
//! which file a descriptor is, and `/proc/<pid>/fdinfo/<n>` which locks its
//! open file holds. Only the processes this user may read are seen (all of
//! them for root). Asked only where idem would otherwise wait without a
//! word: it reads every descriptor of every process.

use std::fs;
use std::os::unix::fs::MetadataExt;

use super::holders::{comm, Living};

/// The processes other than this one holding byte `slot` of the file of
/// `device` and `inode` through a descriptor, in pid order; `slot` `None`
/// counts any byte.
pub fn lockers(device: u64, inode: u64, slot: Option<i64>) -> Vec<Living> {
    let me = std::process::id() as i32;
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me && locks(*pid, device, inode, slot))
        .collect();
    pids.sort_unstable();
    pids.into_iter()
        .map(|pid| Living {
            pid,
            name: comm(pid).unwrap_or_else(|| "?".to_owned()),
        })
        .collect()
}

/// Whether a descriptor of `pid` is an open file of the file and locks
/// `slot` (any byte, for `None`).
fn locks(pid: i32, device: u64, inode: u64, slot: Option<i64>) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        let same = fs::metadata(fd.path())
            .is_ok_and(|metadata| metadata.dev() == device && metadata.ino() == inode);
        same && fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .is_ok_and(|info| info.lines().any(|line| covers(line, inode, slot)))
    })
}

/// Whether an fdinfo line is a lock held on `inode` over `slot`:
/// `lock: 1: OFDLCK ADVISORY  READ -1 fe:00:1234 7 7` (a waiter's line,
/// with `->`, holds nothing).
fn covers(line: &str, inode: u64, slot: Option<i64>) -> bool {
    let Some(lock) = line.strip_prefix("lock:") else {
        return false;
    };
    let fields: Vec<&str> = lock.split_whitespace().collect();
    if fields.contains(&"->") || fields.len() < 8 {
        return false;
    }
    let on_inode = fields[5]
        .rsplit(':')
        .next()
        .and_then(|ino| ino.parse::<u64>().ok())
        == Some(inode);
    let start = fields[6].parse::<i64>().ok();
    let end = match fields[7] {
        "EOF" => Some(i64::MAX),
        end => end.parse::<i64>().ok(),
    };
    on_inode
        && match (slot, start, end) {
            (None, _, _) => true,
            (Some(slot), Some(start), Some(end)) => start <= slot && slot <= end,
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_line_covers_its_bytes_of_its_file() {
        let line = "lock:\t1: OFDLCK ADVISORY  READ -1 fe:00:1234 7 9";
        assert!(covers(line, 1234, Some(7)));
        assert!(covers(line, 1234, Some(9)));
        assert!(covers(line, 1234, None));
        assert!(!covers(line, 1234, Some(10)));
        assert!(!covers(line, 1235, Some(7)));
        let to_end = "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:1234 0 EOF";
        assert!(covers(to_end, 1234, Some(1 << 62)));
        let waiter = "lock:\t1: -> OFDLCK ADVISORY  WRITE -1 fe:00:1234 7 7";
        assert!(!covers(waiter, 1234, Some(7)));
        assert!(!covers("pos:\t0", 1234, None));
    }

    #[test]
    fn a_child_holding_a_byte_is_found_by_its_descriptor() {
        let dir = tempfile::tempdir().expect("a tempdir");
        let ledger = dir.path().join("ledger.db");
        let locks = crate::ledger::runlock::RunLocks::new(&ledger);
        let hold = locks.take(7).expect("takes").expect("free");
        let metadata = fs::metadata(locks.path()).expect("the lock file");
        let (device, inode) = (metadata.dev(), metadata.ino());
        assert!(
            lockers(device, inode, Some(7)).is_empty(),
            "only idem holds it"
        );
        let attempt = hold.for_attempt().expect("joins");
        let mut child = sleep_inheriting(&attempt).expect("sleep starts");
        drop(attempt);
        let pid = child.id() as i32;
        let mut found = Vec::new();
        for _ in 0..100 {
            found = lockers(device, inode, Some(7));
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(found.iter().map(|each| each.pid).collect::<Vec<_>>(), [pid]);
        assert!(lockers(device, inode, Some(8)).is_empty());
        child.kill().expect("sleep is killed");
        child.wait().expect("sleep is reaped");
        assert!(lockers(device, inode, None).is_empty());
    }

    /// `sleep`, inheriting a copy of `fd` (which is close-on-exec).
    fn sleep_inheriting(fd: &std::os::fd::OwnedFd) -> std::io::Result<std::process::Child> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        // SAFETY: dup of a descriptor we own; the copy, without
        // close-on-exec, is owned (and closed) here once sleep has it.
        let copy = unsafe { nix::libc::dup(fd.as_raw_fd()) };
        if copy < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `copy` is a new descriptor nothing else owns.
        let copy = unsafe { OwnedFd::from_raw_fd(copy) };
        let child = std::process::Command::new("sleep").arg("30").spawn();
        drop(copy);
        child
    }
}
