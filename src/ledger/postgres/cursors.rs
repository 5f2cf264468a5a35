//! `export`: every run with its attempts, oldest first, from one snapshot
//! while runs go on, read through two cursors in batches so that memory
//! stays bounded whatever the ledger holds.

use std::collections::VecDeque;

use anyhow::Result;
use tokio_postgres::Row;

use super::super::columns::attempt_list;
use super::super::{Attempt, ExportedRun, Run};
use super::client::Transaction;
use super::faults::fault;
use super::fences::highest_fence;
use super::rows::{attempt_from_row, run_from_row, RunCol};
use super::PostgresLedger;

impl PostgresLedger {
    /// Hands every run with its attempts to `sink`, oldest first.
    pub(super) fn export_runs(
        &mut self,
        sink: &mut dyn FnMut(ExportedRun) -> Result<()>,
    ) -> Result<()> {
        let shown = self.shown.clone();
        let read = |error: tokio_postgres::Error| -> anyhow::Error {
            fault("read", &shown, &error).into()
        };
        // One snapshot while runs go on; runs and their attempts come in
        // batches from two cursors in the same order, so memory stays
        // bounded whatever the ledger holds.
        let mut tx = Transaction::begin(
            &mut self.client,
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        )
        .map_err(read)?;
        let mut cursors = Cursors::open(&mut tx).map_err(read)?;
        // Read after the cursors took the snapshot: no run in it drew a
        // fence above this.
        let ledger_fence = highest_fence(&mut tx).map_err(read)?;
        while let Some((run, attempts)) = cursors.next(&mut tx).map_err(read)? {
            sink(ExportedRun {
                head: run.head,
                run,
                attempts,
                ledger_fence,
            })?;
        }
        tx.commit().map_err(read)
    }
}

/// The two cursors of `export`: runs, and their attempts in the same
/// order, each read in batches.
struct Cursors {
    batch: VecDeque<Row>,
    pending: VecDeque<Row>,
    attempts_done: bool,
}

/// The next rows of each cursor, 256 at a time.
const FETCH_RUNS: &str = "FETCH 256 FROM runs";
const FETCH_ATTEMPTS: &str = "FETCH 256 FROM attempts";

impl Cursors {
    fn open(tx: &mut Transaction<'_>) -> Result<Cursors, tokio_postgres::Error> {
        tx.batch_execute(&format!(
            "DECLARE runs NO SCROLL CURSOR FOR
                 SELECT {} FROM idem.runs r ORDER BY r.started_at, r.id;
             DECLARE attempts NO SCROLL CURSOR FOR
                 SELECT {} FROM idem.attempts a JOIN idem.runs r ON r.id = a.run
                 ORDER BY r.started_at, r.id, a.n",
            RunCol::LIST,
            attempt_list(true, "NULL::bytea")
        ))?;
        Ok(Cursors {
            batch: Default::default(),
            pending: Default::default(),
            attempts_done: false,
        })
    }

    /// The next run with its attempts; `None` after the last.
    fn next(
        &mut self,
        tx: &mut Transaction<'_>,
    ) -> Result<Option<(Run, Vec<Attempt>)>, tokio_postgres::Error> {
        if self.batch.is_empty() {
            self.batch.extend(tx.query_typed(FETCH_RUNS, &[])?);
        }
        let Some(row) = self.batch.pop_front() else {
            return Ok(None);
        };
        let (id, run) = run_from_row(&row)?;
        let mut attempts = Vec::new();
        loop {
            if self.pending.is_empty() && !self.attempts_done {
                let more = tx.query_typed(FETCH_ATTEMPTS, &[])?;
                self.attempts_done = more.is_empty();
                self.pending.extend(more);
            }
            match self.pending.front() {
                Some(next) if attempt_from_row(next)?.0 == id => {}
                _ => break,
            }
            if let Some(next) = self.pending.pop_front() {
                attempts.push(attempt_from_row(&next)?.1);
            }
        }
        Ok(Some((run, attempts)))
    }
}
