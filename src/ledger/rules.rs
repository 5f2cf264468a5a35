//! The ledger's rules, written once: what `forget` refuses, which imported
//! run becomes its key's head, what `prune` may never delete and how it
//! goes in batches, and how the per-key figures of `metrics` are made.
//!
//! Each backend implements [`Tx`], one write (or read) transaction in its
//! own SQL, with its own locking and fencing; the rules decide over it and
//! never see a dialect. A row id (`i64`) names a run within a backend. A
//! prune commits batch by batch, so it runs over [`PruneBatches`], each
//! call its own transaction.

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;
use uuid::Uuid;

use super::{
    Attempt, Feed, ForgetReport, ForgottenKey, Head, ImportReport, ImportSink, KeyMetrics,
    PruneReport, Run, Status,
};

/// One transaction of a backend, as the rules see it.
pub(super) trait Tx {
    type Error;

    /// Runs `sql`, which both dialects read alike.
    fn batch(&mut self, sql: &str) -> Result<(), Self::Error>;

    /// Locks the rows of `keys` against claims (in one order, so that two
    /// callers cannot deadlock) and returns those the ledger knows.
    fn lock_keys(&mut self, keys: &[String]) -> Result<HashSet<String>, Self::Error>;

    /// Makes the key's row if it is missing, and locks it as a claim would.
    fn hold_key(&mut self, key: &str) -> Result<(), Self::Error>;

    /// The key's deciding run with its row id, its owner judged.
    fn read_head(&mut self, key: &str) -> Result<Option<(i64, Head)>, Self::Error>;

    /// How many runs the key has.
    fn count_runs(&mut self, key: &str) -> Result<u64, Self::Error>;

    /// Ends run `run`, if it is still running, with an unknown outcome (its
    /// owner is gone): counted in its job, its owner and locks released.
    fn mark_abandoned(&mut self, run: i64) -> Result<(), Self::Error>;

    /// Frees the owner of the key that run `run` decides: the run ended,
    /// or the key stops being its.
    fn release_owner(&mut self, run: i64) -> Result<(), Self::Error>;

    /// The key has no deciding run any more, and no owner; an owner
    /// presumed gone that comes back finds its claim lost.
    fn clear_head(&mut self, key: &str) -> Result<(), Self::Error>;

    /// Removes the key with its runs and their attempts, taken out of their
    /// jobs' counts.
    fn purge(&mut self, key: &str) -> Result<(), Self::Error>;

    /// The row id and status of the run `run_id`, if this ledger holds it.
    fn find_run(&mut self, run_id: Uuid) -> Result<Option<(i64, Status)>, Self::Error>;

    /// Adds `run` (its key held), counted in its job, made when new.
    fn insert_run(&mut self, run: &Run) -> Result<i64, Self::Error>;

    /// Gives run `id`, held here as running, the outcome of `run`: its
    /// attempts dropped (the stream's replace them), its job told.
    fn replace_outcome(&mut self, id: i64, run: &Run) -> Result<(), Self::Error>;

    /// Adds an attempt to run `id`.
    fn add_attempt(&mut self, id: i64, attempt: &Attempt) -> Result<(), Self::Error>;

    /// The status of the key's head, and the latest start of its runs
    /// other than `id`.
    fn head_and_latest(
        &mut self,
        key: &str,
        id: i64,
    ) -> Result<(Option<Status>, Option<Timestamp>), Self::Error>;

    /// Makes run `id` (a finished run) the key's head, with no owner.
    fn adopt_head(&mut self, key: &str, id: i64) -> Result<(), Self::Error>;

    /// Sets aside the runs that finished before `before`, for the calls
    /// below: never a running run, never a key's head (see [`prune`]).
    fn mark_prunable(&mut self, before: Timestamp) -> Result<u64, Self::Error>;

    /// The attempts of the runs set aside, and the bytes of their output.
    fn marked_output(&mut self) -> Result<(u64, u64), Self::Error>;

