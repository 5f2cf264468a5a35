//! The ledger's rules ([`crate::ledger::rules`]) over one PostgreSQL
//! transaction, and the job bookkeeping every write shares. A key is
//! locked by its row (`FOR UPDATE`), as a claim locks it; clearing a head
//! raises the key's epoch, so an owner presumed gone finds its claim lost.

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

use super::super::columns::JobCol;
use super::super::rules::{self, KeyFigures};
use super::super::{encode_command, encode_keys, Attempt, Head, JobState, Run, Status};
use super::client::Transaction;
use super::rows::{job_from_row, maybe_time, query_head, run_from_row, time, unsigned, RunCol};
use crate::process::Containment;

/// Frees a key's owner: the run it owned has ended or was judged gone.
pub(super) const RELEASE_OWNER: &str = "owner_boot = NULL, owner_pid_start = NULL, \
    owner_pgid = NULL, owner_pgid_start = NULL, lease_until = NULL";

/// One transaction, and the runs `prune` set aside in it.
pub(super) struct Tx<'a, 'b> {
    pub tx: &'a mut Transaction<'b>,
    pub marked: Vec<i64>,
}

impl<'a, 'b> Tx<'a, 'b> {
    pub fn new(tx: &'a mut Transaction<'b>) -> Tx<'a, 'b> {
        Tx {
            tx,
            marked: Vec::new(),
        }
    }
}

impl rules::Tx for Tx<'_, '_> {
    type Error = tokio_postgres::Error;

    fn batch(&mut self, sql: &str) -> Result<(), tokio_postgres::Error> {
        self.tx.batch_execute(sql)
    }

    fn lock_keys(&mut self, keys: &[String]) -> Result<HashSet<String>, tokio_postgres::Error> {
        self.tx
            .query(
                "SELECT key FROM idem.keys WHERE key = ANY($1)
                 ORDER BY key COLLATE \"C\" FOR UPDATE",
                &[&keys],
            )?
            .iter()
            .map(|row| row.try_get("key"))
            .collect()
    }

    fn hold_key(&mut self, key: &str) -> Result<(), tokio_postgres::Error> {
        self.tx.execute_typed(
            "INSERT INTO idem.keys (key) VALUES ($1) ON CONFLICT (key) DO NOTHING",
            &[(&key, Type::TEXT)],
        )?;
        self.tx.execute_typed(
            "SELECT 1 FROM idem.keys WHERE key = $1 FOR UPDATE",
            &[(&key, Type::TEXT)],
        )?;
        Ok(())
    }

    fn read_head(&mut self, key: &str) -> Result<Option<(i64, Head)>, tokio_postgres::Error> {
        self.tx.pipeline(async |db| query_head(db, key).await)
    }

    fn count_runs(&mut self, key: &str) -> Result<u64, tokio_postgres::Error> {
        let row = self.tx.query_one(
            "SELECT count(*) AS runs FROM idem.runs WHERE key = $1",
            &[&key],
        )?;
        unsigned(&row, "runs")
    }

    fn mark_abandoned(&mut self, run: i64) -> Result<(), tokio_postgres::Error> {
        let abandoned = self.tx.query_typed_opt(
            "UPDATE idem.runs SET status = 'abandoned', finished_at = now()
             WHERE id = $1 AND status = 'running'
             RETURNING run_id",
            &[(&run, Type::INT8)],
        )?;
        if let Some(row) = abandoned {
            let run_id: Uuid = row.try_get("run_id")?;
            job_outcome(self.tx, run_id, Status::Abandoned, None)?;
            self.tx
                .pipeline(async |db| release_locks(db, run_id).await)?;
        }
        self.release_owner(run)
    }

    fn release_owner(&mut self, run: i64) -> Result<(), tokio_postgres::Error> {
        self.tx.execute_typed(
            // The key found by its name: no index holds `head`.
            &format!(
                "UPDATE idem.keys SET {RELEASE_OWNER}
                 WHERE key = (SELECT key FROM idem.runs WHERE id = $1) AND head = $1"
            ),
            &[(&run, Type::INT8)],
        )?;
        Ok(())
    }

