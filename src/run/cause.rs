//! What an attempt died of, in the words a log line carries (`cause`):
//! `exit N`, `signal N`, `timeout`, `interrupted by signal N`, `lease
//! lost`, `not started`.

use crate::console::Event;
use crate::process::{AttemptEnd, End};

/// Notes how the attempt ended for the lines that follow; the kind of
/// line its end is, if it ends the run.
pub(super) fn noted(end: &AttemptEnd) -> Event {
    crate::console::ended(end.code().into(), &|| cause(end));
    match end.interrupted {
        Some(_) => Event::Interrupted,
        None => Event::Failed,
    }
}

pub(super) fn cause(end: &AttemptEnd) -> String {
    if end.stopped.is_some() {
        return "lease lost".to_owned();
    }
    if let Some(signal) = end.interrupted {
        return format!("interrupted by signal {signal}");
    }
    if end.timed_out {
        return "timeout".to_owned();
    }
    match &end.end {
        End::Exited(code) => format!("exit {code}"),
        End::Signaled(signal) => format!("signal {signal}"),
        End::NotStarted { code, .. } => format!("not started ({code})"),
    }
}