    /// How many keys, with no head, have no runs but those set aside: the
    /// keys a prune of them leaves unused, and deletes.
    fn keys_left_unused(&mut self) -> Result<u64, Self::Error>;

    /// Each key's figures, in key order (see [`metrics`]).
    fn key_figures(&mut self) -> Result<Vec<KeyFigures>, Self::Error>;

    /// The runs with row ids `ids`.
    fn runs(&mut self, ids: &[i64]) -> Result<HashMap<i64, Run>, Self::Error>;

    /// Raises the fence counter so that every later claim's fence is above
    /// `fence` (the highest of a ledger whose runs are imported); never
    /// lowers it.
    fn raise_fence(&mut self, fence: i64) -> Result<(), Self::Error>;
}

/// What a backend counts for one key, in one pass over its runs.
pub(super) struct KeyFigures {
    pub key: String,
    /// The row id of its latest run, by start time.
    pub last: i64,
    /// When its latest success finished.
    pub last_success: Option<Timestamp>,
    /// `failed` and `abandoned` runs started after its latest success did.
    pub failures: u64,
    /// Its runs by status, in the order of [`Status::ALL`].
    pub runs: [u64; 4],
}

/// Clears each key's head (a running head whose owner is gone is first
/// marked abandoned), and with `purge` removes the key and its runs. A key
/// running under a live owner, or under one that cannot be judged without
/// `force`, is busy: then nothing changes, and the report names it.
pub(super) fn forget<T: Tx>(
    tx: &mut T,
    keys: &[String],
    purge: bool,
    force: bool,
) -> Result<ForgetReport, T::Error> {
    let known = tx.lock_keys(keys)?;
    let mut report = ForgetReport::default();
    let mut found = Vec::new();
    for key in keys {
        let head = tx.read_head(key)?;
        let runs = tx.count_runs(key)?;
        let running = head
            .as_ref()
            .filter(|(_, head)| head.run.status == Status::Running);
        let busy = running
            .and_then(|(_, head)| head.owner.clone())
            .filter(|owner| owner.alive == Some(true) || (owner.alive.is_none() && !force));
        let abandoned = running.is_some() && busy.is_none();
        let left = running
            .and_then(|(_, head)| head.owner.clone())
            .filter(|_| abandoned);
        report.keys.push(ForgottenKey {
            key: key.clone(),
            known: known.contains(key),
            head: head.as_ref().map(|(_, head)| head.run.status),
            abandoned,
            runs,
            busy,
            left,
        });
        if known.contains(key) {
            found.push((key, head.map(|(id, _)| id), abandoned));
        }
    }
    if report.busy().next().is_some() {
        return Ok(report);
    }
    for (key, head, abandoned) in found {
        if let (Some(id), true) = (head, abandoned) {
            tx.mark_abandoned(id)?;
        }
        if purge {
            tx.purge(key)?;
        } else {
            tx.clear_head(key)?;
        }
    }
    Ok(report)
}

/// Where an imported run's attempts go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Imported {
    /// Into run `id`, new or replaced.
    Into(i64),
    /// Nowhere: the ledger keeps the run as it holds it.
    Nowhere,
}

/// Imports `run` (its attempts follow, through [`Tx::add_attempt`] into
/// what this returns), idempotently by run id: a run held already stays as
/// it is, unless it is held as running with its owner gone while the
/// stream has it finished. An imported run that was its key's head (`head`)
/// becomes the head here when it started after every other run of its key
/// here and the current head is not running.
pub(super) fn import<T: Tx>(
    tx: &mut T,
    run: &Run,
    head: bool,
    report: &mut ImportReport,
) -> Result<Imported, T::Error> {
    tx.hold_key(&run.key)?;
    let id = match tx.find_run(run.run_id)? {
        Some((id, Status::Running)) if run.status != Status::Running => {
            // A copy never overrides a run that goes on here.
            if owner_lives(tx, &run.key)? {
                report.unchanged += 1;
                return Ok(Imported::Nowhere);
            }
            // Exported again after it finished: take the outcome.
            tx.replace_outcome(id, run)?;
            tx.release_owner(id)?;
            report.updated += 1;
            id
        }
        Some(_) => {
            report.unchanged += 1;
            return Ok(Imported::Nowhere);
        }
        None => {
            let id = tx.insert_run(run)?;
            report.added += 1;
            id
        }
    };
    // A running run's owner is not in this ledger, so it cannot decide.
    if head && run.status != Status::Running {
        let (head_status, latest) = tx.head_and_latest(&run.key, id)?;
        let newer = latest.is_none_or(|latest| latest < run.started_at);
        if newer && head_status != Some(Status::Running) {
            tx.adopt_head(&run.key, id)?;
            report.heads += 1;
        }
    }
    Ok(Imported::Into(id))
}

