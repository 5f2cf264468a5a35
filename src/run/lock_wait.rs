//! An attempt whose guardian is gone while its lock is still held: idem
//! waits until nothing holds it, since whatever does may still act for
//! the run. It says once who holds it, so the wait is never silent: the
//! run's own processes its guardian left (killed), or a process outside
//! the run that was handed a descriptor of the lock file (over a Unix
//! socket, or kept by a daemon the command talked to).

use std::cell::Cell;

use crate::ledger::runlock::Hold;
use crate::ledger::Claim;
use crate::process::holders::{names, Living};
use crate::report::Reporter;

/// Whether processes other than idem still hold the attempt's lock; the
/// first time they do, `told` is set and a line names them.
pub(super) fn still_held(
    claim: &Claim,
    hold: &Hold,
    told: &Cell<bool>,
    reporter: &Reporter,
) -> bool {
    let held = hold.others_hold();
    if held && !told.replace(true) {
        let line = waiting_line(&claim.key, &claim.run_id.to_string(), &hold.holders());
        reporter.notice(
            &mut std::io::stderr(),
            crate::console::Event::Waiting,
            &line,
        );
    }
    held
}

/// The line for a wait on `holders` (none seen: another user's process).
fn waiting_line(key: &str, run_id: &str, holders: &[Living]) -> String {
    let of_run = crate::process::processes_of_run(run_id);
    let (ours, outside): (Vec<Living>, Vec<Living>) = holders
        .iter()
        .cloned()
        .partition(|each| of_run.contains(&each.pid));
    if !outside.is_empty() {
        format!(
            "{key}: the attempt ended, but its lock is still held by {}, outside the run (a descriptor of the lock file was handed on); waiting until that closes it or ends",
            names(&outside)
        )
    } else if !ours.is_empty() {
        format!(
            "{key}: the attempt's guardian is gone; waiting for {}, which it left running holding the run's lock",
            names(&ours)
        )
    } else {
        format!(
            "{key}: the attempt ended, but a process this user cannot see still holds its lock; waiting until it closes it or ends"
        )
    }
}