    fn clear_head(&mut self, key: &str) -> Result<(), tokio_postgres::Error> {
        self.tx.execute(
            &format!(
                "UPDATE idem.keys SET head = NULL, epoch = nextval('idem.fences'), {RELEASE_OWNER}
                 WHERE key = $1"
            ),
            &[&key],
        )?;
        Ok(())
    }

    fn purge(&mut self, key: &str) -> Result<(), tokio_postgres::Error> {
        self.tx.execute(
            "DELETE FROM idem.attempts
             WHERE run IN (SELECT id FROM idem.runs WHERE key = $1)",
            &[&key],
        )?;
        uncount_runs(self.tx, "key = $1", &key)?;
        self.tx
            .execute("DELETE FROM idem.runs WHERE key = $1", &[&key])?;
        self.tx
            .execute("DELETE FROM idem.keys WHERE key = $1", &[&key])?;
        Ok(())
    }

    fn find_run(&mut self, run_id: Uuid) -> Result<Option<(i64, Status)>, tokio_postgres::Error> {
        self.tx
            .query_typed_opt(
                "SELECT id, status FROM idem.runs WHERE run_id = $1",
                &[(&run_id, Type::UUID)],
            )?
            .map(|row| Ok((row.try_get("id")?, row.try_get("status")?)))
            .transpose()
    }