/// Imports what `feed` hands over until it has no more, each run in a
/// savepoint of its own: a run whose line turns out bad midway leaves
/// nothing, while the runs before it stay in the transaction. The outer
/// error is the ledger's; the inner one, the feed's (the transaction then
/// holds the runs before it, to be committed).
pub(super) fn import_all<T: Tx>(
    tx: &mut T,
    feed: &mut Feed<'_>,
    report: &mut ImportReport,
) -> Result<anyhow::Result<()>, T::Error> {
    // The fence raised so far: every line of one export carries the same,
    // so the counter is written once, not once a run.
    let mut raised = 0;
    loop {
        tx.batch("SAVEPOINT import_run")?;
        let before = *report;
        let mut sink = Sink {
            tx: &mut *tx,
            report: &mut *report,
            raised: &mut raised,
            into: Imported::Nowhere,
            failed: None,
        };
        let fed = feed(&mut sink);
        if let Some(error) = sink.failed.take() {
            return Err(error);
        }
        match fed {
            Ok(more) => {
                tx.batch("RELEASE SAVEPOINT import_run")?;
                if !more {
                    return Ok(Ok(()));
                }
            }
            Err(error) => {
                tx.batch("ROLLBACK TO SAVEPOINT import_run")?;
                tx.batch("RELEASE SAVEPOINT import_run")?;
                *report = before;
                return Ok(Err(error));
            }
        }
    }
}

/// The sink `import_all` hands its feed: the rules over `tx`, and the
/// ledger's own error kept aside, for the backend to describe.
struct Sink<'a, T: Tx> {
    tx: &'a mut T,
    report: &'a mut ImportReport,
    raised: &'a mut i64,
    into: Imported,
    failed: Option<T::Error>,
}

impl<T: Tx> Sink<'_, T> {
    fn keep(&mut self, result: Result<(), T::Error>) -> anyhow::Result<()> {
        result.map_err(|error| {
            self.failed = Some(error);
            anyhow::anyhow!("the ledger refused the run")
        })
    }
}

impl<T: Tx> ImportSink for Sink<'_, T> {
    fn ledger_fence(&mut self, fence: i64) -> anyhow::Result<()> {
        if fence <= *self.raised {
            return Ok(());
        }
        let raised = self.tx.raise_fence(fence);
        *self.raised = fence;
        self.keep(raised)
    }

    fn run(&mut self, run: &Run, head: bool) -> anyhow::Result<()> {
        let into = import(self.tx, run, head, self.report);
        let into = into.map(|into| self.into = into);
        self.keep(into)
    }

    fn attempt(&mut self, attempt: &Attempt) -> anyhow::Result<()> {
        match self.into {
            Imported::Into(id) => {
                let added = self.tx.add_attempt(id, attempt);
                self.keep(added)
            }
            Imported::Nowhere => Ok(()),
        }
    }
}

/// Whether the running head of `key` is owned by a run that lives (or that
/// cannot be judged).
fn owner_lives<T: Tx>(tx: &mut T, key: &str) -> Result<bool, T::Error> {
    Ok(tx
        .read_head(key)?
        .and_then(|(_, head)| head.owner)
        .is_some_and(|owner| owner.presumed_alive()))
}

