//! A SQLite ledger opened only to be read (`idem doctor`).
//!
//! SQLite reads a WAL-mode file through its -shm index and creates that
//! index when it is missing, so the file is opened so that nothing is
//! created: as [`read_only_uri`] says when it can (`immutable=1` without a
//! write-ahead log, `mode=ro` with the log and its index), and as a private
//! copy elsewhere when only the log is left.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::super::inspect::{Inspect, Schema};
use super::super::runlock::RunLocks;
use super::super::Owner;
use super::durability::LOCK_WAIT;
use super::open::{schema_state, versions};
use super::path::{check_one_name, judge_new_ledger, read_only_uri, side_file, symbolic_link};
use super::rows::{get, running_heads, RUNNING, SUCCEEDED};
use super::stops::pending;
use crate::exit::io_words;

/// The most lost events `doctor` names.
const LOST_SHOWN: u32 = 20;

pub struct SqliteInspector {
    // Field order matters: the connection closes before the copy it may
    // read is deleted.
    conn: Connection,
    /// The ledger's own lock file, whatever file is read: it tells whether
    /// a run lives.
    locks: RunLocks,
    _copy: Option<tempfile::TempDir>,
}

impl SqliteInspector {
    /// Opens the ledger at `path` for reading, creating nothing next to it;
    /// says in words why it cannot.
    pub fn open(path: &Path) -> Result<SqliteInspector, String> {
        let failed = |error: rusqlite::Error| format!("cannot open {}: {error}", path.display());
        let (conn, copy) = match read_only_uri(path) {
            Ok(uri) => {
                let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
                    | OpenFlags::SQLITE_OPEN_URI
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX;
                (
                    Connection::open_with_flags(uri, flags).map_err(failed)?,
                    None,
                )
            }
            Err(_) => {
                let copy = copy_with_log(path)?;
                let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
                let conn = Connection::open_with_flags(copy.path().join("ledger.db"), flags)
                    .map_err(failed)?;
                (conn, Some(copy))
            }
        };
        let _ = conn.busy_timeout(LOCK_WAIT);
        Ok(SqliteInspector {
            conn,
            locks: RunLocks::new(path),
            _copy: copy,
        })
    }

    /// What `run` refuses in the ledger file itself, beyond its owner and
    /// modes (doctor's own checks): a link at its path, or a second name
    /// (a hard link, a file mounted alone). Opened read-only, creating
    /// nothing; a file that cannot be opened is doctor's to report.
    pub fn refusal(path: &Path) -> Option<String> {
        use std::os::unix::fs::OpenOptionsExt;
        if std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink()) {
            return Some(symbolic_link(path).to_string());
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(path)
            .ok()?;
        let metadata = file.metadata().ok()?;
        check_one_name(path, &file, &metadata)
            .err()
            .map(|error| error.to_string())
    }

    /// What `run` would refuse of a ledger it is to create at `path` (its
    /// folder, judged as `run` judges it); `None` when the first run
    /// creates it. Changes nothing.
    pub fn creation_refusal(path: &Path) -> Option<String> {
        judge_new_ledger(path).err().map(|error| error.to_string())
    }

    /// The keys whose running head's claim locked a lock file that is no
    /// longer at the path (deleted or replaced since), so the kernel cannot
    /// tell whether their runs live; none where the ledger cannot say.
    pub fn moved_lock_file(&self) -> Vec<String> {
        let moved = || -> rusqlite::Result<Vec<String>> {
            let mut statement = self.conn.prepare(&format!(
                "SELECT k.key AS key, k.id AS id, k.owner_lock AS lock
                 FROM runs r CROSS JOIN keys k ON k.id = r.key_id
                 WHERE r.status = {RUNNING} AND r.status <> {SUCCEEDED} AND k.head = r.id
                   AND k.owner_lock > 1
                 ORDER BY k.key"
            ))?;
            let mut rows = statement.query([])?;
            let mut keys = Vec::new();
            while let Some(row) = rows.next()? {
                let judged = self.locks.judge(get(row, "id")?, get(row, "lock")?);
                if matches!(judged, Ok(None)) {
                    keys.push(get(row, "key")?);
                }
            }
            Ok(keys)
        };
        moved().unwrap_or_default()
    }

    /// The rows of `PRAGMA integrity_check`: `["ok"]` when the file is sound.
    pub fn integrity(&mut self) -> Result<Vec<String>, String> {
        let lines = self
            .conn
            .prepare("PRAGMA integrity_check")
            .and_then(|mut statement| {
                statement
                    .query_map([], |row| row.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            });
        lines.map_err(|error| error.to_string())
    }
}

/// A log without its index: SQLite would create the index, so the ledger
/// and its log are read from a private copy instead.
fn copy_with_log(path: &Path) -> Result<tempfile::TempDir, String> {
    let copy = tempfile::tempdir()
        .map_err(|error| format!("cannot make a temporary folder: {}", io_words(&error)))?;
    let target = copy.path().join("ledger.db");
    let copied = std::fs::copy(path, &target)
        .and_then(|_| std::fs::copy(side_file(path, "-wal"), side_file(&target, "-wal")));
    copied.map_err(|error| format!("cannot copy {}: {}", path.display(), io_words(&error)))?;
    Ok(copy)
}

impl Inspect for SqliteInspector {
    fn lost_events(&mut self) -> Result<Vec<crate::ledger::EventState>, String> {
        super::outbox::lost_in(&self.conn, LOST_SHOWN).map_err(|error| error.to_string())
    }

    fn owed_events(&mut self) -> Result<u64, String> {
        super::outbox::owed_in(&self.conn).map_err(|error| error.to_string())
    }

    fn schema(&mut self) -> Result<Schema, String> {
        match versions(&self.conn) {
            Ok(versions) => Ok(schema_state(versions)),
            Err(error) if error.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) => {
                Ok(Schema::NotADatabase)
            }
            Err(error) => Err(error.to_string()),
        }
    }

    fn running(&mut self) -> Result<Vec<(String, Owner)>, String> {
        let heads = running_heads(&self.conn, &self.locks).map_err(|error| error.to_string())?;
        Ok(heads
            .into_iter()
            .map(|(_, run, owner)| (run.key, owner))
            .collect())
    }

    fn pauses(&mut self) -> Result<Vec<super::super::Pause>, String> {
        let now = jiff::Timestamp::now();
        super::pauses::read_pauses(&self.conn, None)
            .map(|pauses| pauses.into_iter().filter(|p| p.holds_at(now)).collect())
            .map_err(|error| error.to_string())
    }

    fn pending_stops(&mut self) -> Result<Vec<super::super::StopRequest>, String> {
        pending(&self.conn).map_err(|error| error.to_string())
    }

    fn upstreams(&mut self) -> Result<Vec<(String, Vec<String>)>, String> {
        super::deps::upstream_graph(&self.conn).map_err(|error| error.to_string())
    }
}
