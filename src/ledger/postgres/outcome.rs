//! The writes of a claimed run after its command started: a non-final
//! attempt, then the outcome with the last attempt, the key's release, the
//! job's figures and the run's named locks. Each is fenced by the claim's
//! epoch, so a repeat on a new connection, or a run that lost its claim,
//! never writes over a newer claim. Then the hooks that ran for it.

use futures_util::future::{try_join, try_join5};
use tokio_postgres::Row;
use uuid::Uuid;

use super::super::{Attempt, Claim, HookRun, NewEvent, Outcome, Status};
use super::begin;
use super::client::{Client, Transaction, READ_COMMITTED};
use super::tx::{job_after, job_of_run, release_locks, save_job, RELEASE_OWNER};

/// Records a non-final attempt; false when the claim's epoch no longer
/// holds the key.
pub(super) fn attempt_finished(
    client: &mut Client,
    claim: &Claim,
    attempt: &Attempt,
) -> Result<bool, tokio_postgres::Error> {
    let mut tx = begin(client)?;
    if !lock_claimed(&mut tx, claim)? {
        return Ok(false);
    }
    upsert_attempt(&mut tx, claim, attempt)?;
    tx.commit()?;
    Ok(true)
}

/// Records the run's outcome; false when the claim's epoch no longer
/// holds the key. `due`: whether other runs' events were due in the
/// outbox as it committed, read in its last round trip so that the run's
/// look at the outbox after it costs none.
pub(super) fn finish(
    client: &mut Client,
    claim: &Claim,
    last: Option<&Attempt>,
    outcome: &Outcome,
    owed: &[NewEvent],
    due: &mut Option<bool>,
) -> Result<bool, tokio_postgres::Error> {
    // Begins and records: one round trip.
    let mut tx = Transaction::pipelined(client);
    let recorded = tx.pipeline(async |db| {
        let ((), recorded) = try_join(
            db.batch_execute(READ_COMMITTED),
            record_outcome(db, claim, last, outcome),
        )
        .await?;
        Ok(recorded)
    })?;
    let Some(recorded) = recorded else {
        return Ok(false);
    };
    let job = match (&recorded.job, recorded.ended) {
        (Some(row), true) => Some(job_after(
            row,
            outcome.status,
            Some(outcome.exit_code),
            outcome.stopped,
        )?),
        _ => None,
    };
    if let (Some(job), Some(after)) = (&job, claim.pause_after) {
        if outcome.status == Status::Failed && !outcome.stopped {
            super::pauses::after_failure(&mut tx, &job.job, job.failures, after, claim.run_id)?;
        }
    }
    let locks = recorded.ended && !claim.locks.is_empty();
    // The job's figures, the run's named locks (most runs take
    // none), its events, whether others' are due, and the commit: one
    // round trip.
    let owed = if recorded.ended { owed } else { &[] };
    let due_sql = super::outbox::any_due_sql();
    let ((), (), (), found, ()) = tx.pipeline(async |db| {
        try_join5(
            async {
                match &job {
                    Some(job) => save_job(db, job).await,
                    None => Ok(()),
                }
            },
            async {
                if locks {
                    release_locks(db, claim.run_id).await
                } else {
                    Ok(())
                }
            },
            super::outbox::owe(db, owed),
            async {
                db.query_typed_one(&due_sql, &[])
                    .await?
                    .try_get::<_, bool>("due")
            },
            db.batch_execute("COMMIT"),
        )
        .await
    })?;
    tx.committed();
    *due = Some(found);
    Ok(recorded.recorded)
}

/// Records the hooks that ran for run `run_id`.
pub(super) fn hooks_ran(
    client: &mut Client,
    run_id: Uuid,
    hooks: &[HookRun],
) -> Result<(), tokio_postgres::Error> {
    let mut tx = begin(client)?;
    for hook in hooks {
        tx.execute(
            "INSERT INTO idem.hooks (run, event, exit_code, at)
             SELECT id, $2, $3, $4 FROM idem.runs WHERE run_id = $1",
            &[&run_id, &hook.event, &hook.exit_code, &hook.at],
        )?;
    }
    tx.commit()
}

/// Locks the key's row if the claim's epoch still holds it; false if not.
fn lock_claimed(tx: &mut Transaction<'_>, claim: &Claim) -> Result<bool, tokio_postgres::Error> {
    Ok(tx
        .query_typed_opt(
            "SELECT 1 FROM idem.keys WHERE key = $1 AND epoch = $2 FOR UPDATE",
            typed![&claim.key => TEXT, &claim.token => INT8],
        )?
        .is_some())
}

