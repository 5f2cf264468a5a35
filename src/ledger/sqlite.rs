//! A ledger in one local SQLite file.
//!
//! Durability: WAL, and every claim and outcome on disk before idem goes
//! on (see [`Sync`]); a power cut can lose nothing that idem reported.
//! Concurrency: every write transaction is taken under a blocking `flock`
//! on the ledger file, because SQLite's own busy handler sleeps and retries
//! and collapses under hundreds of writers, while the kernel's lock queue
//! hands the file over at once.

mod inspect;
pub(super) mod path;
mod rows;
mod tx;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, LazyLock};
use std::time::Duration;

use anyhow::Result;
use jiff::Timestamp;
use rusqlite::config::DbConfig;
use rusqlite::{params, params_from_iter, Connection, ErrorCode, OpenFlags, OptionalExtension};
use uuid::Uuid;

use super::columns::{attempt_list, JobCol};
use super::error::{LedgerError, Taker, Why};
use super::inspect::Schema;
use super::rules;
use super::runlock::{Hold, RunLocks};
use super::schema::{APPLICATION_ID, LATEST, MIGRATIONS};
use super::{
    encode_command, Attempt, Claim, ExportedRun, Feed, ForgetReport, Head, HookRun, ImportReport,
    JobState, KeyMetrics, Ledger, ListFilter, Locks, NewRun, Outcome, Plan, PruneReport, Run,
    RunAttempts, Status, Tails,
};
use crate::exit::io_words;
pub use inspect::SqliteInspector;
use path::{
    check_side_files, disk_full, open_file, open_wal, prepare_folder, read_only_uri, sync_folder,
};
use rows::{
    attempt_from_row, by_the_kernel, job_from_row, lock_file_error, lock_file_fault, millis,
    query_head, run_from_row, running_heads, timestamp, unlocked_owner, RunCol, StatusCode,
    RUNNING, RUNS, SUCCEEDED,
};
use tx::{
    count_outcome, upsert_attempt, Tx, END_ATTEMPT, LOAD_JOB, RELEASE_HEAD, RELEASE_OWNER, SAVE_JOB,
};

/// How long idem waits for another writer before giving up (exit 125).
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// WAL pages after which a commit checkpoints (a run writes about ten).
const WAL_PAGES: i64 = 64;

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

/// When a write transaction reaches the disk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sync {
    /// In its commit, under the writers' lock (`synchronous=FULL`). An
    /// outcome: no one may read a success that a power cut could take back
    /// (a skip standing on it would be reported, then lost).
    InCommit,
    /// Committed unsynced (`synchronous=NORMAL`), and owed to the disk
    /// before its command starts: the write that lets the command in
    /// ([`Sync::LetsIn`]) pays it, while the guardian forked in between
    /// starts on another CPU. A claim: others may see it before it is
    /// durable, which costs them only a refusal (the key is busy), and one
    /// lost to a power cut ran nothing.
    Owed,
    /// The write that lets a command in (an attempt's start): committed
    /// unsynced and, when a claim is owed, synced with it once the writers'
    /// lock is released, before the write returns (one sync for both; the
    /// next writer's transaction goes on while this one waits for the
    /// disk). Otherwise as [`Sync::Later`].
    LetsIn,
    /// With the next synced commit, whoever makes it: bookkeeping that
    /// matters only while the host stays up. NORMAL, not OFF: OFF also
    /// drops the syncs of a checkpoint the commit may run, which would copy
    /// the unsynced frames into the ledger file, where a power cut could
    /// leave half a transaction.
    Later,
}

