//! Jobs that wait for each other (`--after`): what a blocked call leaves in
//! the ledger, each job's upstream templates, and the note that tells a
//! success marked by hand (`ledger mark`) from a real run.
//!
//! A blocked call claims nothing and holds nothing: it writes one job row
//! (the keys it waits for, and when), which the job's next claim outdates
//! (`last_run` later than `blocked_at`), so the claim's own statements need
//! not know of it.

use anyhow::Result;
use jiff::Timestamp;

use super::JobInfo;

/// A job's upstreams, as `status` and `doctor` read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstreams {
    pub job: String,
    /// The `--after` templates its latest call gave, as typed.
    pub templates: Vec<String>,
    /// The upstream keys its latest call waited for, while no claim of the
    /// job came after it.
    pub blocked_on: Option<Vec<String>>,
    pub blocked_at: Option<Timestamp>,
}

/// What a ledger keeps of jobs that wait for each other.
pub trait Dependencies {
    /// Records `job`'s upstream `templates` and, when its call is blocked,
    /// the upstream keys it waits for. Bookkeeping: not durable, and a
    /// write only when something changed or the call is blocked. The
    /// command is kept for a job that has no run yet, so that `status`
    /// shows what it will run.
    fn depend(
        &mut self,
        job: &JobInfo,
        command: (&[std::ffi::OsString], bool),
        templates: &[String],
        blocked_on: Option<&[String]>,
    ) -> Result<()>;

    /// The jobs matching `glob` (all without one) that have upstreams or
    /// were blocked, in job order.
    fn upstreams(&mut self, glob: Option<&str>) -> Result<Vec<Upstreams>>;
}

/// Whether a job's blocked call is still its latest: no claim came after
/// it (`last_run`), nor a skip's stamp (`checked_at`, which the blocked
/// call sets to its own time).
pub fn still_blocked(
    blocked_at: Option<Timestamp>,
    last_run: Option<Timestamp>,
    checked_at: Option<Timestamp>,
) -> bool {
    blocked_at.is_some_and(|at| {
        last_run.is_none_or(|run| at > run) && checked_at.is_none_or(|checked| at >= checked)
    })
}

/// Upstream templates or keys as stored: one a line (keys hold no newline).
pub fn encode_lines(lines: &[String]) -> String {
    lines.join("\n")
}

pub fn decode_lines(text: Option<String>) -> Vec<String> {
    text.map(|text| super::decode_keys(&text))
        .unwrap_or_default()
}

/// The note of a period that `--misfire latest` passed over for a newer
/// one: recorded as a success with no attempt (so it is neither missed nor
/// failed, and its dependents go on), told apart by this note.
pub const MISFIRE_NOTE: &str = "skipped by --misfire latest: a newer period ran instead";

/// The note of a success marked by hand: who, and why.
pub fn mark_note(who: &str, reason: &str) -> String {
    format!("marked succeeded by {who}: {reason}")
}

/// A success recorded without running (`ledger mark`, a period skipped by
/// `--misfire latest`): the key's head, no attempt, this process and host,
/// `note` telling why.
pub fn recorded_success(
    key: String,
    job: String,
    command: Vec<std::ffi::OsString>,
    shell: bool,
    note: String,
) -> super::Run {
    let now = Timestamp::now();
    super::Run {
        key,
        job,
        head: true,
        run_id: crate::id::new(),
        status: super::Status::Succeeded,
        exit_code: Some(0),
        signal: None,
        attempts: 0,
        started_at: now,
        finished_at: Some(now),
        host: crate::host::name(),
        pid: std::process::id(),
        command,
        shell,
        recovered: false,
        note: Some(note),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_outdated_by_a_later_claim_or_stamp() {
        let at = Timestamp::from_second(100).unwrap();
        let before = Timestamp::from_second(50).unwrap();
        let after = Timestamp::from_second(150).unwrap();
        assert!(still_blocked(Some(at), None, Some(at)));
        assert!(still_blocked(Some(at), Some(before), Some(at)));
        assert!(!still_blocked(Some(at), Some(after), Some(at)));
        assert!(!still_blocked(Some(at), Some(before), Some(after)));
        assert!(!still_blocked(None, None, None));
    }
}
