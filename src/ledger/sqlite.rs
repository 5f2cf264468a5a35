//! A ledger in one local SQLite file.
//!
//! Durability: WAL, and every claim and outcome on disk before idem goes
//! on (see [`durability::Sync`]); a power cut can lose nothing that idem
//! reported. Concurrency: every write transaction is taken under a
//! blocking `flock` on the ledger file, because SQLite's own busy handler
//! sleeps and retries and collapses under hundreds of writers, while the
//! kernel's lock queue hands the file over at once.
//!
//! This file holds the ledger and its [`Ledger`] methods; `open` opens and
//! migrates it, `durability` makes its writes, `statements` holds the SQL
//! text of a run's writes, `rows` reads rows (`containment`: an attempt's
//! containment as a code) and `tx` gives the rules a transaction.

mod containment;
mod deps;
mod durability;
mod inspect;
mod open;
mod outbox;
pub(super) mod path;
mod pauses;
mod prune;
mod rows;
mod statements;
mod stops;
mod tx;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use jiff::Timestamp;
use rusqlite::{params, params_from_iter, Connection, ErrorCode, OptionalExtension};
use uuid::Uuid;

use super::columns::{attempt_list, JobCol};
use super::error::{LedgerError, Taker, Why};
use super::rules;
use super::runlock::{Hold, RunLocks};
use super::{
    Attempt, Claim, ExportedRun, Feed, ForgetReport, Head, HookRun, ImportReport, JobState,
    KeyMetrics, ListFilter, Locks, NamedLock, NewEvent, Outcome, Plan, PruneReport, Records, Run,
    RunAttempts, RunLedger, Status, Tails,
};
use crate::process::Containment;
use containment::ContainmentCode;
use durability::{Sync, LOCK_WAIT};
pub use inspect::SqliteInspector;
use path::disk_full;
use rows::{
    attempt_from_row, by_the_kernel, get, hook_from_row, job_from_row, judge_in_claim,
    lock_file_error, lock_file_fault, millis, query_head, run_from_row, running_heads,
    runs_on_a_moved_file, tails_from_row, HookCol, RunCol, StatusCode, TailCol, TimeOutOfRange,
    RUNS,
};
use statements::{list_query, start_run, Ahead, END_RUN, KEY_ID, NEW_KEY};
use tx::{count_outcome, upsert_attempt, Tx, END_ATTEMPT};

pub struct SqliteLedger {
    // Field order matters: `conn` must close before `lock`. Closing any
    // descriptor of the ledger file drops this process's POSIX locks on it,
    // SQLite's included, so the lock descriptor lives longest.
    conn: Connection,
    lock: Arc<File>,
    path: PathBuf,
    /// The kernel locks that tell whether a run lives.
    locks: RunLocks,
    /// Whether the connection's `synchronous` is FULL (else NORMAL).
    full: bool,
    /// The WAL as idem opened it, to sync what SQLite committed unsynced
    /// ([`Sync::LetsIn`]). SQLite keeps no POSIX lock on the WAL, so
    /// this descriptor's close drops none of them.
    wal: Option<File>,
    /// Whether this process has synced the ledger's folder, which it does
    /// once, with its first durable write.
    folder_synced: bool,
    /// Whether a claim was committed and not yet synced ([`Sync::Owed`]).
    owed: bool,
    /// The key whose head was last read and found missing: its claim will
    /// likely make its key's row and its job's (see [`Ahead::claim`]).
    headless: Option<String>,
}

