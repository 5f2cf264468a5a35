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
//!
//! A lock has slots (`--lock NAME:N`, a semaphore): a run takes the first
//! free one of its N, and starts only while fewer than N runs hold `NAME`,
//! whatever N they gave. Runs that give one name different N so each keep
//! their own bound: at most the largest N run at once, and no run starts
//! while its own N or more hold the lock.

use std::time::Instant;

use anyhow::Result;

use super::config::{printable_name, Config};
use crate::exit::Failure;
use crate::key;
use crate::ledger::{Claim, Locks, NamedLock, RunLedger};
use crate::report::{self, Reporter};

/// The most slots a lock may have: a local lock's slots are bytes of the
/// lock file, a shared one's are rows, and every take counts the held ones.
const MAX_SLOTS: u32 = crate::ledger::runlock::MAX_NAMED_SLOTS;

/// The `--lock` values (`NAME` or `NAME:N`) once each, in name order (see
/// the module), refusing the first that is not a lock, as given.
pub(super) fn parse(given: &[String]) -> Result<Vec<NamedLock>> {
    let mut locks: Vec<NamedLock> = Vec::new();
    for value in given {
        let lock = parse_one(value)?;
        match locks.iter().find(|other| other.name == lock.name) {
            Some(other) if other.slots != lock.slots => {
                return Err(Failure::usage(format!(
                    "--lock {} is given with {} and with {} slots; give it once",
                    crate::render::printable(&lock.name),
                    other.slots,
                    lock.slots
                ))
                .into())
            }
            Some(_) => {}
            None => locks.push(lock),
        }
    }
    locks.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(locks)
}

/// One `--lock` value: `NAME` (one slot) or `NAME:N`; the last colon
/// parts them, so a name with a colon gives its N (`db:main:1`).
fn parse_one(value: &str) -> Result<NamedLock> {
    if value.is_empty() {
        return Err(Failure::usage(
            "--lock is empty; name the lock, like --lock backup-disk (IDEM_LOCK takes a,b)",
        )
        .into());
    }
    let (name, slots) = match value.rsplit_once(':') {
        Some((name, slots)) => (name, slots_of(value, slots)?),
        None => (value, 1),
    };
    if name.is_empty() {
        return Err(Failure::usage(format!(
            "invalid --lock {}: name the lock before its slots, like --lock backup:{slots}",
            crate::render::printable(value)
        ))
        .into());
    }
    if !printable_name(name) {
        return Err(Failure::usage(format!(
            "invalid --lock {}: a lock name is at most {} bytes of printable characters",
            crate::render::printable(name),
            key::MAX_KEY_BYTES
        ))
        .into());
    }
    Ok(NamedLock {
        name: name.to_owned(),
        slots,
    })
}

/// The N of `--lock NAME:N`: a whole number of slots from 1 to [`MAX_SLOTS`].
fn slots_of(value: &str, given: &str) -> Result<u32> {
    let digits = !given.is_empty() && given.bytes().all(|byte| byte.is_ascii_digit());
    match given.parse::<u32>() {
        Ok(slots) if digits && (1..=MAX_SLOTS).contains(&slots) => Ok(slots),
        _ => Err(Failure::usage(format!(
            "invalid --lock {}: its slots must be a number from 1 to {MAX_SLOTS}, like --lock backup:2 (a name with a colon gives its slots: db:main:1)",
            crate::render::printable(value)
        ))
        .into()),
    }
}

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
        let slots = config
            .locks
            .iter()
            .find(|lock| lock.name == held)
            .map_or(1, |lock| lock.slots);
        if super::wait_a_moment(wait_until, &mut spinner, reporter, |left| {
            format!(
                "waiting for lock {shown} (for {key}): {}; {left} left",
                holders(slots)
            )
        }) {
            continue;
        }
        let what = if held == super::overlap::job_lock(&config.job.name) {
            format!(
                "{key}: a run of job {} is running (--overlap skip)",
                crate::render::printable(&config.job.name)
            )
        } else {
            format!("{key}: lock {shown} is held by {}", held_by(slots))
        };
        let code = super::conflict(config, reporter, &what);
        return Ok(Err(code));
    }
}

/// Who holds a lock whose slots are all taken, for the waiting line.
fn holders(slots: u32) -> String {
    match slots {
        1 => "another run holds it".to_owned(),
        slots => format!("all {slots} of its slots are held"),
    }
}

/// Who holds a lock whose slots are all taken, for the conflict line.
fn held_by(slots: u32) -> String {
    match slots {
        1 => "another run".to_owned(),
        slots => format!("other runs in all its {slots} slots"),
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
