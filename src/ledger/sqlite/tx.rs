//! The ledger's rules ([`crate::ledger::rules`]) over one SQLite write
//! transaction, and the job bookkeeping every write shares. The writers'
//! lock is held around the whole transaction, so locking a key is a no-op.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use jiff::Timestamp;
use rusqlite::types::ToSql;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use uuid::Uuid;

use super::super::columns::JobCol;
use super::super::rules::{self, KeyFigures};
use super::super::runlock::RunLocks;
use super::super::{encode_command, encode_keys, Attempt, Head, JobState, Run, Status};
use super::containment::code;
use super::rows::{
    by_the_kernel, count_at, get, job_from_row, millis, query_head, run_from_row, time_at, RunCol,
    StatusCode, ABANDONED, FAILED, RUNNING, RUNS, SUCCEEDED,
};

/// Frees a key's owner columns: the run it owned has ended or was judged
/// dead. Part of every update that ends a head's `running`.
pub(super) const RELEASE_OWNER: &str = "owner_boot = NULL, owner_pid_start = NULL, \
     owner_pgid = NULL, owner_pgid_start = NULL, owner_lock = NULL";

/// Raises the fence counter to at least `?1`: an import of a moved ledger.
const RAISE_FENCE: &str = "UPDATE fences SET last = max(last, ?1)";

/// [`RELEASE_OWNER`] for the key whose head is run `?1` (found by the
/// run's key: no index holds `head`).
pub(super) static RELEASE_HEAD: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE keys SET {RELEASE_OWNER}
         WHERE id = (SELECT key_id FROM runs WHERE id = ?1) AND head = ?1"
    )
});

/// An attempt's end, on the row its start made.
pub(super) const END_ATTEMPT: &str = "UPDATE attempts SET finished_at = ?4, exit_code = ?5,
        signal = ?6, timed_out = ?7, stdout_tail = ?8, stderr_tail = ?9, cut = ?10,
        cause = ?11, peak_memory = ?12, cpu_ms = ?13
    WHERE run = ?1 AND n = ?2";

pub(super) static LOAD_JOB: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {} FROM jobs WHERE id = ?1", JobCol::LIST));

pub(super) const SAVE_JOB: &str = "UPDATE jobs SET first_run = ?2, last_run = ?3,
        last_status = ?4, last_exit = ?5, last_success = ?6, failures = ?7, running = ?8,
        succeeded = ?9, failed = ?10, abandoned = ?11, checked_at = ?12, strip = ?13,
        ok_keys = ?14, host = ?15, command = ?16, shell = ?17
    WHERE id = ?1";

/// One write transaction (the writers' lock held), with the kernel locks
/// that judge owners.
pub(super) struct Tx<'a> {
    pub conn: &'a Connection,
    pub locks: &'a RunLocks,
}

