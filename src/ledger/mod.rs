//! The ledger: where runs, their attempts and each key's deciding run live.
//!
//! The run logic talks to one small trait, [`Ledger`]; `sqlite.rs` stores a
//! ledger in a local file and a PostgreSQL backend can slot in beside it.
//! `idem doctor` reads a ledger through another, [`Inspect`], which changes
//! nothing.
//!
//! Every key points at the run that decides what the next `idem run` does
//! (its latest run, or none after `ledger forget`). Runs keep their attempts.

/// A select list whose columns are read by name: `Cols::X.at()` is the
/// place of column X in `Cols::LIST`, and a list that follows it in the
/// same SELECT starts at `Cols::COUNT`.
macro_rules! select_list {
    ($(#[$meta:meta])* $vis:vis enum $name:ident {
        $first:ident = $first_sql:literal $(, $col:ident = $sql:literal)* $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        $vis enum $name {
            $first $(, $col)*
        }

        #[allow(dead_code)]
        impl $name {
            $vis const LIST: &'static str = concat!($first_sql $(, ", ", $sql)*);
            $vis const COUNT: usize = [$name::$first $(, $name::$col)*].len();

            $vis const fn at(self) -> usize {
                self as usize
            }
        }
    };
}

mod columns;
mod error;
mod inspect;
pub mod line;
mod postgres;
mod rules;
pub mod runlock;
mod schema;
mod sqlite;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use anyhow::Result;
use jiff::Timestamp;
use uuid::Uuid;

/// The status of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Running,
    Succeeded,
    Failed,
    Abandoned,
}

use crate::exit::Failure;
pub(crate) use inspect::{Inspect, Schema};
pub(crate) use postgres::client::Client as PostgresClient;
/// A PostgreSQL error in words, shared with `idem doctor`, which words the
/// errors of its own questions to the server (the role's rights) as the
/// ledger words its own.
pub(crate) use postgres::connect::describe;
pub(crate) use postgres::PostgresInspector;
pub use postgres::PostgresLedger;
/// How a SQLite ledger is read without creating anything beside it, shared
/// with key completion, which asks a ledger for keys as TAB is pressed on a
/// connection of its own.
pub(crate) use sqlite::path::read_only_uri;
/// The files beside a SQLite ledger and the room left on its disk, shared
/// with `idem doctor`, which judges the same side files and the same full
/// disk as the ledger refuses or fails on.
pub(crate) use sqlite::path::{disk_full, free_bytes, side_file};
pub(crate) use sqlite::SqliteInspector;
pub use sqlite::SqliteLedger;

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Abandoned => "abandoned",
        }
    }

    pub fn parse(text: &str) -> Option<Status> {
        Some(match text {
            "running" => Status::Running,
            "succeeded" => Status::Succeeded,
            "failed" => Status::Failed,
            "abandoned" => Status::Abandoned,
            _ => return None,
        })
    }
}

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
                    Ok(Location::Sqlite(PathBuf::from(db)))
                }
            }
            None => {
                let data = dirs::data_dir().ok_or_else(|| {
                    Failure::usage("no data directory is known for this user; set --db or IDEM_DB")
                })?;
                Ok(Location::Sqlite(data.join("idem").join("ledger.db")))
            }
        }
    }

    /// The location for people: a password in a URL is masked.
    pub fn display(&self) -> String {
        match self {
            Location::Sqlite(path) => path.display().to_string(),
            Location::Postgres(url) => mask_password(url),
        }
    }
}

fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let tail = mask_password_option(tail);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => format!("{scheme}://{authority}{tail}"),
        },
        None => format!("{scheme}://{authority}{tail}"),
    }
}

/// Masks a `password=` option in a URL's query.
fn mask_password_option(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let options: Vec<String> = query
        .split('&')
        .map(|option| match option.split_once('=') {
            Some(("password", _)) => "password=***".to_owned(),
            _ => option.to_owned(),
        })
        .collect();
    format!("{path}?{}", options.join("&"))
}