/// What went wrong with the ledger in `path`.
fn describe(error: &rusqlite::Error, path: &Path) -> Why {
    match error {
        rusqlite::Error::FromSqlConversionFailure(_, _, why) => {
            return match why.downcast_ref::<TimeOutOfRange>() {
                Some(TimeOutOfRange(ms)) => Why::UnreadableTime(*ms),
                None => Why::Unreadable(why.to_string()),
            };
        }
        rusqlite::Error::IntegralValueOutOfRange(at, value) => {
            return Why::Unreadable(format!("{value} out of range in column {at}"))
        }
        rusqlite::Error::InvalidColumnType(_, name, kind) => {
            return Why::Unreadable(format!("column {name} holds {kind}"))
        }
        _ => {}
    }
    match error.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => Why::DiskFull,
        // A full disk often shows as an i/o error: the -shm index is grown
        // through mmap, which cannot report ENOSPC as such.
        Some(ErrorCode::SystemIoFailure) if disk_full(path) => Why::DiskFull,
        // What SQLite reports as an i/o error when a map or an allocation
        // was refused (ulimit -v): not the disk's fault.
        Some(ErrorCode::SystemIoFailure) | Some(ErrorCode::OutOfMemory) if out_of_memory(error) => {
            Why::Memory
        }
        Some(ErrorCode::ReadOnly) => Why::ReadOnly,
        Some(ErrorCode::NotADatabase) => Why::NotSqlite,
        Some(ErrorCode::DatabaseCorrupt) => Why::Corrupt,
        Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => Why::Busy {
            secs: LOCK_WAIT.as_secs(),
        },
        Some(ErrorCode::PermissionDenied) | Some(ErrorCode::CannotOpen) => {
            Why::Permission(error.to_string())
        }
        Some(ErrorCode::SystemIoFailure) => Why::Io(error.to_string()),
        _ => Why::Said(error.to_string()),
    }
}

/// Whether SQLite's error is a refused allocation or map: SQLITE_NOMEM,
/// SQLITE_IOERR_NOMEM, or SQLITE_IOERR_SHMMAP and SQLITE_IOERR_MMAP (the
/// disk, once full, was ruled out before).
fn out_of_memory(error: &rusqlite::Error) -> bool {
    use rusqlite::ffi;
    match error {
        rusqlite::Error::SqliteFailure(failure, _) => matches!(
            failure.extended_code,
            ffi::SQLITE_NOMEM
                | ffi::SQLITE_IOERR_NOMEM
                | ffi::SQLITE_IOERR_SHMMAP
                | ffi::SQLITE_IOERR_MMAP
        ),
        _ => false,
    }
}

impl SqliteLedger {
    fn fail(&self, doing: &str, error: &rusqlite::Error) -> anyhow::Error {
        LedgerError::Could {
            doing: doing.to_owned(),
            ledger: self.path.display().to_string(),
            why: describe(error, &self.path),
        }
        .into()
    }

    /// The rules' view of the connection outside a write, for reads.
    fn reader(&self) -> Tx<'_> {
        Tx {
            conn: &self.conn,
            locks: &self.locks,
        }
    }
}

impl RunLedger for SqliteLedger {
    fn head(&mut self, key: &str) -> Result<Option<Head>> {
        let head = query_head(&self.conn, key, &mut by_the_kernel(&self.locks))
            .map(|head| head.map(|(_, head)| head))
            .map_err(|error| self.fail("read", &error))?;
        self.headless = head.is_none().then(|| key.to_owned());
        Ok(head)
    }

    fn claim(
        &mut self,
        key: &str,
        plan: &mut dyn FnMut(Option<&Head>, bool) -> Plan,
    ) -> Result<Option<Claim>> {
        let ahead = Ahead::claim(self.headless.as_deref() == Some(key));
        let boot = crate::host::boot_id();
        self.write("claim a key in", Sync::Owed, &ahead, |tx| {
            // The key's row id, its row made when new: a lookup, which
            // most claims are, costs a third of an upsert to prepare.
            let known: Option<i64> = tx
                .conn
                .prepare_cached(KEY_ID)?
                .query_row([key], |row| row.get(0))
                .optional()?;
            let key_id: i64 = match known {
                Some(id) => id,
                None => tx
                    .conn
                    .prepare_cached(NEW_KEY)?
                    .query_row([key], |row| row.get(0))?,
            };
            // The byte is taken before the head is judged: whoever holds it
            // now is a live run of this key (claims take it only under the
            // writers' lock, which this transaction holds), and once taken
            // it says this run lives from before its claim commits.
            let hold: Option<Hold> = tx
                .locks
                .take(key_id)
                .map_err(|error| lock_file_error(tx.locks, error))?;
            let free = hold.is_some();
            let taken = hold.as_ref().map(Hold::stamp);
            let head = query_head(tx.conn, key, &mut |_, lock, boot| {
                Ok(judge_in_claim(taken, lock, boot))
            })?;
            let running = head
                .as_ref()
                .is_some_and(|(_, head)| head.run.status == Status::Running);
            let plan = plan(head.as_ref().map(|(_, head)| head), !free && !running);
            if let (true, Some((id, _))) = (plan.abandon_head, &head) {
                rules::Tx::mark_abandoned(tx, *id)?;
            }
            let (Some(new), Some(hold)) = (plan.claim, hold) else {
                return Ok(None);
            };
            let (run, fence) = start_run(tx.conn, key_id, &new, (hold.stamp(), boot))?;
            outbox::owe(tx.conn, &new.owed)?;
            Ok(Some(Claim {
                key: key.to_owned(),
                run_id: new.run_id,
                token: run,
                fence,
                hold: Some(hold),
                locks: Vec::new(),
                pause_after: None,
            }))
        })
    }

