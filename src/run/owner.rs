//! Whether the owner of a running key is still alive.
//!
//! A run is alive while its idem process, or anything in its command's
//! process group, lives on the same boot of the same host. Pids can be
//! reused, so each is checked together with its recorded start time. An
//! owner on another host can only be judged by its lease: without one (a
//! local ledger read from elsewhere), it is presumed alive.

use crate::host;
use crate::ledger::Owner;

pub fn alive(owner: &Owner) -> bool {
    let by_lease = owner.lease_expired.map(|expired| !expired);
    if owner.host != host::name() {
        return by_lease.unwrap_or(true);
    }
    if owner.boot_id != host::boot_id() {
        // This host rebooted since, and nothing of that run survived; or,
        // on a shared ledger, another machine bears the same name (cloned
        // machines, containers with a fixed hostname): only its lease tells.
        return by_lease.unwrap_or(false);
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
            lease_expired: None,
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
        assert!(alive(&Owner {
            lease_expired: Some(false),
            ..elsewhere.clone()
        }));
        assert!(!alive(&Owner {
            lease_expired: Some(true),
            ..elsewhere
        }));
        // On a shared ledger a namesake machine is judged by its lease.
        let namesake = Owner {
            boot_id: "another-boot".into(),
            lease_expired: Some(false),
            ..me()
        };
        assert!(alive(&namesake));
        assert!(!alive(&Owner {
            lease_expired: Some(true),
            ..namesake
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
