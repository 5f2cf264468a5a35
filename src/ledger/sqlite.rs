//! A ledger in one local SQLite file.
//!
//! Durability: WAL with `synchronous=FULL`, so a commit (a claim, an
//! outcome) has reached the disk before idem goes on; a power cut can lose
//! nothing that idem reported. Concurrency: every write transaction is taken
//! under a blocking `flock` on the ledger file, because SQLite's own busy
//! handler sleeps and retries and collapses under hundreds of writers, while
//! the kernel's lock queue hands the file over at once.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{Context, Result};
use jiff::Timestamp;
use rusqlite::config::DbConfig;
use rusqlite::{params, params_from_iter, Connection, ErrorCode, OpenFlags, OptionalExtension};
use uuid::Uuid;

use super::runlock::{Hold, RunLocks};
use super::schema::{APPLICATION_ID, LATEST, MIGRATIONS};
use super::{
    decode_command, encode_command, Attempt, Claim, ExportedRun, ForgetReport, ForgottenKey, Head,
    HookRun, ImportReport, JobState, KeyMetrics, Ledger, ListFilter, Locks, Outcome, Owner, Plan,
    PruneReport, Run, RunAttempts, Status, Tails,
};
use crate::exit::{io_words, Failure, IDEM_FAILED};

/// How long idem waits for another writer before giving up (exit 125).
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

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
}

/// Frees a key's owner columns: the run it owned has ended or was judged
/// dead. Part of every update that ends a head's `running`.
const RELEASE_OWNER: &str = "owner_boot = NULL, owner_pid_start = NULL, owner_pgid = NULL, \
     owner_pgid_start = NULL, owner_lock = NULL";

const RUN_COLUMNS: &str = "k.key, r.id, r.run_id, r.status, r.exit_code, r.signal, r.attempts, \
     r.started_at, r.finished_at, r.host, r.pid, r.command, r.shell, r.recovered, \
     coalesce(j.job, k.key), coalesce(k.head = r.id, 0)";

/// Runs with their keys and jobs, for [`RUN_COLUMNS`].
const RUNS: &str = "runs r JOIN keys k ON k.id = r.key_id LEFT JOIN jobs j ON j.id = r.job_id";

fn millis(time: Timestamp) -> i64 {
    time.as_millisecond()
}

/// A stored time; one out of range is a value that cannot be read (an
/// error naming the ledger), never a made-up time.
fn timestamp(ms: i64) -> rusqlite::Result<Timestamp> {
    Timestamp::from_millisecond(ms).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, ms))
}

/// Reads the columns of [`RUN_COLUMNS`]: the run's row id and the run.
fn run_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, Run)> {
    let status: String = row.get(3)?;
    let run_id: Vec<u8> = row.get(2)?;
    let run = Run {
        key: row.get(0)?,
        run_id: Uuid::from_slice(&run_id).map_err(|error| {
            rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Blob, error.into())
        })?,
        status: Status::parse(&status).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                3,
                rusqlite::types::Type::Text,
                format!("unknown run status {status:?}").into(),
            )
        })?,
        exit_code: row.get(4)?,
        signal: row.get(5)?,
        attempts: row.get(6)?,
        started_at: timestamp(row.get(7)?)?,
        finished_at: row.get::<_, Option<i64>>(8)?.map(timestamp).transpose()?,
        host: row.get(9)?,
        pid: row.get(10)?,
        command: decode_command(&row.get::<_, Vec<u8>>(11)?),
        shell: row.get(12)?,
        recovered: row.get(13)?,
        job: row.get(14)?,
        head: row.get(15)?,
    };
    Ok((row.get(1)?, run))
}

/// Says in words what went wrong with the ledger in `path`.
fn describe(error: &rusqlite::Error, path: &Path) -> String {
    match error {
        rusqlite::Error::FromSqlConversionFailure(_, _, why) => {
            return format!(
                "a stored value cannot be read ({why}): the ledger was changed by hand or damaged; run `idem doctor`"
            )
        }
        rusqlite::Error::IntegralValueOutOfRange(_, value) => {
            return format!(
                "a stored time cannot be read ({value}): the ledger was changed by hand or damaged; run `idem doctor`"
            )
        }
        _ => {}
    }
    match error.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => "the disk is full; free some space".into(),
        // A full disk often shows as an i/o error: the -shm index is grown
        // through mmap, which cannot report ENOSPC as such.
        Some(ErrorCode::SystemIoFailure) if disk_full(path) => {
            "the disk is full; free some space".into()
        }
        Some(ErrorCode::ReadOnly) => {
            "the ledger is read-only (its file or file system refuses writes); make it writable or set --db".into()
        }
        Some(ErrorCode::NotADatabase) => {
            "not an idem ledger (the file is not a SQLite database); move it aside or set --db"
                .into()
        }
        Some(ErrorCode::DatabaseCorrupt) => {
            "the ledger is corrupt; run `idem doctor`, then move it aside".into()
        }
        Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => format!(
            "the ledger stayed locked by another process for {}s",
            LOCK_WAIT.as_secs()
        ),
        Some(ErrorCode::PermissionDenied) | Some(ErrorCode::CannotOpen) => {
            format!("{error}; check the permissions or set --db")
        }
        Some(ErrorCode::SystemIoFailure) => format!("i/o error ({error}); check the disk"),
        _ => error.to_string(),
    }
}

/// Bytes free for unprivileged writers on the file system of `path`.
pub(crate) fn free_bytes(path: &Path) -> Option<u64> {
    let stats = nix::sys::statvfs::statvfs(super::folder_of(path)).ok()?;
    Some(
        stats
            .blocks_available()
            .saturating_mul(stats.fragment_size()),
    )
}

