//! Pauses: a job that must not run for now (`idem pause`, `--pause-after`).
//!
//! A pause is kept per job, beside the job's figures: who paused it
//! (user@host), since when, why, and until when (none: until `idem
//! resume`). One whose `until` has passed holds no more, with nothing to
//! write: every read compares it with the ledger's clock. `idem resume`
//! ends a pause by setting its `until` to now, so that the job's latest
//! pause stays known: its periods are not missed, and the job is judged
//! from its resume. The rules here
//! are written once, over [`PauseTx`], one transaction of a backend in
//! its own SQL.

use jiff::Timestamp;
use uuid::Uuid;

/// A job's pause, as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    pub job: String,
    /// Who paused it: `user@host`.
    pub by: String,
    pub since: Timestamp,
    pub reason: Option<String>,
    /// When it ends by itself; `None`: at `idem resume`.
    pub until: Option<Timestamp>,
    /// The failed run whose outcome paused its job (`--pause-after`).
    pub run_id: Option<Uuid>,
}

impl Pause {
    /// Whether it still holds at `now`.
    pub fn holds_at(&self, now: Timestamp) -> bool {
        self.until.is_none_or(|until| until > now)
    }
}

/// What `idem pause` asks for, the job aside.
#[derive(Debug, Clone)]
pub struct PauseRequest {
    pub by: String,
    pub reason: Option<String>,
    pub until: Option<Timestamp>,
}

/// Whether `target` is a glob (`*`, `?`, `[`) rather than a job's name:
/// a glob names jobs the ledger knows; a name may be a job yet to run.
pub fn is_glob(target: &str) -> bool {
    target.contains(['*', '?', '['])
}

/// One transaction of a backend, as the pause rules see it. `now` is the
/// ledger's clock, read once per transaction.
pub(super) trait PauseTx {
    type Error;

    /// The ledger's clock.
    fn now(&mut self) -> Result<Timestamp, Self::Error>;

    /// The jobs matching `glob`: those with runs, and those paused before
    /// their first run, in job order.
    fn jobs_matching(&mut self, glob: &str) -> Result<Vec<String>, Self::Error>;

    /// Writes `pause`, over any pause of its job.
    fn put_pause(&mut self, pause: &Pause) -> Result<(), Self::Error>;

    /// Writes `pause` unless a pause of its job holds at `now`; whether it
    /// was written.
    fn add_pause(&mut self, pause: &Pause, now: Timestamp) -> Result<bool, Self::Error>;

    /// Ends at `now` the pauses of `jobs` that hold then, each kept with
    /// its end (the job is judged from its resume); those jobs.
    fn end_pauses(&mut self, jobs: &[String], now: Timestamp) -> Result<Vec<String>, Self::Error>;
}

/// Pauses `target` (a job, or a glob of known jobs) as `request` says;
/// the jobs paused, in order (none: a glob that matched nothing).
pub(super) fn pause<T: PauseTx>(
    tx: &mut T,
    target: &str,
    request: &PauseRequest,
) -> Result<Vec<String>, T::Error> {
    let now = tx.now()?;
    let jobs = targets(tx, target)?;
    for job in &jobs {
        tx.put_pause(&Pause {
            job: job.clone(),
            by: request.by.clone(),
            since: now,
            reason: request.reason.clone(),
            until: request.until,
            run_id: None,
        })?;
    }
    Ok(jobs)
}

/// Resumes `target`: (jobs matched, of those the ones that were paused).
pub(super) fn resume<T: PauseTx>(
    tx: &mut T,
    target: &str,
) -> Result<(Vec<String>, Vec<String>), T::Error> {
    let now = tx.now()?;
    let jobs = targets(tx, target)?;
    let paused = tx.end_pauses(&jobs, now)?;
    Ok((jobs, paused))
}

fn targets<T: PauseTx>(tx: &mut T, target: &str) -> Result<Vec<String>, T::Error> {
    if is_glob(target) {
        tx.jobs_matching(target)
    } else {
        Ok(vec![target.to_owned()])
    }
}

/// `--pause-after N`: in the transaction that records a failure of `job`,
/// its `failures`th in a row, pauses the job when that is N or more and
/// no pause holds. Whether this outcome paused it: of two hosts failing at
/// once, the job's row lock lets one write the pause and the other find it.
pub(super) fn after_failure<T: PauseTx>(
    tx: &mut T,
    job: &str,
    failures: u64,
    pause_after: u32,
    run_id: Uuid,
) -> Result<bool, T::Error> {
    if failures < u64::from(pause_after) {
        return Ok(false);
    }
    let now = tx.now()?;
    let pause = Pause {
        job: job.to_owned(),
        by: who(),
        since: now,
        reason: Some(format!(
            "{failures} failures in a row (--pause-after {pause_after})"
        )),
        until: None,
        run_id: Some(run_id),
    };
    tx.add_pause(&pause, now)
}

/// This user at this host, as a pause records who made it: the name of
/// the effective user (its number when it has none).
pub fn who() -> String {
    let uid = nix::unistd::geteuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| format!("uid{}", uid.as_raw()), |user| user.name);
    format!("{user}@{}", crate::host::name())
}

/// The [`Records`](super::Records) methods that run a pause rule in one of
/// the backend's transactions, written once and expanded in each backend's
/// `impl Records`, which must have `write_or_rehearse(doing, dry_run, body)`.
macro_rules! pause_methods {
    () => {
        fn pause(
            &mut self,
            target: &str,
            request: &super::pauses::PauseRequest,
        ) -> Result<Vec<String>> {
            self.write_or_rehearse("pause jobs in", false, |tx| {
                super::pauses::pause(tx, target, request)
            })
        }

        fn resume(&mut self, target: &str) -> Result<(Vec<String>, Vec<String>)> {
            self.write_or_rehearse("resume jobs in", false, |tx| {
                super::pauses::resume(tx, target)
            })
        }
    };
}
pub(super) use pause_methods;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_holds_until_its_until_and_a_glob_is_told_from_a_name() {
        let now: Timestamp = "2026-12-01T08:00:00Z".parse().expect("time");
        let mut pause = Pause {
            job: "backup".into(),
            by: "ops@a".into(),
            since: now,
            reason: None,
            until: None,
            run_id: None,
        };
        assert!(pause.holds_at(now));
        pause.until = Some(now);
        assert!(!pause.holds_at(now));
        assert!(is_glob("backup-*") && is_glob("b?") && is_glob("[ab]"));
        assert!(!is_glob("backup-{date}"));
    }
}
