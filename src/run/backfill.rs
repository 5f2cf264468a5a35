//! `idem backfill`: the periods of a job between two times whose key never
//! succeeded, run oldest first and one at a time. Each is a whole run of
//! its own key, as `--catch-up` makes one (claim, retries, locks, `--after`
//! at the period's slot, no overlap, crash safety), so a backfill stopped
//! anywhere is taken up by the next one from the period it stopped in.

use anyhow::Result;
use jiff::{Timestamp, Zoned};

use super::catchup::slot;
use super::config::Config;
use super::run_key;
use crate::exit::{self, Failure};
use crate::key::Period;
use crate::ledger::{self, Head, Ledger, Location, Status};
use crate::report::Reporter;

/// The most periods one backfill takes: a year of five-minute periods.
const MOST: i64 = 110_000;

/// What `idem backfill` was asked, past its run options.
#[derive(Debug, Clone, Copy)]
pub struct Backfill {
    pub from: Timestamp,
    pub to: Timestamp,
    pub dry_run: bool,
    /// `--all`: every period, its success too.
    pub all: bool,
}

/// The key template and the job `target` names: a job the ledger knows
/// (its template as its runs typed it), else `target` is the template and
/// names its job.
pub fn resolve(target: &str, location: &Location) -> Result<(String, Option<String>)> {
    let Some(mut ledger) = ledger::open_existing(location)? else {
        return Ok((target.to_owned(), None));
    };
    let state = ledger::job_state(ledger.as_mut(), target)?;
    ledger.leave();
    Ok(match state {
        Some(state) if state.template != target => (state.template, Some(target.to_owned())),
        _ => (target.to_owned(), None),
    })
}

/// A period to run, and what its key holds now.
struct Due {
    key: String,
    slot: String,
    why: &'static str,
}

/// `idem backfill`: lists (`--dry-run`) or runs the periods due.
pub fn backfill(
    config: &Config,
    plan: &Backfill,
    location: &Location,
    reporter: &Reporter,
) -> Result<u8> {
    let Some(period) = config.template.period() else {
        return Err(Failure::usage(format!(
            "idem backfill needs a job whose key template has a time placeholder ({{minute}} {{minute/N}} {{hour}} {{hour/N}} {{date}} {{week}} {{month}} {{year}}); '{}' is neither such a template nor a job in the ledger",
            crate::render::printable(&config.job.template)
        ))
        .into());
    };
    if config.catch_up.is_some() {
        return Err(Failure::usage(
            "idem backfill runs the periods it is given; leave --catch-up to idem run",
        )
        .into());
    }
    if plan.from > plan.to {
        return Err(Failure::usage(format!(
            "--from {} is after --to {}; give the older time to --from",
            crate::render::local_with_zone(plan.from),
            crate::render::local_with_zone(plan.to)
        ))
        .into());
    }
    let mut ledger = ledger::open_existing(location)?;
    let due = due(config, period, plan, &mut ledger)?;
    if let Some(ledger) = ledger {
        ledger.leave();
    }
    if plan.dry_run {
        list(&due, reporter);
        return Ok(exit::SUCCESS);
    }
    if due.is_empty() {
        reporter.notice(
            &mut std::io::stderr(),
            crate::console::Event::Backfill,
            &format!(
                "backfill {}: every period from {} to {} succeeded; nothing to run",
                crate::render::printable(&config.job.name),
                crate::render::local_with_zone(plan.from),
                crate::render::local_with_zone(plan.to)
            ),
        );
        return Ok(exit::SUCCESS);
    }
    run_all(config, &due, location, reporter)
}

