//! The run state machine: decide, claim, execute with retries, record.
//!
//! A run reads top to bottom in `run_key`: the flags become a `Config`
//! (`config`, before anything is opened), the key is claimed (`acquire`,
//! deciding by `decide`), the attempts run, each recorded, the outcome is
//! recorded, then told (`execute`), and idem exits.
//!
//! A key's state is the status of its head run (its latest, unless
//! forgotten):
//!
//! ```text
//!  (none) ──claim──▶ running ──exit 0──────────────▶ succeeded
//!                       │    ──failure, no retries──▶ failed
//!                       │    ──idem and its group gone (found by
//!                       │      the next run, or a lease ran out)──▶ abandoned
//!  failed, abandoned, expired or forced succeeded ──claim──▶ running
//! ```
//!
//! Who writes what: only a claim transaction creates a `running` run, and
//! only after reading the head under the ledger's write lock and finding it
//! claimable, so two runs of a key never overlap. Only the owner of a run
//! writes its final state (`succeeded` or `failed`), and only while the run
//! is still `running`. Any later `idem run` may write `abandoned`, and only
//! for a running head whose owner it has found dead.

mod acquire;
mod after;
mod backfill;
mod catchup;
mod cause;
mod config;
mod decide;
mod execute;
mod lease;
mod lock_wait;
mod locks;
mod misfire;
mod overlap;
mod paused;
mod record;
mod replace;
mod reserve;
mod stopped;
mod streams;
mod tell;
mod traced;

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Result;
use jiff::Timestamp;

use crate::alert::Alerts;
use crate::console::Event;
use crate::exit::{self, Failure};
use crate::ledger::{self, Ledger, Location};
use crate::process::Supervisor;
use crate::report::{self, Reporter};
use acquire::{acquire, Acquired};
pub use backfill::{backfill, resolve as resolve_backfill, Backfill};
pub use config::Config;
use execute::Run;
use streams::Streams;

/// How often a waiter looks at the ledger again.
const WAIT_POLL: Duration = Duration::from_millis(100);

/// `idem run` with its options made a [`Config`] (`Config::from_args`,
/// at the edge, where clap's types end).
pub fn run(config: &Config, location: &Location, reporter: &Reporter) -> Result<u8> {
    match config.catch_up {
        Some((period, periods)) => catchup::run(config, period, periods, location, reporter),
        None => run_key(config, &config.key, None, location, reporter),
    }
}

/// One run of `key` for the config's job: claim, attempts, record, alerts,
/// exit code. `slot` is the start of the period it is for (`IDEM_SLOT`),
/// with `--catch-up`.
fn run_key(
    config: &Config,
    key: &str,
    slot: Option<&str>,
    location: &Location,
    reporter: &Reporter,
) -> Result<u8> {
    crate::console::run_of(key, &config.job.name);
    let mut streams = Streams::prepare(config)?;
    if let Some(splay) = config.splay {
        splay_wait(key, splay, reporter);
    }
    let mut ledger = ledger::open_for_run(location, key, &config.job.name)?;
    if let Some(code) = after::wait(config, key, slot, ledger.as_mut(), reporter)? {
        ledger.leave();
        return Ok(code);
    }
    let trace = config.trace.clone().map(crate::trace::Recorder::begin);
    let claiming = traced::now(trace.as_ref());
    let (claim, recovered, reserve) = match acquire(config, key, ledger.as_mut(), reporter)? {
        Acquired::Claimed {
            claim,
            recovered,
            reserve,
        } => (claim, recovered, reserve),
        Acquired::Done(code) => {
            ledger.leave();
            return Ok(code);
        }
    };
    crate::console::claimed(&claim.run_id);
    traced::claimed(trace.as_ref(), claiming, &claim);
    let alerts = Alerts::start(
        &config.alerts,
        &claim,
        &config.job.name,
        location,
        ledger.as_mut(),
        reporter,
    );
    // What the attempts need besides the ledger; a refusal here (no
    // descriptor or thread left) ends the claimed run as failed.
    let set_up = streams
        .output()
        .and_then(|output| Ok((output, Supervisor::new()?)));
    let (mut output, supervisor) = match set_up {
        Ok(set_up) => set_up,
        Err(error) => {
            drop(reserve);
            alerts.settle_start(ledger.as_mut());
            return Err(not_started(ledger, &claim, error));
        }
    };
    let run = Run {
        config,
        claim: &claim,
        recovered,
        slot,
        reporter,
        trace: trace.as_ref(),
    };
    // A shared ledger's claim lives only as long as its heartbeat.
    let heartbeat = ledger
        .leased()
        .then(|| lease::Lease::start(location, &claim, config.lease, supervisor.stopper()));
    let ending = run.attempts(&supervisor, ledger.as_mut(), streams, &mut output, &alerts);
    drop(heartbeat);
    drop(reserve);
    let lost = supervisor.stopped().is_some();
    let concluded = run.conclude(ending, lost, ledger.as_mut(), output, &alerts);
    // The outcome is recorded: the key and its named locks are free now,
    // so that a monitor or a hook slow to answer holds no next run.
    let mut claim = claim;
    drop(claim.hold.take());
    let code = concluded.map(|(code, owed, quiet)| {
        alerts.tell(&owed, quiet, ledger.as_mut());
        code
    });
    ledger.leave();
    code
}