/// What went wrong with the ledger in `path`.
fn describe(error: &rusqlite::Error, path: &Path) -> Why {
    match error {
        rusqlite::Error::FromSqlConversionFailure(_, _, why) => {
            return Why::Unreadable(why.to_string())
        }
        rusqlite::Error::IntegralValueOutOfRange(_, value) => return Why::UnreadableTime(*value),
        _ => {}
    }
    match error.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => Why::DiskFull,
        // A full disk often shows as an i/o error: the -shm index is grown
        // through mmap, which cannot report ENOSPC as such.
        Some(ErrorCode::SystemIoFailure) if disk_full(path) => Why::DiskFull,
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

impl SqliteLedger {
    /// Opens the ledger at `path`, creating it (0600, in a 0700 folder) and
    /// migrating it when needed. Refuses, untouched, a file that is not an
    /// idem ledger or that a newer idem wrote.
    pub fn open(path: &Path) -> Result<SqliteLedger> {
        prepare_folder(path)?;
        let (file, writable) = open_file(path)?;
        check_side_files(path)?;
        // NOFOLLOW: SQLite opens the file again by name; should a link
        // replace it meanwhile, SQLite refuses it too.
        let opened = if writable {
            Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_WRITE
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX
                    | OpenFlags::SQLITE_OPEN_NOFOLLOW,
            )
        } else {
            Connection::open_with_flags(
                read_only_uri(path)?,
                OpenFlags::SQLITE_OPEN_READ_ONLY
                    | OpenFlags::SQLITE_OPEN_URI
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX
                    | OpenFlags::SQLITE_OPEN_NOFOLLOW,
            )
        };
        let conn = opened.map_err(|error| LedgerError::Could {
            doing: "open".into(),
            ledger: path.display().to_string(),
            why: describe(&error, path),
        })?;
        let mut ledger = SqliteLedger {
            conn,
            lock: Arc::new(file),
            path: path.to_owned(),
            locks: RunLocks::new(path),
            full: false,
            wal: None,
            folder_synced: false,
            owed: false,
            headless: None,
        };
        ledger.configure()?;
        ledger.check_and_migrate()?;
        Ok(ledger)
    }

    /// The one place connection settings are made.
    fn configure(&mut self) -> Result<()> {
        // NORMAL until a write asks for more (see `Sync`): in WAL mode it
        // syncs no commit, but every checkpoint. A page cache of 512KiB
        // (not SQLite's 2MiB): a run touches a handful of pages, but
        // writing two 1MiB output tails would otherwise fill all of it, and
        // memory is bounded at 16MiB whatever the command prints.
        self.conn
            .execute_batch(
                "PRAGMA synchronous = NORMAL;
                 PRAGMA foreign_keys = ON;
                 PRAGMA cache_size = -512;",
            )
            .map_err(|error| self.fail("configure", &error))?;
        self.conn
            .busy_timeout(LOCK_WAIT)
            .map_err(|error| self.fail("configure", &error))?;
        // By default the last connection to close checkpoints the WAL and
        // deletes it and the shared-memory file, and the next process makes
        // them anew: most of the cost of a short-lived process. Keep them.
        // But a process that opens the ledger alone rebuilds the WAL index
        // by reading the whole WAL, so checkpoint often to keep it short.
        self.conn
            .set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(|error| self.fail("configure", &error))?;
        self.conn
            .pragma_update(None, "wal_autocheckpoint", WAL_PAGES)
            .map_err(|error| self.fail("configure", &error))?;
        Ok(())
    }

    fn check_and_migrate(&mut self) -> Result<()> {
        let found = versions(&self.conn).map_err(|error| self.fail("read", &error))?;
        if self.needs_migration(found)? {
            let _guard = self.write_lock()?;
            // Another process may have migrated while this one waited.
            let found = versions(&self.conn).map_err(|error| self.fail("read", &error))?;
            if self.needs_migration(found)? {
                self.no_older_run_going(found.1)?;
                self.migrate(found.1)
                    .map_err(|error| self.fail("create or migrate", &error))?;
            }
        }
        Ok(())
    }

    /// Schema 8 keeps a run's status as a code. An older idem that still
    /// runs a run would record its outcome by the status's name, which then
    /// matches no row: its outcome lost, its run found abandoned and run
    /// again. So no ledger moves past schema 7 while such a run lives (its
    /// key's byte of the lock file held); under the writers' lock, which
    /// the caller holds, no older idem claims one meanwhile.
    fn no_older_run_going(&self, from: i64) -> Result<()> {
        const CODES: i64 = 8;
        if from == 0 || from >= CODES {
            return Ok(());
        }
        let read = |error| self.fail("read", &error);
        let running: Vec<(i64, String)> = self
            .conn
            .prepare(
                "SELECT k.id, k.key FROM keys k JOIN runs r ON r.id = k.head
                 WHERE r.status = 'running' ORDER BY k.key",
            )
            .and_then(|mut statement| {
                statement
                    .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                    .collect()
            })
            .map_err(read)?;
        for (id, key) in running {
            let held = self
                .locks
                .held(id)
                .map_err(|error| lock_file_fault(&self.locks, &error))?;
            if held {
                return Err(LedgerError::OlderRunGoing {
                    ledger: self.path.display().to_string(),
                    key,
                    schema: CODES,
                }
                .into());
            }
        }
        Ok(())
    }

    /// Refuses foreign and newer files; says whether migrations are due.
    fn needs_migration(&self, versions: (i32, i64, i64)) -> Result<bool> {
        let path = self.path.display();
        match schema_state(versions) {
            Schema::None => Ok(true), // a new, empty file
            Schema::NotADatabase | Schema::Foreign { .. } => Err(LedgerError::NotALedger {
                ledger: path.to_string(),
            }
            .into()),
            schema @ Schema::Idem { version, latest } if schema.newer() => {
                Err(LedgerError::Newer {
                    ledger: path.to_string(),
                    version,
                    latest,
                }
                .into())
            }
            Schema::Idem { version, latest } => Ok(version < latest),
        }
    }

    fn migrate(&mut self, from: i64) -> rusqlite::Result<()> {
        // journal_mode cannot change inside a transaction; it persists in
        // the file, so this runs once per ledger. Other processes may be
        // reading the new file (without the writers' lock), and the switch
        // does not wait for them through the busy handler: retry it.
        let started = std::time::Instant::now();
        loop {
            match self.conn.pragma_update(None, "journal_mode", "WAL") {
                Err(error)
                    if error.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                        && started.elapsed() < LOCK_WAIT =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                result => break result?,
            }
        }
        // A migration that makes a table anew drops the old one, which with
        // foreign keys on would delete the rows that refer to it (ON DELETE
        // CASCADE). The pragma does nothing inside a transaction.
        self.conn.execute_batch("PRAGMA foreign_keys = OFF")?;
        let migrated = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            for (index, migration) in MIGRATIONS.iter().enumerate().skip(from as usize) {
                tx.execute_batch(migration)?;
                tx.pragma_update(None, "user_version", index as i64 + 1)?;
            }
            tx.pragma_update(None, "application_id", APPLICATION_ID)?;
            tx.commit()
        })();
        self.conn.execute_batch("PRAGMA foreign_keys = ON")?;
        if migrated.is_ok() && from > 0 {
            // Tables made anew fill the WAL with the whole ledger.
            self.checkpoint();
        }
        migrated
    }

    /// Takes the writers' lock, waiting at most [`LOCK_WAIT`].
    fn write_lock(&self) -> Result<LockGuard> {
        self.write_lock_preparing(&[])
    }

    /// Takes the writers' lock, waiting at most [`LOCK_WAIT`], and
    /// prepares the statements `ahead` while it waits (see [`Ahead`]).
    fn write_lock_preparing(&self, ahead: &[&str]) -> Result<LockGuard> {
        match self.lock.try_lock() {
            Ok(()) => return Ok(LockGuard(Arc::clone(&self.lock))),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(error)) => return Err(self.lock_error(&error)),
        }
        // Block in the kernel's queue on a helper thread, so the wait can be
        // bounded; the thread holds its own handle, so the descriptor stays
        // open (see the field order of SqliteLedger) even if it outlives us.
        let (done, waited) = mpsc::channel();
        let file = Arc::clone(&self.lock);
        std::thread::spawn(move || {
            let _ = done.send(file.lock());
        });
        for sql in ahead {
            // An error comes again in the body, which reports it.
            let _ = self.conn.prepare_cached(sql);
        }
        match waited.recv_timeout(LOCK_WAIT) {
            Ok(Ok(())) => Ok(LockGuard(Arc::clone(&self.lock))),
            Ok(Err(error)) => Err(self.lock_error(&error)),
            Err(_) => Err(LedgerError::StayedLocked {
                ledger: self.path.display().to_string(),
                secs: LOCK_WAIT.as_secs(),
            }
            .into()),
        }
    }

    fn lock_error(&self, error: &std::io::Error) -> anyhow::Error {
        LedgerError::Could {
            doing: "lock".into(),
            ledger: self.path.display().to_string(),
            why: Why::Said(io_words(error)),
        }
        .into()
    }

    fn fail(&self, doing: &str, error: &rusqlite::Error) -> anyhow::Error {
        LedgerError::Could {
            doing: doing.to_owned(),
            ledger: self.path.display().to_string(),
            why: describe(error, &self.path),
        }
        .into()
    }

    /// Runs `body` in an IMMEDIATE transaction under the writers' lock,
    /// durable as `sync` says by the time it returns. The statements
    /// `ahead` are prepared while the lock is waited for, if it is.
    fn write<T>(
        &mut self,
        doing: &str,
        sync: Sync,
        ahead: &[&str],
        body: impl FnOnce(&mut Tx<'_>) -> rusqlite::Result<T>,
    ) -> Result<T> {
        // The connection's own setting: made before the lock is taken.
        let full = sync == Sync::InCommit;
        if self.full != full {
            let level = if full { "FULL" } else { "NORMAL" };
            self.conn
                .pragma_update(None, "synchronous", level)
                .map_err(|error| self.fail(doing, &error))?;
            self.full = full;
        }
        let changes = self.conn.total_changes();
        let value = {
            let _guard = self.write_lock_preparing(ahead)?;
            self.transaction(true, body)
                .map_err(|error| self.fail(doing, &error))?
        };
        // A transaction that changed nothing (a refused claim) wrote nothing.
        let wrote = self.conn.total_changes() != changes;
        let wal = match sync {
            Sync::InCommit if wrote => false,
            Sync::LetsIn if self.owed => true,
            Sync::Owed => {
                self.owed |= wrote;
                return Ok(value);
            }
            _ => return Ok(value),
        };
        self.sync(wal)
            .map_err(|error| self.sync_fault(doing, &error))?;
        // The WAL's sync, SQLite's or idem's, covers the claim's frames
        // too; a checkpoint since then synced them in the ledger file.
        self.owed = false;
        Ok(value)
    }

    /// After a durable write: syncs the WAL when SQLite did not (`wal`),
    /// and the ledger's folder, once per process. SQLite itself would sync
    /// the folder at each process's first sync of the WAL, so that a WAL it
    /// has just made stays after a power cut; idem's build leaves that to
    /// this, after the writers' lock is released.
    fn sync(&mut self, wal: bool) -> std::io::Result<()> {
        if wal {
            let file = match &self.wal {
                Some(file) => file,
                None => self.wal.insert(open_wal(&self.path)?),
            };
            file.sync_all()?;
        }
        if !self.folder_synced {
            // As SQLite's own: some file systems refuse to sync a folder
            // (EINVAL), and a ledger there must still work.
            let _ = sync_folder(&self.path);
            self.folder_synced = true;
        }
        Ok(())
    }

    fn sync_fault(&self, doing: &str, error: &std::io::Error) -> anyhow::Error {
        let why = if error.raw_os_error() == Some(nix::libc::ENOSPC) {
            Why::DiskFull
        } else {
            Why::Io(io_words(error))
        };
        LedgerError::Could {
            doing: doing.to_owned(),
            ledger: self.path.display().to_string(),
            why,
        }
        .into()
    }
}