/// Opens the ledger for `run`, creating and migrating it when needed.
pub fn open(location: &Location) -> Result<Box<dyn Ledger>> {
    match location {
        Location::Sqlite(path) => Ok(Box::new(SqliteLedger::open(path)?)),
        Location::Postgres(url) => Ok(Box::new(PostgresLedger::open(url, &location.display())?)),
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

/// Whether nothing at all is at `path` (not even a link).
fn nothing_at(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound)
}

/// Who owns a running key, and whether it still lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Where and as which pid idem ran the claim: for people to read, never
    /// to decide (a pid means nothing in another PID namespace).
    pub host: String,
    pub pid: u32,
    /// The process group of the command's current attempt, once spawned.
    pub pgid: Option<u32>,
    /// Whether the run lives, as the ledger knows it: by the kernel lock the
    /// run holds (a local ledger) or by its lease (a shared one). `None`:
    /// it cannot be judged (a claim of an idem that did not lock), so it is
    /// presumed alive until a person frees it (`ledger forget --force`).
    pub alive: Option<bool>,
}

impl Owner {
    /// Whether a run must be presumed to go on: alive, or not judged.
    pub fn presumed_alive(&self) -> bool {
        self.alive != Some(false)
    }
}

/// One run, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub key: String,
    /// The job the run belongs to (`--job`, else the key as typed).
    pub job: String,
    /// The run decides its key (it is the key's head).
    pub head: bool,
    pub run_id: Uuid,
    pub status: Status,
    /// The code idem reported for the run: the command's, 124, or 128+N.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub attempts: u32,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub host: String,
    pub pid: u32,
    pub command: Vec<OsString>,
    pub shell: bool,
    /// The previous run of the key was abandoned when this one started.
    pub recovered: bool,
}

impl Run {
    pub fn fingerprint(&self) -> [u8; 32] {
        crate::key::fingerprint(&self.command, self.shell)
    }
}

/// A run with its attempts.
pub type RunAttempts = (Run, Vec<Attempt>);

/// A key's deciding run, with its owner while it is running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub run: Run,
    pub owner: Option<Owner>,
    /// The time by the clock that stamped the run, when that is not this
    /// host's (a shared database's `now()`), so a TTL is judged on one clock.
    pub read_at: Option<Timestamp>,
    /// When the head run's job was last called, by the ledger's clock (so
    /// a skip can tell whether its stamp is due).
    pub checked_at: Option<Timestamp>,
}

/// One attempt of a run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attempt {
    pub number: u32,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
    /// The output was longer than what was kept: the tails lack its start.
    pub cut: bool,
}

/// A hook that ran for a run (`--on-failure`, `--on-recovery`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRun {
    /// `failure`, `recovery` or `slow`.
    pub event: String,
    /// Its exit code (128+N for signal N); `None`: it could not start.
    pub exit_code: Option<i32>,
    pub at: Timestamp,
}

/// An attempt's kept output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tails {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The output was longer than what was kept: its start is missing.
    pub cut: bool,
}

/// What a claim writes about the new run.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub run_id: Uuid,
    pub command: Vec<OsString>,
    pub shell: bool,
    pub host: String,
    pub pid: u32,
    pub recovered: bool,
    /// Shared ledgers: how long the claim lives without a heartbeat.
    pub lease: std::time::Duration,
    /// The job the run belongs to.
    pub job: JobInfo,
}

/// What a run tells the ledger about its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub name: String,
    /// The key as typed, before expansion: its finest placeholder is the
    /// job's period.
    pub template: String,
    /// The IANA time zone the key was expanded in (`None`: no time
    /// placeholder, or a zone without a name).
    pub zone: Option<String>,
}

/// A job as `idem status` and `metrics` see it: figures kept up to date by
/// every claim and outcome, so reading them costs one row per job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobState {
    pub job: String,
    pub template: String,
    pub zone: Option<String>,
    /// The host of its latest run (for a `{host}` template).
    pub host: Option<String>,
    pub command: Vec<OsString>,
    pub shell: bool,
    pub first_run: Option<Timestamp>,
    pub last_run: Option<Timestamp>,
    pub last_status: Option<Status>,
    pub last_exit: Option<i32>,
    pub last_success: Option<Timestamp>,
    /// Failed and abandoned runs since its latest success, across its keys.
    pub failures: u64,
    /// Runs by status, in the order of [`Status::ALL`].
    pub runs: [u64; 4],
    /// When it was last called: a claim, or a skip (stamped at most once a
    /// minute).
    pub checked_at: Option<Timestamp>,
    /// Its latest outcomes, oldest first: `s` succeeded, `f` failed, `a`
    /// abandoned.
    pub strip: String,
    /// Its latest keys that succeeded, newest first.
    pub ok_keys: Vec<String>,
    /// Runs of the job recorded as running whose owner lives.
    pub live: u64,
}

