//! One judge of a job: its state (see [`judge::state`]), its figures and
//! what it owes to monitors, from one read of the ledger. `idem status`,
//! the board, each job page, `/api/status`, `/metrics` and `doctor` take
//! it from here.
//!
//! Everything comes from the ledger's per-job figures (one row a job, kept
//! by every claim and outcome), its pauses, its upstreams and its outbox,
//! so it answers at once however many runs the ledger holds. It only
//! reads: what is owed is counted, never sent.

pub mod judge;
pub mod period;

use std::collections::HashMap;

use anyhow::Result;
use jiff::Timestamp;

use crate::ledger::{glob_literal, JobState, Ledger, Pause, Upstreams};
use crate::render::status::JobStatus;
use judge::Facts;
use period::Zones;

/// Every job matching `glob` (all without one) judged at `now`, the jobs
/// that need a person first.
pub fn read(ledger: &mut dyn Ledger, glob: Option<&str>, now: Timestamp) -> Result<Vec<JobStatus>> {
    let jobs = ledger.jobs(glob)?;
    let pauses = ledger.pauses(glob)?;
    let upstreams = ledger.upstreams(glob)?;
    // A ledger from before the outbox (read, not migrated) owes nothing.
    let owed: HashMap<String, u64> = ledger.owed().unwrap_or_default().into_iter().collect();
    Ok(judged(&jobs, &pauses, &upstreams, &owed, now))
}

/// The events given up (lost) per job, the newest 100 000 at most: what
/// `/metrics` counts.
pub fn lost(ledger: &mut dyn Ledger) -> HashMap<String, u64> {
    let mut lost = HashMap::new();
    // A ledger from before the outbox (read, not migrated) lost nothing.
    for event in ledger.lost(100_000).unwrap_or_default() {
        *lost.entry(event.job).or_insert(0) += 1;
    }
    lost
}

/// One job judged at `now`, as [`read`] judges it among the others;
/// `None` for a job the ledger knows nothing of.
pub fn one(ledger: &mut dyn Ledger, job: &str, now: Timestamp) -> Result<Option<JobStatus>> {
    let found = read(ledger, Some(&glob_literal(job)), now)?;
    Ok(found.into_iter().find(|status| status.job == job))
}

/// The jobs judged at `now`: those with runs, and those paused before
/// their first run, the jobs that need a person first.
fn judged(
    jobs: &[JobState],
    pauses: &[Pause],
    upstreams: &[Upstreams],
    owed: &HashMap<String, u64>,
    now: Timestamp,
) -> Vec<JobStatus> {
    let mut zones = Zones::default();
    let host = crate::host::name();
    let held = |pause: &&Pause| pause.holds_at(now);
    let unrun: Vec<JobState> = pauses
        .iter()
        .filter(held)
        .filter(|pause| !jobs.iter().any(|job| job.job == pause.job))
        .map(|pause| not_run_yet(&pause.job))
        .collect();
    let mut statuses: Vec<JobStatus> = jobs
        .iter()
        .chain(&unrun)
        .map(|job| {
            let latest = pauses.iter().find(|pause| pause.job == job.job);
            let facts = Facts {
                job,
                pause: latest.filter(held),
                ended: latest.filter(|pause| !pause.holds_at(now)),
                upstreams: upstreams.iter().find(|found| found.job == job.job),
                owed: owed.get(&job.job).copied().unwrap_or(0),
            };
            judge::judge(&facts, now, &mut zones, &host)
        })
        .collect();
    statuses.sort_by(|a, b| a.state.cmp(&b.state).then_with(|| a.job.cmp(&b.job)));
    statuses
}

/// The figures of a job the ledger knows only by its pause: none yet.
fn not_run_yet(job: &str) -> JobState {
    JobState {
        job: job.to_owned(),
        template: job.to_owned(),
        zone: None,
        host: None,
        command: Vec::new(),
        shell: false,
        first_run: None,
        last_run: None,
        last_status: None,
        last_exit: None,
        last_success: None,
        failures: 0,
        runs: [0; 4],
        checked_at: None,
        strip: String::new(),
        ok_keys: Vec::new(),
        live: 0,
    }
}