/// The file's application id, schema version, and (only for a file with
/// neither, which may be new and empty) how many objects it holds, as
/// [`schema_state`] judges them. Plain pragmas: a query over them costs a
/// skip about 4% more; the read transaction around them, 0.25%.
fn versions(conn: &Connection) -> rusqlite::Result<(i32, i64, i64)> {
    // One read transaction, so that all three are of one moment: read
    // apart, they could straddle another process's creation of the schema
    // (no id yet, then a version) and take a new ledger of idem's for
    // another program's.
    let snapshot = conn.unchecked_transaction()?;
    let app_id = snapshot.pragma_query_value(None, "application_id", |row| row.get(0))?;
    let version = snapshot.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let objects = if app_id == 0 && version == 0 {
        snapshot.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))?
    } else {
        -1
    };
    snapshot.commit()?;
    Ok((app_id, version, objects))
}

/// What a file's [`versions`] say it is: new and empty, another
/// program's, or idem's at a version.
fn schema_state((app_id, version, objects): (i32, i64, i64)) -> Schema {
    if app_id == 0 && version == 0 && objects == 0 {
        Schema::None
    } else if app_id != APPLICATION_ID {
        Schema::Foreign { version }
    } else {
        Schema::Idem {
            version,
            latest: LATEST,
        }
    }
}