    fn attempt_started(
        &mut self,
        claim: &Claim,
        number: u32,
        pgid: u32,
        contained: Containment,
    ) -> Result<()> {
        // Not cached (nor prepared ahead): a statement kept for the rest
        // of the run costs an uncontended one more than it saves.
        self.write("record an attempt in", Sync::LetsIn, &[], |tx| {
            tx.conn.execute(
                "INSERT INTO attempts (run, n, started_at, containment) VALUES (?1, ?2, ?3, ?4)",
                params![
                    claim.token,
                    number,
                    millis(Timestamp::now()),
                    ContainmentCode(contained)
                ],
            )?;
            tx.conn.execute(
                "UPDATE runs SET attempts = ?2 WHERE id = ?1",
                params![claim.token, number],
            )?;
            // By its key: no index holds `head`.
            tx.conn.execute(
                "UPDATE keys SET owner_pgid = ?2 WHERE key = ?3 AND head = ?1",
                params![claim.token, pgid, claim.key],
            )?;
            Ok(())
        })
    }

    fn attempt_finished(&mut self, claim: &Claim, attempt: &Attempt) -> Result<()> {
        self.write(
            "record an attempt in",
            Sync::InCommit,
            &[END_ATTEMPT],
            |tx| upsert_attempt(tx.conn, claim.token, attempt),
        )
    }

    fn finish_owing(
        &mut self,
        claim: &Claim,
        last: Option<&Attempt>,
        outcome: &Outcome,
        owed: &[NewEvent],
    ) -> Result<()> {
        let ahead = Ahead::outcome();
        let recorded = self.write("record the outcome in", Sync::InCommit, &ahead, |tx| {
            if let Some(attempt) = last {
                upsert_attempt(tx.conn, claim.token, attempt)?;
            }
            // What the job's figures need comes back with the update.
            let ended: Option<Option<i64>> = tx
                .conn
                .prepare_cached(&END_RUN)?
                .query_row(
                    params![
                        claim.token,
                        StatusCode(outcome.status),
                        outcome.exit_code,
                        outcome.signal,
                        millis(Timestamp::now()),
                        last.map_or(0, |attempt| attempt.number)
                    ],
                    |row| get(row, "job_id"),
                )
                .optional()?;
            rules::Tx::release_owner(tx, claim.token)?;
            if let Some(Some(job_id)) = ended {
                count_outcome(
                    tx.conn,
                    job_id,
                    &claim.key,
                    outcome.status,
                    Some(outcome.exit_code),
                    outcome.stopped,
                )?;
                let failed = outcome.status == Status::Failed && !outcome.stopped;
                if let (Some(after), true) = (claim.pause_after, failed) {
                    pauses::after_failure(tx, job_id, after, claim.run_id)?;
                }
            }
            if ended.is_some() {
                outbox::owe(tx.conn, owed)?;
            }
            Ok(ended.is_some())
        })?;
        if !recorded {
            return Err(LedgerError::OutcomeLost {
                run: claim.run_id.to_string(),
                key: claim.key.clone(),
                taker: Taker::Abandoner,
            }
            .into());
        }
        Ok(())
    }

    fn hooks_ran(&mut self, run_id: Uuid, hooks: &[HookRun]) -> Result<()> {
        self.write("record hooks in", Sync::InCommit, &[], |tx| {
            let mut insert = tx.conn.prepare_cached(
                "INSERT INTO hooks (run, event, exit_code, at)
                 SELECT id, ?2, ?3, ?4 FROM runs WHERE run_id = ?1",
            )?;
            for hook in hooks {
                insert.execute(params![
                    run_id.as_bytes().as_slice(),
                    hook.event,
                    hook.exit_code,
                    millis(hook.at)
                ])?;
            }
            Ok(())
        })
    }

    fn paused(&mut self, job: &str) -> Result<Option<super::Pause>> {
        pauses::read_pause(&self.conn, job, Timestamp::now())
            .map_err(|error| self.fail("read", &error))
    }

