//! The ids idem makes for runs and events: UUIDv7, the time in
//! milliseconds and then random bits, so that ids sort by when they were
//! made and two hosts never make the same one.
//!
//! The random bits come from the kernel's getrandom(2) called directly,
//! never from a file: the `uuid` crate's own generator looks the call up
//! at run time, which a static binary (the one the packages ship) cannot
//! do, then opens /dev/urandom, and panics when no descriptor is left
//! (`ulimit -n 7`).

use std::time::{SystemTime, UNIX_EPOCH};

use nix::libc;
use uuid::Uuid;

/// A new UUIDv7.
pub fn new() -> Uuid {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64);
    let mut random = [0u8; 10];
    fill(&mut random);
    uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid()
}

/// Fills `bytes` from getrandom(2). A kernel without it (before 3.17)
/// gets the clock's nanoseconds and the pid instead: unique on one host,
/// not across hosts.
fn fill(bytes: &mut [u8]) {
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: the pointer and length are those of `rest`, a slice we
        // hold mutably for the call; getrandom writes at most that many
        // bytes and keeps no pointer.
        let got = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if got > 0 {
            filled += got as usize;
        } else if got < 0 && nix::errno::Errno::last() == nix::errno::Errno::EINTR {
            continue;
        } else {
            break;
        }
    }
    if filled < bytes.len() {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos());
        let seed = (u64::from(nanos) << 32) | u64::from(std::process::id());
        for (i, byte) in bytes[filled..].iter_mut().enumerate() {
            *byte = (seed >> ((i % 8) * 8)) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_version_7_distinct_and_in_the_order_made() {
        let ids: Vec<_> = (0..1000).map(|_| super::new()).collect();
        assert!(ids.iter().all(|id| id.get_version_num() == 7));
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "no id made twice");
        let first = ids[0].get_timestamp().unwrap().to_unix();
        let last = ids[999].get_timestamp().unwrap().to_unix();
        assert!(first <= last);
    }
}
