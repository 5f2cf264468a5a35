//! A run's trace, when one is asked for (`--trace`, OTEL variables): the
//! claim, each attempt and each backoff as the run's children, the run's
//! span at its outcome, all made an outbox event written with the
//! outcome. With no recorder each of these does nothing.

use std::ffi::OsString;

use crate::ledger::{Claim, NewEvent, Outcome, Status};
use crate::process::AttemptEnd;
use crate::trace::proto::{int, text};
use crate::trace::{spans, Recorder, SpanId};

/// The claim was made: from `began` until now.
pub(super) fn claimed(trace: Option<&Recorder>, began: Option<u64>, claim: &Claim) {
    if let (Some(trace), Some(began)) = (trace, began) {
        let attributes = vec![
            text("idem.key", claim.key.as_str()),
            int("idem.fence", claim.fence),
        ];
        trace.child(
            spans::span_id(),
            "claim",
            (began, spans::now()),
            attributes,
            None,
        );
    }
}

/// An attempt is about to start: its span's id and start, and the
/// `TRACEPARENT` (and `TRACESTATE`) that names it for the command.
pub(super) fn attempt_starts(
    trace: Option<&Recorder>,
    env: &mut Vec<(&'static str, OsString)>,
) -> Option<(SpanId, u64)> {
    let trace = trace?;
    let id = spans::span_id();
    env.push(("TRACEPARENT", trace.traceparent(id).into()));
    if !trace.tracestate.is_empty() {
        env.push(("TRACESTATE", trace.tracestate.clone().into()));
    }
    Some((id, spans::now()))
}

/// Attempt `number`, started as `started`, ended as `end`.
pub(super) fn attempt_ended(
    trace: Option<&Recorder>,
    started: Option<(SpanId, u64)>,
    number: u32,
    end: &AttemptEnd,
) {
    let (Some(trace), Some((id, began))) = (trace, started) else {
        return;
    };
    let code = i64::from(end.code());
    let cause = super::cause::cause(end);
    let attributes = vec![
        int("idem.attempt", i64::from(number)),
        int("process.exit.code", code),
        text("idem.cause", cause.as_str()),
    ];
    let error = (code != 0).then_some(cause);
    trace.child(
        id,
        &format!("attempt {number}"),
        (began, spans::now()),
        attributes,
        error,
    );
}

/// The backoff after attempt `number`, from `began` until now.
pub(super) fn backoff(trace: Option<&Recorder>, began: Option<u64>, number: u32) {
    if let (Some(trace), Some(began)) = (trace, began) {
        let attributes = vec![int("idem.attempt", i64::from(number))];
        trace.child(
            spans::span_id(),
            "backoff",
            (began, spans::now()),
            attributes,
            None,
        );
    }
}

/// The time now, when a trace is kept: a clock read is saved otherwise.
pub(super) fn now(trace: Option<&Recorder>) -> Option<u64> {
    trace.map(|_| spans::now())
}

/// The run ends with `outcome`: its span and its children, as the event
/// that delivers them.
pub(super) fn event(
    trace: Option<&Recorder>,
    claim: &Claim,
    job: &str,
    outcome: &Outcome,
) -> Option<NewEvent> {
    let trace = trace?;
    let cause = match outcome.signal {
        Some(signal) => format!("signal {signal}"),
        None => format!("exit {}", outcome.exit_code),
    };
    let attributes = vec![
        text("idem.key", claim.key.as_str()),
        text("idem.job", job),
        text("idem.run_id", claim.run_id.to_string()),
        int("idem.fence", claim.fence),
        text("host.name", crate::host::name()),
        int("process.exit.code", i64::from(outcome.exit_code)),
        text("idem.cause", cause.as_str()),
        text(
            "idem.status",
            if outcome.status == Status::Succeeded {
                "succeeded"
            } else {
                "failed"
            },
        ),
    ];
    let error = (outcome.status != Status::Succeeded).then_some(cause);
    let spans = trace.finish(&format!("idem run {job}"), attributes, error);
    Some(crate::alert::trace_event(
        &trace.exporter,
        claim.run_id,
        job,
        &claim.key,
        spans,
    ))
}