impl rules::Tx for Tx<'_> {
    type Error = rusqlite::Error;

    fn batch(&mut self, sql: &str) -> rusqlite::Result<()> {
        self.conn.execute_batch(sql)
    }

    fn lock_keys(&mut self, keys: &[String]) -> rusqlite::Result<HashSet<String>> {
        let mut known = HashSet::new();
        let mut find = self
            .conn
            .prepare_cached("SELECT 1 FROM keys WHERE key = ?1")?;
        for key in keys {
            if find.exists([key])? {
                known.insert(key.clone());
            }
        }
        Ok(known)
    }

    fn hold_key(&mut self, key: &str) -> rusqlite::Result<()> {
        self.conn
            .prepare_cached("INSERT INTO keys (key) VALUES (?1) ON CONFLICT (key) DO NOTHING")?
            .execute([key])?;
        Ok(())
    }

    fn read_head(&mut self, key: &str) -> rusqlite::Result<Option<(i64, Head)>> {
        query_head(self.conn, key, &mut by_the_kernel(self.locks))
    }

    fn count_runs(&mut self, key: &str) -> rusqlite::Result<u64> {
        self.conn
            .prepare_cached(
                "SELECT count(*) FROM runs r JOIN keys k ON k.id = r.key_id WHERE k.key = ?1",
            )?
            .query_row([key], |row| row.get(0))
    }

    fn mark_abandoned(&mut self, run: i64) -> rusqlite::Result<()> {
        let changed = self
            .conn
            .prepare_cached(&format!(
                "UPDATE runs SET status = {ABANDONED}, finished_at = ?2
                 WHERE id = ?1 AND status = {RUNNING}"
            ))?
            .execute(params![run, millis(Timestamp::now())])?;
        if changed == 1 {
            job_outcome(self.conn, run, Status::Abandoned, None)?;
        }
        self.release_owner(run)
    }

    fn release_owner(&mut self, run: i64) -> rusqlite::Result<()> {
        self.conn.prepare_cached(&RELEASE_HEAD)?.execute([run])?;
        Ok(())
    }

    fn clear_head(&mut self, key: &str) -> rusqlite::Result<()> {
        self.conn.execute(
            &format!("UPDATE keys SET head = NULL, {RELEASE_OWNER} WHERE key = ?1"),
            [key],
        )?;
        Ok(())
    }

    fn purge(&mut self, key: &str) -> rusqlite::Result<()> {
        let key_id: i64 =
            self.conn
                .query_row("SELECT id FROM keys WHERE key = ?1", [key], |row| {
                    row.get(0)
                })?;
        self.conn.execute(
            "DELETE FROM attempts WHERE run IN (SELECT id FROM runs WHERE key_id = ?1)",
            [key_id],
        )?;
        uncount_runs(self.conn, "key_id = ?1", &key_id)?;
        self.conn
            .execute("DELETE FROM runs WHERE key_id = ?1", [key_id])?;
        self.conn
            .execute("DELETE FROM keys WHERE id = ?1", [key_id])?;
        Ok(())
    }

    fn find_run(&mut self, run_id: Uuid) -> rusqlite::Result<Option<(i64, Status)>> {
        self.conn
            .prepare_cached("SELECT id, status FROM runs WHERE run_id = ?1")?
            .query_row([run_id.as_bytes().as_slice()], |row| {
                Ok((get(row, "id")?, get::<StatusCode>(row, "status")?.0))
            })
            .optional()
    }

    fn insert_run(&mut self, run: &Run) -> rusqlite::Result<i64> {
        let job_id = import_job(self.conn, run)?;
        self.conn
            .prepare_cached(
                "INSERT INTO runs (run_id, key_id, status, exit_code, signal, attempts,
                     started_at, finished_at, host, pid, command, shell, recovered, job_id,
                     note)
                 SELECT ?1, id, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15
                 FROM keys WHERE key = ?2",
            )?
            .execute(params![
                run.run_id.as_bytes().as_slice(),
                run.key,
                StatusCode(run.status),
                run.exit_code,
                run.signal,
                run.attempts,
                millis(run.started_at),
                run.finished_at.map(millis),
                run.host,
                run.pid,
                encode_command(&run.command),
                run.shell,
                run.recovered,
                job_id,
                run.note
            ])?;
        Ok(self.conn.last_insert_rowid())
    }

    fn replace_outcome(&mut self, id: i64, run: &Run) -> rusqlite::Result<()> {
        self.conn.execute(
            "UPDATE runs SET status = ?2, exit_code = ?3, signal = ?4, attempts = ?5,
                 finished_at = ?6
             WHERE id = ?1",
            params![
                id,
                StatusCode(run.status),
                run.exit_code,
                run.signal,
                run.attempts,
                run.finished_at.map(millis)
            ],
        )?;
        self.conn
            .execute("DELETE FROM attempts WHERE run = ?1", [id])?;
        job_outcome(self.conn, id, run.status, run.exit_code)
    }

    fn add_attempt(&mut self, id: i64, attempt: &Attempt) -> rusqlite::Result<()> {
        upsert_attempt(self.conn, id, attempt)
    }

    fn head_and_latest(
        &mut self,
        key: &str,
        id: i64,
    ) -> rusqlite::Result<(Option<Status>, Option<Timestamp>)> {
        self.conn
            .prepare_cached(
                "SELECT (SELECT status FROM runs WHERE id = k.head) AS status,
                        (SELECT max(started_at) FROM runs WHERE key_id = k.id AND id != ?2)
                            AS latest
                 FROM keys k WHERE k.key = ?1",
            )?
            .query_row(params![key, id], |row| {
                Ok((
                    get::<Option<StatusCode>>(row, "status")?.map(|code| code.0),
                    time_at(row, "latest")?,
                ))
            })
    }

    fn adopt_head(&mut self, key: &str, id: i64) -> rusqlite::Result<()> {
        self.conn.execute(
            &format!("UPDATE keys SET head = ?2, {RELEASE_OWNER} WHERE key = ?1"),
            params![key, id],
        )?;
        Ok(())
    }

    fn mark_prunable(&mut self, before: Timestamp) -> rusqlite::Result<u64> {
        // Finished before the cutoff (so started before it too, which lets
        // the start-time index find them), never running, never a head.
        self.conn
            .execute_batch("CREATE TEMP TABLE IF NOT EXISTS pruned (id INTEGER PRIMARY KEY)")?;
        self.conn.execute("DELETE FROM temp.pruned", [])?;
        let runs = self.conn.execute(
            &format!(
                "INSERT INTO temp.pruned (id)
                 SELECT r.id FROM runs r
                 WHERE r.started_at < ?1 AND r.finished_at < ?1 AND r.status != {RUNNING}
                   AND r.id NOT IN (SELECT head FROM keys WHERE head IS NOT NULL)"
            ),
            [millis(before)],
        )?;
        Ok(runs as u64)
    }

    fn marked_output(&mut self) -> rusqlite::Result<(u64, u64)> {
        self.conn.query_row(
            "SELECT count(*) AS attempts,
                 coalesce(sum(length(stdout_tail)), 0) + coalesce(sum(length(stderr_tail)), 0)
                     AS bytes
             FROM attempts WHERE run IN (SELECT id FROM temp.pruned)",
            [],
            |row| Ok((count_at(row, "attempts")?, count_at(row, "bytes")?)),
        )
    }

    fn keys_left_unused(&mut self) -> rusqlite::Result<u64> {
        self.conn.query_row(
            "SELECT count(*) AS keys FROM keys k WHERE k.head IS NULL
               AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.key_id = k.id
                                 AND r.id NOT IN (SELECT id FROM temp.pruned))",
            [],
            |row| count_at(row, "keys"),
        )
    }

    fn key_figures(&mut self) -> rusqlite::Result<Vec<KeyFigures>> {
        // One pass over the runs; `r.id` is the row of max(started_at) (a
        // SQLite bare column beside a single max()).
        let mut statement = self.conn.prepare(&format!(
            "WITH ok AS (
                 SELECT key_id, max(started_at) AS started, max(finished_at) AS finished
                 FROM runs WHERE status = {SUCCEEDED} GROUP BY key_id
             )
             SELECT k.key AS key, max(r.started_at), r.id AS last, ok.finished AS last_success,
                 sum(r.status = {RUNNING}) AS running, sum(r.status = {SUCCEEDED}) AS succeeded,
                 sum(r.status = {FAILED}) AS failed, sum(r.status = {ABANDONED}) AS abandoned,
                 sum(r.status IN ({FAILED}, {ABANDONED})
                     AND r.started_at > coalesce(ok.started, -1)) AS failures
             FROM keys k JOIN runs r ON r.key_id = k.id LEFT JOIN ok ON ok.key_id = k.id
             GROUP BY k.id ORDER BY k.key"
        ))?;
        let rows = statement.query_map([], |row| {
            Ok(KeyFigures {
                key: get(row, "key")?,
                last: get(row, "last")?,
                last_success: time_at(row, "last_success")?,
                failures: count_at(row, "failures")?,
                runs: [
                    count_at(row, "running")?,
                    count_at(row, "succeeded")?,
                    count_at(row, "failed")?,
                    count_at(row, "abandoned")?,
                ],
            })
        })?;
        rows.collect()
    }

    fn runs(&mut self, ids: &[i64]) -> rusqlite::Result<HashMap<i64, Run>> {
        let mut statement = self.conn.prepare(&format!(
            "SELECT {} FROM {RUNS} WHERE r.id = ?1",
            RunCol::LIST
        ))?;
        let mut runs = HashMap::new();
        for id in ids {
            if let Some((id, run)) = statement.query_row([id], run_from_row).optional()? {
                runs.insert(id, run);
            }
        }
        Ok(runs)
    }

    fn raise_fence(&mut self, fence: i64) -> rusqlite::Result<()> {
        self.conn.execute(RAISE_FENCE, [fence]).map(drop)
    }
}