/// What a prune of the runs that finished before `before` would drop, read
/// in one transaction that writes nothing to the ledger, so that a dry run
/// holds no claim up: the runs [`prune`] deletes, their attempts and
/// output, and the keys it leaves with neither runs nor a head.
pub(super) fn rehearse_prune<T: Tx>(
    tx: &mut T,
    before: Timestamp,
) -> Result<PruneReport, T::Error> {
    let runs = tx.mark_prunable(before)?;
    let (attempts, output_bytes) = tx.marked_output()?;
    let keys = tx.keys_left_unused()?;
    Ok(PruneReport {
        runs,
        attempts,
        output_bytes,
        keys,
    })
}

/// Runs a prune deletes per transaction: small enough that a batch holds
/// the writers' lock (SQLite) or its jobs' rows (PostgreSQL) for
/// milliseconds, large enough that a million runs take seconds.
pub(super) const PRUNE_BATCH: u64 = 1000;

/// A run's place in start order, where a prune's batch ended: its start,
/// then its row id.
pub(super) type PruneCursor = (Timestamp, i64);

/// What one batch of a prune took and deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct PrunedBatch {
    /// The runs it took, at most the batch's size: fewer, and none is left.
    pub taken: u64,
    /// Of those, the runs it deleted (another prune may have been first).
    pub runs: u64,
    /// Their attempts, and the bytes of their output.
    pub attempts: u64,
    pub bytes: u64,
    /// The last run it took, where the next batch starts.
    pub last: Option<PruneCursor>,
}

/// A backend's prune, batch by batch, each batch its own transaction.
pub(super) trait PruneBatches {
    type Error;

    /// In one transaction: takes up to `size` runs that finished before
    /// `before`, never running, never a key's head, the first in start
    /// order after `after`; deletes them with their attempts and counts
    /// them down from their jobs; commits.
    fn prune_batch(
        &mut self,
        before: Timestamp,
        after: Option<PruneCursor>,
        size: u64,
    ) -> Result<PrunedBatch, Self::Error>;

    /// Deletes the keys left with neither runs nor a head; how many.
    fn delete_unused_keys(&mut self) -> Result<u64, Self::Error>;
}

/// Drops the runs that finished before `before`, with their attempts and
/// output, then the keys left with neither runs nor a head. What `run`
/// would decide never changes: a key's head and a running run stay. Each
/// batch commits on its own with its jobs' figures counted down, so a
/// claim waits for one batch at most, and every commit leaves the figures
/// right. Runs are taken in start order from where the last batch ended,
/// so the rows a batch passed over (a key's head) are not read again.
pub(super) fn prune<B: PruneBatches>(
    batches: &mut B,
    before: Timestamp,
) -> Result<PruneReport, B::Error> {
    let mut report = PruneReport::default();
    let mut after = None;
    loop {
        let batch = batches.prune_batch(before, after, PRUNE_BATCH)?;
        report.runs += batch.runs;
        report.attempts += batch.attempts;
        report.output_bytes += batch.bytes;
        match batch.last {
            Some(last) if batch.taken >= PRUNE_BATCH => after = Some(last),
            _ => break,
        }
    }
    report.keys = batches.delete_unused_keys()?;
    Ok(report)
}

/// Per-key figures, in key order: each key's latest run by start time, its
/// latest success, and its failures in a row (failed and abandoned runs
/// started after its latest success started).
pub(super) fn metrics<T: Tx>(tx: &mut T) -> Result<Vec<KeyMetrics>, T::Error> {
    let figures = tx.key_figures()?;
    let ids: Vec<i64> = figures.iter().map(|key| key.last).collect();
    let mut last = tx.runs(&ids)?;
    Ok(figures
        .into_iter()
        .map(|key| KeyMetrics {
            last_run: last.remove(&key.last),
            key: key.key,
            last_success: key.last_success,
            consecutive_failures: key.failures,
            runs: key.runs,
        })
        .collect())
}