/// Whether the file system holding `path` has (next to) no space left.
pub(crate) fn disk_full(path: &Path) -> bool {
    free_bytes(path).is_some_and(|free| free < 256 << 10)
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
        let conn = opened.map_err(|error| {
            Failure::new(
                IDEM_FAILED,
                format!(
                    "could not open ledger {}: {}",
                    path.display(),
                    describe(&error, path)
                ),
            )
        })?;
        let mut ledger = SqliteLedger {
            conn,
            lock: Arc::new(file),
            path: path.to_owned(),
            locks: RunLocks::new(path),
        };
        ledger.configure()?;
        ledger.check_and_migrate()?;
        Ok(ledger)
    }

    /// The one place connection settings are made.
    fn configure(&mut self) -> Result<()> {
        // FULL: in WAL mode NORMAL may lose the last commits on power loss,
        // and a lost success would make a job run twice. A page cache of
        // 512KiB (not SQLite's 2MiB): a run touches a handful of pages, but
        // writing two 1MiB output tails would otherwise fill all of it, and
        // memory is bounded at 16MiB whatever the command prints.
        self.conn
            .execute_batch(
                "PRAGMA synchronous = FULL;
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

    fn versions(&self) -> rusqlite::Result<(i32, i64, i64)> {
        self.conn.query_row(
            "SELECT (SELECT application_id FROM pragma_application_id),
                    (SELECT user_version FROM pragma_user_version),
                    (SELECT count(*) FROM sqlite_schema)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
    }

    fn check_and_migrate(&mut self) -> Result<()> {
        let versions = self.versions().map_err(|error| self.fail("read", &error))?;
        if self.needs_migration(versions)? {
            let _guard = self.write_lock()?;
            // Another process may have migrated while this one waited.
            let versions = self.versions().map_err(|error| self.fail("read", &error))?;
            if self.needs_migration(versions)? {
                self.migrate(versions.1)
                    .map_err(|error| self.fail("create or migrate", &error))?;
            }
        }
        Ok(())
    }

    /// Refuses foreign and newer files; says whether migrations are due.
    fn needs_migration(&self, (app_id, version, objects): (i32, i64, i64)) -> Result<bool> {
        let path = self.path.display();
        if app_id == 0 && version == 0 && objects == 0 {
            return Ok(true); // a new, empty file
        }
        if app_id != APPLICATION_ID {
            return Err(Failure::new(
                IDEM_FAILED,
                format!("{path} is not an idem ledger (it is another program's SQLite database); move it aside or set --db"),
            )
            .into());
        }
        if version > LATEST {
            return Err(Failure::new(
                IDEM_FAILED,
                format!("ledger {path} was written by a newer idem (schema {version}, this idem knows {LATEST}); upgrade idem"),
            )
            .into());
        }
        Ok(version < LATEST)
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
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        for (index, migration) in MIGRATIONS.iter().enumerate().skip(from as usize) {
            tx.execute_batch(migration)?;
            tx.pragma_update(None, "user_version", index as i64 + 1)?;
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        tx.commit()
    }

    /// Takes the writers' lock, waiting at most [`LOCK_WAIT`].
    fn write_lock(&self) -> Result<LockGuard> {
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
        match waited.recv_timeout(LOCK_WAIT) {
            Ok(Ok(())) => Ok(LockGuard(Arc::clone(&self.lock))),
            Ok(Err(error)) => Err(self.lock_error(&error)),
            Err(_) => Err(Failure::new(
                IDEM_FAILED,
                format!(
                    "ledger {} stayed locked by another process for {}s; see `idem doctor`",
                    self.path.display(),
                    LOCK_WAIT.as_secs()
                ),
            )
            .transient()
            .into()),
        }
    }

    fn lock_error(&self, error: &std::io::Error) -> anyhow::Error {
        Failure::new(
            IDEM_FAILED,
            format!(
                "could not lock ledger {}: {}",
                self.path.display(),
                io_words(error)
            ),
        )
        .into()
    }

    fn fail(&self, doing: &str, error: &rusqlite::Error) -> anyhow::Error {
        let failure = Failure::new(
            IDEM_FAILED,
            format!(
                "could not {doing} ledger {}: {}",
                self.path.display(),
                describe(error, &self.path)
            ),
        );
        let busy = matches!(
            error.sqlite_error_code(),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
        );
        if busy { failure.transient() } else { failure }.into()
    }

    /// Runs `body` in an IMMEDIATE transaction under the writers' lock.
    fn write<T>(
        &mut self,
        doing: &str,
        durable: bool,
        body: impl FnOnce(&rusqlite::Transaction<'_>, &RunLocks) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let _guard = self.write_lock()?;
        if !durable {
            // Bookkeeping that only matters while this host stays up: a
            // later FULL commit syncs these WAL frames too.
            self.conn
                .pragma_update(None, "synchronous", "OFF")
                .map_err(|error| self.fail(doing, &error))?;
        }
        let result = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let value = body(&tx, &self.locks)?;
            tx.commit()?;
            Ok(value)
        })();
        if !durable {
            self.conn
                .pragma_update(None, "synchronous", "FULL")
                .map_err(|error| self.fail(doing, &error))?;
        }
        result.map_err(|error| self.fail(doing, &error))
    }
}

struct LockGuard(Arc<File>);

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

// ---- the ledger's path, judged before SQLite opens anything -------------
//
// As ssh judges `authorized_keys`: a ledger decides what runs, so idem uses
// only a file of its own user that no one else can write, in a folder that
// no one else can swap it out of (owned by the user or root, and writable
// by no one else unless sticky, like /tmp). It never follows a symbolic
// link at the ledger's path or beside it, where another user could plant
// one to make idem write a file of its choosing. A refusal changes nothing.

fn refuse(message: String) -> anyhow::Error {
    Failure::new(IDEM_FAILED, message).into()
}

/// A file's owner for people: `alice (uid 1000)`, or `uid 4242`.
fn owner_words(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => format!("{} (uid {uid})", user.name),
        _ => format!("uid {uid}"),
    }
}

fn mode_words(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// What a file that is not a regular file is, for people.
fn kind_words(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a folder"
    } else if file_type.is_fifo() {
        "a fifo"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

fn not_regular(path: &Path, file_type: std::fs::FileType) -> anyhow::Error {
    refuse(format!(
        "ledger {} is not a regular file (it is {}); set --db or IDEM_DB to a ledger file",
        path.display(),
        kind_words(file_type)
    ))
}

fn symbolic_link(path: &Path) -> anyhow::Error {
    refuse(format!(
        "ledger {} is a symbolic link, which idem never follows (another user could aim it at any file); give the real path with --db or IDEM_DB",
        path.display()
    ))
}

/// Refuses a file at (or beside) the ledger that is not the user's own or
/// that others can write.
fn check_owner_and_mode(path: &Path, metadata: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    if metadata.uid() != me {
        return Err(refuse(format!(
            "ledger {} belongs to {}, not to {}: idem uses only a ledger of its own user; set --db or IDEM_DB to one of yours",
            path.display(),
            owner_words(metadata.uid()),
            owner_words(me)
        )));
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "ledger {} is mode {}: other users can write it; chmod 600 {}",
            path.display(),
            mode_words(metadata.mode()),
            path.display()
        )));
    }
    Ok(())
}

