//! The owner's side of a stop request (`idem stop`, `run --replace`): a
//! run asked to stop is recorded `failed` and never retried, whatever
//! `--retries`. The owner looks for a request where an attempt ends
//! badly and before a retry (one read each, never on the path of a
//! success), and hears of one from its heartbeat on a shared ledger.

use uuid::Uuid;

use super::execute::{attempt_record, Ending, Run};
use super::streams::Output;
use crate::exit;
use crate::ledger::{Ledger, Outcome, Status, StopRequest};
use crate::process::AttemptEnd;

/// The request to stop run `run_id`, marked seen: read from the ledger,
/// or, when the ledger cannot say, the signal the heartbeat brought
/// (`requested`), by an unknown requester.
pub(super) fn request(
    ledger: &mut dyn Ledger,
    run_id: Uuid,
    key: &str,
    requested: Option<i32>,
) -> Option<StopRequest> {
    match ledger.stop_seen(run_id) {
        Ok(Some(request)) => Some(request),
        Ok(None) | Err(_) => requested.map(|signal| StopRequest {
            run_id,
            key: key.to_owned(),
            by: "someone".to_owned(),
            requested_at: jiff::Timestamp::now(),
            signal,
            seen_at: None,
        }),
    }
}

/// What a person is told of a run stopped by `request`.
pub(super) fn words(key: &str, request: &StopRequest) -> String {
    format!(
        "{key}: stopped by {} at {} (signal {}); not retried",
        request.by,
        crate::render::local_with_zone(request.requested_at),
        request.signal
    )
}

/// The outcome of a run stopped by `request` whose last attempt stood for
/// `code` (its command's, 128+N for signal N), or that was stopped
/// between attempts (`None`): what a forwarded signal would leave.
pub(super) fn outcome(request: &StopRequest, code: Option<u8>) -> (u8, Outcome) {
    let code = code.unwrap_or_else(|| exit::for_signal(request.signal));
    let outcome = Outcome {
        status: Status::Failed,
        exit_code: code.into(),
        signal: Some(request.signal),
        stopped: true,
    };
    (code, outcome)
}

impl Run<'_> {
    /// The run's end when a person asked to stop it, between attempts.
    pub(super) fn stop_requested(
        &self,
        ledger: &mut dyn Ledger,
        requested: Option<i32>,
        output: &mut Output,
    ) -> Option<Ending> {
        let claim = self.claim;
        let request = request(ledger, claim.run_id, &claim.key, requested)?;
        self.reporter.notice(
            output.lines(),
            crate::console::Event::Stopped,
            &words(&claim.key, &request),
        );
        let (code, outcome) = outcome(&request, None);
        Some(Ending::Outcome {
            code,
            outcome,
            last: None,
        })
    }

    /// The run's end when a person asked to stop it, after attempt
    /// `number` ended as `end`; asked only when it did not succeed (a
    /// command that exited 0 before the request reached it succeeded).
    pub(super) fn stopped_after(
        &self,
        ledger: &mut dyn Ledger,
        end: &mut AttemptEnd,
        number: u32,
        requested: Option<i32>,
        output: &mut Output,
    ) -> Option<Ending> {
        if end.code() == exit::SUCCESS {
            return None;
        }
        let claim = self.claim;
        let request = request(ledger, claim.run_id, &claim.key, requested)?;
        self.reporter.notice(
            output.lines(),
            crate::console::Event::Stopped,
            &words(&claim.key, &request),
        );
        let (code, outcome) = outcome(&request, Some(end.code()));
        Some(Ending::Outcome {
            code,
            outcome,
            last: Some(attempt_record(number, end)),
        })
    }
}