/// How many outcomes a job's strip keeps, and how many succeeded keys.
pub const STRIP_MARKS: usize = 20;
pub const OK_KEYS: usize = 16;

/// A skip within this long of the job's last stamp writes nothing: the
/// stamp tells a job cron still calls from one it stopped calling, which
/// needs no finer grain, and the skip path stays a read.
pub const CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl JobState {
    /// The job's figures after one more outcome (`key` ran and ended
    /// `status`), as every backend applies them. Outcomes count in the order
    /// runs finish, however the runs overlapped: a slow job whose every run
    /// is outrun by the next one's start still fails "in a row".
    pub fn outcome(&mut self, key: &str, status: Status, exit: Option<i32>, now: Timestamp) {
        self.last_status = Some(status);
        self.last_exit = exit;
        match status {
            Status::Succeeded => {
                self.failures = 0;
                self.succeeded(key, now);
            }
            Status::Failed | Status::Abandoned => self.failures += 1,
            Status::Running => {}
        }
        self.strip.push(match status {
            Status::Succeeded => 's',
            Status::Failed => 'f',
            Status::Abandoned => 'a',
            Status::Running => 'r',
        });
        let extra = self.strip.chars().count().saturating_sub(STRIP_MARKS);
        self.strip = self.strip.chars().skip(extra).collect();
    }

    /// A success of `key` recorded at `now`: the newest of the job's
    /// succeeded keys.
    fn succeeded(&mut self, key: &str, now: Timestamp) {
        self.last_success = Some(self.last_success.map_or(now, |last| last.max(now)));
        self.ok_keys.retain(|ok| ok != key);
        self.ok_keys.insert(0, key.to_owned());
        self.ok_keys.truncate(OK_KEYS);
    }

    /// An imported run older than the job's latest: it changes no row of
    /// "in a row", but its success counts for its period.
    fn older_outcome(&mut self, key: &str, status: Status, finished: Timestamp) {
        if status == Status::Succeeded {
            self.last_success = Some(
                self.last_success
                    .map_or(finished, |last| last.max(finished)),
            );
            if !self.ok_keys.iter().any(|ok| ok == key) && self.ok_keys.len() < OK_KEYS {
                self.ok_keys.push(key.to_owned());
            }
        }
    }
}

impl JobState {
    /// The job's figures with an imported run counted in.
    pub fn imported(&mut self, run: &Run) {
        let index = Status::ALL
            .iter()
            .position(|status| *status == run.status)
            .unwrap_or(0);
        self.runs[index] += 1;
        self.first_run = Some(
            self.first_run
                .map_or(run.started_at, |first| first.min(run.started_at)),
        );
        self.checked_at = Some(
            self.checked_at
                .map_or(run.started_at, |at| at.max(run.started_at)),
        );
        let newest = self.last_run.is_none_or(|last| last <= run.started_at);
        if run.status != Status::Running {
            let finished = run.finished_at.unwrap_or(run.started_at);
            if newest {
                self.outcome(&run.key, run.status, run.exit_code, finished);
            } else {
                self.older_outcome(&run.key, run.status, finished);
            }
        }
        if newest {
            self.last_run = Some(run.started_at);
            self.last_status = Some(run.status);
            self.last_exit = run.exit_code;
            self.host = Some(run.host.clone());
            self.command = run.command.clone();
            self.shell = run.shell;
        }
    }
}

/// Encodes a job's succeeded keys for storage (keys hold no newline).
pub fn encode_keys(keys: &[String]) -> String {
    keys.join("\n")
}

pub fn decode_keys(text: &str) -> Vec<String> {
    text.split('\n')
        .filter(|key| !key.is_empty())
        .map(str::to_owned)
        .collect()
}

/// What the run logic asks of one claim transaction, having seen the head.
#[derive(Debug, Default)]
pub struct Plan {
    /// Mark the head (running, its owner gone) as abandoned.
    pub abandon_head: bool,
    /// Start a new run and make it the key's head.
    pub claim: Option<NewRun>,
}

