//! Where a ledger lives (`--db`, `IDEM_DB`, the data folder) and how it is
//! opened: for `run`, created when missing; for readers, only when there.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{error, Ledger, PostgresLedger, SqliteLedger};
use crate::exit::Failure;

/// Where the ledger lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Location {
    /// `--db`, else `$IDEM_DB` (clap folds both into `db`), else the default
    /// file under the user's data directory.
    pub fn resolve(db: Option<&OsStr>) -> Result<Location> {
        match db {
            Some(db) if db.is_empty() => Err(Failure::usage(
                "--db is empty; give a file path or a postgres:// URL (or unset IDEM_DB)",
            )
            .into()),
            Some(db) => {
                let bytes = db.as_bytes();
                if bytes.starts_with(b"postgres://") || bytes.starts_with(b"postgresql://") {
                    let url = db.to_str().ok_or_else(|| {
                        Failure::usage("--db holds a URL that is not UTF-8; write it in UTF-8")
                    })?;
                    Ok(Location::Postgres(url.to_owned()))
                } else {
                    Location::refuse_unknown_scheme(db)?;
                    Location::refuse_mistyped_scheme(db)?;
                    Ok(Location::Sqlite(PathBuf::from(db)))
                }
            }
            None => {
                let folder = default_folder().ok_or_else(|| {
                    Failure::usage("no data directory is known for this user; set --db or IDEM_DB")
                })?;
                Ok(Location::Sqlite(folder.join("ledger.db")))
            }
        }
    }

    /// Whether `folder` is the default ledger's, the one folder `run`
    /// makes when it is missing.
    pub fn is_default_folder(folder: &Path) -> bool {
        default_folder().is_some_and(|default| default == folder)
    }

    /// The location for people: a password in a URL is masked.
    pub fn display(&self) -> String {
        match self {
            Location::Sqlite(path) => path.display().to_string(),
            Location::Postgres(url) => crate::url::masked(url),
        }
    }
}

/// The default ledger's folder: `idem` in the user's data folder.
fn default_folder() -> Option<PathBuf> {
    dirs::data_dir().map(|data| data.join("idem"))
}

/// Opens the ledger for `run`, creating and migrating it when needed.
pub fn open(location: &Location) -> Result<Box<dyn Ledger>> {
    match location {
        Location::Sqlite(path) => Ok(Box::new(SqliteLedger::open(path)?)),
        Location::Postgres(url) => Ok(Box::new(PostgresLedger::open(url, &location.display())?)),
    }
}

/// [`open`] for a run of `key` (job `job`), which reads the key's head and
/// the job's pause next: a shared ledger reads them with its first round
/// trip, beside the session's settings.
pub fn open_for_run(location: &Location, key: &str, job: &str) -> Result<Box<dyn Ledger>> {
    match location {
        Location::Postgres(url) => Ok(Box::new(PostgresLedger::open_for_run(
            url,
            &location.display(),
            key,
            job,
        )?)),
        _ => open(location),
    }
}

/// Opens an existing ledger for reading; `None` when a SQLite file does not
/// exist yet (a fresh machine has simply run nothing).
pub fn open_existing(location: &Location) -> Result<Option<Box<dyn Ledger>>> {
    match location {
        // A missing file is a ledger nothing has run under yet; but a path
        // that cannot name a file at all (its folder is a file) is a typo.
        // Anything at the path, a dangling link included, is judged by open.
        Location::Sqlite(path) if nothing_at(path) => match std::fs::metadata(folder_of(path)) {
            Ok(folder) if !folder.is_dir() => Err(error::Refusal::NotAFolder {
                ledger: path.display().to_string(),
                folder: folder_of(path).display().to_string(),
            }
            .into()),
            _ => Ok(None),
        },
        _ => open(location).map(Some),
    }
}

/// Opens an existing ledger for a reader (`status`, `ledger list|show|
/// metrics`), whoever owns it; `None` as [`open_existing`] says. The
/// user's own SQLite ledger opens as for `run`, which migrates it and
/// makes its -shm index; another user's opens read-only, creating and
/// refusing nothing a run's checks guard (see
/// [`SqliteLedger::open_reader`]).
pub fn open_to_read(location: &Location) -> Result<Option<Box<dyn Ledger>>> {
    use std::os::unix::fs::MetadataExt;
    let Location::Sqlite(path) = location else {
        return open_existing(location);
    };
    // Another user's file, or one behind a folder this user cannot
    // search; the rest (the user's own, nothing, a folder that is a
    // file) is judged as ever.
    let others = match std::fs::symlink_metadata(path) {
        Ok(file) => file.uid() != nix::unistd::geteuid().as_raw(),
        Err(error) => error.kind() == std::io::ErrorKind::PermissionDenied,
    };
    if !others {
        return open_existing(location);
    }
    let opened = SqliteLedger::open_reader(path)?;
    Ok(opened.map(|ledger| Box::new(ledger) as Box<dyn Ledger>))
}

/// Whether nothing at all is at `path` (not even a link).
fn nothing_at(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound)
}

/// The folder a SQLite ledger lives in, for messages.
pub fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}
