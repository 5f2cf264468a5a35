//! `--misfire latest`: a catch-up after a long stop runs the newest period
//! due only, and records each older one as skipped by policy, a success
//! with no attempt whose note says so (`ledger list` shows `skipped
//! (misfire)`), so that it is counted neither missed nor failed and the
//! next catch-up does not take it up again.

use anyhow::Result;

use super::config::Config;
use crate::ledger::{self, ImportReport, ImportSink, Location, Run, MISFIRE_NOTE};
use crate::report::Reporter;

/// Records the keys of `older` skipped by policy, at once; a key that a
/// run claimed meanwhile keeps that run (an import never takes the place
/// of a running head).
pub(super) fn skip(
    config: &Config,
    older: &[(String, jiff::Zoned)],
    location: &Location,
    reporter: &Reporter,
) -> Result<()> {
    if older.is_empty() {
        return Ok(());
    }
    let runs: Vec<Run> = older
        .iter()
        .map(|(key, _)| {
            ledger::recorded_success(
                key.clone(),
                config.job.name.clone(),
                config.command.clone(),
                config.shell,
                MISFIRE_NOTE.to_owned(),
            )
        })
        .collect();
    let mut ledger = ledger::open(location)?;
    let mut report = ImportReport::default();
    let mut fed = false;
    ledger.import(
        &mut |sink: &mut dyn ImportSink| {
            if !fed {
                fed = true;
                for run in &runs {
                    sink.run(run, true)?;
                }
            }
            Ok(false)
        },
        &mut report,
    )?;
    ledger.leave();
    reporter.info(crate::console::Event::Skipped, || {
        format!(
            "--misfire latest: {} older period{} of {} recorded skipped ({} to {})",
            older.len(),
            if older.len() == 1 { "" } else { "s" },
            crate::render::printable(&config.job.name),
            crate::render::printable(&older[0].0),
            crate::render::printable(&older[older.len() - 1].0)
        )
    });
    Ok(())
}