/// A claimed run: the handle for the writes that follow.
#[derive(Debug, Clone)]
pub struct Claim {
    pub key: String,
    pub run_id: Uuid,
    /// Backend-specific: a row id, or a claim epoch that fences later writes.
    pub token: i64,
    /// The fencing token (`IDEM_FENCE`): larger than that of every earlier
    /// claim of any key in this ledger, purged keys included.
    pub fence: i64,
    /// A local ledger's kernel lock that says the run lives; the run's
    /// processes inherit it. Dropped (with every clone) once the outcome is
    /// recorded.
    pub hold: Option<runlock::Hold>,
    /// The named locks (`--lock`) the run holds; a shared ledger renews
    /// their leases with the claim's and releases them with its outcome.
    pub locks: Vec<String>,
}

/// What a heartbeat found of its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The lease runs on.
    Renewed,
    /// Another run holds the key or one of its named locks now (the lease
    /// ran out), or the run was marked abandoned.
    TakenOver,
    /// The ledger has no trace of the run: it lost the claim's commit (a
    /// failover to a standby that had not received it).
    Gone,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: Status,
    pub exit_code: i32,
    pub signal: Option<i32>,
}

/// Filters of `ledger list`.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub key_glob: Option<String>,
    pub job_glob: Option<String>,
    pub statuses: Vec<Status>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub limit: u32,
}

/// What `forget` found for one key (and, unless a dry run, changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgottenKey {
    pub key: String,
    /// The key is in the ledger (it has a row, even without runs).
    pub known: bool,
    /// The status of the key's head before `forget`; `None` when the key had
    /// no deciding run (new, or forgotten already).
    pub head: Option<Status>,
    /// The head was `running` with a dead owner: it is marked `abandoned`.
    pub abandoned: bool,
    /// Runs of the key in the ledger (removed with `purge`).
    pub runs: u64,
    /// The head is running under a live owner: nothing was changed.
    pub busy: Option<Owner>,
}

/// What `forget` did. When any key is busy, nothing at all was changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForgetReport {
    pub keys: Vec<ForgottenKey>,
}

impl ForgetReport {
    /// The keys refused because a live owner runs them.
    pub fn busy(&self) -> impl Iterator<Item = &ForgottenKey> {
        self.keys.iter().filter(|key| key.busy.is_some())
    }
}

/// What `prune` dropped (or would drop, on a dry run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub runs: u64,
    pub attempts: u64,
    /// Bytes of captured output (stdout and stderr tails).
    pub output_bytes: u64,
    /// Keys left with neither runs nor a head, removed too.
    pub keys: u64,
}

/// One run with its attempts, as `export` writes it and `import` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedRun {
    pub run: Run,
    pub attempts: Vec<Attempt>,
    /// The run was its key's head (the run that decides) in its ledger.
    pub head: bool,
}

/// What `import` did with a batch of runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Runs new to this ledger.
    pub added: u64,
    /// Runs this ledger held as `running` and the stream held finished.
    pub updated: u64,
    /// Runs this ledger already held (by `run_id`): left as they are.
    pub unchanged: u64,
    /// Imported runs that became their key's head.
    pub heads: u64,
}

/// Where `import` puts the runs of a stream, one at a time: each run, then
/// its attempts, so that memory holds one attempt whatever the run holds.
pub trait ImportSink {
    /// A run (`head`: it was its key's head in its ledger); its attempts
    /// follow.
    fn run(&mut self, run: &Run, head: bool) -> Result<()>;

    /// An attempt of the run handed over last.
    fn attempt(&mut self, attempt: &Attempt) -> Result<()>;
}

/// Hands one run of a stream to the sink; `false` when it has none left
/// for this transaction.
pub type Feed<'a> = dyn FnMut(&mut dyn ImportSink) -> Result<bool> + 'a;

/// Per-key figures for `metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMetrics {
    pub key: String,
    /// The key's latest run (by start time), if it has any.
    pub last_run: Option<Run>,
    /// When the key's latest success finished.
    pub last_success: Option<Timestamp>,
    /// `failed` and `abandoned` runs since the latest success.
    pub consecutive_failures: u64,
    /// Runs in the ledger by status, in the order of [`Status::ALL`].
    pub runs: [u64; 4],
}

impl Status {
    pub const ALL: [Status; 4] = [
        Status::Running,
        Status::Succeeded,
        Status::Failed,
        Status::Abandoned,
    ];
}

