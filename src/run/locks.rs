//! Named locks (`--lock NAME`): held while a run's command runs, so runs of
//! different keys that share a lock (a backup and a vacuum) never overlap.
//!
//! They are taken before the claim, all or none, in name order, polling
//! without blocking: a run that waits for one holds nothing else, and two
//! runs wanting the same locks in any order cannot deadlock. On a local
//! ledger a lock is a byte of the ledger's lock file, held like the key's
//! (see `ledger::runlock`): the run's attempts inherit it, so it lives as
//! long as any process of the run, however idem dies. On a shared ledger it
//! is a row leased to the run, renewed with its claim's heartbeat and fenced
//! by an epoch, so a run that loses it is stopped like one that loses its key.

use std::time::Instant;

use anyhow::Result;

use super::config::Config;
use crate::ledger::{Claim, Locks, RunLedger};
use crate::report::{self, Reporter};

/// Takes every lock of the run, waiting until `wait_until` (`--wait`);
/// `Err(code)` when one stayed held: the conflict exit code, said.
pub(super) fn take(
    config: &Config,
    key: &str,
    ledger: &mut dyn RunLedger,
    run_id: uuid::Uuid,
    wait_until: Option<Instant>,
    reporter: &Reporter,
) -> Result<Result<Locks, u8>> {
    let mut spinner: Option<Option<report::Spinner>> = None;
    loop {
        let held = match ledger.take_locks(&config.locks, run_id, config.lease) {
            Ok(Ok(locks)) => {
                drop(spinner.take());
                return Ok(Ok(locks));
            }
            Ok(Err(held)) => held,
            Err(error) if super::rides_out(&error, wait_until) => {
                std::thread::sleep(super::WAIT_POLL);
                continue;
            }
            Err(error) => return Err(error),
        };
        let shown = crate::render::printable(&held).into_owned();
        if super::wait_a_moment(wait_until, &mut spinner, reporter, |left| {
            format!("waiting for lock {shown} (for {key}): another run holds it; {left} left")
        }) {
            continue;
        }
        let code = super::conflict(
            config,
            reporter,
            &format!("{key}: lock {shown} is held by another run"),
        );
        return Ok(Err(code));
    }
}

/// Gives the locks to the run that claimed its key: its attempts inherit
/// them, and its heartbeat renews them.
pub(super) fn attach(claim: &mut Claim, locks: Locks) {
    claim.locks = locks.names;
    if let Some(hold) = claim.hold.as_mut() {
        for lock in locks.holds {
            hold.join(lock);
        }
    }
}

/// Lets go of locks taken for a claim that was not made.
pub(super) fn release(locks: Option<Locks>, ledger: &mut dyn RunLedger, run_id: uuid::Uuid) {
    if let Some(locks) = locks {
        drop(locks.holds);
        if !locks.names.is_empty() {
            // Unreleased, a lock's lease frees it on its own.
            let _ = ledger.release_locks(run_id);
        }
    }
}
