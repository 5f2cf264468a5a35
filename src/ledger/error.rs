//! The ledger's own failures (exit 125): each kind of fault once, with its
//! words, its fix and whether it may pass by itself, so that both backends
//! say a fault the same way and `main` maps it through [`Failure`].

use std::fmt;

use crate::exit::{Failure, IDEM_FAILED};

/// Why another run has the key now, said after "could not be recorded:".
const LEASE_RAN_OUT: &str = "its lease ran out and another run took the key over";

/// The tail of every fault that a person's hand or a damaged disk made.
const DAMAGED: &str = "the ledger was changed by hand or damaged; run `idem doctor`";

/// A failure of the ledger itself.
#[derive(Debug)]
pub(crate) enum LedgerError {
    /// `doing` the ledger failed: "could not read ledger X: ...".
    Could {
        doing: String,
        ledger: String,
        why: Why,
    },
    /// The file is another program's SQLite database.
    NotALedger { ledger: String },
    /// The schema is ahead of what this idem knows.
    Newer {
        ledger: String,
        version: i64,
        latest: i64,
    },
    /// The schema is older than this idem reads, and the reader, who is
    /// not its owner, may not migrate it.
    OlderForReader {
        ledger: String,
        version: i64,
        latest: i64,
        owner: String,
    },
    /// Another process held the writers' lock past the wait.
    StayedLocked { ledger: String, secs: u64 },
    /// A run of an older idem still goes, which the migration to `schema`
    /// would leave unable to record its outcome.
    OlderRunGoing {
        ledger: String,
        key: String,
        schema: i64,
    },
    /// Another session held a key's row past the wait.
    RowHeld {
        key: String,
        ledger: String,
        secs: u64,
    },
    /// The lock file that tells whether a run lives cannot be used.
    LockFile { file: String, why: String },
    /// The run's outcome found the key in other hands.
    OutcomeLost {
        run: String,
        key: String,
        taker: Taker,
    },
    /// The run's claim passed to another run.
    ClaimLost { run: String, key: String },
    /// The server cannot be reached.
    Unreachable { ledger: String, why: String },
    /// The URL cannot be parsed.
    BadUrl { url: String, why: String },
    /// The user may not create idem's schema.
    CannotCreateSchema {
        schema: &'static str,
        ledger: String,
        why: String,
    },
    /// What is at (or around) the ledger's path cannot be used safely.
    Refused(Refusal),
}

/// What went wrong with the ledger, after "could not DO ledger X:".
#[derive(Debug)]
pub(crate) enum Why {
    /// A stored value idem cannot read, in the words of its reader.
    Unreadable(String),
    /// A stored time out of range.
    UnreadableTime(i64),
    DiskFull,
    ReadOnly,
    /// The file is no SQLite database at all.
    NotSqlite,
    Corrupt,
    /// Another process held the ledger past the wait: it may pass.
    Busy {
        secs: u64,
    },
    /// Permissions refused the file, in SQLite's words.
    Permission(String),
    /// The disk failed, in SQLite's words.
    Io(String),
    /// Memory ran out under SQLite (a map or an allocation refused).
    Memory,
    /// A fault that may pass by itself (a lost connection), in its own words.
    Passing(String),
    /// Anything else, in its own words.
    Said(String),
}

/// Who has the key now that the run's outcome could not be recorded.
#[derive(Debug)]
pub(crate) enum Taker {
    /// Another process marked the run abandoned or removed it.
    Abandoner,
    /// The lease ran out and another run took the key over.
    Lease,
}

/// A ledger path idem refuses before opening it: a refusal changes nothing.
#[derive(Debug)]
pub(crate) enum Refusal {
    NotAFolder {
        ledger: String,
        folder: String,
    },
    NotRegular {
        ledger: String,
        kind: &'static str,
    },
    SymbolicLink {
        ledger: String,
    },
    SideFileLink {
        file: String,
        suffix: &'static str,
    },
    ForeignOwner {
        ledger: String,
        owner: String,
        me: String,
    },
    OpenToOthers {
        ledger: String,
        mode: String,
    },
    /// The ledger's folder cannot hold a ledger safely.
    Folder {
        folder: String,
        fault: FolderFault,
    },
    /// A read-only ledger whose log cannot be read without its index.
    WalWithoutIndex {
        ledger: String,
    },
    Unopenable {
        ledger: String,
        why: String,
    },
}

