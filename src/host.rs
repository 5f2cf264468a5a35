//! Facts about this machine and process that a claim records, so that a
//! later run can tell whether the owner of a key is still alive.

use std::sync::OnceLock;

/// This host's name (`{host}` in keys, `host` in the ledger).
pub fn name() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|name| name.into_string().ok())
            .unwrap_or_else(|| "localhost".to_owned())
    })
    .clone()
}

/// This boot's id: a pid or start time means nothing across a reboot.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_default()
}

/// The start time of a process in clock ticks since boot (field 22 of
/// `/proc/PID/stat`), which tells a process from a later one that reused
/// its pid. `None` when there is no such process, or only its zombie: a
/// killed idem whose parent has not reaped it yet runs nothing.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: skip past
    // its last ')'; field 3 (state) is then the first one.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// Whether process group `pgid` has a member that is not a zombie. Zombies
/// count as gone: they run nothing, and `kill(-pgid, 0)` would still find
/// them until their parent (often init) reaps them.
pub fn group_has_live_members(pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|name| name.parse::<u32>().ok()) else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(after_name) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
            return false;
        };
        let mut fields = after_name.split_whitespace();
        // Fields 3 (state) and 5 (pgrp) of /proc/PID/stat.
        let state = fields.next();
        let group = fields.nth(1).and_then(|field| field.parse::<u32>().ok());
        group == Some(pgid) && state != Some("Z")
    })
}
