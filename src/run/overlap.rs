//! `--overlap`: what a run does while another run of its job, under any
//! key, is running. Built on named locks (see `locks`): under skip, queue
//! and replace every run of the job holds the job's overlap lock, one
//! slot, taken before the claim with the run's other locks, all or none,
//! held by every process of the run and leased on a shared ledger, so the
//! policy holds across processes and hosts as `--lock` does.
//!
//! - skip: the lock held is a conflict (or waited for under `--wait`).
//! - queue: a run that finds it held takes the job's queue lock, one slot,
//!   and waits holding nothing else (no key, no other lock) until the
//!   overlap lock is free; a run that finds the queue lock held too exits
//!   as a conflict: at most one waits per job.
//! - replace: the job's running runs are asked to stop, as `idem stop`
//!   asks, and the lock is taken once they are gone.

use std::time::{Duration, Instant};

use anyhow::Result;
use nix::libc;
use uuid::Uuid;

use super::config::Config;
use super::locks;
use crate::console::Event;
use crate::control::stop::{stop_job, Found, Stopping};
use crate::exit::Failure;
use crate::ledger::{self, Ledger, Locks, NamedLock};
use crate::render::printable;
use crate::report::Reporter;

/// `--overlap`, as the engine takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    Allow,
    Skip,
    Queue,
    Replace,
}

/// The lock every run of `job` holds under skip, queue and replace.
pub(super) fn job_lock(job: &str) -> String {
    format!("overlap of job {job}")
}

/// The lock the one run of `job` waiting under queue holds.
fn queue_lock(job: &str) -> String {
    format!("queue of job {job}")
}

/// The run's `--lock`s, with the job's overlap lock under a policy that
/// has one, in name order (the order locks are taken in).
pub(super) fn with_job_lock(
    mut locks: Vec<NamedLock>,
    overlap: Overlap,
    job: &str,
) -> Vec<NamedLock> {
    if overlap != Overlap::Allow {
        locks.push(NamedLock {
            name: job_lock(job),
            slots: 1,
        });
        locks.sort_by(|a, b| a.name.cmp(&b.name));
    }
    locks
}

/// Takes the run's locks as its `--overlap` says.
pub(super) fn take(
    config: &Config,
    key: &str,
    ledger: &mut dyn Ledger,
    run_id: Uuid,
    wait_until: Option<Instant>,
    reporter: &Reporter,
) -> Result<Result<Locks, u8>> {
    let policy = config.overlap;
    if matches!(policy, Overlap::Allow | Overlap::Skip) {
        return locks::take(config, key, ledger, run_id, wait_until, reporter);
    }
    match ledger.take_locks(&config.locks, run_id, config.lease)? {
        Ok(taken) => return Ok(Ok(taken)),
        // A lock of its own (--lock) is waited for as always.
        Err(held) if held != job_lock(&config.job.name) => {
            return locks::take(config, key, ledger, run_id, wait_until, reporter)
        }
        Err(_) => {}
    }
    if policy == Overlap::Queue {
        queue(config, key, ledger, run_id, wait_until, reporter)
    } else {
        replace(config, key, ledger, run_id, wait_until, reporter)
    }
}