/// Makes the ledger's folder (0700) when it is missing, and refuses one
/// that cannot be searched, that another user owns, or that others can
/// write without the sticky bit.
fn prepare_folder(path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let folder = super::folder_of(path);
    let metadata = match std::fs::metadata(folder) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(folder)
                .and_then(|()| std::fs::metadata(folder))
                .map_err(|error| {
                    refuse(format!(
                        "could not create ledger folder {}: {}; set --db or IDEM_DB",
                        folder.display(),
                        io_words(&error)
                    ))
                })?
        }
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(refuse(format!(
                "ledger folder {} cannot be reached: a folder above it cannot be searched ({}); give this user search (x) rights on each folder of the path, or set --db",
                folder.display(),
                io_words(&error)
            )))
        }
        Err(error) => {
            return Err(refuse(format!(
                "could not read ledger folder {}: {}; set --db or IDEM_DB",
                folder.display(),
                io_words(&error)
            )))
        }
    };
    if !metadata.is_dir() {
        return Err(refuse(format!(
            "ledger {} cannot exist: {} is not a folder; set --db or IDEM_DB",
            path.display(),
            folder.display()
        )));
    }
    if nix::unistd::access(folder, nix::unistd::AccessFlags::X_OK).is_err() {
        return Err(refuse(format!(
            "ledger folder {} cannot be searched (mode {}, owner {}); chmod u+x {}, or set --db",
            folder.display(),
            mode_words(metadata.mode()),
            owner_words(metadata.uid()),
            folder.display()
        )));
    }
    let me = nix::unistd::geteuid().as_raw();
    if metadata.uid() != me && metadata.uid() != 0 {
        return Err(refuse(format!(
            "ledger folder {} belongs to {}, who could replace the ledger in it; keep the ledger in a folder of your own (set --db or IDEM_DB)",
            folder.display(),
            owner_words(metadata.uid())
        )));
    }
    let sticky = metadata.mode() & 0o1000 != 0;
    if metadata.mode() & 0o022 != 0 && !sticky {
        return Err(refuse(format!(
            "ledger folder {} is mode {}: other users can replace the ledger in it; chmod 700 {}, or set --db",
            folder.display(),
            mode_words(metadata.mode()),
            folder.display()
        )));
    }
    Ok(())
}

/// Opens (creating with 0600) the ledger file; falls back to read-only
/// where the file or its file system refuses writes, so reading still works.
///
/// `O_NOFOLLOW` refuses a link, even a dangling one, and `O_NONBLOCK` keeps
/// a FIFO from hanging the open; what was opened is then judged by `fstat`
/// before SQLite sees it, so nothing (no `-journal`) appears beside a
/// device or a FIFO. A device is not even opened: `lstat` finds it first.
fn open_file(path: &Path) -> Result<(File, bool)> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => return Err(symbolic_link(path)),
        Ok(metadata) if !metadata.is_file() => return Err(not_regular(path, metadata.file_type())),
        _ => {}
    }
    let options = |write: bool, create: bool| {
        let mut options = OpenOptions::new();
        options
            .read(true)
            .write(write)
            .create_new(create)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK);
        options
    };
    let (opened, created) = match options(true, true).open(path) {
        Ok(file) => (Ok(file), true),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            (options(true, false).open(path), false)
        }
        Err(error) => (Err(error), false),
    };
    let (file, writable) = match opened {
        Ok(file) => (file, true),
        Err(error)
            if matches!(
                error.raw_os_error(),
                Some(libc_errno::EACCES) | Some(libc_errno::EROFS)
            ) && std::fs::symlink_metadata(path).is_ok() =>
        {
            let file = options(false, false)
                .open(path)
                .map_err(|error| open_error(path, &error))?;
            (file, false)
        }
        Err(error) => return Err(open_error(path, &error)),
    };
    let metadata = file.metadata().map_err(|error| open_error(path, &error))?;
    if !metadata.is_file() {
        return Err(not_regular(path, metadata.file_type()));
    }
    if created {
        // The umask may have taken bits away; never add any.
        file.set_permissions(Permissions::from_mode(0o600))
            .with_context(|| format!("could not set permissions of {}", path.display()))?;
    } else {
        check_owner_and_mode(path, &metadata)?;
    }
    Ok((file, writable))
}

/// The -wal and -shm files are part of the ledger (and a -journal while a
/// write is caught midway): SQLite opens them by name, so they are judged
/// like the ledger itself.
fn check_side_files(path: &Path) -> Result<()> {
    for suffix in ["-wal", "-shm", "-journal"] {
        let side = side_file(path, suffix);
        match std::fs::symlink_metadata(&side) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                return Err(refuse(format!(
                    "ledger file {} is a symbolic link, which idem never follows; remove the link (the ledger's own {suffix} file is a regular file)",
                    side.display()
                )))
            }
            Ok(metadata) if !metadata.is_file() => {
                return Err(not_regular(&side, metadata.file_type()))
            }
            Ok(metadata) => check_owner_and_mode(&side, &metadata)?,
            Err(_) => {}
        }
    }
    Ok(())
}

/// The file next to the ledger with `suffix` (`-wal`, `-shm`, `-journal`).
pub(crate) fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut side = path.as_os_str().to_owned();
    side.push(suffix);
    PathBuf::from(side)
}

/// How to read a ledger that cannot be written. SQLite reads a WAL-mode
/// file through its -shm index and must create that index when it is
/// missing, which a read-only file system refuses. Without a -wal file the
/// main file holds every commit, so `immutable=1` reads it creating nothing
/// (a writer that starts meanwhile writes to a new -wal, not to this file,
/// until it checkpoints).
pub(crate) fn read_only_uri(path: &Path) -> Result<PathBuf> {
    let wal_is_empty =
        std::fs::metadata(side_file(path, "-wal")).map_or(true, |wal| wal.len() == 0);
    if wal_is_empty {
        return Ok(sqlite_uri(path, "immutable=1"));
    }
    if side_file(path, "-shm").exists() {
        return Ok(sqlite_uri(path, "mode=ro"));
    }
    Err(Failure::new(
        IDEM_FAILED,
        format!(
            "ledger {} cannot be written and holds a write-ahead log (-wal) without its index (-shm), left by a crash; make it writable once (any idem command then folds the log in)",
            path.display()
        ),
    )
    .into())
}

/// A `file:` URI for `path` with `query`: every byte but the unreserved ones
/// is percent-encoded, so `?`, `#` and non-UTF-8 names survive.
pub(crate) fn sqlite_uri(path: &Path, query: &str) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut uri = b"file:".to_vec();
    if path.is_absolute() {
        uri.extend_from_slice(b"//");
    }
    for &byte in path.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            uri.push(byte);
        } else {
            uri.extend_from_slice(format!("%{byte:02X}").as_bytes());
        }
    }
    uri.push(b'?');
    uri.extend_from_slice(query.as_bytes());
    PathBuf::from(std::ffi::OsString::from_vec(uri))
}