/// The periods from `plan.from` to `plan.to` whose key never succeeded
/// (every one with `--all`), oldest first, in the zone the job's keys are
/// made in (as `--catch-up` judges them).
fn due(
    config: &Config,
    period: Period,
    plan: &Backfill,
    ledger: &mut Option<Box<dyn Ledger>>,
) -> Result<Vec<Due>> {
    let zone = ledger
        .as_deref_mut()
        .map(|ledger| ledger::job_state(ledger, &config.job.name))
        .transpose()?
        .flatten()
        .and_then(|state| state.zone)
        .and_then(|zone| crate::host::zone_named(&zone))
        .unwrap_or_else(crate::host::zone);
    let span = plan.to.duration_since(plan.from).as_secs();
    let length = i64::try_from(period.seconds()).unwrap_or(i64::MAX);
    if span / length > MOST {
        return Err(Failure::usage(format!(
            "--from and --to hold about {} periods of {}, more than the {MOST} one backfill takes; narrow them",
            span / length,
            period.name()
        ))
        .into());
    }
    let host = crate::host::name();
    let rules = config.rules(Timestamp::now());
    let starts: Vec<Zoned> =
        period.starts(&plan.from.to_zoned(zone.clone()), &plan.to.to_zoned(zone));
    let mut due: Vec<Due> = Vec::new();
    for start in starts {
        let key = config.template.expand(&start, &host)?;
        // Across a DST change two starts may make one key: it runs once.
        if due.last().is_some_and(|last| last.key == key) {
            continue;
        }
        let head = match ledger.as_deref_mut() {
            Some(ledger) => ledger.head(&key)?,
            None => None,
        };
        let why = match head {
            None => "never ran",
            Some(head) => match head.run.status {
                Status::Succeeded if rules.fresh(&head) && !plan.all => continue,
                Status::Succeeded if rules.fresh(&head) => "succeeded; --all runs it again",
                Status::Succeeded => "its success expired (--ttl)",
                Status::Failed => "failed",
                Status::Abandoned => "abandoned",
                Status::Running => "running elsewhere; passed by",
            },
        };
        due.push(Due {
            key,
            slot: slot(&start),
            why,
        });
    }
    Ok(due)
}

/// `--dry-run`: a line per period due (its start, its key, why), and how
/// many on stderr.
fn list(due: &[Due], reporter: &Reporter) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for period in due {
        let _ = writeln!(
            out,
            "{}  {}  {}",
            period.slot,
            crate::render::printable(&period.key),
            period.why
        );
    }
    let _ = out.flush();
    reporter.notice(
        &mut std::io::stderr(),
        crate::console::Event::Backfill,
        &format!(
            "dry run: {} period{} due, oldest first; nothing ran",
            due.len(),
            if due.len() == 1 { "" } else { "s" }
        ),
    );
}

/// How the periods went, for the exit code: the first failure's code,
/// else the conflict's when one was passed by, else 0.
#[derive(Default)]
struct Tally {
    first_failure: Option<u8>,
    passed_by: bool,
}

/// Runs each period due, oldest first, one at a time.
fn run_all(config: &Config, due: &[Due], location: &Location, reporter: &Reporter) -> Result<u8> {
    let bar = reporter.bar(due.len() as u64);
    let mut tally = Tally::default();
    for (done, period) in due.iter().enumerate() {
        let place = format!("{}/{}", done + 1, due.len());
        let before = match look(config, &period.key, location, reporter)? {
            Look::Stop(code) => return Ok(code),
            Look::Pass => {
                tally.passed_by = true;
                said(
                    bar.as_deref(),
                    reporter,
                    &place,
                    &period.key,
                    "running elsewhere; passed by",
                );
                continue;
            }
            Look::Done => continue,
            Look::Run(before) => before,
        };
        if let Some(bar) = &bar {
            bar.set_message(crate::render::printable(&period.key).into_owned());
        }
        let ran = || run_key(config, &period.key, Some(&period.slot), location, reporter);
        let code = match bar.as_deref() {
            // The bar steps aside while the command writes to the terminal.
            Some(bar) => bar.suspend(ran),
            None => ran(),
        };
        let code = super::catchup::past_period(code, reporter)?;
        let what = outcome(config, &period.key, before, code, location)?;
        said(bar.as_deref(), reporter, &place, &period.key, &what);
        if let Some(bar) = &bar {
            bar.inc(1);
        }
        if interrupted(code) {
            reporter.notice(
                &mut std::io::stderr(),
                crate::console::Event::Backfill,
                &format!(
                    "backfill stopped at {} by a signal; the same backfill again starts from it",
                    crate::render::printable(&period.key)
                ),
            );
            return Ok(code);
        }
        tally.count(config, code, &what);
    }
    drop(bar);
    Ok(tally.code(config))
}