pub(super) fn upsert_attempt(tx: &Connection, run: i64, attempt: &Attempt) -> rusqlite::Result<()> {
    // The attempt's start is recorded before its command runs, so its row
    // is nearly always there: not when the child died before reaching
    // exec, and import adds new ones. An update, and an insert only when
    // it found nothing: an upsert costs more to prepare than the update.
    let values = params![
        run,
        attempt.number,
        attempt.started_at.map_or(0, millis),
        attempt.finished_at.map(millis),
        attempt.exit_code,
        attempt.signal,
        attempt.timed_out,
        (!attempt.stdout_tail.is_empty()).then_some(&attempt.stdout_tail),
        (!attempt.stderr_tail.is_empty()).then_some(&attempt.stderr_tail),
        attempt.cut,
        code(attempt.containment),
        attempt.cause,
        attempt.peak_memory,
        attempt.cpu_ms,
    ];
    // END_ATTEMPT takes all but the eleventh, numbered on from ?11: an end
    // leaves the containment its start recorded.
    let updated = tx.prepare_cached(END_ATTEMPT)?.execute(params_from_iter(
        values[..10].iter().chain(&values[11..]).copied(),
    ))?;
    if updated == 0 {
        tx.prepare_cached(
            "INSERT INTO attempts (run, n, started_at, finished_at, exit_code, signal,
                 timed_out, stdout_tail, stderr_tail, cut, containment, cause, peak_memory,
                 cpu_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )?
        .execute(values)?;
    }
    Ok(())
}