mod libc_errno {
    pub const EACCES: i32 = nix::errno::Errno::EACCES as i32;
    pub const EROFS: i32 = nix::errno::Errno::EROFS as i32;
    pub const ELOOP: i32 = nix::errno::Errno::ELOOP as i32;
}

fn open_error(path: &Path, error: &std::io::Error) -> anyhow::Error {
    if error.raw_os_error() == Some(libc_errno::ELOOP) {
        // Made a link since it was looked at.
        return symbolic_link(path);
    }
    Failure::new(
        IDEM_FAILED,
        format!(
            "could not open ledger {}: {}; set --db or IDEM_DB",
            path.display(),
            io_words(error)
        ),
    )
    .into()
}

/// Tells whether the owner of the running head of key row `key_id` lives:
/// `locked` when its claim holds the key's byte of the lock file, else the
/// row's boot id (claims of an idem that did not lock).
type Judge<'a> = dyn FnMut(i64, bool, Option<&str>) -> rusqlite::Result<Option<bool>> + 'a;

/// The judge outside a claim: asks the kernel who holds the key's byte.
fn by_the_kernel(
    locks: &RunLocks,
) -> impl FnMut(i64, bool, Option<&str>) -> rusqlite::Result<Option<bool>> + '_ {
    move |key_id, locked, boot| judge_local_owner(locks, key_id, locked, boot)
}

/// Whether the owner of the running head of key row `key_id` lives, by
/// the key's columns `owner_lock` (`locked`) and `owner_boot` (`boot`).
pub(crate) fn judge_local_owner(
    locks: &RunLocks,
    key_id: i64,
    locked: bool,
    boot: Option<&str>,
) -> rusqlite::Result<Option<bool>> {
    if locked {
        locks
            .held(key_id)
            .map(Some)
            .map_err(|error| lock_file_error(locks, error))
    } else {
        Ok(unlocked_owner(boot))
    }
}

/// A claim made without the lock file lives, for all idem can tell, until
/// its host reboots.
fn unlocked_owner(boot: Option<&str>) -> Option<bool> {
    let this_boot = crate::host::boot_id();
    match boot {
        Some(boot) if !boot.is_empty() && !this_boot.is_empty() && boot != this_boot => Some(false),
        _ => None,
    }
}

fn lock_file_error(locks: &RunLocks, error: std::io::Error) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(
        format!(
            "could not use the lock file {}: {}",
            locks.path().display(),
            io_words(&error)
        )
        .into(),
    )
}

/// The key's head with its row id and its key's row id.
fn query_head(
    tx: &Connection,
    key: &str,
    judge: &mut Judge<'_>,
) -> rusqlite::Result<Option<(i64, Head)>> {
    let found = tx
        .prepare_cached(&format!(
            "SELECT {RUN_COLUMNS}, k.id, k.owner_lock, k.owner_boot, k.owner_pgid, j.checked_at
             FROM keys k JOIN runs r ON r.id = k.head LEFT JOIN jobs j ON j.id = r.job_id
             WHERE k.key = ?1"
        ))?
        .query_row([key], |row| {
            let (id, run) = run_from_row(row)?;
            let key_id: i64 = row.get(16)?;
            let locked = row.get::<_, Option<bool>>(17)?.unwrap_or(false);
            let boot: Option<String> = row.get(18)?;
            let pgid: Option<u32> = row.get(19)?;
            let checked: Option<i64> = row.get(20)?;
            Ok((id, run, key_id, locked, boot, pgid, checked))
        })
        .optional()?;
    let Some((id, run, key_id, locked, boot, pgid, checked)) = found else {
        return Ok(None);
    };
    let owner = match run.status {
        Status::Running => Some(Owner {
            host: run.host.clone(),
            pid: run.pid,
            pgid,
            alive: judge(key_id, locked, boot.as_deref())?,
        }),
        _ => None,
    };
    Ok(Some((
        id,
        Head {
            run,
            owner,
            read_at: None,
            checked_at: checked.map(timestamp).transpose()?,
        },
    )))
}

impl Ledger for SqliteLedger {
    fn head(&mut self, key: &str) -> Result<Option<Head>> {
        query_head(&self.conn, key, &mut by_the_kernel(&self.locks))
            .map(|head| head.map(|(_, head)| head))
            .map_err(|error| self.fail("read", &error))
    }