    fn checked(&mut self, job: &str) -> Result<()> {
        self.write("stamp a job in", Sync::Later, &[], |tx| {
            tx.conn
                .prepare_cached("UPDATE jobs SET checked_at = ?2 WHERE job = ?1")?
                .execute(params![job, millis(Timestamp::now())])?;
            Ok(())
        })
    }

    fn take_locks(
        &mut self,
        wanted: &[NamedLock],
        _run_id: Uuid,
        _lease: Duration,
    ) -> Result<Result<Locks, String>> {
        let mut locks = Locks::default();
        for lock in wanted {
            let first = super::runlock::named_slot(&lock.name);
            match self.locks.take_named(first, lock.slots) {
                Ok(Some(hold)) => locks.holds.push(hold),
                Ok(None) => return Ok(Err(lock.name.clone())),
                Err(error) => return Err(lock_file_fault(&self.locks, &error).into()),
            }
            locks.names.push(lock.name.clone());
        }
        // A run whose lock file was deleted or replaced may hold these on
        // its own file, where no byte taken here can see it.
        let mut stamps: Vec<i64> = locks.holds.iter().map(Hold::stamp).collect();
        stamps.dedup();
        for stamp in stamps {
            let moved = runs_on_a_moved_file(&self.conn, stamp)
                .map_err(|error| self.fail("read", &error))?;
            if moved {
                return Ok(Err(wanted[0].name.clone()));
            }
        }
        Ok(Ok(locks))
    }

    fn leave(self: Box<Self>) {
        // Everything is committed, and no checkpoint runs at close (see
        // `configure`): closing would only free memory and unmap the WAL
        // index, which the exit does, for 5% of a skip's instructions.
        std::mem::forget(self);
    }
}

impl Records for SqliteLedger {
    fn list(&mut self, filter: &ListFilter) -> Result<Vec<Run>> {
        let (sql, values) = list_query(filter);
        let result = (|| {
            let mut statement = self.conn.prepare(&sql)?;
            let rows =
                statement.query_map(params_from_iter(values), |row| Ok(run_from_row(row)?.1))?;
            rows.collect::<rusqlite::Result<Vec<Run>>>()
        })();
        result.map_err(|error| self.fail("read", &error))
    }

