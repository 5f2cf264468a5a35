//! A run its ledger judged over (its lock free, its lease passed) whose
//! processes still live on this host. Where the guardian alone held the
//! run (no PID namespace: an unprivileged user), a worker that closed the
//! descriptors it inherited holds no lock and renews no lease, and once
//! idem and its guardian are killed together nothing kills it: it still
//! carries the run's `IDEM_RUN_ID`, so it is found by that. Both backends
//! ask it of a head they judged over, and only then, so a skip or a free
//! key never scans `/proc`.

use super::Run;

/// Whether run `run`, judged over, still has processes here. Asked only of
/// a run of this host and boot (`boot`: the one its claim recorded, if
/// any), since a pid of another host or boot means nothing here. Another
/// host cannot see such a worker at all.
pub(crate) fn left_running(run: &Run, boot: Option<&str>) -> bool {
    let this_boot = crate::host::boot_id();
    let same_boot = match boot {
        Some(boot) if !boot.is_empty() && !this_boot.is_empty() => boot == this_boot,
        _ => true,
    };
    same_boot
        && run.host == crate::host::name()
        && crate::process::run_lives(&run.run_id.to_string())
}
