//! Whether the owner of a running key is still alive.
//!
//! A run is alive while its idem process, or anything in its command's
//! process group, lives on the same boot of the same host. Pids can be
//! reused, so each is checked together with its recorded start time. An
//! owner on another host can only be judged by its lease.

use crate::host;
use crate::ledger::Owner;

pub fn alive(owner: &Owner) -> bool {
    if owner.host != host::name() {
        return !owner.lease_expired;
    }
    if owner.boot_id != host::boot_id() {
        // The host rebooted since: nothing of that run survived.
        return false;
    }
    if host::process_start(owner.pid) == Some(owner.pid_start) {
        return true;
    }
    match (owner.pgid, owner.pgid_start) {
        (Some(pgid), leader_start) => group_alive(pgid, leader_start),
        (None, _) => false,
    }
}

/// The group `pgid` still has members and is the one recorded. The kernel
/// does not reuse a pid while a group of that id exists, so a leader with
/// another start time means the recorded group ended long ago.
fn group_alive(pgid: u32, leader_start: Option<u64>) -> bool {
    if !host::group_has_live_members(pgid) {
        return false;
    }
    match host::process_start(pgid) {
        None => true,
        Some(start) => leader_start.is_none_or(|recorded| recorded == start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Owner {
        let pid = std::process::id();
        Owner {
            host: host::name(),
            boot_id: host::boot_id(),
            pid,
            pid_start: host::process_start(pid).unwrap_or_default(),
            pgid: None,
            pgid_start: None,
            lease_expired: false,
        }
    }

    #[test]
    fn judges_by_pid_and_start_time() {
        assert!(alive(&me()));
        let reused = Owner {
            pid_start: me().pid_start + 1,
            ..me()
        };
        assert!(!alive(&reused));
        let rebooted = Owner {
            boot_id: "another-boot".into(),
            ..me()
        };
        assert!(!alive(&rebooted));
        let elsewhere = Owner {
            host: "another-host".into(),
            ..me()
        };
        assert!(alive(&elsewhere));
        assert!(!alive(&Owner {
            lease_expired: true,
            ..elsewhere
        }));
    }

    #[test]
    fn judges_a_group_by_its_members() {
        let own_group = nix::unistd::getpgrp().as_raw() as u32;
        let gone = Owner {
            pid_start: 0,
            pgid: Some(own_group),
            ..me()
        };
        assert!(alive(&gone));
    }
}
