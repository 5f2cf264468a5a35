//! The ledger's record of an attempt: how it ended, what it died of and
//! what it used, from what the process room tells of its end.

use crate::exit;
use crate::ledger::Attempt;
use crate::process::AttemptEnd;

/// The ledger's record of an attempt; takes the output tails, which may be
/// megabytes, rather than copy them.
pub(super) fn attempt_record(number: u32, end: &mut AttemptEnd) -> Attempt {
    Attempt {
        number,
        started_at: Some(end.started_at),
        finished_at: Some(end.finished_at),
        exit_code: Some(end.code().into()),
        signal: end.signal(),
        timed_out: end.timed_out,
        stdout_tail: std::mem::take(&mut end.stdout_tail),
        stderr_tail: std::mem::take(&mut end.stderr_tail),
        cut: end.cut,
        // Recorded with its start; an end leaves it as it is.
        containment: None,
        cause: cause(end),
        peak_memory: end
            .usage
            .peak_memory
            .and_then(|bytes| i64::try_from(bytes).ok()),
        cpu_ms: end.usage.cpu_ms.and_then(|ms| i64::try_from(ms).ok()),
    }
}

/// What attempt `end` died of where its exit code and signal do not say
/// it (see `Attempt::cause`).
fn cause(end: &AttemptEnd) -> Option<String> {
    if end.usage.oom_killed {
        return Some("killed for memory".to_owned());
    }
    if end.timed_out {
        return Some("timeout".to_owned());
    }
    end.stopped.as_ref().map(|why| format!("stopped: {why}"))
}

/// The ledger's record of attempt `number`, recorded as started at
/// `started_at`, whose setup failed: it ends now with idem's own code.
pub(super) fn set_up_failed(number: u32, started_at: jiff::Timestamp) -> Attempt {
    Attempt {
        number,
        started_at: Some(started_at),
        finished_at: Some(jiff::Timestamp::now()),
        exit_code: Some(exit::IDEM_FAILED.into()),
        signal: None,
        timed_out: false,
        stdout_tail: Vec::new(),
        stderr_tail: Vec::new(),
        cut: false,
        containment: None,
        ..Attempt::default()
    }
}
