//! Delivering the events owed: one event to its ping or hook, and a sweep
//! of a ledger's outbox by a run or `ledger deliver` (never by a read).

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::cronitor;
use super::events::{hook_flag, is_hook, Payload};
use super::hooks;
use super::http::Http;
use super::ping::{self, Monitor};
use super::sentry::{self, Dsn};
use crate::ledger::outbox::backoff;
use crate::ledger::EventState;
use crate::ledger::{Ledger, NewEvent, Owed, Pick, Settled};
use crate::render::doctor::Level;
use crate::report::Reporter;

/// The most one ping event may take in a sweep: a monitor that hangs
/// costs each event this, not the sweep's whole time.
const PER_EVENT: Duration = Duration::from_secs(3);

/// How many events a sweep takes at once: few enough that a sweep that
/// runs out of time leaves few held until their lease passes.
const BATCH: u32 = 32;

/// What a sweep did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Swept {
    pub delivered: u64,
    pub failed: u64,
    /// Events whose sending outlived its lease before it was settled:
    /// sent, not confirmed, and never sent again.
    pub taken: u64,
    /// Events found overtaken by a newer run's outcome: never sent.
    pub superseded: u64,
}

/// What a failure line calls an event's ping: Healthchecks' words.
fn called(event: &NewEvent, payload: &Payload) -> &'static str {
    match event.kind.as_str() {
        "start" => "start",
        "trace" => "trace",
        "success" | "recovery" | "stopped" => "success",
        "failure" if payload.alert => "fail",
        _ => "log",
    }
}

/// Delivers `event` within `most`: its ping sent to its monitor, or its
/// hook run to a zero exit; else the line that says why, masked. An event
/// its monitor has no word for (a `slow` to Sentry) is delivered as is.
pub fn deliver(event: &NewEvent, most: Duration, reporter: &Reporter) -> Result<(), String> {
    let payload = Payload::read(event);
    if is_hook(event) {
        return deliver_hook(event, &payload, reporter).1;
    }
    let shown = ping::shown(&event.address);
    let (http, request) = match ping::monitor(&event.address) {
        Monitor::Healthchecks(url) => (
            Http::new(url, shown, Vec::new()),
            Some(ping::healthchecks(url, event, &payload)),
        ),
        Monitor::Sentry(dsn) => {
            let parsed = Dsn::parse(dsn)?;
            let request = sentry::request(&parsed, event, &payload);
            (Http::new(dsn, shown, vec![parsed.key]), request)
        }
        Monitor::Cronitor(url) => (
            Http::new(url, shown, Vec::new()),
            cronitor::request(url, event, &payload),
        ),
        Monitor::Otlp(url) => (
            Http::new(url, shown, Vec::new()),
            Some(super::otlp::request(url, event)),
        ),
    };
    let Some(request) = request else {
        return Ok(());
    };
    http.send(&request, most).map(|_| ()).map_err(|failure| {
        format!(
            "{}: could not send the {} ping to {}: {failure}",
            named(event, &payload),
            called(event, &payload),
            http.masked
        )
    })
}

/// What a line about `event` names: its key, or its job when the event
/// was made before the key was known to it (a claim's).
fn named<'a>(event: &'a NewEvent, payload: &'a Payload) -> &'a str {
    if payload.key.is_empty() {
        &event.job
    } else {
        &payload.key
    }
}

/// Runs a hook event's command as `--on-failure` or `--on-recovery` runs
/// it; its exit code, for the run's record, and whether it exited 0.
pub fn deliver_hook(
    event: &NewEvent,
    payload: &Payload,
    reporter: &Reporter,
) -> (Option<i32>, Result<(), String>) {
    let run_id = event.run_id.to_string();
    let told = hooks::Event {
        name: if payload.paused {
            "paused"
        } else {
            &event.kind
        },
        job: &event.job,
        key: named(event, payload),
        run_id: &run_id,
        exit_code: payload.exit_code,
        cause: payload.cause.as_deref(),
        failures: payload.failures,
        output: &event.body,
    };
    let flag = hook_flag(event);
    let code = hooks::run(flag, OsStr::new(&event.address), &told, reporter);
    let result = match code {
        Some(0) => Ok(()),
        Some(code) => Err(format!("the {flag} hook exited {code}")),
        None => Err(format!("the {flag} hook could not start")),
    };
    (code, result)
}

/// How a delivery's result is kept: delivered, or owed again after its
/// backoff.
pub fn settled(result: &Result<(), String>, attempts: u32) -> Settled {
    match result {
        Ok(()) => Settled::Delivered,
        Err(error) => Settled::Failed {
            error: error.clone(),
            retry_in: backoff(attempts + 1),
        },
    }
}

