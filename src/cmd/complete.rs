//! `idem __complete`: what the completion scripts ask of the ledger, at
//! each press of TAB. It answers at once or not at all: it reads the
//! SQLite file read-only by a range of the keys' unique index (a million
//! keys cost one index seek), creates nothing, and prints nothing but
//! candidates, so a missing or broken ledger only means no candidates.

use std::ffi::OsStr;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::cli::Completable;
use crate::ledger::Location;

/// At most this many candidates: a shell shows no more usefully.
const LIMIT: u32 = 200;

/// Prints the candidates, one a line; always exits 0.
pub fn run(what: Completable, prefix: &str, db: Option<&OsStr>) -> u8 {
    let found = match (what, Location::resolve(db)) {
        (Completable::Keys, Ok(Location::Sqlite(path))) => keys(&path, prefix),
        // A shared ledger is a network round trip away: no candidates
        // rather than a pause at every TAB.
        _ => Vec::new(),
    };
    let mut text = String::new();
    for key in found {
        text.push_str(&key);
        text.push('\n');
    }
    use std::io::Write;
    let _ = std::io::stdout().write_all(text.as_bytes());
    crate::exit::SUCCESS
}

/// Keys starting with `prefix`, in order. Keys holding a line break or a
/// hidden character are left out: a shell would break them in two.
fn keys(path: &Path, prefix: &str) -> Vec<String> {
    let Some(connection) = open(path) else {
        return Vec::new();
    };
    // [prefix, prefix + U+10FFFF): the keys' unique index compares bytes,
    // and no UTF-8 character sorts after the largest one.
    let upper = format!("{prefix}\u{10FFFF}");
    let rows = connection
        .prepare("SELECT key FROM keys WHERE key >= ?1 AND key < ?2 ORDER BY key LIMIT ?3")
        .and_then(|mut statement| {
            statement
                .query_map(rusqlite::params![prefix, upper, LIMIT], |row| {
                    row.get::<_, String>(0)
                })?
                .collect::<Result<Vec<_>, _>>()
        });
    rows.unwrap_or_default()
        .into_iter()
        .filter(|key| !key.chars().any(crate::key::is_hidden))
        .collect()
}

/// The ledger read-only, creating no file, as the ledger itself reads one
/// it cannot write (see [`crate::ledger::read_only_uri`]).
fn open(path: &Path) -> Option<Connection> {
    if std::fs::symlink_metadata(path).map_or(true, |meta| !meta.is_file()) {
        return None;
    }
    let connection = Connection::open_with_flags(
        crate::ledger::read_only_uri(path).ok()?,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW,
    )
    .ok()?;
    // A writer holding the file: give up quickly rather than stall TAB.
    connection
        .busy_timeout(std::time::Duration::from_millis(20))
        .ok()?;
    Some(connection)
}
