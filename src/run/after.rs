//! `--after`: a run whose upstream keys have not all succeeded is blocked.
//! It is checked before anything is taken (named locks, the claim), so a
//! blocked run holds nothing while it waits, and two jobs that wait for
//! each other cannot deadlock: both are blocked, and both exit.

use std::time::{Duration, Instant};

use anyhow::Result;
use jiff::Timestamp;

use super::config::Config;
use super::decide::{decide, Verdict};
use crate::cli::RunArgs;
use crate::exit::Failure;
use crate::key::Template;
use crate::ledger::{Head, Ledger, Status};
use crate::report::Reporter;

/// `--after`, `--after-wait` and `--blocked-exit-code`, checked.
pub struct After {
    /// Each upstream template, as typed and parsed.
    templates: Vec<(String, Template)>,
    wait: Option<Duration>,
    exit_code: u8,
}

impl After {
    pub fn from_args(args: &RunArgs) -> Result<After> {
        let mut templates = Vec::new();
        for typed in &args.after {
            let template = Template::parse(typed).map_err(|error| {
                Failure::usage(error.message.replacen(
                    "invalid --key",
                    &format!("invalid --after '{typed}'"),
                    1,
                ))
            })?;
            if typed == &args.key {
                return Err(Failure::usage(format!(
                    "--after '{typed}' names the run's own key, which would wait for itself; name an upstream job's key"
                ))
                .into());
            }
            if !templates.iter().any(|(seen, _)| seen == typed) {
                templates.push((typed.clone(), template));
            }
        }
        Ok(After {
            templates,
            wait: args.after_wait.map(Into::into),
            exit_code: args.blocked_exit_code,
        })
    }

    /// The upstream templates as typed, as the job keeps them.
    fn typed(&self) -> Vec<String> {
        self.templates
            .iter()
            .map(|(typed, _)| typed.clone())
            .collect()
    }

    /// The upstream keys of a run of `slot` (`IDEM_SLOT`, under
    /// `--catch-up`), else of now.
    fn keys(&self, slot: Option<&str>) -> Result<Vec<String>> {
        let when = slot.and_then(slot_time).unwrap_or_else(crate::host::now);
        let host = crate::host::name();
        let mut keys = Vec::new();
        for (typed, template) in &self.templates {
            let key = template
                .expand(&when, &host)
                .map_err(|error| Failure::usage(format!("--after '{typed}': {}", error.message)))?;
            keys.push(key);
        }
        Ok(keys)
    }
}

/// The time a slot (`IDEM_SLOT`, RFC 3339) names, in the offset it was
/// made in, so that its upstream keys are cut as its own key was.
fn slot_time(slot: &str) -> Option<jiff::Zoned> {
    let offset = slot.get(slot.len().checked_sub(6)?..)?;
    format!("{slot}[{offset}]").parse().ok()
}

/// Waits, under `--after-wait`, until every upstream key of `key` has
/// succeeded. `None`: go on and claim. `Some(code)`: the run is blocked
/// and idem exits with `--blocked-exit-code`, nothing claimed. A key that
/// would not run anyway (its success skips, another run holds it) is left
/// to the claim to decide.
pub(super) fn wait(
    config: &Config,
    key: &str,
    slot: Option<&str>,
    ledger: &mut dyn Ledger,
    reporter: &Reporter,
) -> Result<Option<u8>> {
    let after = &config.after;
    if after.templates.is_empty() {
        return Ok(None);
    }
    let own = ledger.head(key)?;
    let rules = config.rules(Timestamp::now());
    if !matches!(
        decide(own.as_ref(), false, &rules).verdict,
        Verdict::Run { .. }
    ) {
        return Ok(None);
    }
    let upstreams = after.keys(slot)?;
    let typed = after.typed();
    let until = after.wait.map(|wait| Instant::now() + wait);
    let mut spinner = None;
    let mut recorded = false;
    loop {
        let waiting = match waiting_for(config, &upstreams, ledger) {
            Err(error) if super::rides_out(&error, until) => {
                std::thread::sleep(super::WAIT_POLL);
                continue;
            }
            waiting => waiting?,
        };
        if waiting.is_empty() {
            drop(spinner.take());
            if !recorded {
                // Bookkeeping: a ledger that refuses it changes nothing here.
                let _ = ledger.depend(&config.job, (&config.command, config.shell), &typed, None);
            }
            return Ok(None);
        }
        let names = waiting
            .iter()
            .map(|(key, state)| format!("{key} ({state})"))
            .collect::<Vec<_>>()
            .join(", ");
        if !recorded {
            recorded = true;
            blocked(config, key, &waiting, &names, ledger, reporter);
        }
        if super::wait_a_moment(until, &mut spinner, reporter, |left| {
            format!("{key}: waiting for {names}; {left} left")
        }) {
            continue;
        }
        reporter.info(crate::console::Event::Waiting, || {
            format!(
                "blocked {key}: waiting for {names}; {}",
                if after.wait.is_some() {
                    "--after-wait ran out"
                } else {
                    "--after-wait DUR waits for it"
                }
            )
        });
        return Ok(Some(after.exit_code));
    }
}

/// The run is blocked: its job row says on what (bookkeeping: a ledger
/// that refuses it changes nothing here), and a wait is said once where a
/// skip would be (at a terminal the spinner says the rest).
fn blocked(
    config: &Config,
    key: &str,
    waiting: &[(String, &str)],
    names: &str,
    ledger: &mut dyn Ledger,
    reporter: &Reporter,
) {
    let keys: Vec<String> = waiting.iter().map(|(key, _)| key.clone()).collect();
    let _ = ledger.depend(
        &config.job,
        (&config.command, config.shell),
        &config.after.typed(),
        Some(&keys),
    );
    if let Some(wait) = config.after.wait {
        reporter.info(crate::console::Event::Waiting, || {
            format!(
                "{key}: waiting up to {} for {names}",
                crate::report::short(wait)
            )
        });
    }
}

/// The upstream keys that have not succeeded (a success counts as a skip
/// would count it: within this run's `--ttl`), each with what it is.
fn waiting_for(
    config: &Config,
    upstreams: &[String],
    ledger: &mut dyn Ledger,
) -> Result<Vec<(String, &'static str)>> {
    let rules = config.rules(Timestamp::now());
    let mut waiting = Vec::new();
    for key in upstreams {
        let head = ledger.head(key)?;
        let state = match head.as_ref() {
            Some(head) if succeeded(head, &rules) => continue,
            Some(Head { run, .. }) if run.status == Status::Succeeded => "succeeded past --ttl",
            Some(head) => head.run.status.as_str(),
            None => "not run yet",
        };
        waiting.push((key.clone(), state));
    }
    Ok(waiting)
}

fn succeeded(head: &Head, rules: &super::decide::Rules) -> bool {
    head.run.status == Status::Succeeded && rules.fresh(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_read_in_the_offset_it_was_made_in() {
        let slot = slot_time("2026-03-01T00:00:00+01:00").expect("a slot");
        let template = Template::parse("extract-{date}").unwrap();
        assert_eq!(template.expand(&slot, "h").unwrap(), "extract-2026-03-01");
        assert!(slot_time("garbage").is_none());
    }
}
