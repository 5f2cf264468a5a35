//! Doctor's word on stop requests (`idem stop`, `run --replace`) that
//! the running run's owner has not seen yet: normal for a moment (until
//! its attempt ends, or its next heartbeat on a shared ledger), a sign of
//! a frozen or cut-off owner when it lasts.

use serde_json::json;

use super::{Level, Report};
use crate::ledger::Inspect;

pub(super) fn pending(ledger: &mut dyn Inspect, report: &mut Report) {
    let requests = match ledger.pending_stops() {
        Ok(requests) => requests,
        Err(why) => {
            return report.push(
                "stop requests",
                Level::Problem,
                format!("cannot be read: {why}"),
                None::<String>,
            )
        }
    };
    let keys: Vec<&str> = requests
        .iter()
        .map(|request| request.key.as_str())
        .collect();
    report.facts.insert("pending_stops".into(), json!(keys));
    if requests.is_empty() {
        return report.ok("stop requests", "none pending");
    }
    let shown: Vec<String> = requests
        .iter()
        .take(5)
        .map(|request| {
            format!(
                "{} (by {} at {}, signal {})",
                request.key,
                request.by,
                crate::render::local_with_zone(request.requested_at),
                request.signal
            )
        })
        .collect();
    report.push(
        "stop requests",
        Level::Warn,
        format!(
            "{} stop request(s) not yet seen by the run's owner: {}{}",
            requests.len(),
            shown.join(", "),
            if requests.len() > 5 { ", ..." } else { "" }
        ),
        Some("the owner sees a request when its attempt ends, and on a shared ledger at its next heartbeat; one that lasts names a frozen or cut-off owner (`idem ledger show KEY`)"),
    );
}