fn upsert_attempt(
    tx: &mut Transaction<'_>,
    claim: &Claim,
    attempt: &Attempt,
) -> Result<(), tokio_postgres::Error> {
    // An upsert: an attempt whose command could not even be spawned was
    // never recorded as started.
    let tail = |bytes: &Vec<u8>| (!bytes.is_empty()).then(|| bytes.clone());
    tx.execute_typed(
        "INSERT INTO idem.attempts (run, n, started_at, finished_at, exit_code, signal,
             timed_out, stdout_tail, stderr_tail, cut, cause, peak_memory, cpu_ms)
         SELECT id, $2, now(), now(), $3, $4, $5, $6, $7, $8, $9, $10, $11
         FROM idem.runs WHERE run_id = $1
         ON CONFLICT (run, n) DO UPDATE SET finished_at = now(), exit_code = $3, signal = $4,
             timed_out = $5, stdout_tail = $6, stderr_tail = $7, cut = $8, cause = $9,
             peak_memory = $10, cpu_ms = $11",
        typed![
            &claim.run_id => UUID,
            &(attempt.number as i32) => INT4,
            &attempt.exit_code => INT4,
            &attempt.signal => INT4,
            &attempt.timed_out => BOOL,
            &tail(&attempt.stdout_tail) => BYTEA,
            &tail(&attempt.stderr_tail) => BYTEA,
            &attempt.cut => BOOL,
            &attempt.cause => TEXT,
            &attempt.peak_memory => INT8,
            &attempt.cpu_ms => INT8,
        ],
    )?;
    Ok(())
}

/// What [`record_outcome`] found.
struct Recorded {
    /// The outcome is recorded. A repeat after a lost connection may find
    /// its first commit: this looks at the run as it was before.
    recorded: bool,
    /// This statement ended the run.
    ended: bool,
    /// The run's job, read for its figures (see [`job_of_run`]).
    job: Option<Row>,
}

/// The key's lock, the last attempt, the outcome, the key's release and
/// the run's job in one statement; None if the claim's epoch no longer
/// holds the key.
async fn record_outcome(
    db: &tokio_postgres::Client,
    claim: &Claim,
    last: Option<&Attempt>,
    outcome: &Outcome,
) -> Result<Option<Recorded>, tokio_postgres::Error> {
    let attempt = last.cloned().unwrap_or_default();
    let tail = |bytes: &Vec<u8>| (!bytes.is_empty()).then(|| bytes.clone());
    // `k` takes the key's row lock first (every write below waits on it),
    // so no claim can read the run as running (and abandon it) while this
    // records its outcome; each write is void unless the epoch held.
    let row = db
        .query_typed_one(
            &record_outcome_sql(),
            typed![
                &claim.run_id => UUID,
                &outcome.status.as_str() => TEXT,
                &outcome.exit_code => INT4,
                &outcome.signal => INT4,
                &(attempt.number as i32) => INT4,
                &claim.key => TEXT,
                &(attempt.number as i32) => INT4,
                &attempt.exit_code => INT4,
                &attempt.signal => INT4,
                &attempt.timed_out => BOOL,
                &tail(&attempt.stdout_tail) => BYTEA,
                &tail(&attempt.stderr_tail) => BYTEA,
                &last.is_some() => BOOL,
                &attempt.cut => BOOL,
                &claim.token => INT8,
                &attempt.cause => TEXT,
                &attempt.peak_memory => INT8,
                &attempt.cpu_ms => INT8,
            ],
        )
        .await?;
    if !row.try_get::<_, bool>("held")? {
        return Ok(None);
    }
    Ok(Some(Recorded {
        recorded: row.try_get("recorded")?,
        ended: row.try_get("ended")?,
        job: row.try_get::<_, bool>("has_job")?.then_some(row),
    }))
}

/// The statement of [`record_outcome`].
fn record_outcome_sql() -> String {
    format!(
        "WITH k AS (
                 SELECT 1 FROM idem.keys WHERE key = $6 AND epoch = $15 FOR UPDATE
             ), a AS (
                 INSERT INTO idem.attempts (run, n, started_at, finished_at, exit_code,
                     signal, timed_out, stdout_tail, stderr_tail, cut, cause, peak_memory,
                     cpu_ms)
                 SELECT id, $7, now(), now(), $8, $9, $10, $11, $12, $14, $16, $17, $18
                 FROM idem.runs WHERE run_id = $1 AND $13 AND EXISTS (SELECT 1 FROM k)
                 ON CONFLICT (run, n) DO UPDATE SET finished_at = now(), exit_code = $8,
                     signal = $9, timed_out = $10, stdout_tail = $11, stderr_tail = $12,
                     cut = $14, cause = $16, peak_memory = $17, cpu_ms = $18
             ), r AS (
                 UPDATE idem.runs SET status = $2, exit_code = $3, signal = $4,
                     finished_at = now(), attempts = greatest(attempts, $5)
                 WHERE run_id = $1 AND status = 'running' AND EXISTS (SELECT 1 FROM k)
                 RETURNING id
             ), o AS (
                 UPDATE idem.keys SET {RELEASE_OWNER}
                 WHERE key = $6 AND EXISTS (SELECT 1 FROM k)
             ), j AS ({job})
             SELECT j.*, j.job IS NOT NULL AS has_job, EXISTS (SELECT 1 FROM k) AS held,
                 (SELECT count(*) FROM r) = 1
                     OR EXISTS (SELECT 1 FROM idem.runs
                                WHERE run_id = $1 AND status = $2 AND exit_code = $3)
                     AS recorded,
                 (SELECT count(*) FROM r) = 1 AS ended
             FROM (SELECT 1) one LEFT JOIN j ON true",
        job = job_of_run("AND EXISTS (SELECT 1 FROM k)")
    )
}
