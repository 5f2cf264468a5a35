//! A job as `idem status` and `metrics` see it: figures kept up to date by
//! every claim and outcome, in the order runs finish.

use std::ffi::OsString;

use anyhow::Result;
use jiff::Timestamp;

use super::{Ledger, Run, Status};

/// A job as `idem status` and `metrics` see it: figures kept up to date by
/// every claim and outcome, so reading them costs one row per job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobState {
    pub job: String,
    pub template: String,
    pub zone: Option<String>,
    /// The host of its latest run (for a `{host}` template).
    pub host: Option<String>,
    pub command: Vec<OsString>,
    pub shell: bool,
    pub first_run: Option<Timestamp>,
    pub last_run: Option<Timestamp>,
    pub last_status: Option<Status>,
    pub last_exit: Option<i32>,
    pub last_success: Option<Timestamp>,
    /// Failed and abandoned runs since its latest success, across its keys.
    pub failures: u64,
    /// Runs by status, in the order of [`Status::ALL`].
    pub runs: [u64; 4],
    /// When it was last called: a claim, or a skip (stamped at most once a
    /// minute).
    pub checked_at: Option<Timestamp>,
    /// Its latest outcomes, oldest first: `s` succeeded, `f` failed, `a`
    /// abandoned, `t` stopped by a person.
    pub strip: String,
    /// Its latest keys that succeeded, newest first.
    pub ok_keys: Vec<String>,
    /// Runs of the job recorded as running whose owner lives.
    pub live: u64,
}

/// The strip's mark of a run a person stopped.
pub const STOPPED: char = 't';

/// How many outcomes a job's strip keeps, and how many succeeded keys.
pub const STRIP_MARKS: usize = 20;

pub const OK_KEYS: usize = 16;

/// A skip within this long of the job's last stamp writes nothing: the
/// stamp tells a job cron still calls from one it stopped calling, which
/// needs no finer grain, and the skip path stays a read.
pub const CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl JobState {
    /// The job's figures after one more outcome (`key` ran and ended
    /// `status`), as every backend applies them. Outcomes count in the order
    /// runs finish, however the runs overlapped: a slow job whose every run
    /// is outrun by the next one's start still fails "in a row".
    pub fn outcome(&mut self, key: &str, status: Status, exit: Option<i32>, now: Timestamp) {
        self.last_status = Some(status);
        self.last_exit = exit;
        match status {
            Status::Succeeded => {
                self.failures = 0;
                self.succeeded(key, now);
            }
            Status::Failed | Status::Abandoned => self.failures += 1,
            Status::Running => {}
        }
        self.strip.push(match status {
            Status::Succeeded => 's',
            Status::Failed => 'f',
            Status::Abandoned => 'a',
            Status::Running => 'r',
        });
        self.keep_strip();
    }

    /// The job's figures after a run a person stopped (`key` recorded
    /// `failed` with `exit`): its latest outcome, marked `t` in the strip,
    /// but no failure: the failures in a row stay as they were.
    pub fn stopped(&mut self, exit: Option<i32>) {
        self.last_status = Some(Status::Failed);
        self.last_exit = exit;
        self.strip.push(STOPPED);
        self.keep_strip();
    }

    /// Whether the job's latest finished run was stopped by a person.
    pub fn last_stopped(&self) -> bool {
        self.strip.ends_with(STOPPED)
    }

    fn keep_strip(&mut self) {
        let extra = self.strip.chars().count().saturating_sub(STRIP_MARKS);
        self.strip = self.strip.chars().skip(extra).collect();
    }

    /// A success of `key` recorded at `now`: the newest of the job's
    /// succeeded keys.
    fn succeeded(&mut self, key: &str, now: Timestamp) {
        self.last_success = Some(self.last_success.map_or(now, |last| last.max(now)));
        self.ok_keys.retain(|ok| ok != key);
        self.ok_keys.insert(0, key.to_owned());
        self.ok_keys.truncate(OK_KEYS);
    }

    /// An imported run older than the job's latest: it changes no row of
    /// "in a row", but its success counts for its period.
    fn older_outcome(&mut self, key: &str, status: Status, finished: Timestamp) {
        if status == Status::Succeeded {
            self.last_success = Some(
                self.last_success
                    .map_or(finished, |last| last.max(finished)),
            );
            if !self.ok_keys.iter().any(|ok| ok == key) && self.ok_keys.len() < OK_KEYS {
                self.ok_keys.push(key.to_owned());
            }
        }
    }
}

impl JobState {
    /// The job's figures with an imported run counted in.
    pub fn imported(&mut self, run: &Run) {
        let index = Status::ALL
            .iter()
            .position(|status| *status == run.status)
            .unwrap_or(0);
        self.runs[index] += 1;
        self.first_run = Some(
            self.first_run
                .map_or(run.started_at, |first| first.min(run.started_at)),
        );
        self.checked_at = Some(
            self.checked_at
                .map_or(run.started_at, |at| at.max(run.started_at)),
        );
        let newest = self.last_run.is_none_or(|last| last <= run.started_at);
        if run.status != Status::Running {
            let finished = run.finished_at.unwrap_or(run.started_at);
            if newest {
                self.outcome(&run.key, run.status, run.exit_code, finished);
            } else {
                self.older_outcome(&run.key, run.status, finished);
            }
        }
        if newest {
            self.last_run = Some(run.started_at);
            self.last_status = Some(run.status);
            self.last_exit = run.exit_code;
            self.host = Some(run.host.clone());
            self.command = run.command.clone();
            self.shell = run.shell;
        }
    }
}

/// Encodes a job's succeeded keys for storage (keys hold no newline).
pub fn encode_keys(keys: &[String]) -> String {
    keys.join("\n")
}

pub fn decode_keys(text: &str) -> Vec<String> {
    text.split('\n')
        .filter(|key| !key.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The job's row in the ledger, if it has one.
pub fn job_state(ledger: &mut dyn Ledger, job: &str) -> Result<Option<JobState>> {
    Ok(ledger
        .jobs(Some(&glob_literal(job)))?
        .into_iter()
        .find(|state| state.job == job))
}

/// A glob that matches `text` alone.
pub fn glob_literal(text: &str) -> String {
    let mut glob = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '*' | '?' | '[' => {
                glob.push('[');
                glob.push(c);
                glob.push(']');
            }
            c => glob.push(c),
        }
    }
    glob
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_name_is_its_own_glob() {
        assert_eq!(glob_literal("a*b?[c]"), "a[*]b[?][[]c]");
    }
}