/// The storage behind `idem`. Implementations keep every write short and
/// make `claim` atomic: the head is read and rewritten in one transaction.
pub trait Ledger {
    /// The key's deciding run, read without writing anything (the skip path).
    fn head(&mut self, key: &str) -> Result<Option<Head>>;

    /// In one write transaction: read the head, ask `plan` what to do with
    /// it, and do that. Returns the claim when `plan` asked for one. The
    /// plan is also told when the key is `lingering`: no running head owns
    /// it, yet processes an ended run left behind still hold it (their
    /// guardian was killed), so nothing may run the key until they are gone.
    /// The claim is durable once the first attempt's start is recorded, at
    /// the latest: the command starts only after that.
    fn claim(
        &mut self,
        key: &str,
        plan: &mut dyn FnMut(Option<&Head>, bool) -> Plan,
    ) -> Result<Option<Claim>>;

    /// Attempt `number` is about to start; `pgid` is the command's process
    /// group. Need not be durable itself (it matters only while this host
    /// stays up), but the claim is once it returns.
    fn attempt_started(&mut self, claim: &Claim, number: u32, pgid: u32) -> Result<()>;

    /// A non-final attempt ended.
    fn attempt_finished(&mut self, claim: &Claim, attempt: &Attempt) -> Result<()>;

    /// The last attempt ended and the run with it. Durable before it returns.
    fn finish(&mut self, claim: &Claim, last: Option<&Attempt>, outcome: &Outcome) -> Result<()>;

    /// Renews a shared ledger's lease, or tells how the claim was lost.
    fn heartbeat(&mut self, _claim: &Claim) -> Result<Renewal> {
        Ok(Renewal::Renewed)
    }

    /// Whether the server is known to have closed a shared ledger's
    /// connection (a primary gone in a failover), found without a round
    /// trip, so that a heartbeat need not wait for its turn to find out.
    fn cut(&mut self) -> bool {
        false
    }

    /// Whether a claim lives only as long as its lease, so that the run
    /// must call [`Ledger::heartbeat`] while its command runs.
    fn leased(&self) -> bool {
        false
    }

    /// Runs, newest first.
    fn list(&mut self, filter: &ListFilter) -> Result<Vec<Run>>;

    /// The latest `limit` runs of `key`, newest first, each with its
    /// attempts but not their output (see [`Ledger::output`]), and how
    /// many runs the key has in all.
    fn history(&mut self, key: &str, limit: u32) -> Result<(Vec<RunAttempts>, u64)>;

    /// The output tails (stdout, stderr) of attempt `number` of run
    /// `run_id`, or of its last attempt; `None` when it has no such
    /// attempt. Read one attempt at a time, so that memory holds one
    /// attempt's output whatever the history.
    fn output(&mut self, run_id: Uuid, number: Option<u32>) -> Result<Option<Tails>>;

    /// Makes `keys` run again next time: each key's head is cleared (a head
    /// whose owner is gone is first marked `abandoned`), and with `purge`
    /// the key's runs and attempts are removed too. In one transaction: if
    /// any key's head is `running` under a live owner, or one that cannot be
    /// judged without `force`, nothing changes and the report names it.
    /// `dry_run` changes nothing.
    fn forget(
        &mut self,
        keys: &[String],
        purge: bool,
        dry_run: bool,
        force: bool,
    ) -> Result<ForgetReport>;

    /// Records the hooks that ran for run `run_id`.
    fn hooks_ran(&mut self, run_id: Uuid, hooks: &[HookRun]) -> Result<()>;

    /// The hooks that ran for run `run_id`, in order.
    fn hooks(&mut self, run_id: Uuid) -> Result<Vec<HookRun>>;

    /// The time by the clock that stamps this ledger's runs: this host's,
    /// or a shared database's, so that "2h ago" means what the runs say.
    fn now(&mut self) -> Result<Timestamp> {
        Ok(Timestamp::now())
    }

    /// Drops runs that finished before `before`, with their attempts and
    /// output, except each key's head (the run that decides) and running
    /// runs; then keys left with neither runs nor a head.
    fn prune(&mut self, before: Timestamp, dry_run: bool) -> Result<PruneReport>;

    /// Every run with its attempts, oldest first, handed to `sink` one at a
    /// time (memory stays bounded whatever the ledger holds).
    fn export(&mut self, sink: &mut dyn FnMut(ExportedRun) -> Result<()>) -> Result<()>;