    fn history(&mut self, key: &str, limit: u32) -> Result<(Vec<RunAttempts>, u64)> {
        let result = (|| {
            let total = rules::Tx::count_runs(&mut self.reader(), key)?;
            let mut runs = self.conn.prepare(&format!(
                "SELECT {} FROM {RUNS}
                 WHERE k.key = ?1 ORDER BY r.started_at DESC, r.id DESC LIMIT ?2",
                RunCol::LIST
            ))?;
            // The tails stay on disk (they are the row's last columns, so
            // SQLite does not even read their overflow pages).
            let mut attempts = self.conn.prepare(&format!(
                "SELECT {} FROM attempts a WHERE a.run = ?1 ORDER BY a.n",
                attempt_list(false, "NULL")
            ))?;
            let mut history = Vec::new();
            for row in runs.query_map(params![key, limit], run_from_row)? {
                let (id, run) = row?;
                let run_attempts = attempts
                    .query_map([id], attempt_from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                history.push((run, run_attempts));
            }
            Ok((history, total))
        })();
        result.map_err(|error: rusqlite::Error| self.fail("read", &error))
    }

    fn output(&mut self, run_id: Uuid, number: Option<u32>) -> Result<Option<Tails>> {
        self.conn
            .query_row(
                &format!(
                    "SELECT {} FROM attempts a JOIN runs r ON r.id = a.run
                     WHERE r.run_id = ?1 AND (?2 IS NULL OR a.n = ?2)
                     ORDER BY a.n DESC LIMIT 1",
                    TailCol::LIST
                ),
                params![run_id.as_bytes().as_slice(), number],
                tails_from_row,
            )
            .optional()
            .map_err(|error| self.fail("read", &error))
    }

    fn hooks(&mut self, run_id: Uuid) -> Result<Vec<HookRun>> {
        let read = || -> rusqlite::Result<Vec<HookRun>> {
            let mut statement = self.conn.prepare_cached(&format!(
                "SELECT {} FROM hooks h JOIN runs r ON r.id = h.run
                 WHERE r.run_id = ?1 ORDER BY h.at, h.rowid",
                HookCol::LIST
            ))?;
            let rows = statement.query_map([run_id.as_bytes().as_slice()], hook_from_row)?;
            rows.collect()
        };
        read().map_err(|error| self.fail("read", &error))
    }

    rule_methods!();
    super::pauses::pause_methods!();

    fn pauses(&mut self, glob: Option<&str>) -> Result<Vec<super::Pause>> {
        pauses::read_pauses(&self.conn, glob).map_err(|error| self.fail("read", &error))
    }

    fn prune(&mut self, before: Timestamp, dry_run: bool) -> Result<PruneReport> {
        if dry_run {
            return self.rehearse_prune(before);
        }
        let report = self.with_prune_cache(|ledger| rules::prune(ledger, before))?;
        self.checkpoint();
        Ok(report)
    }

    fn export(&mut self, sink: &mut dyn FnMut(ExportedRun) -> Result<()>) -> Result<()> {
        // One read transaction: a consistent snapshot while runs go on.
        let tx = self
            .conn
            .unchecked_transaction()
            .map_err(|error| self.fail("read", &error))?;
        let read = |error| self.fail("read", &error);
        let mut runs = tx
            .prepare(&format!(
                "SELECT {} FROM {RUNS} ORDER BY r.started_at, r.id",
                RunCol::LIST
            ))
            .map_err(read)?;
        let mut attempts = tx
            .prepare(&format!(
                "SELECT {} FROM attempts a WHERE a.run = ?1 ORDER BY a.n",
                attempt_list(true, "NULL")
            ))
            .map_err(read)?;
        let mut rows = runs.query([]).map_err(read)?;
        // The snapshot of the runs' first read: no run in it drew a fence
        // above this.
        let ledger_fence = tx
            .query_row(statements::HIGHEST_FENCE, [], |row| get(row, "last"))
            .map_err(read)?;
        while let Some(row) = rows.next().map_err(read)? {
            let (id, run) = run_from_row(row).map_err(read)?;
            let run_attempts = attempts
                .query_map([id], attempt_from_row)
                .and_then(Iterator::collect)
                .map_err(read)?;
            sink(ExportedRun {
                head: run.head,
                run,
                attempts: run_attempts,
                ledger_fence,
            })?;
        }
        Ok(())
    }

    fn import(&mut self, feed: &mut Feed<'_>, report: &mut ImportReport) -> Result<()> {
        let imported = self.write("import runs into", Sync::InCommit, &[], |tx| {
            rules::import_all(tx, feed, report)
        })?;
        self.checkpoint();
        imported
    }

    fn metrics(&mut self) -> Result<Vec<KeyMetrics>> {
        rules::metrics(&mut self.reader()).map_err(|error| self.fail("read", &error))
    }

    fn jobs(&mut self, glob: Option<&str>) -> Result<Vec<JobState>> {
        let result = (|| {
            let mut statement = self.conn.prepare(&format!(
                "SELECT id, {} FROM jobs WHERE ?1 IS NULL OR job GLOB ?1 ORDER BY job",
                JobCol::LIST
            ))?;
            let mut ids = std::collections::HashMap::new();
            let mut jobs = Vec::new();
            for row in statement.query_map([glob], |row| {
                Ok((get::<i64>(row, "id")?, job_from_row(row, 1)?))
            })? {
                let (id, job) = row?;
                ids.insert(id, jobs.len());
                jobs.push(job);
            }
            // Runs recorded as running are few (and in the partial index).
            for (job, _, owner) in running_heads(&self.conn, &self.locks)? {
                let Some(&at) = job.and_then(|job| ids.get(&job)) else {
                    continue;
                };
                if owner.alive != Some(false) {
                    jobs[at].live += 1;
                }
            }
            Ok(jobs)
        })();
        result.map_err(|error: rusqlite::Error| self.fail("read", &error))
    }

    fn keys_matching(&mut self, glob: &str) -> Result<Vec<String>> {
        let result = (|| {
            let mut statement = self
                .conn
                .prepare("SELECT key FROM keys WHERE key GLOB ?1 ORDER BY key")?;
            let rows = statement.query_map([glob], |row| row.get(0))?;
            rows.collect::<rusqlite::Result<Vec<String>>>()
        })();
        result.map_err(|error| self.fail("read", &error))
    }
}

#[cfg(test)]
mod tests;