    fn insert_run(&mut self, run: &Run) -> Result<i64, tokio_postgres::Error> {
        import_job(self.tx, run)?;
        self.tx
            .query_one(
                "INSERT INTO idem.runs (run_id, key, status, exit_code, signal, attempts,
                     started_at, finished_at, host, pid, command, shell, recovered, job, note)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
                 RETURNING id",
                &[
                    &run.run_id,
                    &run.key,
                    &run.status.as_str(),
                    &run.exit_code,
                    &run.signal,
                    &(run.attempts as i32),
                    &run.started_at,
                    &run.finished_at,
                    &run.host,
                    &i64::from(run.pid),
                    &encode_command(&run.command),
                    &run.shell,
                    &run.recovered,
                    &run.job,
                    &run.note,
                ],
            )?
            .try_get("id")
    }

    fn replace_outcome(&mut self, id: i64, run: &Run) -> Result<(), tokio_postgres::Error> {
        self.tx.execute(
            "UPDATE idem.runs SET status = $2, exit_code = $3, signal = $4,
                 attempts = $5, finished_at = $6
             WHERE id = $1",
            &[
                &id,
                &run.status.as_str(),
                &run.exit_code,
                &run.signal,
                &(run.attempts as i32),
                &run.finished_at,
            ],
        )?;
        self.tx
            .execute("DELETE FROM idem.attempts WHERE run = $1", &[&id])?;
        job_outcome(self.tx, run.run_id, run.status, run.exit_code)
    }

    fn add_attempt(&mut self, id: i64, attempt: &Attempt) -> Result<(), tokio_postgres::Error> {
        fn tail(bytes: &[u8]) -> Option<&[u8]> {
            (!bytes.is_empty()).then_some(bytes)
        }
        self.tx.execute_typed(
            "INSERT INTO idem.attempts (run, n, started_at, finished_at, exit_code, signal,
                 timed_out, stdout_tail, stderr_tail, cut, containment, cause, peak_memory,
                 cpu_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
            &[
                (&id, Type::INT8),
                (&(attempt.number as i32), Type::INT4),
                (
                    &attempt.started_at.unwrap_or(Timestamp::UNIX_EPOCH),
                    Type::TIMESTAMPTZ,
                ),
                (&attempt.finished_at, Type::TIMESTAMPTZ),
                (&attempt.exit_code, Type::INT4),
                (&attempt.signal, Type::INT4),
                (&attempt.timed_out, Type::BOOL),
                (&tail(&attempt.stdout_tail), Type::BYTEA),
                (&tail(&attempt.stderr_tail), Type::BYTEA),
                (&attempt.cut, Type::BOOL),
                (&attempt.containment.map(Containment::name), Type::TEXT),
                (&attempt.cause, Type::TEXT),
                (&attempt.peak_memory, Type::INT8),
                (&attempt.cpu_ms, Type::INT8),
            ],
        )?;
        Ok(())
    }

    fn head_and_latest(
        &mut self,
        key: &str,
        id: i64,
    ) -> Result<(Option<Status>, Option<Timestamp>), tokio_postgres::Error> {
        let row = self.tx.query_one(
            "SELECT (SELECT status FROM idem.runs WHERE id = k.head) AS head_status,
                    (SELECT max(started_at) FROM idem.runs WHERE key = k.key AND id <> $2)
                        AS latest
             FROM idem.keys k WHERE k.key = $1",
            &[&key, &id],
        )?;
        Ok((row.try_get("head_status")?, maybe_time(&row, "latest")?))
    }

    fn adopt_head(&mut self, key: &str, id: i64) -> Result<(), tokio_postgres::Error> {
        self.tx.execute(
            &format!("UPDATE idem.keys SET head = $2, {RELEASE_OWNER} WHERE key = $1"),
            &[&key, &id],
        )?;
        Ok(())
    }

    fn mark_prunable(&mut self, before: Timestamp) -> Result<u64, tokio_postgres::Error> {
        // Finished before the cutoff, never running, never a key's head.
        self.marked = self
            .tx
            .query(
                "SELECT r.id FROM idem.runs r
                 WHERE r.started_at < $1 AND r.finished_at < $1 AND r.status <> 'running'
                   AND NOT EXISTS (SELECT 1 FROM idem.keys k WHERE k.head = r.id)",
                &[&before],
            )?
            .iter()
            .map(|row| row.try_get("id"))
            .collect::<Result<_, _>>()?;
        Ok(self.marked.len() as u64)
    }

    fn marked_output(&mut self) -> Result<(u64, u64), tokio_postgres::Error> {
        let stats = self.tx.query_one(
            "SELECT count(*) AS attempts,
                    coalesce(sum(octet_length(stdout_tail)), 0)
                        + coalesce(sum(octet_length(stderr_tail)), 0) AS bytes
             FROM idem.attempts WHERE run = ANY($1)",
            &[&self.marked],
        )?;
        Ok((unsigned(&stats, "attempts")?, unsigned(&stats, "bytes")?))
    }

    fn keys_left_unused(&mut self) -> Result<u64, tokio_postgres::Error> {
        let row = self.tx.query_one(
            "SELECT count(*) AS keys FROM idem.keys k WHERE k.head IS NULL
               AND NOT EXISTS (SELECT 1 FROM idem.runs r WHERE r.key = k.key
                                 AND NOT (r.id = ANY($1)))",
            &[&self.marked],
        )?;
        unsigned(&row, "keys")
    }

    fn key_figures(&mut self) -> Result<Vec<KeyFigures>, tokio_postgres::Error> {
        let rows = self.tx.query(
            "WITH ok AS (
                 SELECT key, max(started_at) AS started, max(finished_at) AS finished
                 FROM idem.runs WHERE status = 'succeeded' GROUP BY key
             ),
             last AS (
                 SELECT DISTINCT ON (key) key, id FROM idem.runs
                 ORDER BY key, started_at DESC, id DESC
             )
             SELECT k.key, last.id AS last, ok.finished AS last_success,
                 count(*) FILTER (WHERE r.status = 'running') AS running,
                 count(*) FILTER (WHERE r.status = 'succeeded') AS succeeded,
                 count(*) FILTER (WHERE r.status = 'failed') AS failed,
                 count(*) FILTER (WHERE r.status = 'abandoned') AS abandoned,
                 count(*) FILTER (WHERE r.status IN ('failed', 'abandoned')
                     AND r.started_at > coalesce(ok.started, '-infinity')) AS failures
             FROM idem.keys k
             JOIN idem.runs r ON r.key = k.key
             JOIN last ON last.key = k.key
             LEFT JOIN ok ON ok.key = k.key
             GROUP BY k.key, last.id, ok.finished, ok.started
             ORDER BY k.key COLLATE \"C\"",
            &[],
        )?;
        rows.iter()
            .map(|row| {
                Ok(KeyFigures {
                    key: row.try_get("key")?,
                    last: row.try_get("last")?,
                    last_success: maybe_time(row, "last_success")?,
                    failures: unsigned(row, "failures")?,
                    runs: [
                        unsigned(row, "running")?,
                        unsigned(row, "succeeded")?,
                        unsigned(row, "failed")?,
                        unsigned(row, "abandoned")?,
                    ],
                })
            })
            .collect()
    }

    fn runs(&mut self, ids: &[i64]) -> Result<HashMap<i64, Run>, tokio_postgres::Error> {
        self.tx
            .query(
                &format!(
                    "SELECT {} FROM idem.runs r WHERE r.id = ANY($1)",
                    RunCol::LIST
                ),
                &[&ids],
            )?
            .iter()
            .map(run_from_row)
            .collect()
    }

    fn raise_fence(&mut self, fence: i64) -> Result<(), tokio_postgres::Error> {
        // A sequence ignores the transaction: a raise outlives an import
        // rolled back, which is harmless, since it never lowers.
        super::fences::raise_fence(self.tx, fence)
    }
}

