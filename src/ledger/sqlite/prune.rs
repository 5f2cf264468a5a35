//! `idem ledger prune` on a SQLite ledger: old runs deleted in batches
//! ([`rules::prune`]), each its own write transaction under the writers'
//! lock, so that a claim waits for one batch at most, never for the whole
//! prune (which could outlast its wait and fail it). A dry run only reads.

use std::time::Duration;

use anyhow::Result;
use jiff::Timestamp;
use rusqlite::{params, Connection, OptionalExtension};

use super::super::rules::{self, PruneBatches, PruneCursor, PrunedBatch};
use super::super::PruneReport;
use super::durability::Sync;
use super::open::CACHE_KIB;
use super::rows::{millis, time_at, RUNNING};
use super::tx::{uncount_runs, Tx};
use super::SqliteLedger;

impl SqliteLedger {
    /// What a prune would drop, read in a deferred transaction: it writes
    /// only its own temporary table, so it takes no lock a claim needs.
    pub(super) fn rehearse_prune(&mut self, before: Timestamp) -> Result<PruneReport> {
        let result = (|| {
            let tx = self.conn.unchecked_transaction()?;
            let report = rules::rehearse_prune(
                &mut Tx {
                    conn: &tx,
                    locks: &self.locks,
                },
                before,
            )?;
            tx.rollback()?;
            Ok(report)
        })();
        result.map_err(|error: rusqlite::Error| self.fail("read", &error))
    }
}

/// How long a prune leaves the writers' lock free after each batch, for
/// the claims that waited for it: a few times the time a woken process
/// takes to run (a prune of 200,000 runs pauses 1 s in all).
const BETWEEN_BATCHES: Duration = Duration::from_millis(5);

/// The page cache of a prune, in KiB. Every batch rewrites the pages of
/// the runs' indexes it touches (by key, by run id), which hold runs of
/// every age: with the cache of a run (512 KiB) each batch would read
/// most of them back from the file.
const PRUNE_CACHE_KIB: i64 = 16 * 1024;

impl SqliteLedger {
    /// Runs `body` with the page cache of a prune, then the usual one.
    pub(super) fn with_prune_cache<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let set = |ledger: &mut Self, kib: i64| {
            ledger
                .conn
                .pragma_update(None, "cache_size", -kib)
                .map_err(|error| ledger.fail("configure", &error))
        };
        set(self, PRUNE_CACHE_KIB)?;
        let value = body(self);
        set(self, CACHE_KIB)?;
        value
    }
}

impl PruneBatches for SqliteLedger {
    type Error = anyhow::Error;

    /// Synced in its commit, as every write that is reported: a prune's
    /// summary is never undone by a power cut.
    fn prune_batch(
        &mut self,
        before: Timestamp,
        after: Option<PruneCursor>,
        size: u64,
    ) -> Result<PrunedBatch> {
        let batch = self.write("prune", Sync::InCommit, &[], |tx| {
            prune_batch(tx, before, after, size)
        })?;
        // The kernel hands a released lock to no one in particular: the
        // waiting claims are only woken, and the prune, already running,
        // would take it again before them batch after batch (a claim then
        // waited up to 2 s). Pausing lets them in first.
        std::thread::sleep(BETWEEN_BATCHES);
        Ok(batch)
    }

    fn delete_unused_keys(&mut self) -> Result<u64> {
        self.write("prune", Sync::InCommit, &[], |tx| {
            let keys = tx.conn.execute(
                "DELETE FROM keys WHERE head IS NULL
                   AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.key_id = keys.id)",
                [],
            )?;
            Ok(keys as u64)
        })
    }
}

/// One batch, in the caller's write transaction: the runs are set aside in
/// `temp.pruned`, counted, then deleted with their attempts (their hooks
/// go by the foreign key) and counted down from their jobs.
fn prune_batch(
    tx: &mut Tx<'_>,
    before: Timestamp,
    after: Option<PruneCursor>,
    size: u64,
) -> rusqlite::Result<PrunedBatch> {
    let taken = take_batch(tx.conn, before, after, size)?;
    let last = tx
        .conn
        .query_row(
            "SELECT started_at, id FROM runs WHERE id IN (SELECT id FROM temp.pruned)
             ORDER BY started_at DESC, id DESC LIMIT 1",
            [],
            |row| Ok(time_at(row, "started_at")?.zip(Some(row.get::<_, i64>("id")?))),
        )
        .optional()?
        .flatten();
    let (attempts, bytes) = rules::Tx::marked_output(tx)?;
    let pruned = "run IN (SELECT id FROM temp.pruned)";
    tx.conn
        .execute(&format!("DELETE FROM attempts WHERE {pruned}"), [])?;
    uncount_runs(tx.conn, "id IN (SELECT id FROM temp.pruned) AND ?1", &1)?;
    let runs = tx.conn.execute(
        "DELETE FROM runs WHERE id IN (SELECT id FROM temp.pruned)",
        [],
    )?;
    tx.conn.execute("DELETE FROM temp.pruned", [])?;
    Ok(PrunedBatch {
        taken,
        runs: runs as u64,
        attempts,
        bytes,
        last,
    })
}

/// Sets aside in `temp.pruned` up to `size` runs that finished before the
/// cutoff (so started before it too, which lets the start-time index find
/// them, in start order from `after`), never running, never a key's head;
/// how many.
fn take_batch(
    conn: &Connection,
    before: Timestamp,
    after: Option<PruneCursor>,
    size: u64,
) -> rusqlite::Result<u64> {
    conn.execute_batch("CREATE TEMP TABLE IF NOT EXISTS pruned (id INTEGER PRIMARY KEY)")?;
    conn.execute("DELETE FROM temp.pruned", [])?;
    let (since, since_id) = after.map_or((i64::MIN, i64::MIN), |(at, id)| (millis(at), id));
    let taken = conn
        .prepare_cached(&format!(
            "INSERT INTO temp.pruned (id)
             SELECT r.id FROM runs r
             WHERE r.started_at < ?1 AND r.finished_at < ?1 AND r.status != {RUNNING}
               AND r.started_at >= ?2 AND (r.started_at > ?2 OR r.id > ?3)
               AND NOT EXISTS (SELECT 1 FROM keys k WHERE k.id = r.key_id AND k.head = r.id)
             ORDER BY r.started_at, r.id LIMIT ?4"
        ))?
        .execute(params![millis(before), since, since_id, size as i64])?;
    Ok(taken as u64)
}