/// Delivers the ledger's due events, each target's in its order, for at
/// most `within`; hooks too with `hooks` (a hook may run for its whole
/// limit, so only `idem ledger deliver` and a run's own outcome run
/// them), and, with `now`, whether or not their next try has come (`idem
/// ledger deliver`: a person or a timer asks for them now). A target that
/// fails is not tried again in this sweep, nor are those in `skip`.
/// Quiet: the events are other runs'.
pub fn sweep(
    ledger: &mut dyn Ledger,
    within: Duration,
    hooks: bool,
    now: bool,
    skip: &[String],
    reporter: &Reporter,
) -> Result<Swept> {
    let until = Instant::now() + within;
    let holder = crate::id::new();
    let quiet = Reporter::new(true, false, false);
    let mut swept = Swept::default();
    let mut skip = skip.to_vec();
    // Recorded as being sent only with time left to send it.
    // A run's sweep first reads whether anything is due, and writes
    // nothing when not.
    while Instant::now() < until && (now || ledger.any_due()?) {
        // A short sweep (a run's time left) takes one event at a time.
        let limit = if within < PER_EVENT { 1 } else { BATCH };
        let pick = Pick {
            targets: &[],
            skip: &skip,
            hooks,
            now,
            run: None,
            limit,
        };
        let taken = ledger.take_next(holder, &pick)?;
        swept.superseded += taken.superseded;
        if taken.owed.is_empty() {
            break;
        }
        for owed in taken.owed {
            let left = until.saturating_duration_since(Instant::now()).max(MINIMUM);
            let told = if is_hook(&owed.event) {
                reporter
            } else {
                &quiet
            };
            let result = deliver(&owed.event, left.min(PER_EVENT), told);
            if result.is_err() {
                skip.push(owed.event.dest.clone());
            }
            settle(ledger, &owed, result, &mut swept)?;
        }
    }
    Ok(swept)
}

/// The least time an event taken is given: it was recorded as being sent,
/// so it is tried, however little of the sweep's time is left.
const MINIMUM: Duration = Duration::from_millis(500);

/// Settles one delivery; a ledger that cannot record it is an error that
/// says whether the event went out (it is never sent again either way:
/// its sending was recorded first).
pub fn settle(
    ledger: &mut dyn Ledger,
    owed: &Owed,
    result: Result<(), String>,
    swept: &mut Swept,
) -> Result<()> {
    let settled = [(owed.event.event_id, settled(&result, owed.attempts))];
    let held = match ledger.settle(owed.holder, &settled) {
        Ok(held) => held == 1,
        Err(error) => {
            let went = match result {
                Ok(()) => "went out",
                Err(_) => "did not go out",
            };
            return Err(error.context(format!(
                "the {} event to {} {went}, but idem could not record it; it is never sent again",
                owed.event.kind, owed.event.target
            )));
        }
    };
    match (held, result) {
        (false, _) => swept.taken += 1,
        (true, Ok(())) => swept.delivered += 1,
        (true, Err(_)) => swept.failed += 1,
    }
    Ok(())
}

/// What `doctor` says of the outbox: the events still owed (a note), and
/// those given up, a day old and never delivered (a warning: a person was
/// not told), named by job, kind and target, never by address. A ledger
/// with neither says nothing.
pub fn doctor_outbox(
    owed: Result<u64, String>,
    lost: Result<Vec<EventState>, String>,
    push: &mut dyn FnMut(Level, String, Option<String>),
) {
    if let Ok(owed @ 1..) = owed {
        push(
            Level::Ok,
            format!(
                "{} owed, not yet delivered (retried by the next idem)",
                crate::render::count(owed, "event")
            ),
            Some("`idem ledger deliver` sends them now".to_owned()),
        );
    }
    let lost = match lost {
        Ok(lost) => lost,
        Err(why) => {
            push(
                Level::Warn,
                format!("the outbox cannot be read: {why}"),
                None,
            );
            return;
        }
    };
    let Some(newest) = lost.first() else {
        return;
    };
    let named: Vec<String> = lost
        .iter()
        .map(|event| {
            format!(
                "{} {} to {} at {}",
                crate::render::printable(&event.job),
                event.kind,
                event.target,
                crate::render::json::rfc3339(event.created_at)
            )
        })
        .collect();
    push(
        Level::Warn,
        format!(
            "{} lost, never delivered within a day (newest of job {}): {}",
            crate::render::count(lost.len() as u64, "event"),
            crate::render::printable(&newest.job),
            named.join("; ")
        ),
        Some("check the monitor's URL or the hook the events went to; `idem ledger show KEY` shows each event's tries".to_owned()),
    );
}