/// Takes the runs chosen by `filter` (over `runs`, with `?1` bound to
/// `value`) out of their jobs' counts, before they are deleted.
pub(super) fn uncount_runs(
    tx: &Connection,
    filter: &str,
    value: &dyn ToSql,
) -> rusqlite::Result<()> {
    tx.execute(
        &format!(
            "UPDATE jobs SET running = max(jobs.running - c.running, 0),
                 succeeded = max(jobs.succeeded - c.succeeded, 0),
                 failed = max(jobs.failed - c.failed, 0),
                 abandoned = max(jobs.abandoned - c.abandoned, 0)
             FROM (SELECT job_id, sum(status = {RUNNING}) AS running,
                       sum(status = {SUCCEEDED}) AS succeeded, sum(status = {FAILED}) AS failed,
                       sum(status = {ABANDONED}) AS abandoned
                   FROM runs WHERE {filter} GROUP BY job_id) AS c
             WHERE jobs.id = c.job_id"
        ),
        [value],
    )?;
    Ok(())
}

fn status_index(status: Status) -> usize {
    Status::ALL
        .iter()
        .position(|each| *each == status)
        .unwrap_or(0)
}

fn save_job(tx: &Connection, id: i64, job: &JobState) -> rusqlite::Result<()> {
    tx.prepare_cached(SAVE_JOB)?.execute(params![
        id,
        job.first_run.map(millis),
        job.last_run.map(millis),
        job.last_status.map(Status::as_str),
        job.last_exit,
        job.last_success.map(millis),
        job.failures as i64,
        job.runs[0] as i64,
        job.runs[1] as i64,
        job.runs[2] as i64,
        job.runs[3] as i64,
        job.checked_at.map(millis),
        job.strip,
        encode_keys(&job.ok_keys),
        job.host,
        encode_command(&job.command),
        job.shell
    ])?;
    Ok(())
}

fn load_job(tx: &Connection, id: i64) -> rusqlite::Result<JobState> {
    tx.prepare_cached(&LOAD_JOB)?
        .query_row([id], |row| job_from_row(row, 0))
}

/// A running run of row `run` ended `status`: its job's figures follow, in
/// the transaction that records it.
fn job_outcome(
    tx: &Connection,
    run: i64,
    status: Status,
    exit: Option<i32>,
) -> rusqlite::Result<()> {
    let found: Option<(Option<i64>, String)> = tx
        .prepare_cached(
            "SELECT r.job_id AS job_id, k.key AS key
             FROM runs r JOIN keys k ON k.id = r.key_id WHERE r.id = ?1",
        )?
        .query_row([run], |row| Ok((get(row, "job_id")?, get(row, "key")?)))
        .optional()?;
    let Some((Some(job_id), key)) = found else {
        return Ok(());
    };
    count_outcome(tx, job_id, &key, status, exit, false)
}

/// Job `job_id` after its running run of `key` ended `status` (a person
/// stopped it: `stopped`).
pub(super) fn count_outcome(
    tx: &Connection,
    job_id: i64,
    key: &str,
    status: Status,
    exit: Option<i32>,
    stopped: bool,
) -> rusqlite::Result<()> {
    let mut job = load_job(tx, job_id)?;
    job.runs[0] = job.runs[0].saturating_sub(1);
    job.runs[status_index(status)] += 1;
    if stopped {
        job.stopped(exit);
    } else {
        job.outcome(key, status, exit, Timestamp::now());
    }
    save_job(tx, job_id, &job)
}

/// The job of an imported run, made when new, with the run counted in.
fn import_job(tx: &Connection, run: &Run) -> rusqlite::Result<i64> {
    let job_id: i64 = tx
        .prepare_cached(
            "INSERT INTO jobs (job, template) VALUES (?1, ?1)
             ON CONFLICT (job) DO UPDATE SET job = excluded.job RETURNING id",
        )?
        .query_row([&run.job], |row| row.get(0))?;
    let mut job = load_job(tx, job_id)?;
    job.imported(run);
    save_job(tx, job_id, &job)?;
    Ok(job_id)
}