    fn claim(
        &mut self,
        key: &str,
        plan: &mut dyn FnMut(Option<&Head>, bool) -> Plan,
    ) -> Result<Option<Claim>> {
        self.write("claim a key in", true, |tx, locks| {
            let key_id: i64 = tx
                .prepare_cached(
                    "INSERT INTO keys (key) VALUES (?1)
                     ON CONFLICT (key) DO UPDATE SET key = excluded.key RETURNING id",
                )?
                .query_row([key], |row| row.get(0))?;
            // The byte is taken before the head is judged: whoever holds it
            // now is a live run of this key (claims take it only under the
            // writers' lock, which this transaction holds), and once taken
            // it says this run lives from before its claim commits.
            let hold: Option<Hold> = locks
                .take(key_id)
                .map_err(|error| lock_file_error(locks, error))?;
            let free = hold.is_some();
            let head = query_head(tx, key, &mut |_, locked, boot| {
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
            if plan.abandon_head {
                if let Some((id, _)) = &head {
                    mark_abandoned(tx, *id)?;
                }
            }
            let (Some(new), Some(hold)) = (plan.claim, hold) else {
                return Ok(None);
            };
            let fence: i64 = tx
                .prepare_cached("UPDATE fences SET last = last + 1 RETURNING last")?
                .query_row([], |row| row.get(0))?;
            let now = millis(Timestamp::now());
            let command = encode_command(&new.command);
            let job_id: i64 = tx
                .prepare_cached(
                    "INSERT INTO jobs (job, template, zone, host, command, shell, first_run,
                         last_run, last_status, checked_at, running)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, 'running', ?7, 1)
                     ON CONFLICT (job) DO UPDATE SET template = excluded.template,
                         zone = excluded.zone, host = excluded.host, command = excluded.command,
                         shell = excluded.shell, first_run = coalesce(first_run, ?7),
                         last_run = ?7, last_status = 'running', last_exit = NULL,
                         checked_at = ?7, running = running + 1
                     RETURNING id",
                )?
                .query_row(
                    params![
                        new.job.name,
                        new.job.template,
                        new.job.zone,
                        new.host,
                        command,
                        new.shell,
                        now
                    ],
                    |row| row.get(0),
                )?;
            tx.prepare_cached(
                "INSERT INTO runs (run_id, key_id, status, started_at, host, pid, command, shell,
                     recovered, job_id)
                 VALUES (?1, ?2, 'running', ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
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
            tx.prepare_cached(
                "UPDATE keys SET head = ?2, owner_lock = 1, owner_boot = NULL,
                     owner_pid_start = NULL, owner_pgid = NULL, owner_pgid_start = NULL
                 WHERE id = ?1",
            )?
            .execute(params![key_id, run])?;
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
        self.write("record an attempt in", false, |tx, _| {
            tx.execute(
                "INSERT INTO attempts (run, n, started_at) VALUES (?1, ?2, ?3)",
                params![claim.token, number, millis(Timestamp::now())],
            )?;
            tx.execute(
                "UPDATE runs SET attempts = ?2 WHERE id = ?1",
                params![claim.token, number],
            )?;
            tx.execute(
                "UPDATE keys SET owner_pgid = ?2 WHERE head = ?1",
                params![claim.token, pgid],
            )?;
            Ok(())
        })
    }

    fn attempt_finished(&mut self, claim: &Claim, attempt: &Attempt) -> Result<()> {
        self.write("record an attempt in", true, |tx, _| {
            upsert_attempt(tx, claim.token, attempt)
        })
    }

    fn finish(&mut self, claim: &Claim, last: Option<&Attempt>, outcome: &Outcome) -> Result<()> {
        let recorded = self.write("record the outcome in", true, |tx, _| {
            if let Some(attempt) = last {
                upsert_attempt(tx, claim.token, attempt)?;
            }
            let changed = tx.execute(
                "UPDATE runs SET status = ?2, exit_code = ?3, signal = ?4, finished_at = ?5,
                     attempts = max(attempts, ?6)
                 WHERE id = ?1 AND status = 'running'",
                params![
                    claim.token,
                    outcome.status.as_str(),
                    outcome.exit_code,
                    outcome.signal,
                    millis(Timestamp::now()),
                    last.map_or(0, |attempt| attempt.number)
                ],
            )?;
            release_owner(tx, claim.token)?;
            if changed == 1 {
                job_outcome(tx, claim.token, outcome.status, Some(outcome.exit_code))?;
            }
            Ok(changed == 1)
        })?;
        if !recorded {
            return Err(Failure::new(IDEM_FAILED, format!(
                "the outcome of run {} of key {} could not be recorded: another process marked it abandoned or removed it",
                claim.run_id, claim.key
            ))
            .into());
        }
        Ok(())
    }

    fn list(&mut self, filter: &ListFilter) -> Result<Vec<Run>> {
        let mut sql = format!("SELECT {RUN_COLUMNS} FROM {RUNS} WHERE 1");
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
                values.push(status.as_str().to_owned().into());
                marks.push(format!("?{}", values.len()));
            }
            sql.push_str(&format!(" AND r.status IN ({})", marks.join(", ")));
            if !filter.statuses.contains(&Status::Succeeded) {
                // The literal term lets the planner use the partial index.
                sql.push_str(" AND r.status <> 'succeeded'");
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
            let total: u64 = self.conn.query_row(
                "SELECT count(*) FROM runs r JOIN keys k ON k.id = r.key_id WHERE k.key = ?1",
                [key],
                |row| row.get(0),
            )?;
            let mut runs = self.conn.prepare(&format!(
                "SELECT {RUN_COLUMNS} FROM {RUNS}
                 WHERE k.key = ?1 ORDER BY r.started_at DESC, r.id DESC LIMIT ?2"
            ))?;
            // The tails stay on disk (they are the row's last columns, so
            // SQLite does not even read their overflow pages).
            let mut attempts = self.conn.prepare(
                "SELECT n, started_at, finished_at, exit_code, signal, timed_out, NULL, NULL, cut
                 FROM attempts WHERE run = ?1 ORDER BY n",
            )?;
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
        self.write("record hooks in", true, |tx, _| {
            let mut insert = tx.prepare_cached(
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
        self.write_or_rehearse("forget keys in", dry_run, |tx, locks| {
            forget_keys(tx, keys, purge, force, locks)
        })
    }

    fn prune(&mut self, before: Timestamp, dry_run: bool) -> Result<PruneReport> {
        self.write_or_rehearse("prune", dry_run, |tx, _| prune_runs(tx, before))
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
                "SELECT {RUN_COLUMNS}, k.head = r.id FROM {RUNS}
                 ORDER BY r.started_at, r.id"
            ))
            .map_err(read)?;
        let mut attempts = tx.prepare(ATTEMPTS_OF_RUN).map_err(read)?;
        let mut rows = runs.query([]).map_err(read)?;
        while let Some(row) = rows.next().map_err(read)? {
            let (id, run) = run_from_row(row).map_err(read)?;
            let head = row
                .get::<_, Option<bool>>(16)
                .map_err(read)?
                .unwrap_or(false);
            let run_attempts = attempts
                .query_map([id], attempt_from_row)
                .and_then(Iterator::collect)
                .map_err(read)?;
            sink(ExportedRun {
                run,
                attempts: run_attempts,
                head,
            })?;
        }
        Ok(())
    }

    fn import(&mut self, runs: &[ExportedRun]) -> Result<ImportReport> {
        self.write("import runs into", true, |tx, locks| {
            import_runs(tx, runs, locks)
        })
    }

    fn metrics(&mut self) -> Result<Vec<KeyMetrics>> {
        key_metrics(&self.conn).map_err(|error| self.fail("read", &error))
    }

    fn checked(&mut self, job: &str) -> Result<()> {
        self.write("stamp a job in", false, |tx, _| {
            tx.prepare_cached("UPDATE jobs SET checked_at = ?2 WHERE job = ?1")?
                .execute(params![job, millis(Timestamp::now())])?;
            Ok(())
        })
    }

    fn jobs(&mut self, glob: Option<&str>) -> Result<Vec<JobState>> {
        let result = (|| {
            let mut statement = self.conn.prepare(&format!(
                "SELECT id, {JOB_COLUMNS} FROM jobs WHERE ?1 IS NULL OR job GLOB ?1 ORDER BY job"
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
            // Runs recorded as running (few, and in the partial index):
            // their owners are asked of the kernel.
            let mut running = self.conn.prepare(
                "SELECT r.job_id, k.id, k.owner_lock, k.owner_boot FROM runs r
                 CROSS JOIN keys k ON k.id = r.key_id
                 WHERE r.status = 'running' AND r.status <> 'succeeded' AND k.head = r.id",
            )?;
            let rows = running.query_map([], |row| {
                Ok((
                    row.get::<_, Option<i64>>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, Option<bool>>(2)?.unwrap_or(false),
                    row.get::<_, Option<String>>(3)?,
                ))
            })?;
            for row in rows {
                let (job, key_id, locked, boot) = row?;
                let Some(&at) = job.and_then(|job| ids.get(&job)) else {
                    continue;
                };
                if judge_local_owner(&self.locks, key_id, locked, boot.as_deref())? != Some(false) {
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
                Err(error) => {
                    return Err(Failure::new(
                        IDEM_FAILED,
                        format!(
                            "could not use the lock file {}: {}",
                            self.locks.path().display(),
                            io_words(&error)
                        ),
                    )
                    .into())
                }
            }
            locks.names.push(name.clone());
        }
        Ok(Ok(locks))
    }
}

/// The columns of a job's figures, read by [`job_from_row`].
const JOB_COLUMNS: &str = "job, template, zone, host, command, shell, first_run, last_run, \
     last_status, last_exit, last_success, failures, running, succeeded, failed, abandoned, \
     checked_at, strip, ok_keys";

fn job_from_row(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<JobState> {
    let time = |index: usize| -> rusqlite::Result<Option<Timestamp>> {
        row.get::<_, Option<i64>>(at + index)?
            .map(timestamp)
            .transpose()
    };
    let count = |index: usize| -> rusqlite::Result<u64> {
        Ok(row.get::<_, Option<i64>>(at + index)?.unwrap_or(0).max(0) as u64)
    };
    Ok(JobState {
        job: row.get(at)?,
        template: row.get(at + 1)?,
        zone: row.get(at + 2)?,
        host: row.get(at + 3)?,
        command: decode_command(&row.get::<_, Option<Vec<u8>>>(at + 4)?.unwrap_or_default()),
        shell: row.get::<_, Option<bool>>(at + 5)?.unwrap_or(false),
        first_run: time(6)?,
        last_run: time(7)?,
        last_status: row
            .get::<_, Option<String>>(at + 8)?
            .and_then(|status| Status::parse(&status)),
        last_exit: row.get(at + 9)?,
        last_success: time(10)?,
        failures: count(11)?,
        runs: [count(12)?, count(13)?, count(14)?, count(15)?],
        checked_at: time(16)?,
        strip: row.get(at + 17)?,
        ok_keys: super::decode_keys(&row.get::<_, String>(at + 18)?),
        live: 0,
    })
}

fn status_index(status: Status) -> usize {
    Status::ALL
        .iter()
        .position(|each| *each == status)
        .unwrap_or(0)
}

fn save_job(tx: &Connection, id: i64, job: &JobState) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "UPDATE jobs SET first_run = ?2, last_run = ?3, last_status = ?4, last_exit = ?5,
             last_success = ?6, failures = ?7, running = ?8, succeeded = ?9, failed = ?10,
             abandoned = ?11, checked_at = ?12, strip = ?13, ok_keys = ?14, host = ?15,
             command = ?16, shell = ?17
         WHERE id = ?1",
    )?
    .execute(params![
        id,
        job.first_run.map(millis),
        job.last_run.map(millis),
        job.last_status.map(Status::as_str),
        job.last_exit,
        job.last_success.map(millis),
        job.failures as i64,
        job.runs[0] as i64,
        job.runs[1] as i64,
        job.runs[2] as i64,
        job.runs[3] as i64,
        job.checked_at.map(millis),
        job.strip,
        super::encode_keys(&job.ok_keys),
        job.host,
        encode_command(&job.command),
        job.shell
    ])?;
    Ok(())
}

fn load_job(tx: &Connection, id: i64) -> rusqlite::Result<JobState> {
    tx.prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"))?
        .query_row([id], |row| job_from_row(row, 0))
}

/// A running run of row `run` ended `status`: its job's figures follow, in
/// the transaction that records it.
fn job_outcome(
    tx: &Connection,
    run: i64,
    status: Status,
    exit: Option<i32>,
) -> rusqlite::Result<()> {
    let found: Option<(Option<i64>, String, i64)> = tx
        .prepare_cached(
            "SELECT r.job_id, k.key, r.started_at FROM runs r JOIN keys k ON k.id = r.key_id
             WHERE r.id = ?1",
        )?
        .query_row([run], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let Some((Some(job_id), key, started)) = found else {
        return Ok(());
    };
    let mut job = load_job(tx, job_id)?;
    job.runs[0] = job.runs[0].saturating_sub(1);
    job.runs[status_index(status)] += 1;
    job.outcome(&key, status, timestamp(started)?, exit, Timestamp::now());
    save_job(tx, job_id, &job)
}

/// The job of an imported run, made when new, with the run counted in.
fn import_job(tx: &Connection, run: &Run) -> rusqlite::Result<i64> {
    let job_id: i64 = tx
        .prepare_cached(
            "INSERT INTO jobs (job, template) VALUES (?1, ?1)
             ON CONFLICT (job) DO UPDATE SET job = excluded.job RETURNING id",
        )?
        .query_row([&run.job], |row| row.get(0))?;
    let mut job = load_job(tx, job_id)?;
    job.imported(run);
    save_job(tx, job_id, &job)?;
    Ok(job_id)
}

/// Takes the runs chosen by `filter` (over `runs`, with `?1` bound to
/// `value`) out of their jobs' counts, before they are deleted.
fn uncount_runs(tx: &Connection, filter: &str, value: i64) -> rusqlite::Result<()> {
    tx.execute(
        &format!(
            "UPDATE jobs SET running = max(jobs.running - c.running, 0),
                 succeeded = max(jobs.succeeded - c.succeeded, 0),
                 failed = max(jobs.failed - c.failed, 0),
                 abandoned = max(jobs.abandoned - c.abandoned, 0)
             FROM (SELECT job_id, sum(status = 'running') AS running,
                       sum(status = 'succeeded') AS succeeded, sum(status = 'failed') AS failed,
                       sum(status = 'abandoned') AS abandoned
                   FROM runs WHERE {filter} GROUP BY job_id) AS c
             WHERE jobs.id = c.job_id"
        ),
        [value],
    )?;
    Ok(())
}

fn upsert_attempt(tx: &Connection, run: i64, attempt: &Attempt) -> rusqlite::Result<()> {
    // An upsert: the attempt's start is recorded before its command runs,
    // but not when the child died before reaching exec; import adds new ones.
    tx.prepare_cached(
        "INSERT INTO attempts (run, n, started_at, finished_at, exit_code, signal, timed_out,
             stdout_tail, stderr_tail, cut)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (run, n) DO UPDATE SET finished_at = ?4, exit_code = ?5, signal = ?6,
             timed_out = ?7, stdout_tail = ?8, stderr_tail = ?9, cut = ?10",
    )?
    .execute(params![
        run,
        attempt.number,
        attempt.started_at.map_or(0, millis),
        attempt.finished_at.map(millis),
        attempt.exit_code,
        attempt.signal,
        attempt.timed_out,
        (!attempt.stdout_tail.is_empty()).then_some(&attempt.stdout_tail),
        (!attempt.stderr_tail.is_empty()).then_some(&attempt.stderr_tail),
        attempt.cut,
    ])?;
    Ok(())
}

const ATTEMPTS_OF_RUN: &str = "SELECT n, started_at, finished_at, exit_code, signal, timed_out, \
     stdout_tail, stderr_tail, cut FROM attempts WHERE run = ?1 ORDER BY n";

fn attempt_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Attempt> {
    Ok(Attempt {
        number: row.get(0)?,
        started_at: Some(timestamp(row.get(1)?)?),
        finished_at: row.get::<_, Option<i64>>(2)?.map(timestamp).transpose()?,
        exit_code: row.get(3)?,
        signal: row.get(4)?,
        timed_out: row.get(5)?,
        stdout_tail: row.get::<_, Option<Vec<u8>>>(6)?.unwrap_or_default(),
        stderr_tail: row.get::<_, Option<Vec<u8>>>(7)?.unwrap_or_default(),
        cut: row.get(8)?,
    })
}

impl SqliteLedger {
    /// Like `write`, but a dry run does the same work and rolls it back,
    /// so what it reports is exactly what a real run would do.
    fn write_or_rehearse<T>(
        &mut self,
        doing: &str,
        dry_run: bool,
        body: impl FnOnce(&rusqlite::Transaction<'_>, &RunLocks) -> rusqlite::Result<T>,
    ) -> Result<T> {
        if !dry_run {
            return self.write(doing, true, body);
        }
        let _guard = self.write_lock()?;
        let result = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let value = body(&tx, &self.locks)?;
            tx.rollback()?;
            Ok(value)
        })();
        result.map_err(|error| self.fail(doing, &error))
    }
}

/// Ends a head's `running` with an unknown outcome: its owner was found gone.
fn mark_abandoned(tx: &Connection, run: i64) -> rusqlite::Result<()> {
    let changed = tx
        .prepare_cached(
            "UPDATE runs SET status = 'abandoned', finished_at = ?2
             WHERE id = ?1 AND status = 'running'",
        )?
        .execute(params![run, millis(Timestamp::now())])?;
    if changed == 1 {
        job_outcome(tx, run, Status::Abandoned, None)?;
    }
    release_owner(tx, run)
}

fn release_owner(tx: &Connection, head: i64) -> rusqlite::Result<()> {
    tx.prepare_cached(&format!("UPDATE keys SET {RELEASE_OWNER} WHERE head = ?1"))?
        .execute([head])?;
    Ok(())
}

fn forget_keys(
    tx: &Connection,
    keys: &[String],
    purge: bool,
    force: bool,
    locks: &RunLocks,
) -> rusqlite::Result<ForgetReport> {
    let mut report = ForgetReport::default();
    let mut found = Vec::new();
    for key in keys {
        let key_id: Option<i64> = tx
            .query_row("SELECT id FROM keys WHERE key = ?1", [key], |row| {
                row.get(0)
            })
            .optional()?;
        let head = query_head(tx, key, &mut by_the_kernel(locks))?;
        let runs: u64 = match key_id {
            Some(id) => {
                tx.query_row("SELECT count(*) FROM runs WHERE key_id = ?1", [id], |row| {
                    row.get(0)
                })?
            }
            None => 0,
        };
        let running = head
            .as_ref()
            .filter(|(_, head)| head.run.status == Status::Running);
        let busy = running
            .and_then(|(_, head)| head.owner.clone())
            .filter(|owner| owner.alive == Some(true) || (owner.alive.is_none() && !force));
        let abandoned = running.filter(|_| busy.is_none()).map(|(id, _)| *id);
        report.keys.push(ForgottenKey {
            key: key.clone(),
            known: key_id.is_some(),
            head: head.as_ref().map(|(_, head)| head.run.status),
            abandoned: abandoned.is_some(),
            runs,
            busy,
        });
        if let Some(id) = key_id {
            found.push((id, abandoned));
        }
    }
    if report.busy().next().is_some() {
        return Ok(report);
    }
    for (key_id, abandoned) in found {
        if let Some(run) = abandoned {
            mark_abandoned(tx, run)?;
        }
        if purge {
            tx.execute(
                "DELETE FROM attempts WHERE run IN (SELECT id FROM runs WHERE key_id = ?1)",
                [key_id],
            )?;
            uncount_runs(tx, "key_id = ?1", key_id)?;
            tx.execute("DELETE FROM runs WHERE key_id = ?1", [key_id])?;
            tx.execute("DELETE FROM keys WHERE id = ?1", [key_id])?;
        } else {
            tx.execute(
                &format!("UPDATE keys SET head = NULL, {RELEASE_OWNER} WHERE id = ?1"),
                [key_id],
            )?;
        }
    }
    Ok(report)
}

fn prune_runs(tx: &Connection, before: Timestamp) -> rusqlite::Result<PruneReport> {
    // Finished before the cutoff (so started before it too, which lets the
    // start-time index find them), never running, never a key's head.
    tx.execute_batch("CREATE TEMP TABLE IF NOT EXISTS pruned (id INTEGER PRIMARY KEY)")?;
    tx.execute("DELETE FROM temp.pruned", [])?;
    let runs = tx.execute(
        "INSERT INTO temp.pruned (id)
         SELECT r.id FROM runs r
         WHERE r.started_at < ?1 AND r.finished_at < ?1 AND r.status != 'running'
           AND r.id NOT IN (SELECT head FROM keys WHERE head IS NOT NULL)",
        [millis(before)],
    )? as u64;
    let (attempts, output_bytes): (u64, u64) = tx.query_row(
        "SELECT count(*), coalesce(sum(length(stdout_tail)), 0) + coalesce(sum(length(stderr_tail)), 0)
         FROM attempts WHERE run IN (SELECT id FROM temp.pruned)",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    tx.execute(
        "DELETE FROM attempts WHERE run IN (SELECT id FROM temp.pruned)",
        [],
    )?;
    uncount_runs(tx, "id IN (SELECT id FROM temp.pruned) AND ?1", 1)?;
    tx.execute(
        "DELETE FROM runs WHERE id IN (SELECT id FROM temp.pruned)",
        [],
    )?;
    let keys = tx.execute(
        "DELETE FROM keys WHERE head IS NULL
           AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.key_id = keys.id)",
        [],
    )? as u64;
    tx.execute("DELETE FROM temp.pruned", [])?;
    Ok(PruneReport {
        runs,
        attempts,
        output_bytes,
        keys,
    })
}

fn insert_attempts(tx: &Connection, run: i64, attempts: &[Attempt]) -> rusqlite::Result<()> {
    attempts
        .iter()
        .try_for_each(|attempt| upsert_attempt(tx, run, attempt))
}

fn import_runs(
    tx: &Connection,
    runs: &[ExportedRun],
    locks: &RunLocks,
) -> rusqlite::Result<ImportReport> {
    let mut report = ImportReport::default();
    for item in runs {
        let run = &item.run;
        let existing: Option<(i64, i64, String)> = tx
            .prepare_cached("SELECT r.id, r.key_id, r.status FROM runs r WHERE r.run_id = ?1")?
            .query_row([run.run_id.as_bytes().as_slice()], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .optional()?;
        let finishes = |status: &str| status == "running" && run.status != Status::Running;
        let (id, key_id) = match existing {
            // A copy never overrides a run that goes on here.
            Some((_, _, status)) if finishes(&status) && owner_lives(tx, &run.key, locks)? => {
                report.unchanged += 1;
                continue;
            }
            Some((id, key_id, status)) if finishes(&status) => {
                // Exported again after it finished: take the outcome.
                tx.execute(
                    "UPDATE runs SET status = ?2, exit_code = ?3, signal = ?4, attempts = ?5,
                         finished_at = ?6
                     WHERE id = ?1",
                    params![
                        id,
                        run.status.as_str(),
                        run.exit_code,
                        run.signal,
                        run.attempts,
                        run.finished_at.map(millis)
                    ],
                )?;
                tx.execute("DELETE FROM attempts WHERE run = ?1", [id])?;
                insert_attempts(tx, id, &item.attempts)?;
                release_owner(tx, id)?;
                job_outcome(tx, id, run.status, run.exit_code)?;
                report.updated += 1;
                (id, key_id)
            }
            Some(_) => {
                report.unchanged += 1;
                continue;
            }
            None => {
                let key_id: i64 = tx
                    .prepare_cached(
                        "INSERT INTO keys (key) VALUES (?1)
                         ON CONFLICT (key) DO UPDATE SET key = excluded.key RETURNING id",
                    )?
                    .query_row([&run.key], |row| row.get(0))?;
                let job_id = import_job(tx, run)?;
                tx.prepare_cached(
                    "INSERT INTO runs (run_id, key_id, status, exit_code, signal, attempts,
                         started_at, finished_at, host, pid, command, shell, recovered, job_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                )?
                .execute(params![
                    run.run_id.as_bytes().as_slice(),
                    key_id,
                    run.status.as_str(),
                    run.exit_code,
                    run.signal,
                    run.attempts,
                    millis(run.started_at),
                    run.finished_at.map(millis),
                    run.host,
                    run.pid,
                    encode_command(&run.command),
                    run.shell,
                    run.recovered,
                    job_id
                ])?;
                let id = tx.last_insert_rowid();
                insert_attempts(tx, id, &item.attempts)?;
                report.added += 1;
                (id, key_id)
            }
        };
        // A running run's owner is not in this ledger, so it cannot decide.
        if !item.head || run.status == Status::Running {
            continue;
        }
        let (head_status, latest): (Option<String>, Option<i64>) = tx
            .prepare_cached(
                "SELECT (SELECT status FROM runs WHERE id = k.head),
                        (SELECT max(started_at) FROM runs WHERE key_id = k.id AND id != ?2)
                 FROM keys k WHERE k.id = ?1",
            )?
            .query_row(params![key_id, id], |row| Ok((row.get(0)?, row.get(1)?)))?;
        let newer = latest.is_none_or(|latest| latest < millis(run.started_at));
        if newer && head_status.as_deref() != Some("running") {
            tx.execute(
                &format!("UPDATE keys SET head = ?2, {RELEASE_OWNER} WHERE id = ?1"),
                params![key_id, id],
            )?;
            report.heads += 1;
        }
    }
    Ok(report)
}

/// Whether the running head of `key` is owned by a run that lives (or that
/// cannot be judged).
fn owner_lives(tx: &Connection, key: &str, locks: &RunLocks) -> rusqlite::Result<bool> {
    let head = query_head(tx, key, &mut by_the_kernel(locks))?;
    Ok(head
        .and_then(|(_, head)| head.owner)
        .is_some_and(|owner| owner.presumed_alive()))
}

fn key_metrics(conn: &Connection) -> rusqlite::Result<Vec<KeyMetrics>> {
    // One pass over the runs; `r.id` is the row of max(started_at) (a
    // SQLite bare column beside a single max()).
    let mut statement = conn.prepare(
        "WITH ok AS (
             SELECT key_id, max(started_at) AS started, max(finished_at) AS finished
             FROM runs WHERE status = 'succeeded' GROUP BY key_id
         )
         SELECT k.key, max(r.started_at), r.id, ok.finished,
             sum(r.status = 'running'), sum(r.status = 'succeeded'),
             sum(r.status = 'failed'), sum(r.status = 'abandoned'),
             sum(r.status IN ('failed', 'abandoned') AND r.started_at > coalesce(ok.started, -1))
         FROM keys k JOIN runs r ON r.key_id = k.id LEFT JOIN ok ON ok.key_id = k.id
         GROUP BY k.id ORDER BY k.key",
    )?;
    let mut last = conn.prepare(&format!("SELECT {RUN_COLUMNS} FROM {RUNS} WHERE r.id = ?1"))?;
    let rows = statement.query_map([], |row| {
        Ok((
            KeyMetrics {
                key: row.get(0)?,
                last_run: None,
                last_success: row.get::<_, Option<i64>>(3)?.map(timestamp).transpose()?,
                consecutive_failures: row.get(8)?,
                runs: [row.get(4)?, row.get(5)?, row.get(6)?, row.get(7)?],
            },
            row.get::<_, i64>(2)?,
        ))
    })?;
    let mut metrics = Vec::new();
    for row in rows {
        let (mut key, id) = row?;
        key.last_run = last
            .query_row([id], |row| Ok(run_from_row(row)?.1))
            .optional()?;
        metrics.push(key);
    }
    Ok(metrics)
}