/// What is wrong with the ledger's folder.
#[derive(Debug)]
pub(crate) enum FolderFault {
    /// Missing where it is not the default location, which alone is made:
    /// a `--db` into a folder that is not there is more often a typo than
    /// a wish for a new folder.
    Missing,
    NotCreated(String),
    /// A folder above it cannot be searched.
    Unreachable(String),
    Unreadable(String),
    NotSearchable {
        mode: String,
        owner: String,
        /// The folder is the user's own, who can give itself the right.
        mine: bool,
    },
    ForeignOwner {
        owner: String,
    },
    OpenToOthers {
        mode: String,
    },
}

impl LedgerError {
    /// Whether the cause may pass by itself, worth riding out.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            LedgerError::StayedLocked { .. } | LedgerError::OlderRunGoing { .. } => true,
            LedgerError::Could { why, .. } => matches!(why, Why::Busy { .. } | Why::Passing(_)),
            _ => false,
        }
    }
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerError::Could { doing, ledger, why } => {
                write!(f, "could not {doing} ledger {ledger}: {why}")
            }
            LedgerError::NotALedger { ledger } => write!(
                f,
                "{ledger} is not an idem ledger (it is another program's SQLite database); move it aside or set --db"
            ),
            LedgerError::Newer { ledger, version, latest } => write!(
                f,
                "ledger {ledger} was written by a newer idem (schema {version}, this idem knows {latest}); upgrade idem"
            ),
            LedgerError::OlderForReader { ledger, version, latest, owner } => write!(
                f,
                "ledger {ledger} has schema {version}, older than this idem reads ({latest}); an `idem run` as its owner, {owner}, migrates it"
            ),
            LedgerError::OlderRunGoing { ledger, key, schema } => write!(
                f,
                "ledger {ledger} is in use by an older idem's run of {key}; this idem moves the ledger to schema {schema} once that run ends: try again then"
            ),
            LedgerError::StayedLocked { ledger, secs } => write!(
                f,
                "ledger {ledger} stayed locked by another process for {secs}s; see `idem doctor`"
            ),
            LedgerError::RowHeld { key, ledger, secs } => write!(
                f,
                "could not claim key {key} in ledger {ledger}: another session held its row for {secs}s; look for a stuck one in pg_stat_activity"
            ),
            LedgerError::LockFile { file, why } => {
                write!(f, "could not use the lock file {file}: {why}")
            }
            LedgerError::OutcomeLost { run, key, taker } => write!(
                f,
                "the outcome of run {run} of key {key} could not be recorded: {taker}"
            ),
            LedgerError::ClaimLost { run, key } => {
                write!(f, "run {run} of key {key} lost its claim: {LEASE_RAN_OUT}")
            }
            LedgerError::Unreachable { ledger, why } => write!(
                f,
                "could not connect to ledger {ledger}: {why}; check the URL and that the server is up"
            ),
            LedgerError::BadUrl { url, why } => write!(
                f,
                "invalid postgres URL {url}: {why}; see docs/OPERATIONS.md, \"A shared ledger on PostgreSQL\""
            ),
            LedgerError::CannotCreateSchema { schema, ledger, why } => write!(
                f,
                "could not create schema {schema} in ledger {ledger}: {why}; let the database's owner run idem once, or grant CREATE on the database"
            ),
            LedgerError::Refused(refusal) => refusal.fmt(f),
        }
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Unreadable(what) => {
                write!(f, "a stored value cannot be read ({what}): {DAMAGED}")
            }
            Why::UnreadableTime(value) => {
                write!(f, "a stored time cannot be read ({value}): {DAMAGED}")
            }
            Why::DiskFull => f.write_str("the disk is full; free some space"),
            Why::ReadOnly => f.write_str(
                "the ledger is read-only (its file or file system refuses writes); make it writable or set --db",
            ),
            Why::NotSqlite => f.write_str(
                "not an idem ledger (the file is not a SQLite database); move it aside or set --db",
            ),
            Why::Corrupt => f.write_str("the ledger is corrupt; run `idem doctor`, then move it aside"),
            Why::Busy { secs } => {
                write!(f, "the ledger stayed locked by another process for {secs}s")
            }
            Why::Permission(error) => write!(f, "{error}; check the permissions or set --db"),
            Why::Io(error) => write!(f, "i/o error ({error}); check the disk"),
            Why::Memory => f.write_str(
                "out of memory (raise ulimit -v or the memory limit of the service or cgroup)",
            ),
            Why::Passing(text) | Why::Said(text) => f.write_str(text),
        }
    }
}