/// A running run ended `status`: its job's figures follow, in the
/// transaction that records it.
pub(super) fn job_outcome(
    tx: &mut Transaction<'_>,
    run_id: Uuid,
    status: Status,
    exit: Option<i32>,
) -> Result<(), tokio_postgres::Error> {
    // The run's job, key and start with its job's figures, locked: one
    // round trip. A run of no job (imported from before jobs) has none.
    match tx.query_typed_opt(&job_of_run(""), typed![&run_id => UUID])? {
        Some(row) => {
            let job = job_after(&row, status, exit, false)?;
            tx.pipeline(async |db| save_job(db, &job).await)
        }
        None => Ok(()),
    }
}

select_list! {
    /// What [`job_of_run`] reads after a job's [`JobCol`] list: the
    /// database's clock, and the run's key.
    pub(super) enum RunJobCol {
        Now = "now()",
        Key = "r.run_key",
    }
}

/// The job of run `$1` (its figures, locked, at [`JobCol`]'s places), then
/// a [`RunJobCol`] list; `also` narrows the run (`AND ...`).
pub(super) fn job_of_run(also: &str) -> String {
    format!(
        "SELECT {}, {}
         FROM (SELECT job AS run_job, key AS run_key
               FROM idem.runs WHERE run_id = $1 {also}) r
         JOIN idem.jobs ON idem.jobs.job = r.run_job
         FOR UPDATE OF jobs",
        JobCol::LIST,
        RunJobCol::LIST
    )
}

/// The figures of a job after its run ended `status` (a person stopped
/// it: `stopped`), from the row
/// [`job_of_run`] read; [`save_job`] writes them.
pub(super) fn job_after(
    row: &tokio_postgres::Row,
    status: Status,
    exit: Option<i32>,
    stopped: bool,
) -> Result<JobState, tokio_postgres::Error> {
    let mut state = job_from_row(row)?;
    let at = |col: RunJobCol| JobCol::COUNT + col.at();
    let now = time(row, at(RunJobCol::Now))?;
    let key: String = row.try_get(at(RunJobCol::Key))?;
    state.runs[0] = state.runs[0].saturating_sub(1);
    let index = Status::ALL
        .iter()
        .position(|each| *each == status)
        .unwrap_or(0);
    state.runs[index] += 1;
    if stopped {
        state.stopped(exit);
    } else {
        state.outcome(&key, status, exit, now);
    }
    Ok(state)
}

