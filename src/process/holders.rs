//! Who really holds a running key, for the lines that say it is held (a
//! conflict, the `--wait` spinner, `doctor`, `ledger forget`).
//!
//! The ledger records the pid of the idem that claimed the key, but a run
//! outlives its idem: the guardian and the command's processes keep the
//! key until the last of them is gone. Once that idem is gone from this
//! host, its pid names nobody (or, reused, somebody else), so the lines
//! name the run's processes that still live instead, found by the
//! `IDEM_RUN_ID` they inherit.

use std::fs;

use crate::ledger::Owner;

/// How many of a run's processes a line names; the rest are counted.
const NAMED: usize = 4;

/// A process of a run that still lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Living {
    pub pid: i32,
    /// Its command name (`/proc/<pid>/comm`), or `?` when it cannot be read.
    pub name: String,
}

/// The processes of run `owner` that live on this host, as far as
/// `/proc` shows them; none for a run of another host.
pub fn living(owner: &Owner) -> Vec<Living> {
    if owner.host != crate::host::name() {
        return Vec::new();
    }
    let mut pids = super::processes_of_run(&owner.run_id.to_string());
    pids.sort_unstable();
    pids.into_iter()
        .filter(|pid| lives(*pid))
        .map(|pid| Living {
            pid,
            name: comm(pid).unwrap_or_else(|| "?".to_owned()),
        })
        .collect()
}

/// Who holds a running key, for a line that says so: idem's pid (or its
/// command's process group) while that idem lives; once it is gone from
/// this host, the run's processes that still live, named.
pub fn describe(owner: &Owner) -> String {
    if owner.host == crate::host::name() && !idem_lives(owner.pid) {
        let living = living(owner);
        if !living.is_empty() {
            return format!("{} (left by idem pid {}, gone)", names(&living), owner.pid);
        }
    }
    crate::report::holder(owner)
}

/// The owner of ended run `run`, as far as the lines that name its
/// processes need one: its processes still hold the key.
pub fn left_by(run: &crate::ledger::Run) -> Owner {
    Owner {
        host: run.host.clone(),
        pid: run.pid,
        pgid: None,
        run_id: run.run_id,
        alive: Some(true),
        judged: crate::ledger::Judged::LeftRunning,
    }
}

/// Why a key whose last run ended is held: what that run left running,
/// named when its processes are found here (`left_by`, see [`left_by`]).
pub fn lingering(left_by: Option<&Owner>) -> String {
    let living = left_by.map(living).unwrap_or_default();
    let line = "is still held by processes an earlier run of it left running";
    if living.is_empty() {
        return line.to_owned();
    }
    format!("{line}: {}", names(&living))
}

/// `pid 41 (sleep), pid 40 (sh)`, the first few of `living`, and how many
/// more there are.
pub fn names(living: &[Living]) -> String {
    let mut shown: Vec<String> = living
        .iter()
        .take(NAMED)
        .map(|each| {
            format!(
                "pid {} ({})",
                each.pid,
                crate::render::printable(&each.name)
            )
        })
        .collect();
    if living.len() > NAMED {
        shown.push(format!("{} more", living.len() - NAMED));
    }
    shown.join(", ")
}

/// Whether idem's `pid` is a live process here: not gone, not a zombie.
/// (A pid reused since is taken for idem's: the line then says what it
/// said before runs were named.)
fn idem_lives(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(lives)
}

fn lives(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name's closing parenthesis.
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with(['Z', 'X'])
    })
}

pub(super) fn comm(pid: i32) -> Option<String> {
    let name = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(name.trim_end_matches('\n').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_names_the_first_and_counts_the_rest() {
        let living: Vec<Living> = (1..=6)
            .map(|pid| Living {
                pid,
                name: "sleep".into(),
            })
            .collect();
        assert_eq!(names(&living[..1]), "pid 1 (sleep)");
        assert_eq!(
            names(&living),
            "pid 1 (sleep), pid 2 (sleep), pid 3 (sleep), pid 4 (sleep), 2 more"
        );
    }
}