impl fmt::Display for Taker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Taker::Abandoner => "another process marked it abandoned or removed it",
            Taker::Lease => LEASE_RAN_OUT,
        })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotAFolder { ledger, folder } => write!(
                f,
                "ledger {ledger} cannot exist: {folder} is not a folder; set --db or IDEM_DB"
            ),
            Refusal::NotRegular { ledger, kind } => write!(
                f,
                "ledger {ledger} is not a regular file (it is {kind}); set --db or IDEM_DB to a ledger file"
            ),
            Refusal::SymbolicLink { ledger } => write!(
                f,
                "ledger {ledger} is a symbolic link, which idem never follows (another user could aim it at any file); give the real path with --db or IDEM_DB"
            ),
            Refusal::SideFileLink { file, suffix } => write!(
                f,
                "ledger file {file} is a symbolic link, which idem never follows; remove the link (the ledger's own {suffix} file is a regular file)"
            ),
            Refusal::ForeignOwner { ledger, owner, me } => write!(
                f,
                "ledger {ledger} belongs to {owner}, not to {me}: idem uses only a ledger of its own user; set --db or IDEM_DB to one of yours"
            ),
            Refusal::OpenToOthers { ledger, mode } => write!(
                f,
                "ledger {ledger} is mode {mode}: other users can write it; chmod 600 {ledger}"
            ),
            Refusal::WalWithoutIndex { ledger } => write!(
                f,
                "ledger {ledger} cannot be written and holds a write-ahead log (-wal) without its index (-shm), left by a crash; make it writable once (any idem command then folds the log in)"
            ),
            Refusal::Unopenable { ledger, why } => {
                write!(f, "could not open ledger {ledger}: {why}; set --db or IDEM_DB")
            }
            Refusal::Folder { folder, fault } => folder_refusal(folder, fault, f),
        }
    }
}

/// The refusals of the ledger's folder.
fn folder_refusal(folder: &str, fault: &FolderFault, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match fault {
        FolderFault::Missing => write!(
            f,
            "ledger folder {folder} does not exist; make it (mkdir -p {}) or set --db or IDEM_DB to a file in a folder that exists",
            shell_word(folder)
        ),
        FolderFault::NotCreated(why) => write!(
            f,
            "could not create ledger folder {folder}: {why}; set --db or IDEM_DB"
        ),
        FolderFault::Unreachable(why) => write!(
            f,
            "ledger folder {folder} cannot be reached: a folder above it cannot be searched ({why}); give this user search (x) rights on each folder of the path, or set --db"
        ),
        FolderFault::Unreadable(why) => write!(
            f,
            "could not read ledger folder {folder}: {why}; set --db or IDEM_DB"
        ),
        FolderFault::NotSearchable { mode, owner, mine: true } => write!(
            f,
            "ledger folder {folder} cannot be searched (mode {mode}, owner {owner}); chmod u+x {folder}, or set --db"
        ),
        FolderFault::NotSearchable { mode, owner, mine: false } => write!(
            f,
            "you cannot search folder {folder} (mode {mode}, owner {owner}), which holds the ledger: ask its owner, or run as a user who can"
        ),
        FolderFault::ForeignOwner { owner } => write!(
            f,
            "ledger folder {folder} belongs to {owner}, who could replace the ledger in it; keep the ledger in a folder of your own (set --db or IDEM_DB)"
        ),
        FolderFault::OpenToOthers { mode } => write!(
            f,
            "ledger folder {folder} is mode {mode}: other users can replace the ledger in it; chmod 700 {folder}, or set --db"
        ),
    }
}

/// `text` as one word of a shell command a person may paste.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

impl From<LedgerError> for Failure {
    fn from(error: LedgerError) -> Failure {
        let failure = Failure::new(IDEM_FAILED, error.to_string());
        if error.is_transient() {
            failure.transient()
        } else {
            failure
        }
    }
}

impl From<Refusal> for LedgerError {
    fn from(refusal: Refusal) -> LedgerError {
        LedgerError::Refused(refusal)
    }
}

impl From<LedgerError> for anyhow::Error {
    fn from(error: LedgerError) -> anyhow::Error {
        Failure::from(error).into()
    }
}

impl From<Refusal> for anyhow::Error {
    fn from(refusal: Refusal) -> anyhow::Error {
        LedgerError::Refused(refusal).into()
    }
}