/// Frees the named locks of run `$1`.
pub(super) const RELEASE_LOCKS: &str =
    "UPDATE idem.locks SET holder = NULL, lease_until = NULL WHERE holder = $1";

/// Frees the named locks run `run_id` holds.
pub(super) async fn release_locks(
    db: &tokio_postgres::Client,
    run_id: Uuid,
) -> Result<(), tokio_postgres::Error> {
    db.execute_typed(RELEASE_LOCKS, typed![&run_id => UUID])
        .await?;
    Ok(())
}

/// Reads a job's figures under its row lock, with the database's `now()`.
fn load_job(
    tx: &mut Transaction<'_>,
    job: &str,
) -> Result<(JobState, Timestamp), tokio_postgres::Error> {
    let row = tx.query_typed_one(
        &format!(
            "SELECT {}, now() AS now FROM idem.jobs WHERE job = $1 FOR UPDATE",
            JobCol::LIST
        ),
        typed![&job => TEXT],
    )?;
    Ok((job_from_row(&row)?, time(&row, "now")?))
}

pub(super) async fn save_job(
    db: &tokio_postgres::Client,
    job: &JobState,
) -> Result<(), tokio_postgres::Error> {
    db.execute_typed(
        "UPDATE idem.jobs SET first_run = $2, last_run = $3, last_status = $4, last_exit = $5,
             last_success = $6, failures = $7, running = $8, succeeded = $9, failed = $10,
             abandoned = $11, checked_at = $12, strip = $13, ok_keys = $14, host = $15,
             command = $16, shell = $17
         WHERE job = $1",
        typed![
            &job.job => TEXT,
            &job.first_run => TIMESTAMPTZ,
            &job.last_run => TIMESTAMPTZ,
            &job.last_status.map(Status::as_str) => TEXT,
            &job.last_exit => INT4,
            &job.last_success => TIMESTAMPTZ,
            &(job.failures as i64) => INT8,
            &(job.runs[0] as i64) => INT8,
            &(job.runs[1] as i64) => INT8,
            &(job.runs[2] as i64) => INT8,
            &(job.runs[3] as i64) => INT8,
            &job.checked_at => TIMESTAMPTZ,
            &job.strip => TEXT,
            &encode_keys(&job.ok_keys) => TEXT,
            &job.host => TEXT,
            &encode_command(&job.command) => BYTEA,
            &job.shell => BOOL,
        ],
    )
    .await?;
    Ok(())
}

/// The job of an imported run, made when new, with the run counted in.
fn import_job(tx: &mut Transaction<'_>, run: &Run) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "INSERT INTO idem.jobs (job, template) VALUES ($1, $1) ON CONFLICT (job) DO NOTHING",
        &[&run.job],
    )?;
    let (mut job, _) = load_job(tx, &run.job)?;
    job.imported(run);
    tx.pipeline(async |db| save_job(db, &job).await)
}

/// Takes the runs chosen by `filter` (`$1` bound to `value`) out of their
/// jobs' counts, before they are deleted.
fn uncount_runs(
    tx: &mut Transaction<'_>,
    filter: &str,
    value: &(dyn ToSql + Sync),
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        &format!(
            "UPDATE idem.jobs j SET running = greatest(j.running - c.running, 0),
                 succeeded = greatest(j.succeeded - c.succeeded, 0),
                 failed = greatest(j.failed - c.failed, 0),
                 abandoned = greatest(j.abandoned - c.abandoned, 0)
             FROM (SELECT job, count(*) FILTER (WHERE status = 'running') AS running,
                       count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
                       count(*) FILTER (WHERE status = 'failed') AS failed,
                       count(*) FILTER (WHERE status = 'abandoned') AS abandoned
                   FROM idem.runs WHERE {filter} GROUP BY job) AS c
             WHERE j.job = c.job"
        ),
        &[value],
    )?;
    Ok(())
}