/// A claimed run whose command could not be started (idem ran out of
/// descriptors or threads before its first attempt): recorded failed with
/// idem's 125, so that the key is free at once rather than found
/// abandoned later, and said.
fn not_started(
    mut ledger: Box<dyn Ledger>,
    claim: &ledger::Claim,
    error: anyhow::Error,
) -> anyhow::Error {
    let outcome = ledger::Outcome {
        status: ledger::Status::Failed,
        exit_code: exit::IDEM_FAILED.into(),
        signal: None,
        stopped: false,
    };
    let error = match ledger.finish(claim, None, &outcome) {
        Ok(()) => error.context("the command did not run"),
        Err(unrecorded) => error.context(format!(
            "the command did not run, and its run could not be recorded failed: {unrecorded:#}"
        )),
    };
    ledger.leave();
    Failure::new(exit::IDEM_FAILED, format!("{}: {error:#}", claim.key)).into()
}

/// `--splay`: a random wait before the claim, so that a fleet started by
/// one clock does not reach a shared ledger at one instant.
fn splay_wait(key: &str, splay: Duration, reporter: &Reporter) {
    let until = Instant::now() + splay.mul_f64(fastrand::f64());
    let mut spinner = None;
    while wait_a_moment(Some(until), &mut spinner, reporter, |left| {
        format!("{key}: --splay, claiming in {left}")
    }) {}
}

/// Whether a waiter rides out `error`: a ledger that is briefly away (a
/// database restarting), while its wait lasts.
fn rides_out(error: &anyhow::Error, wait_until: Option<Instant>) -> bool {
    Failure::is_transient(error)
        && wait_until.is_some_and(|until| Instant::now() + WAIT_POLL < until)
}

/// One poll of a `--wait` for something another run holds: the spinner
/// says `waiting(time left)`; false once the wait ran out (or none was
/// given), and then the spinner is gone.
fn wait_a_moment(
    until: Option<Instant>,
    spinner: &mut Option<Option<report::Spinner>>,
    reporter: &Reporter,
    waiting: impl FnOnce(String) -> String,
) -> bool {
    let Some(until) = until.filter(|until| Instant::now() < *until) else {
        drop(spinner.take());
        return false;
    };
    if let Some(bar) = spinner.get_or_insert_with(|| reporter.spinner()) {
        bar.set_message(waiting(report::short(until - Instant::now())));
    }
    std::thread::sleep(WAIT_POLL.min(until.saturating_duration_since(Instant::now())));
    true
}

/// Another run holds what this one needs: said (quietly, as a skip, under
/// `--conflict-exit-code 0`), and the conflict's exit code.
fn conflict(config: &Config, reporter: &Reporter, what: &str) -> u8 {
    let line = || {
        format!(
            "{what}; {}",
            if config.wait.is_some() {
                "--wait ran out"
            } else {
                "--wait DUR waits for it"
            }
        )
    };
    if config.conflict_exit_code == exit::SUCCESS {
        reporter.info(Event::Conflict, line);
    } else {
        reporter.notice(&mut std::io::stderr(), Event::Conflict, &line());
    }
    config.conflict_exit_code
}

fn skip(
    config: &Config,
    key: &str,
    finished_at: Timestamp,
    ledger: &mut dyn Ledger,
    reporter: &Reporter,
) -> Result<u8> {
    reporter.info(Event::Skipped, || {
        format!(
            "skipped {key}: succeeded at {}; --force runs it again",
            crate::render::local_with_zone(finished_at)
        )
    });
    if config.replay {
        replay(key, ledger)?;
    }
    Ok(config.skipped_exit_code)
}

/// `run --replay`: prints the output kept of the key's deciding run (the
/// success a skip stands on), its last attempt's alone.
fn replay(key: &str, ledger: &mut dyn Ledger) -> Result<()> {
    let Some(head) = ledger.head(key)? else {
        return Ok(());
    };
    if head.run.status != ledger::Status::Succeeded {
        return Ok(());
    }
    if let Some(tails) = ledger.output(head.run.run_id, None)? {
        if tails.cut {
            exit::say(&format!(
                "{key}: its output was longer than was kept (--capture): the replay lacks its start"
            ));
        }
        let _ = std::io::stdout().write_all(&tails.stdout);
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().write_all(&tails.stderr);
    }
    Ok(())
}
