//! A paused job (`idem pause`, `--pause-after`) as a run meets it: before
//! it claims, the pause is read and nothing is claimed; after a failure
//! that paused its job, the alert says so.

use anyhow::Result;

use super::config::Config;
use crate::alert::Verdict;
use crate::ledger::{Claim, Pause, RunLedger};
use crate::report::Reporter;

/// Whether the job is paused: then nothing runs, the pause is said where a
/// skip would be, and idem exits `--paused-exit-code`.
pub(super) fn check(
    config: &Config,
    ledger: &mut dyn RunLedger,
    reporter: &Reporter,
) -> Result<Option<u8>> {
    let Some(pause) = ledger.paused(&config.job.name)? else {
        return Ok(None);
    };
    reporter.info(crate::console::Event::Paused, || line(&pause));
    Ok(Some(config.paused_exit_code))
}

/// `paused JOB: by u@h since T[ until T]: REASON; idem resume JOB runs it`.
fn line(pause: &Pause) -> String {
    let job = crate::render::printable(&pause.job);
    let mut said = format!(
        "paused {job}: by {} since {}",
        pause.by,
        crate::render::local_with_zone(pause.since)
    );
    if let Some(until) = pause.until {
        said.push_str(&format!(" until {}", crate::render::local_with_zone(until)));
    }
    if let Some(reason) = &pause.reason {
        said.push_str(&format!(": {}", crate::render::printable(reason)));
    }
    said.push_str(&format!("; idem resume {job} runs it"));
    said
}

/// A recorded failure, judged: when this run's outcome paused its job
/// (`--pause-after`), the alert is the pause's (said now, told with
/// `IDEM_EVENT=paused`), once, since only one outcome writes the pause.
pub(super) fn judge(
    config: &Config,
    claim: &Claim,
    ledger: &mut dyn RunLedger,
    reporter: &Reporter,
    verdict: Verdict,
) -> Verdict {
    let (Verdict::Failure { failures, .. }, Some(after)) = (verdict, config.pause_after) else {
        return verdict;
    };
    match ledger.paused(&config.job.name) {
        Ok(Some(pause)) if pause.run_id == Some(claim.run_id) => {
            reporter.notice(
                &mut std::io::stderr(),
                crate::console::Event::Paused,
                &format!(
                    "paused {job}: {failures} failures in a row (--pause-after {after}); idem resume {job} runs it again",
                    job = crate::render::printable(&config.job.name)
                ),
            );
            Verdict::Paused { failures }
        }
        _ => verdict,
    }
}
