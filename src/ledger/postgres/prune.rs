//! `idem ledger prune` on a shared ledger: old runs deleted in batches
//! ([`rules::prune`]), each its own short transaction, so that the claims
//! of a busy fleet wait for one batch at most, never for the whole prune.
//!
//! A batch takes the job rows of the runs it deletes (their figures are
//! counted down), the rows a claim of those jobs writes too: it holds them
//! only for its last statements and its commit. Two prunes at once (two
//! hosts' cron lines at midnight) never deadlock: each batch locks its
//! runs in start order, then their jobs in name order, so neither can hold
//! a row the other took before the one it waits for; the runs the other
//! deleted first are passed over, never counted down twice.

use jiff::Timestamp;
use tokio_postgres::Row;

use super::super::rules::{PruneBatches, PruneCursor, PrunedBatch};
use futures_util::future::try_join5;

use super::client::{Client, READ_COMMITTED};
use super::rows::unsigned;

/// A prune's batches on a shared ledger, over its connection.
pub(super) struct Batches<'a>(pub &'a mut Client);

impl PruneBatches for Batches<'_> {
    type Error = tokio_postgres::Error;

    fn prune_batch(
        &mut self,
        before: Timestamp,
        after: Option<PruneCursor>,
        size: u64,
    ) -> Result<PrunedBatch, tokio_postgres::Error> {
        let row = batch(self.0, before, after, size)?;
        let last: Option<Timestamp> = row.try_get("last_started")?;
        let last_id: Option<i64> = row.try_get("last_id")?;
        Ok(PrunedBatch {
            taken: unsigned(&row, "taken")?,
            runs: unsigned(&row, "runs")?,
            attempts: unsigned(&row, "attempts")?,
            bytes: unsigned(&row, "bytes")?,
            last: last.zip(last_id),
        })
    }

    /// Keys left with neither runs nor a head: each row is locked only
    /// for this one statement.
    fn delete_unused_keys(&mut self) -> Result<u64, tokio_postgres::Error> {
        self.0.execute(
            "DELETE FROM idem.keys k WHERE k.head IS NULL
               AND NOT EXISTS (SELECT 1 FROM idem.runs r WHERE r.key = k.key)",
            &[],
        )
    }
}

/// One batch, one transaction, one round trip: up to `size` runs after
/// `after` (in start order) locked and deleted with their attempts, their
/// jobs' rows locked in name order and the runs counted down from them,
/// then the commit. The jobs' rows, which claims write too, are taken only
/// by the last two statements, right before the commit. The row says how
/// many went and where the batch ended.
fn batch(
    client: &mut Client,
    before: Timestamp,
    after: Option<PruneCursor>,
    size: u64,
) -> Result<Row, tokio_postgres::Error> {
    let (since, since_id) = after.map_or((None, 0), |(at, id)| (Some(at), id));
    let size = i64::try_from(size).unwrap_or(i64::MAX);
    let delete = delete_sql(since.is_some());
    client.pipeline(async |db| {
        let ((), row, _, _, ()) = try_join5(
            db.batch_execute(READ_COMMITTED),
            db.query_typed_one(
                &delete,
                typed![
                    &before => TIMESTAMPTZ,
                    &size => INT8,
                    &since => TIMESTAMPTZ,
                    &since_id => INT8,
                ],
            ),
            db.execute_typed(LOCK_JOBS_SQL, &[]),
            db.execute_typed(UNCOUNT_SQL, &[]),
            db.batch_execute("COMMIT"),
        )
        .await?;
        Ok(row)
    })
}

/// Locks the rows of the batch's jobs in name order, before [`UNCOUNT_SQL`]
/// updates them in whatever order its join takes.
const LOCK_JOBS_SQL: &str = "SELECT j.job FROM idem.jobs j
     WHERE j.job IN (SELECT c.job FROM
         json_to_recordset(current_setting('idem.pruned')::json) AS c(job text))
     ORDER BY j.job FOR UPDATE OF j";

/// Counts the batch's runs down from their jobs, from the figures the
/// delete left in the transaction's setting `idem.pruned`.
const UNCOUNT_SQL: &str = "UPDATE idem.jobs j SET running = greatest(j.running - c.running, 0),
         succeeded = greatest(j.succeeded - c.succeeded, 0),
         failed = greatest(j.failed - c.failed, 0),
         abandoned = greatest(j.abandoned - c.abandoned, 0)
     FROM json_to_recordset(current_setting('idem.pruned')::json)
         AS c(job text, running bigint, succeeded bigint, failed bigint, abandoned bigint)
     WHERE j.job = c.job";

/// The delete of [`batch`]: `$1` the cutoff, `$2` the batch's size, `$3,
/// $4` where the last batch ended (used when `after`). The runs are locked
/// in start order (`FOR UPDATE` under the ordered `LIMIT`); a run another
/// prune deleted meanwhile is passed over, and the figures count only the
/// runs this batch deleted. A key's head is found through the key's own
/// row (`keys.head` has no index). The runs each job lost are left, as
/// JSON, in the transaction's `idem.pruned`.
fn delete_sql(after: bool) -> String {
    let after = if after {
        "AND (r.started_at, r.id) > ($3::timestamptz, $4::bigint)"
    } else {
        "AND $3::timestamptz IS NULL AND $4::bigint = 0"
    };
    format!(
        "WITH b AS (
             SELECT r.id, r.started_at FROM idem.runs r
             WHERE r.started_at < $1 AND r.finished_at < $1 AND r.status <> 'running'
               {after}
               AND NOT EXISTS (SELECT 1 FROM idem.keys k WHERE k.key = r.key AND k.head = r.id)
             ORDER BY r.started_at, r.id LIMIT $2
             FOR UPDATE OF r
         ), a AS (
             DELETE FROM idem.attempts WHERE run IN (SELECT id FROM b)
             RETURNING coalesce(octet_length(stdout_tail), 0)
                 + coalesce(octet_length(stderr_tail), 0) AS bytes
         ), d AS (
             DELETE FROM idem.runs WHERE id IN (SELECT id FROM b)
             RETURNING job, status
         ), c AS (
             SELECT job, count(*) FILTER (WHERE status = 'running') AS running,
                 count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
                 count(*) FILTER (WHERE status = 'failed') AS failed,
                 count(*) FILTER (WHERE status = 'abandoned') AS abandoned
             FROM d WHERE job IS NOT NULL GROUP BY job
         ), last AS (
             SELECT started_at, id FROM b ORDER BY started_at DESC, id DESC LIMIT 1
         )
         SELECT (SELECT count(*) FROM b) AS taken, (SELECT count(*) FROM d) AS runs,
             (SELECT count(*) FROM a) AS attempts,
             (SELECT coalesce(sum(bytes), 0) FROM a)::bigint AS bytes,
             (SELECT started_at FROM last) AS last_started,
             (SELECT id FROM last) AS last_id,
             set_config('idem.pruned',
                 (SELECT coalesce(json_agg(c), '[]') FROM c)::text, true) AS pruned"
    )
}