impl Tally {
    fn count(&mut self, config: &Config, code: u8, what: &str) {
        if what.starts_with("running elsewhere") {
            self.passed_by = true;
        } else if code != exit::SUCCESS
            && code != config.skipped_exit_code
            && code != config.paused_exit_code
            && self.first_failure.is_none()
        {
            self.first_failure = Some(code);
        }
    }

    fn code(&self, config: &Config) -> u8 {
        match (self.first_failure, self.passed_by) {
            (Some(code), _) => code,
            (None, true) => config.conflict_exit_code,
            (None, false) => exit::SUCCESS,
        }
    }
}

/// A period's line: above the bar at a terminal, else on its own.
fn said(
    bar: Option<&indicatif::ProgressBar>,
    reporter: &Reporter,
    place: &str,
    key: &str,
    what: &str,
) {
    let line = format!("backfill {place} {}: {what}", crate::render::printable(key));
    match bar {
        Some(bar) => bar.println(format!("idem: {line}")),
        None => reporter.notice(
            &mut std::io::stderr(),
            crate::console::Event::Backfill,
            &line,
        ),
    }
}

/// Whether a period ended by SIGINT, SIGTERM or SIGHUP: a person or a
/// service manager stopping the backfill, which stops there.
fn interrupted(code: u8) -> bool {
    [nix::libc::SIGINT, nix::libc::SIGTERM, nix::libc::SIGHUP]
        .iter()
        .any(|signal| exit::for_signal(*signal) == code)
}

/// What a period's key holds just before it runs.
enum Look {
    /// Paused: the backfill stops with this code.
    Stop(u8),
    /// Running elsewhere: passed by.
    Pass,
    /// Succeeded since the list was made: nothing to do.
    Done,
    /// To run; the head's run id before it.
    Run(Option<uuid::Uuid>),
}

fn look(config: &Config, key: &str, location: &Location, reporter: &Reporter) -> Result<Look> {
    let Some(mut ledger) = ledger::open_existing(location)? else {
        return Ok(Look::Run(None));
    };
    let look = if let Some(pause) = ledger.paused(&config.job.name)? {
        reporter.notice(
            &mut std::io::stderr(),
            crate::console::Event::Backfill,
            &format!(
                "backfill stopped at {}: {} is paused (by {}); idem resume, then the same backfill again, runs the rest",
                crate::render::printable(key),
                crate::render::printable(&pause.job),
                pause.by
            ),
        );
        Look::Stop(config.paused_exit_code)
    } else {
        let head: Option<Head> = ledger.head(key)?;
        let rules = config.rules(Timestamp::now());
        match head {
            Some(head) if head.run.status == Status::Running => Look::Pass,
            Some(head)
                if head.run.status == Status::Succeeded && rules.fresh(&head) && !config.force =>
            {
                Look::Done
            }
            head => Look::Run(head.map(|head| head.run.run_id)),
        }
    };
    ledger.leave();
    Ok(look)
}

/// What came of a period, from its key's head after the run.
fn outcome(
    config: &Config,
    key: &str,
    before: Option<uuid::Uuid>,
    code: u8,
    location: &Location,
) -> Result<String> {
    let head = match ledger::open_existing(location)? {
        Some(mut ledger) => {
            let head = ledger.head(key)?;
            ledger.leave();
            head
        }
        None => None,
    };
    Ok(match head {
        Some(head) if Some(head.run.run_id) != before => match head.run.status {
            Status::Succeeded => "succeeded".to_owned(),
            Status::Running => "running elsewhere; passed by".to_owned(),
            status => format!("{} (exit {code})", status.as_str()),
        },
        _ if code == config.conflict_exit_code => "running elsewhere; passed by".to_owned(),
        _ => format!("nothing ran (exit {code}: blocked, paused or skipped)"),
    })
}