/// `--overlap queue`, the job's lock held: waits in the job's one queue
/// place until it is free, or exits as a conflict when the place is taken.
fn queue(
    config: &Config,
    key: &str,
    ledger: &mut dyn Ledger,
    run_id: Uuid,
    wait_until: Option<Instant>,
    reporter: &Reporter,
) -> Result<Result<Locks, u8>> {
    let job = printable(&config.job.name).into_owned();
    let place = [NamedLock {
        name: queue_lock(&config.job.name),
        slots: 1,
    }];
    let place_id = crate::id::new();
    let Ok(queued) = ledger.take_locks(&place, place_id, config.lease)? else {
        let what = format!(
            "{key}: a run of job {job} is running and another is already queued behind it (--overlap queue)"
        );
        return Ok(Err(turned_away(config, reporter, &what)));
    };
    reporter.info(Event::Waiting, || {
        format!("{key}: a run of job {job} is running; queued behind it (--overlap queue)")
    });
    let spinner = reporter.spinner();
    if let Some(spinner) = &spinner {
        spinner.set_message(format!("{key}: queued behind the running run of job {job}"));
    }
    let names = vec![place[0].name.clone()];
    let mut renewed = Instant::now();
    let taken = loop {
        match ledger.take_locks(&config.locks, run_id, config.lease) {
            Ok(Ok(taken)) => break Ok(Ok(taken)),
            Ok(Err(_)) => {}
            Err(error) if Failure::is_transient(&error) => {}
            Err(error) => break Err(error),
        }
        // A shared ledger's queue place lives by its lease: renewed as a
        // claim's is, every third of it.
        if renewed.elapsed() >= config.lease / 3 {
            match ledger.renew_locks(place_id, &names) {
                Ok(true) => renewed = Instant::now(),
                Ok(false) => {
                    let what = format!("{key}: its place in the queue of job {job} lapsed (the ledger was out of reach); nothing ran");
                    break Ok(Err(turned_away(config, reporter, &what)));
                }
                Err(error) if Failure::is_transient(&error) => {}
                Err(error) => break Err(error),
            }
        }
        if wait_until.is_some_and(|until| Instant::now() >= until) {
            let what = format!("{key}: a run of job {job} is still running (--overlap queue)");
            break Ok(Err(super::conflict(config, reporter, &what)));
        }
        std::thread::sleep(super::WAIT_POLL);
    };
    drop(spinner);
    drop(queued.holds);
    // Unreleased, the place's lease frees it on its own.
    let _ = ledger.release_locks(place_id);
    taken
}

/// `--overlap replace`, the job's lock held: asks the job's running runs
/// to stop, and takes the lock once they are gone (within the time a
/// `--replace` gives them).
fn replace(
    config: &Config,
    key: &str,
    ledger: &mut dyn Ledger,
    run_id: Uuid,
    wait_until: Option<Instant>,
    reporter: &Reporter,
) -> Result<Result<Locks, u8>> {
    let job = &config.job.name;
    let until = wait_until.unwrap_or_else(|| {
        Instant::now() + config.lease + config.kill_after + Duration::from_secs(5)
    });
    let by = ledger::stops::requester();
    let mut asked: Vec<Stopping> = stop_job(ledger, job, libc::SIGTERM, config.kill_after, &by)?
        .into_iter()
        .filter_map(|found| match found {
            Found::Stopping(stopping) => Some(*stopping),
            Found::Abandoned(_) | Found::NotRunning => None,
        })
        .collect();
    reporter.info(Event::Stopped, || {
        format!(
            "{key}: --overlap replace: stopping {} running run{} of job {}",
            asked.len(),
            if asked.len() == 1 { "" } else { "s" },
            printable(job)
        )
    });
    loop {
        match ledger.take_locks(&config.locks, run_id, config.lease) {
            Ok(Ok(taken)) => return Ok(Ok(taken)),
            Ok(Err(_)) => {}
            Err(error) if Failure::is_transient(&error) => {}
            Err(error) => return Err(error),
        }
        if Instant::now() >= until {
            let what = format!(
                "{key}: the running run of job {} did not end in time (--overlap replace)",
                printable(job)
            );
            return Ok(Err(super::conflict(config, reporter, &what)));
        }
        for stopping in &mut asked {
            stopping.press();
        }
        std::thread::sleep(super::WAIT_POLL);
    }
}

/// A run the policy turns away: said (quietly, as a skip, under
/// `--conflict-exit-code 0`), and the conflict's exit code. Unlike a busy
/// key's conflict, no `--wait` would change it.
fn turned_away(config: &Config, reporter: &Reporter, what: &str) -> u8 {
    if config.conflict_exit_code == crate::exit::SUCCESS {
        reporter.info(Event::Conflict, || what.to_owned());
    } else {
        reporter.notice(&mut std::io::stderr(), Event::Conflict, what);
    }
    config.conflict_exit_code
}
