//! The ledger: where runs, their attempts and each key's deciding run live.
//!
//! A run talks to [`RunLedger`], people's tools to [`Records`]; a
//! [`Ledger`] is both. `sqlite.rs` stores a ledger in a local file,
//! `postgres.rs` in a shared database; the rules both follow are written
//! once, in `rules.rs`, over a small transaction interface.
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

/// The [`Records`] methods that only run a rule of `rules.rs` in one of the
/// backend's transactions (committed, or rolled back for a dry run), written
/// once and expanded in each backend's `impl Records`, which must have
/// `write_or_rehearse(doing, dry_run, body)`.
macro_rules! rule_methods {
    () => {
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
    };
}

mod columns;
mod error;
mod inspect;
mod job;
mod judged;
mod left;
pub mod line;
mod location;
mod marks;
pub mod outbox;
mod pauses;
mod postgres;
mod rules;
pub mod runlock;
mod schema;
mod sqlite;
pub mod stops;
mod types;

use crate::process::Containment;
use anyhow::Result;
use jiff::Timestamp;
use uuid::Uuid;

pub(crate) use inspect::{Inspect, Schema};
pub use job::*;
pub use judged::Judged;
pub use location::*;
pub use marks::*;
pub use outbox::{dest, EventState, NewEvent, Outage, Outbox, Owed, Pick, Settled, Taken};
pub use pauses::{is_glob, who, Pause, PauseRequest};
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
pub use stops::{StopRequest, Stops};
pub use types::*;

/// What a run asks of its ledger on its way, top to bottom: the key's head
/// (the skip path), the claim, each attempt, the outcome, the lease, the
/// stamp of a skip, its named locks. Implementations keep every write
/// short and make `claim` atomic: the head is read and rewritten in one
/// transaction.
pub trait RunLedger {
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
    /// group, `contained` what holds its processes together. Need not be
    /// durable itself (it matters only while this host stays up), but the
    /// claim is once it returns.
    fn attempt_started(
        &mut self,
        claim: &Claim,
        number: u32,
        pgid: u32,
        contained: Containment,
    ) -> Result<()>;

    /// A non-final attempt ended.
    fn attempt_finished(&mut self, claim: &Claim, attempt: &Attempt) -> Result<()>;

    /// The last attempt ended and the run with it. Durable before it returns.
    fn finish(&mut self, claim: &Claim, last: Option<&Attempt>, outcome: &Outcome) -> Result<()> {
        self.finish_owing(claim, last, outcome, &[])
    }

    /// [`RunLedger::finish`], writing the events the outcome owes (see
    /// [`outbox`]) in its transaction.
    fn finish_owing(
        &mut self,
        claim: &Claim,
        last: Option<&Attempt>,
        outcome: &Outcome,
        owed: &[NewEvent],
    ) -> Result<()>;

    /// Renews a shared ledger's lease; `false` when the claim was lost.
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

    /// Records the hooks that ran for run `run_id`.
    fn hooks_ran(&mut self, run_id: Uuid, hooks: &[HookRun]) -> Result<()>;

    /// Stamps that `job` was called (a skip): bookkeeping, not durable.
    fn checked(&mut self, job: &str) -> Result<()>;

    /// Takes a slot of each named lock for run `run_id` of the claim to
    /// come, each its own lease of `lease`; all or none. `Err`: every slot
    /// of one of them is held (its name is returned). Local ledgers hold
    /// them in the kernel.
    fn take_locks(
        &mut self,
        locks: &[NamedLock],
        run_id: Uuid,
        lease: std::time::Duration,
    ) -> Result<Result<Locks, String>>;

    /// Releases the named locks of run `run_id` that never ran (its key
    /// was skipped or busy); a run's outcome releases them by itself.
    fn release_locks(&mut self, _run_id: Uuid) -> Result<()> {
        Ok(())
    }

    /// Renews the leases of the named locks `names` that `holder` took
    /// without a claim to renew them (a run queued behind its job);
    /// `false` when one lapsed. Local ledgers hold them in the kernel.
    fn renew_locks(&mut self, _holder: Uuid, _names: &[String]) -> Result<bool> {
        Ok(true)
    }

    /// The pause of `job` that holds now, if any: read before a claim.
    fn paused(&mut self, job: &str) -> Result<Option<Pause>>;

    /// From now on, read whether `job` is paused together with each head
    /// (for the next `paused`), where that saves a round trip.
    fn pause_with_head(&mut self, _job: &str) {}

    /// Done with the ledger, with nothing left to write: closes it, or
    /// leaves that to the process's exit where closing costs more than it
    /// does (see SQLite's).
    fn leave(self: Box<Self>) {}
}

/// What people's tools ask of a ledger: `ledger list|show|forget|prune|
/// export|import|metrics`, `status`, and key completion. Reads, and the
/// maintenance writes that never race a run's own rules (those live in
/// `rules.rs`, once for both backends).
pub trait Records {
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

    /// Every job matching `glob` (all without one), in job order.
    fn jobs(&mut self, glob: Option<&str>) -> Result<Vec<JobState>>;

    /// The keys matching `glob`, in key order.
    fn keys_matching(&mut self, glob: &str) -> Result<Vec<String>>;

    /// Pauses `target`, a job (known or not yet) or a glob of known jobs:
    /// the jobs paused.
    fn pause(&mut self, target: &str, request: &PauseRequest) -> Result<Vec<String>>;

    /// Resumes `target`: the jobs it names, and of those the ones that
    /// were paused.
    fn resume(&mut self, target: &str) -> Result<(Vec<String>, Vec<String>)>;

    /// The latest pause of each job matching `glob` (all without one),
    /// held now or ended (`until` passed, or set by `idem resume`), in job
    /// order: [`Pause::holds_at`] tells them apart.
    fn pauses(&mut self, glob: Option<&str>) -> Result<Vec<Pause>>;
}

/// A whole ledger, as opened: both faces, so that one handle serves a run
/// and the tools.
pub trait Ledger: RunLedger + Records + Stops + Dependencies + Outbox {}

impl<T: RunLedger + Records + Stops + Dependencies + Outbox + ?Sized> Ledger for T {}
