//! Jobs: what a run tells the ledger about its crontab line, the stamp a
//! skip leaves, and `--catch-up N`, which first runs the earlier periods of
//! the key's template that never succeeded, each as a run of its own.

use anyhow::Result;
use jiff::Timestamp;

use super::config::Config;
use super::decide::Rules;
use super::run_key;
use crate::exit;
use crate::key::Period;
use crate::ledger::{self, Head, JobInfo, Location, RunLedger, Status, CHECK_EVERY};
use crate::report::Reporter;

/// After a skip: stamps that the job was called, at most once a minute,
/// so `status` can tell a job cron still calls. Bookkeeping only: a ledger
/// that refuses it (read-only) changes nothing about the skip.
pub(super) fn stamp(job: &JobInfo, head: Option<&Head>, rules: &Rules, ledger: &mut dyn RunLedger) {
    let now = rules.clock(head);
    let due = head
        .and_then(|head| head.checked_at)
        .is_none_or(|at| now.duration_since(at).unsigned_abs() >= CHECK_EVERY);
    if due {
        let _ = ledger.checked(&job.name);
    }
}

/// The start of a period as `IDEM_SLOT` gives it: RFC 3339 with the offset
/// of the zone the key was made in.
pub(super) fn slot(start: &jiff::Zoned) -> String {
    start.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
}

/// `--catch-up N`: the periods before the current one within the last N
/// whose key never succeeded, oldest first, back to the job's first
/// recorded run; then the current period. Each is a whole run of its own
/// key (claim, retries, no overlap, crash safety). Exits with the current
/// run's code, else the first failure of a caught-up one.
pub(super) fn run(
    config: &Config,
    period: Period,
    periods: u32,
    location: &Location,
    reporter: &Reporter,
) -> Result<u8> {
    let now = crate::host::now();
    let host = crate::host::name();
    let current = period.start(&now);
    let Missed {
        mut periods,
        current_done,
    } = match missed(config, period, &now, periods, &host, location, reporter)? {
        Ok(missed) => missed,
        // A paused job runs no slot.
        Err(code) => return Ok(code),
    };
    if config.misfire_latest && !periods.is_empty() {
        // The newest period due runs: the current one, unless it already
        // succeeded, then the newest missed one.
        let newest = if current_done {
            periods.split_off(periods.len() - 1)
        } else {
            Vec::new()
        };
        super::misfire::skip(config, &periods, location, reporter)?;
        periods = newest;
    }
    let missed = periods;
    let mut first_failure = None;
    for (key, start) in missed {
        let code = past_period(
            run_key(config, &key, Some(&slot(&start)), location, reporter),
            reporter,
        )?;
        let quiet = [
            exit::SUCCESS,
            config.skipped_exit_code,
            config.conflict_exit_code,
        ];
        if first_failure.is_none() && !quiet.contains(&code) {
            first_failure = Some(code);
        }
    }
    let key = config.template.expand(&now, &host)?;
    let code = run_key(config, &key, Some(&slot(&current)), location, reporter)?;
    Ok(match first_failure {
        Some(failure) if code == exit::SUCCESS => failure,
        _ => code,
    })
}

/// What a catch-up finds in the ledger.
struct Missed {
    /// The earlier periods to run, oldest first.
    periods: Vec<(String, jiff::Zoned)>,
    /// Whether the current period's key has a success that counts.
    current_done: bool,
}

/// The earlier periods to run: within the last `periods`, not before the
/// job's first recorded run, whose key has no success that still counts,
/// oldest first.
fn missed(
    config: &Config,
    period: Period,
    now: &jiff::Zoned,
    periods: u32,
    host: &str,
    location: &Location,
    reporter: &Reporter,
) -> Result<Result<Missed, u8>> {
    let nothing = Missed {
        periods: Vec::new(),
        current_done: false,
    };
    let Some(mut ledger) = ledger::open_existing(location)? else {
        return Ok(Ok(nothing));
    };
    if let Some(code) = super::paused::check(config, ledger.as_mut(), reporter)? {
        return Ok(Err(code));
    }
    let state = ledger::job_state(ledger.as_mut(), &config.job.name)?;
    // A new job does not replay history.
    let Some((first_run, zone)) = state.and_then(|state| Some((state.first_run?, state.zone)))
    else {
        return Ok(Ok(nothing));
    };
    // Past periods are those of the zone the job's keys were made in: after
    // a change of TZ the same hours have other names, and judged in the new
    // zone the periods that succeeded would look missed.
    let now = &match zone.as_deref().and_then(crate::host::zone_named) {
        Some(zone) => now.with_time_zone(zone),
        None => now.clone(),
    };
    let oldest = period.start(&first_run.to_zoned(now.time_zone().clone()));
    let rules = config.rules(Timestamp::now());
    let mut missed = Vec::new();
    for back in (1..=i64::from(periods)).rev() {
        let Some(start) = period.shift(now, -back) else {
            continue;
        };
        if start < oldest {
            continue;
        }
        let key = config.template.expand(&start, host)?;
        // Across a DST change two starts may make one key: it runs once.
        if missed.last().is_some_and(|(last, _)| *last == key) {
            continue;
        }
        if !succeeded(ledger.as_mut(), &key, &rules)? {
            missed.push((key, start));
        }
    }
    let current = config.template.expand(&period.start(now), host)?;
    Ok(Ok(Missed {
        periods: missed,
        current_done: succeeded(ledger.as_mut(), &current, &rules)?,
    }))
}

/// Whether `key` has a success that still counts.
fn succeeded(ledger: &mut dyn crate::ledger::Ledger, key: &str, rules: &Rules) -> Result<bool> {
    Ok(ledger
        .head(key)?
        .is_some_and(|head| head.run.status == Status::Succeeded && rules.fresh(&head)))
}

/// The code of a past period's run: a key refused for itself (its command
/// changed, its last run was abandoned under --on-abandoned fail) is said,
/// and the other periods go on; any other error ends them all.
pub(super) fn past_period(ran: Result<u8>, reporter: &Reporter) -> Result<u8> {
    match ran {
        Ok(code) => Ok(code),
        Err(error)
            if matches!(
                exit::code_for(&error),
                exit::FINGERPRINT_MISMATCH | exit::ABANDONED
            ) =>
        {
            reporter.notice(
                &mut std::io::stderr(),
                crate::console::Event::Failed,
                &format!("{error:#}"),
            );
            Ok(exit::code_for(&error))
        }
        Err(error) => Err(error),
    }
}
