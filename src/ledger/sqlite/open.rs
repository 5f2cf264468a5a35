//! Opening a SQLite ledger: judging its path, the connection's settings
//! (in one place), and the schema's state and migrations.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::super::error::{LedgerError, Why};
use super::super::inspect::Schema;
use super::super::runlock::RunLocks;
use super::super::schema::{APPLICATION_ID, LATEST, MIGRATIONS};
use super::durability::LOCK_WAIT;
use super::path::{
    check_side_files, open_error, open_file, open_file_to_read, owner_words, prepare_folder,
    read_only_uri, real_path,
};
use super::rows::{get, lock_file_fault};
use super::{describe, SqliteLedger};

/// WAL pages after which a commit checkpoints (a run writes about ten).
const WAL_PAGES: i64 = 64;

/// The page cache, in KiB (see `configure`).
pub(super) const CACHE_KIB: i64 = 512;

impl SqliteLedger {
    /// Opens the ledger at `path`, creating it (0600, in a 0700 folder) and
    /// migrating it when needed. Refuses, untouched, a file that is not an
    /// idem ledger or that a newer idem wrote.
    pub fn open(path: &Path) -> Result<SqliteLedger> {
        prepare_folder(path)?;
        // The side files first: a refusal leaves nothing behind.
        check_side_files(path)?;
        let (file, writable) = open_file(path)?;
        let conn = connect(path, &file, writable)?;
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

    /// Opens the ledger at `path` to read it only, whoever owns it
    /// (`status`, `ledger list|show|metrics`): its folder is neither made
    /// nor judged, nor its owner refused, since those guard what a run
    /// writes; SQLite reads it read-only, creating nothing (see
    /// [`read_only_uri`]), and migrates nothing: a schema older than this
    /// idem reads is an error that names who can migrate it. `None` for a
    /// file no run has written yet.
    pub fn open_reader(path: &Path) -> Result<Option<SqliteLedger>> {
        use std::os::unix::fs::MetadataExt;
        let file = open_file_to_read(path)?;
        let owner = file
            .metadata()
            .map_err(|error| open_error(path, &error))?
            .uid();
        let conn = connect(path, &file, false)?;
        let mut ledger = SqliteLedger {
            conn,
            lock: Arc::new(file),
            path: path.to_owned(),
            locks: RunLocks::for_reader(path, owner),
            full: false,
            wal: None,
            folder_synced: false,
            owed: false,
            headless: None,
        };
        ledger.configure()?;
        let found = versions(&ledger.conn).map_err(|error| ledger.fail("read", &error))?;
        if schema_state(found) == Schema::None {
            return Ok(None);
        }
        if ledger.needs_migration(found)? {
            return Err(LedgerError::OlderForReader {
                ledger: path.display().to_string(),
                version: found.1,
                latest: LATEST,
                owner: owner_words(owner),
            }
            .into());
        }
        Ok(Some(ledger))
    }

    /// The one place connection settings are made.
    fn configure(&mut self) -> Result<()> {
        // NORMAL until a write asks for more (see `Sync`): in WAL mode it
        // syncs no commit, but every checkpoint. A page cache of 512KiB
        // (not SQLite's 2MiB): a run touches a handful of pages, but
        // writing two 1MiB output tails would otherwise fill all of it, and
        // memory is bounded at 16MiB whatever the command prints.
        self.conn
            .execute_batch(&format!(
                "PRAGMA synchronous = NORMAL;
                 PRAGMA foreign_keys = ON;
                 PRAGMA cache_size = -{CACHE_KIB};"
            ))
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
                "SELECT k.id AS id, k.key AS key FROM keys k JOIN runs r ON r.id = k.head
                 WHERE r.status = 'running' ORDER BY k.key",
            )
            .and_then(|mut statement| {
                statement
                    .query_map([], |row| Ok((get(row, "id")?, get(row, "key")?)))?
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
}

/// SQLite's connection to the ledger at `path`, whose file idem opened as
/// `file`. SQLite's NOFOLLOW refuses a link anywhere in the path, but a
/// link above the ledger's folder is the system's own layout (`/home ->
/// var/home`, a stowed ~/.local): where the path has one, SQLite is given
/// the folder's real path and the ledger's own name, which is never a link
/// (asked only then: resolving every path would cost each run a call per
/// folder).
fn connect(path: &Path, file: &std::fs::File, writable: bool) -> Result<Connection> {
    let fail = |error: rusqlite::Error| -> anyhow::Error {
        LedgerError::Could {
            doing: "open".into(),
            ledger: path.display().to_string(),
            why: describe(&error, path),
        }
        .into()
    };
    let error = match open_by(path, writable)? {
        Ok(conn) => return Ok(conn),
        Err(error) if error.sqlite_error_code() == Some(ErrorCode::CannotOpen) => error,
        Err(error) => return Err(fail(error)),
    };
    let real = match real_path(path) {
        Some(real) if real != path => real,
        _ => return Err(fail(error)),
    };
    let conn = open_by(&real, writable)?.map_err(fail)?;
    // The folder's link could be changed between the two opens: the
    // writers' lock must be on the file SQLite writes.
    if !same_file(&real, file) {
        return Err(LedgerError::Could {
            doing: "open".into(),
            ledger: path.display().to_string(),
            why: Why::Said("its folder was moved while it was opened; try again".into()),
        }
        .into());
    }
    Ok(conn)
}

/// SQLite's connection to the ledger file at `path`. NOFOLLOW: SQLite
/// opens the file again by name; should a link replace it meanwhile,
/// SQLite refuses it too.
fn open_by(path: &Path, writable: bool) -> Result<rusqlite::Result<Connection>> {
    Ok(if writable {
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
    })
}

/// Whether `real` names the file open as `file`.
fn same_file(real: &Path, file: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::symlink_metadata(real), file.metadata()) {
        (Ok(there), Ok(opened)) => there.dev() == opened.dev() && there.ino() == opened.ino(),
        _ => false,
    }
}

/// The file's application id, schema version, and (only for a file with
/// neither, which may be new and empty) how many objects it holds, as
/// [`schema_state`] judges them. Plain pragmas: a query over them costs a
/// skip about 4% more; the read transaction around them, 0.25%.
pub(super) fn versions(conn: &Connection) -> rusqlite::Result<(i32, i64, i64)> {
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
pub(super) fn schema_state((app_id, version, objects): (i32, i64, i64)) -> Schema {
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