    /// Adds the runs `feed` hands over, one at a time, in one transaction,
    /// until it has no more: idempotently by `run_id` (a run this ledger
    /// holds already is left as it is, unless it holds it `running` with
    /// its owner gone and the stream finished). An imported run that was
    /// its key's head becomes the head here when it started after every
    /// run of its key here and the current head is not running. When
    /// `feed` fails, the run it was feeding leaves nothing, the runs before
    /// it are committed, and its error is returned; `report` counts what
    /// was imported either way.
    fn import(&mut self, feed: &mut Feed<'_>, report: &mut ImportReport) -> Result<()>;

    /// Per-key figures, in key order.
    fn metrics(&mut self) -> Result<Vec<KeyMetrics>>;

    /// Stamps that `job` was called (a skip): bookkeeping, not durable.
    fn checked(&mut self, job: &str) -> Result<()>;

    /// Every job matching `glob` (all without one), in job order.
    fn jobs(&mut self, glob: Option<&str>) -> Result<Vec<JobState>>;

    /// The keys matching `glob`, in key order.
    fn keys_matching(&mut self, glob: &str) -> Result<Vec<String>>;

    /// Takes the named locks for run `run_id` of the claim to come, each
    /// its own lease of `lease`; all or none. `None`: one of them is held
    /// (its name is returned). Local ledgers hold them in the kernel.
    fn take_locks(
        &mut self,
        names: &[String],
        run_id: Uuid,
        lease: std::time::Duration,
    ) -> Result<Result<Locks, String>>;

    /// Releases the named locks of run `run_id` that never ran (its key
    /// was skipped or busy); a run's outcome releases them by itself.
    fn release_locks(&mut self, _run_id: Uuid) -> Result<()> {
        Ok(())
    }

    /// Done with the ledger, with nothing left to write: closes it, or
    /// leaves that to the process's exit where closing costs more than it
    /// does (see SQLite's).
    fn leave(self: Box<Self>) {}
}

/// Named locks a run holds: kernel locks (a local ledger), or lock rows
/// leased to its run id (a shared one), released by `finish` or their lease.
#[derive(Debug, Clone, Default)]
pub struct Locks {
    pub holds: Vec<runlock::Hold>,
    pub names: Vec<String>,
}

/// Encodes argv for storage: NUL-separated raw bytes (argv cannot hold NUL),
/// so non-UTF-8 arguments survive byte for byte.
pub fn encode_command(command: &[OsString]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for (index, arg) in command.iter().enumerate() {
        if index > 0 {
            bytes.push(0);
        }
        bytes.extend_from_slice(arg.as_bytes());
    }
    bytes
}

pub fn decode_command(bytes: &[u8]) -> Vec<OsString> {
    bytes
        .split(|byte| *byte == 0)
        .map(|arg| OsString::from_vec(arg.to_vec()))
        .collect()
}

/// The job's row in the ledger, if it has one.
pub fn job_state(ledger: &mut dyn Ledger, job: &str) -> Result<Option<JobState>> {
    Ok(ledger
        .jobs(Some(&glob_literal(job)))?
        .into_iter()
        .find(|state| state.job == job))
}

/// A glob that matches `text` alone.
fn glob_literal(text: &str) -> String {
    let mut glob = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '*' | '?' | '[' => {
                glob.push('[');
                glob.push(c);
                glob.push(']');
            }
            c => glob.push(c),
        }
    }
    glob
}

/// The folder a SQLite ledger lives in, for messages.
pub fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_passwords() {
        assert_eq!(
            mask_password("postgres://idem:s3cret@db.example/idem?sslmode=require"),
            "postgres://idem:***@db.example/idem?sslmode=require"
        );
        assert_eq!(mask_password("postgres://db/idem"), "postgres://db/idem");
        assert_eq!(mask_password("postgresql://u@h/d"), "postgresql://u@h/d");
        assert_eq!(
            mask_password("postgres://u@h/d?sslmode=require&password=x%26y"),
            "postgres://u@h/d?sslmode=require&password=***"
        );
    }

    #[test]
    fn commands_round_trip_bytes() {
        let command = vec![
            OsString::from("printf"),
            OsString::from(""),
            OsString::from_vec(vec![0xff, b'x']),
        ];
        assert_eq!(decode_command(&encode_command(&command)), command);
    }
}