struct LockGuard(Arc<File>);

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl Ledger for SqliteLedger {
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
            let head = query_head(tx.conn, key, &mut |_, locked, boot| {
                Ok(if locked {
                    Some(!free)
                } else {
                    unlocked_owner(boot)
                })
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
            let (run, fence) = start_run(tx.conn, key_id, &new)?;
            Ok(Some(Claim {
                key: key.to_owned(),
                run_id: new.run_id,
                token: run,
                fence,
                hold: Some(hold),
                locks: Vec::new(),
            }))
        })
    }

    fn attempt_started(&mut self, claim: &Claim, number: u32, pgid: u32) -> Result<()> {
        // Not cached (nor prepared ahead): a statement kept for the rest
        // of the run costs an uncontended one more than it saves.
        self.write("record an attempt in", Sync::LetsIn, &[], |tx| {
            tx.conn.execute(
                "INSERT INTO attempts (run, n, started_at) VALUES (?1, ?2, ?3)",
                params![claim.token, number, millis(Timestamp::now())],
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

    fn finish(&mut self, claim: &Claim, last: Option<&Attempt>, outcome: &Outcome) -> Result<()> {
        let ahead = Ahead::outcome();
        let recorded = self.write("record the outcome in", Sync::InCommit, &ahead, |tx| {
            if let Some(attempt) = last {
                upsert_attempt(tx.conn, claim.token, attempt)?;
            }
            // What the job's figures need comes back with the update.
            let ended: Option<(Option<i64>, i64)> = tx
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
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            rules::Tx::release_owner(tx, claim.token)?;
            if let Some((Some(job_id), started)) = ended {
                count_outcome(
                    tx.conn,
                    job_id,
                    &claim.key,
                    started,
                    outcome.status,
                    Some(outcome.exit_code),
                )?;
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
                "SELECT a.stdout_tail, a.stderr_tail, a.cut FROM attempts a JOIN runs r ON r.id = a.run
                 WHERE r.run_id = ?1 AND (?2 IS NULL OR a.n = ?2)
                 ORDER BY a.n DESC LIMIT 1",
                params![run_id.as_bytes().as_slice(), number],
                |row| {
                    Ok(Tails {
                        stdout: row.get::<_, Option<Vec<u8>>>(0)?.unwrap_or_default(),
                        stderr: row.get::<_, Option<Vec<u8>>>(1)?.unwrap_or_default(),
                        cut: row.get(2)?,
                    })
                },
            )
            .optional()
            .map_err(|error| self.fail("read", &error))
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

    fn hooks(&mut self, run_id: Uuid) -> Result<Vec<HookRun>> {
        let read = || -> rusqlite::Result<Vec<HookRun>> {
            let mut statement = self.conn.prepare_cached(
                "SELECT h.event, h.exit_code, h.at FROM hooks h JOIN runs r ON r.id = h.run
                 WHERE r.run_id = ?1 ORDER BY h.at, h.rowid",
            )?;
            let rows = statement.query_map([run_id.as_bytes().as_slice()], |row| {
                Ok(HookRun {
                    event: row.get(0)?,
                    exit_code: row.get(1)?,
                    at: timestamp(row.get(2)?)?,
                })
            })?;
            rows.collect()
        };
        read().map_err(|error| self.fail("read", &error))
    }

    fn forget(
        &mut self,
        keys: &[String],
        purge: bool,
        dry_run: bool,
        force: bool,
    ) -> Result<ForgetReport> {
        self.write_or_rehearse("forget keys in", dry_run, |tx| {
            rules::forget(tx, keys, purge, force)
        })
    }

    fn prune(&mut self, before: Timestamp, dry_run: bool) -> Result<PruneReport> {
        let report = self.write_or_rehearse("prune", dry_run, |tx| rules::prune(tx, before))?;
        if !dry_run {
            self.checkpoint();
        }
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

    fn checked(&mut self, job: &str) -> Result<()> {
        self.write("stamp a job in", Sync::Later, &[], |tx| {
            tx.conn
                .prepare_cached("UPDATE jobs SET checked_at = ?2 WHERE job = ?1")?
                .execute(params![job, millis(Timestamp::now())])?;
            Ok(())
        })
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
                Ok((row.get::<_, i64>(0)?, job_from_row(row, 1)?))
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

    fn take_locks(
        &mut self,
        names: &[String],
        _run_id: Uuid,
        _lease: Duration,
    ) -> Result<Result<Locks, String>> {
        let mut locks = Locks::default();
        for name in names {
            let slot = super::runlock::named_slot(name);
            match self.locks.take(slot) {
                Ok(Some(hold)) => locks.holds.push(hold),
                Ok(None) => return Ok(Err(name.clone())),
                Err(error) => return Err(lock_file_fault(&self.locks, &error).into()),
            }
            locks.names.push(name.clone());
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
struct Ahead;

impl Ahead {
    /// A claim's; with the rows of a `new` key and job, which a key whose
    /// head was not found likely is (a `{date}` key's job is not, and its
    /// statement is prepared for nothing once a day).
    fn claim(new: bool) -> Vec<&'static str> {
        let mut ahead = vec![KEY_ID, NEXT_FENCE, CALL_JOB, &NEW_RUN, &OWN_KEY];
        if new {
            ahead.extend([NEW_KEY, NEW_JOB]);
        }
        ahead
    }

    /// An outcome's: the last attempt's end, the run's, and its job's figures.
    fn outcome() -> [&'static str; 5] {
        [END_ATTEMPT, &END_RUN, &RELEASE_HEAD, &LOAD_JOB, SAVE_JOB]
    }
}

const KEY_ID: &str = "SELECT id FROM keys WHERE key = ?1";
const NEW_KEY: &str = "INSERT INTO keys (key) VALUES (?1) RETURNING id";
const NEXT_FENCE: &str = "UPDATE fences SET last = last + 1 RETURNING last";
const CALL_JOB: &str = "UPDATE jobs SET template = ?2, zone = ?3, host = ?4, command = ?5,
        shell = ?6, first_run = coalesce(first_run, ?7), last_run = ?7,
        last_status = 'running', last_exit = NULL, checked_at = ?7, running = running + 1
    WHERE job = ?1 RETURNING id";
const NEW_JOB: &str = "INSERT INTO jobs (job, template, zone, host, command, shell, first_run,
        last_run, last_status, checked_at, running)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, 'running', ?7, 1)
    RETURNING id";
static NEW_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO runs (run_id, key_id, status, started_at, host, pid, command, shell,
             recovered, job_id)
         VALUES (?1, ?2, {RUNNING}, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    )
});
// The last assignment of a column wins: owned by this claim's lock.
static OWN_KEY: LazyLock<String> = LazyLock::new(|| {
    format!("UPDATE keys SET head = ?2, {RELEASE_OWNER}, owner_lock = 1 WHERE id = ?1")
});
static END_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE runs SET status = ?2, exit_code = ?3, signal = ?4, finished_at = ?5,
             attempts = max(attempts, ?6)
         WHERE id = ?1 AND status = {RUNNING}
         RETURNING job_id, started_at"
    )
});

/// Starts the new run of key row `key_id` and makes it the key's head,
/// owned by this process's lock: its row id and its fencing token.
fn start_run(tx: &Connection, key_id: i64, new: &NewRun) -> rusqlite::Result<(i64, i64)> {
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
    tx.prepare_cached(&OWN_KEY)?.execute(params![key_id, run])?;
    Ok((run, fence))
}

/// The SQL and the values of `ledger list` with `filter`.
fn list_query(filter: &ListFilter) -> (String, Vec<rusqlite::types::Value>) {
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

impl SqliteLedger {
    /// The rules' view of the connection outside a write, for reads.
    /// Folds the WAL into the ledger and empties it, after a write far
    /// larger than a run's: a process that opens the ledger alone reads the
    /// whole WAL to rebuild its index, so an import of a million runs would
    /// otherwise slow every run until the next checkpoint. Best effort: what
    /// was written is committed already, and a checkpoint that cannot finish
    /// now is finished by a later commit.
    fn checkpoint(&self) {
        if let Ok(_guard) = self.write_lock() {
            let _ = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
    }

    fn reader(&self) -> Tx<'_> {
        Tx {
            conn: &self.conn,
            locks: &self.locks,
        }
    }

    /// Like `write`, but a dry run does the same work and rolls it back,
    /// so what it reports is exactly what a real run would do.
    fn write_or_rehearse<T>(
        &mut self,
        doing: &str,
        dry_run: bool,
        body: impl FnOnce(&mut Tx<'_>) -> rusqlite::Result<T>,
    ) -> Result<T> {
        if !dry_run {
            return self.write(doing, Sync::InCommit, &[], body);
        }
        let _guard = self.write_lock()?;
        self.transaction(false, body)
            .map_err(|error| self.fail(doing, &error))
    }

    /// Runs `body` in an IMMEDIATE transaction, then commits it, or rolls
    /// it back (a rehearsal). The caller holds the writers' lock.
    fn transaction<T>(
        &mut self,
        commit: bool,
        body: impl FnOnce(&mut Tx<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let value = body(&mut Tx {
            conn: &tx,
            locks: &self.locks,
        })?;
        if commit {
            tx.commit()?;
        } else {
            tx.rollback()?;
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A ledger file as an idem of schema 7 left it, holding `rows`.
    fn schema_7_ledger(path: &Path, rows: &str) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON;")
            .unwrap();
        for migration in &MIGRATIONS[..7] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", 7).unwrap();
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        conn.execute_batch(rows).unwrap();
    }

    /// Migration 8 makes the runs table anew: a ledger of schema 7 keeps
    /// every run with its status, and the attempts and hooks that refer to
    /// the runs (which the old table's drop would have cascaded to).
    #[test]
    fn a_ledger_of_schema_7_keeps_its_runs_and_their_statuses() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let statuses = ["running", "succeeded", "failed", "abandoned"];
        let rows: String = (1..)
            .zip(statuses)
            .map(|(id, status)| {
                format!(
                    "INSERT INTO keys (id, key, head) VALUES ({id}, '{status}', {id});
                     INSERT INTO runs (id, run_id, key_id, status, started_at, host, pid,
                         command, shell)
                     VALUES ({id}, randomblob(16), {id}, '{status}', {id}000, 'h', 1,
                         CAST('true' AS BLOB), 0);
                     INSERT INTO attempts (run, n, started_at) VALUES ({id}, 1, {id}000);
                     INSERT INTO hooks (run, event, at) VALUES ({id}, 'failure', {id}000);"
                )
            })
            .collect();
        schema_7_ledger(&path, &rows);
        let mut ledger = SqliteLedger::open(&path).unwrap();
        for (code, status) in (0..).zip(statuses) {
            let head = ledger.head(status).unwrap().unwrap();
            assert_eq!(head.run.status.as_str(), status);
            let stored: i64 = ledger
                .conn
                .query_row(
                    "SELECT r.status FROM runs r JOIN keys k ON k.id = r.key_id WHERE k.key = ?1",
                    [status],
                    |row| row.get(0),
                )
                .unwrap();
            assert_eq!(stored, code, "{status}");
        }
        let count =
            |sql: &str| -> i64 { ledger.conn.query_row(sql, [], |row| row.get(0)).unwrap() };
        assert_eq!(count("SELECT count(*) FROM attempts"), 4);
        assert_eq!(count("SELECT count(*) FROM hooks"), 4);
        assert_eq!(count("SELECT count(*) FROM pragma_foreign_key_check"), 0);
        assert_eq!(count("PRAGMA user_version"), LATEST);
    }

    /// A ledger of schema 7 is not migrated while an older idem's run of
    /// it lives: that run would record its outcome by the status's name,
    /// which schema 8 no longer matches. Once it ends, the ledger moves.
    #[test]
    fn a_ledger_of_schema_7_waits_for_an_older_idems_live_run() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        schema_7_ledger(
            &path,
            "INSERT INTO keys (id, key, head, owner_lock) VALUES (1, 'backup', 1, 1);
             INSERT INTO runs (id, run_id, key_id, status, started_at, host, pid, command,
                 shell)
             VALUES (1, randomblob(16), 1, 'running', 1000, 'h', 1, CAST('true' AS BLOB), 0);",
        );
        // The older idem's run: its key's byte held, as its processes hold it.
        let locks = RunLocks::new(&path);
        let hold = locks.take(1).unwrap().expect("the byte is free");
        let refused = SqliteLedger::open(&path)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            refused.contains("in use by an older idem's run of backup"),
            "{refused}"
        );
        let version: i64 = Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, 7, "migrated under a live run");
        drop(hold);
        let mut ledger = SqliteLedger::open(&path).unwrap();
        assert_eq!(
            ledger.head("backup").unwrap().unwrap().run.status,
            Status::Running
        );
    }

    /// The statements alive on `ledger`'s connection (its cache's).
    fn statements(ledger: &SqliteLedger) -> usize {
        let mut count = 0;
        // SAFETY: walks the connection's own list, on its only thread.
        unsafe {
            let db = ledger.conn.handle();
            let mut statement = rusqlite::ffi::sqlite3_next_stmt(db, std::ptr::null_mut());
            while !statement.is_null() {
                count += 1;
                statement = rusqlite::ffi::sqlite3_next_stmt(db, statement);
            }
        }
        count
    }

    /// What a claim and an outcome prepare is all in [`Ahead`]: prepared
    /// first, they add no statement, so none is prepared under the
    /// writers' lock when it was waited for. A first run (a new key and
    /// job), then a run of a known key.
    #[test]
    fn a_runs_writes_prepare_nothing_beyond_what_they_prepare_ahead() {
        let folder = tempfile::tempdir().unwrap();
        let mut ledger = SqliteLedger::open(&folder.path().join("ledger.db")).unwrap();
        let prepared = |ledger: &mut SqliteLedger, ahead: &[&str]| {
            for sql in ahead {
                ledger.conn.prepare_cached(sql).unwrap();
            }
            statements(ledger)
        };
        for new in [true, false] {
            assert_eq!(ledger.head("backup").unwrap().is_none(), new);
            let before = prepared(&mut ledger, &Ahead::claim(new));
            let claim = ledger
                .claim("backup", &mut |_, _| Plan {
                    abandon_head: false,
                    claim: Some(NewRun {
                        run_id: Uuid::now_v7(),
                        command: vec!["true".into()],
                        shell: false,
                        host: "h".into(),
                        pid: std::process::id(),
                        recovered: false,
                        lease: Duration::from_secs(60),
                        job: super::super::JobInfo {
                            name: "backup".into(),
                            template: "backup".into(),
                            zone: None,
                        },
                    }),
                })
                .unwrap()
                .expect("claimed");
            assert_eq!(statements(&ledger), before, "the claim prepared more");
            ledger.attempt_started(&claim, 1, 1).unwrap();
            let before = prepared(&mut ledger, &Ahead::outcome());
            let attempt = Attempt {
                number: 1,
                started_at: Some(Timestamp::now()),
                finished_at: Some(Timestamp::now()),
                exit_code: Some(0),
                ..Attempt::default()
            };
            let outcome = Outcome {
                status: Status::Succeeded,
                exit_code: 0,
                signal: None,
            };
            ledger.finish(&claim, Some(&attempt), &outcome).unwrap();
            assert_eq!(statements(&ledger), before, "the outcome prepared more");
        }
    }

    /// A reader that looks while another connection creates the schema
    /// sees it either not yet there or whole: never a foreign database.
    #[test]
    fn versions_are_of_one_moment_while_the_schema_is_created() {
        let folder = tempfile::tempdir().unwrap();
        let mut foreign = 0;
        for round in 0..40 {
            let path = folder.path().join(format!("{round}")).join("ledger.db");
            let created = AtomicBool::new(false);
            std::thread::scope(|scope| {
                let reader = scope.spawn(|| {
                    let mut seen = 0;
                    while !created.load(Ordering::Relaxed) {
                        let Ok(conn) =
                            Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE)
                        else {
                            continue;
                        };
                        while !created.load(Ordering::Relaxed) {
                            if let Ok(found) = versions(&conn) {
                                seen += usize::from(matches!(
                                    schema_state(found),
                                    Schema::Foreign { .. }
                                ));
                            }
                        }
                    }
                    seen
                });
                SqliteLedger::open(&path).unwrap();
                created.store(true, Ordering::Relaxed);
                foreign += reader.join().unwrap();
            });
        }
        assert_eq!(
            foreign, 0,
            "reads that took idem's new ledger for another's"
        );
    }
}
