//! The SQL text of a SQLite ledger's run writes and the query builders:
//! a claim's and an outcome's statements, and `ledger list`'s filter.

use std::sync::LazyLock;

use jiff::Timestamp;
use rusqlite::{params, Connection, OptionalExtension};

use super::super::{encode_command, ListFilter, NewRun, Status};
use super::rows::{millis, RunCol, StatusCode, RUNNING, RUNS, SUCCEEDED};
use super::tx::{END_ATTEMPT, LOAD_JOB, RELEASE_HEAD, RELEASE_OWNER, SAVE_JOB};

/// The statements of a run's writes, prepared while the writers' lock is
/// waited for: preparing is most of such a write's work, which no other
/// writer then waits for (under 200 concurrent first runs, the lock's
/// queue is what bounds them). An uncontended write prepares them in its
/// body, as it would anyway: looking each up in the cache twice would cost
/// a first run 1.3% of its instructions. Each text is the one its write's
/// body prepares, cached, so the body finds it ready; a unit test checks
/// that the bodies prepare nothing more. (An attempt's start prepares its
/// three statements under the lock: cached, they cost an uncontended run
/// more than they save.)
pub(super) struct Ahead;

impl Ahead {
    /// A claim's; with the rows of a `new` key and job, which a key whose
    /// head was not found likely is (a `{date}` key's job is not, and its
    /// statement is prepared for nothing once a day).
    pub(super) fn claim(new: bool) -> Vec<&'static str> {
        let mut ahead = vec![KEY_ID, NEXT_FENCE, CALL_JOB, &NEW_RUN, &OWN_KEY];
        if new {
            ahead.extend([NEW_KEY, NEW_JOB]);
        }
        ahead
    }

    /// An outcome's: the last attempt's end, the run's, and its job's figures.
    pub(super) fn outcome() -> [&'static str; 5] {
        [END_ATTEMPT, &END_RUN, &RELEASE_HEAD, &LOAD_JOB, SAVE_JOB]
    }
}

pub(super) const KEY_ID: &str = "SELECT id FROM keys WHERE key = ?1";
pub(super) const NEW_KEY: &str = "INSERT INTO keys (key) VALUES (?1) RETURNING id";
pub(super) const NEXT_FENCE: &str = "UPDATE fences SET last = last + 1 RETURNING last";
/// The highest fence handed out (0 before the first claim).
pub(super) const HIGHEST_FENCE: &str = "SELECT last FROM fences";
pub(super) const CALL_JOB: &str =
    "UPDATE jobs SET template = ?2, zone = ?3, host = ?4, command = ?5,
        shell = ?6, first_run = coalesce(first_run, ?7), last_run = ?7,
        last_status = 'running', last_exit = NULL, checked_at = ?7, running = running + 1
    WHERE job = ?1 RETURNING id";
pub(super) const NEW_JOB: &str =
    "INSERT INTO jobs (job, template, zone, host, command, shell, first_run,
        last_run, last_status, checked_at, running)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, 'running', ?7, 1)
    RETURNING id";
pub(super) static NEW_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO runs (run_id, key_id, status, started_at, host, pid, command, shell,
             recovered, job_id)
         VALUES (?1, ?2, {RUNNING}, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    )
});
// The last assignment of a column wins: owned by this claim's lock, on the
// lock file of stamp ?3, made in boot ?4.
pub(super) static OWN_KEY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE keys SET head = ?2, {RELEASE_OWNER}, owner_lock = ?3, owner_boot = ?4
         WHERE id = ?1"
    )
});
pub(super) static END_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE runs SET status = ?2, exit_code = ?3, signal = ?4, finished_at = ?5,
             attempts = max(attempts, ?6)
         WHERE id = ?1 AND status = {RUNNING}
         RETURNING job_id"
    )
});

/// Starts the new run of key row `key_id` and makes it the key's head,
/// owned by this process's lock (`owner`: the lock file's stamp and this
/// boot's id): its row id and its fencing token.
pub(super) fn start_run(
    tx: &Connection,
    key_id: i64,
    new: &NewRun,
    owner: (i64, &str),
) -> rusqlite::Result<(i64, i64)> {
    let fence: i64 = tx
        .prepare_cached(NEXT_FENCE)?
        .query_row([], |row| row.get(0))?;
    let now = millis(Timestamp::now());
    let command = encode_command(&new.command);
    let job = params![
        new.job.name,
        new.job.template,
        new.job.zone,
        new.host,
        command,
        new.shell,
        now
    ];
    // The job's row made the first time only: an upsert costs more to
    // prepare (both statements in one) than this update, which nearly
    // every claim is.
    let known: Option<i64> = tx
        .prepare_cached(CALL_JOB)?
        .query_row(job, |row| row.get(0))
        .optional()?;
    let job_id: i64 = match known {
        Some(id) => id,
        None => tx
            .prepare_cached(NEW_JOB)?
            .query_row(job, |row| row.get(0))?,
    };
    tx.prepare_cached(&NEW_RUN)?.execute(params![
        new.run_id.as_bytes().as_slice(),
        key_id,
        now,
        new.host,
        new.pid,
        command,
        new.shell,
        new.recovered,
        job_id
    ])?;
    let run = tx.last_insert_rowid();
    tx.prepare_cached(&OWN_KEY)?
        .execute(params![key_id, run, owner.0, owner.1])?;
    Ok((run, fence))
}

/// The SQL and the values of `ledger list` with `filter`.
pub(super) fn list_query(filter: &ListFilter) -> (String, Vec<rusqlite::types::Value>) {
    let mut sql = format!("SELECT {} FROM {RUNS} WHERE 1", RunCol::LIST);
    let mut values: Vec<rusqlite::types::Value> = Vec::new();
    if let Some(glob) = &filter.key_glob {
        values.push(glob.clone().into());
        sql.push_str(&format!(" AND k.key GLOB ?{}", values.len()));
    }
    if let Some(glob) = &filter.job_glob {
        values.push(glob.clone().into());
        sql.push_str(&format!(
            " AND coalesce(j.job, k.key) GLOB ?{}",
            values.len()
        ));
    }
    if !filter.statuses.is_empty() {
        let mut marks = Vec::new();
        for status in &filter.statuses {
            values.push(StatusCode(*status).code().into());
            marks.push(format!("?{}", values.len()));
        }
        sql.push_str(&format!(" AND r.status IN ({})", marks.join(", ")));
        if !filter.statuses.contains(&Status::Succeeded) {
            // The literal term lets the planner use the partial index.
            sql.push_str(&format!(" AND r.status <> {SUCCEEDED}"));
        }
    }
    if let Some(since) = filter.since {
        values.push(millis(since).into());
        sql.push_str(&format!(" AND r.started_at >= ?{}", values.len()));
    }
    if let Some(until) = filter.until {
        values.push(millis(until).into());
        sql.push_str(&format!(" AND r.started_at <= ?{}", values.len()));
    }
    values.push(i64::from(filter.limit).into());
    sql.push_str(&format!(
        " ORDER BY r.started_at DESC, r.id DESC LIMIT ?{}",
        values.len()
    ));
    (sql, values)
}
