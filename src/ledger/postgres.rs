//! A ledger shared by many hosts, in PostgreSQL (schema `idem`).
//!
//! Claims are fenced by an epoch: every claim of a key raises `keys.epoch`
//! and hands the new value to its owner, and the owner's later writes
//! (attempts, heartbeats, the outcome) apply only while the epoch is still
//! theirs, so a run that lost its claim can never overwrite a newer one.
//! A claim lives for its lease (`keys.lease_until`), renewed by the owner's
//! heartbeat; an owner on another host is presumed gone once its lease has
//! passed. Every time is the database's (`now()`), never a host's clock.
//!
//! A claim is one short transaction: take the key's row lock (creating the
//! row if need be), read the head, let the run logic decide, write. Every
//! write of a key's state takes that row lock first, so claims of a key
//! are serialized however many hosts race.
//!
//! This file holds the connection and the [`Ledger`] impl; each concern's
//! SQL is a module of its own: the schema and its migration, the claim,
//! the outcome, leases and named locks, the reads, `export`'s cursors, the
//! fence counter, which `--db` values are URLs, and how a fault is said.

/// Parameters with their types, so that a statement costs one round trip
/// to the server (no separate prepare): `typed![&key => TEXT, &n => INT4]`.
// Before the modules, which use it too.
macro_rules! typed {
    ($($value:expr => $type:ident),* $(,)?) => {
        &[$(($value as &(dyn tokio_postgres::types::ToSql + Sync), tokio_postgres::types::Type::$type)),*]
    };
}

mod claim;
pub(crate) mod client;
pub(super) mod connect;
mod cursors;
mod deps;
mod faults;
mod fences;
mod first;
mod glob;
mod inspect;
mod lease;
mod migrate;
mod outbox;
mod outcome;
mod pauses;
mod prune;
mod reads;
mod rows;
mod schema;
mod stops;
mod tx;
mod url;

use std::time::Duration;

use anyhow::Result;
use futures_util::future::try_join;
use jiff::Timestamp;
use uuid::Uuid;

use super::error::{LedgerError, Taker};
use super::rules;
use super::{
    Attempt, Claim, ExportedRun, Feed, ForgetReport, Head, HookRun, ImportReport, JobState,
    KeyMetrics, ListFilter, Locks, NamedLock, NewEvent, Outcome, Plan, PruneReport, Records,
    Renewal, Run, RunAttempts, RunLedger, Tails,
};
use crate::process::Containment;
use client::{Client, Transaction, READ_COMMITTED};
use faults::connection_lost;
pub use inspect::PostgresInspector;
use migrate::session_settings;
use rows::{query_head, time};
use tx::Tx;

pub struct PostgresLedger {
    client: Client,
    /// To connect again when the connection was cut (see [`Self::retrying`]).
    config: tokio_postgres::Config,
    /// The URL with its password masked, for messages.
    shown: String,
    /// The job whose pause is read with each head, and what the last such
    /// read found, kept for the next `paused` (see [`RunLedger::pause_with_head`]).
    pause_job: Option<String>,
    pause_read: Option<Option<super::Pause>>,
    /// The last head read, with its key and row id: a claim of that key
    /// that finds it unchanged takes one round trip (see `claim`).
    seen_head: Option<(String, Option<(i64, Head)>)>,
    /// What a run's first round trip read (see [`Self::open_for_run`]).
    first: Option<first::FirstRead>,
    /// Whether others' events were due as this run's outcome committed
    /// (see `outcome::finish`), for the outbox's next look.
    due: Option<bool>,
}

impl PostgresLedger {
    /// Connects and creates or migrates the schema when needed. Unreachable
    /// or refusing: a [`LedgerError`] (exit code 125).
    pub fn open(url: &str, shown: &str) -> Result<PostgresLedger> {
        let mut ledger = PostgresLedger::connect(url, shown)?;
        ledger.check_and_migrate()?;
        Ok(ledger)
    }

    /// Connects, and nothing more: the session is not set up yet.
    fn connect(url: &str, shown: &str) -> Result<PostgresLedger> {
        let config = connect::config(url, shown)?;
        let client = connect::connect(&config).map_err(|why| LedgerError::Unreachable {
            ledger: shown.to_owned(),
            why,
        })?;
        Ok(PostgresLedger {
            client,
            config,
            shown: shown.to_owned(),
            pause_job: None,
            pause_read: None,
            seen_head: None,
            first: None,
            due: None,
        })
    }

    /// Runs `body`, and once more on a new connection if the connection
    /// was lost: the main connection idles while the command runs, maybe for
    /// hours, and a server restart or a cut idle connection must not cost
    /// the outcome. Only for writes fenced by the epoch, which are safe to
    /// repeat.
    fn retrying<T>(
        &mut self,
        mut body: impl FnMut(&mut Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, tokio_postgres::Error> {
        match body(&mut self.client) {
            Err(error) if connection_lost(&error) => match connect::connect(&self.config) {
                Ok(client) => {
                    self.client = client;
                    self.first = None;
                    self.client.batch_execute(&session_settings())?;
                    body(&mut self.client)
                }
                Err(_) => Err(error),
            },
            other => other,
        }
    }
}

fn interval(duration: Duration) -> String {
    format!("{} milliseconds", duration.as_millis().max(1))
}

/// Starts a write transaction in READ COMMITTED whatever the database's
/// default: a claim reads the head in a statement after taking the key's
/// row lock, and must see the commit of whoever held the lock before.
fn begin(client: &mut Client) -> Result<Transaction<'_>, tokio_postgres::Error> {
    Transaction::begin(client, READ_COMMITTED)
}

impl RunLedger for PostgresLedger {
    fn head(&mut self, key: &str) -> Result<Option<Head>> {
        // A read, safe to repeat on a new connection after a cut one. The
        // pause a claim would read next goes in the same round trip.
        self.pause_read = None;
        self.seen_head = None;
        if let Some(head) = self.first_head(key) {
            self.seen_head = Some((key.to_owned(), head.clone()));
            return Ok(head.map(|(_, head)| head));
        }
        let job = self.pause_job.clone();
        let (head, pause) = self
            .retrying(|client| {
                client.pipeline(async |db| match &job {
                    Some(job) => {
                        let (head, pause) =
                            try_join(query_head(db, key), pauses::query_pause(db, job)).await?;
                        Ok((head, Some(pause)))
                    }
                    None => Ok((query_head(db, key).await?, None)),
                })
            })
            .map_err(|error| self.fail("read", &error))?;
        self.pause_read = pause;
        self.seen_head = Some((key.to_owned(), head.clone()));
        Ok(head.map(|(_, head)| head))
    }

    fn claim(
        &mut self,
        key: &str,
        plan: &mut dyn FnMut(Option<&Head>, bool) -> Plan,
    ) -> Result<Option<Claim>> {
        let seen = match self.seen_head.take() {
            Some((seen_key, head)) if seen_key == key => Some(head),
            _ => None,
        };
        claim::claim(&mut self.client, key, seen, plan)
            .map_err(|error| self.claim_failed(key, &error))
    }

    fn attempt_started(
        &mut self,
        claim: &Claim,
        number: u32,
        pgid: u32,
        contained: Containment,
    ) -> Result<()> {
        let result =
            self.retrying(|client| claim::attempt_started(client, claim, number, pgid, contained));
        match result {
            Ok(true) => Ok(()),
            Ok(false) => Err(Self::lost(claim)),
            Err(error) => Err(self.fail("record an attempt in", &error)),
        }
    }

    fn attempt_finished(&mut self, claim: &Claim, attempt: &Attempt) -> Result<()> {
        let result = self.retrying(|client| outcome::attempt_finished(client, claim, attempt));
        match result {
            Ok(true) => Ok(()),
            Ok(false) => Err(Self::lost(claim)),
            Err(error) => Err(self.fail("record an attempt in", &error)),
        }
    }

    fn finish_owing(
        &mut self,
        claim: &Claim,
        last: Option<&Attempt>,
        outcome: &Outcome,
        owed: &[NewEvent],
    ) -> Result<()> {
        let mut due = None;
        let result =
            self.retrying(|client| outcome::finish(client, claim, last, outcome, owed, &mut due));
        self.due = due;
        match result {
            Ok(true) => Ok(()),
            Ok(false) => Err(LedgerError::OutcomeLost {
                run: claim.run_id.to_string(),
                key: claim.key.clone(),
                taker: Taker::Lease,
            }
            .into()),
            Err(error) => Err(self.fail("record the outcome in", &error)),
        }
    }

    fn heartbeat(&mut self, claim: &Claim) -> Result<Renewal> {
        lease::heartbeat(&mut self.client, claim)
            .map_err(|error| self.fail("renew the lease in", &error))
    }

    fn cut(&mut self) -> bool {
        self.client.closed()
    }

    fn leased(&self) -> bool {
        true
    }

    fn hooks_ran(&mut self, run_id: Uuid, hooks: &[HookRun]) -> Result<()> {
        self.retrying(|client| outcome::hooks_ran(client, run_id, hooks))
            .map_err(|error| self.fail("record hooks in", &error))
    }

    fn paused(&mut self, job: &str) -> Result<Option<super::Pause>> {
        // Read with the head just before, once; else read now.
        if let Some(pause) = self.pause_read.take() {
            if self.pause_job.as_deref() == Some(job) {
                return Ok(pause);
            }
        }
        // A read, safe to repeat on a new connection after a cut one.
        self.retrying(|client| pauses::read_pause(client, job))
            .map_err(|error| self.fail("read", &error))
    }

    fn pause_with_head(&mut self, job: &str) {
        self.pause_job = Some(job.to_owned());
    }

    fn checked(&mut self, job: &str) -> Result<()> {
        // Bookkeeping: its commit does not wait for the server's disk.
        self.client
            .query_typed_one(
                "WITH u AS (UPDATE idem.jobs SET checked_at = now() WHERE job = $1 RETURNING 1)
                 SELECT (SELECT count(*) FROM u), set_config('synchronous_commit', 'off', true)",
                typed![&job => TEXT],
            )
            .map(|_| ())
            .map_err(|error| self.fail("stamp a job in", &error))
    }

    fn take_locks(
        &mut self,
        locks: &[NamedLock],
        run_id: Uuid,
        lease: Duration,
    ) -> Result<Result<Locks, String>> {
        lease::take_locks(&mut self.client, locks, run_id, lease)
            .map_err(|error| self.fail("take a lock in", &error))
    }

    fn release_locks(&mut self, run_id: Uuid) -> Result<()> {
        lease::release_locks(&mut self.client, run_id)
            .map_err(|error| self.fail("release a lock in", &error))
    }

    fn renew_locks(&mut self, holder: Uuid, names: &[String]) -> Result<bool> {
        lease::renew_locks(&mut self.client, holder, names)
            .map_err(|error| self.fail("renew a lock in", &error))
    }
}

impl Records for PostgresLedger {
    fn list(&mut self, filter: &ListFilter) -> Result<Vec<Run>> {
        reads::list(&mut self.client, filter).map_err(|error| self.fail("read", &error))
    }

    fn history(&mut self, key: &str, limit: u32) -> Result<(Vec<RunAttempts>, u64)> {
        reads::history(&mut self.client, key, limit).map_err(|error| self.fail("read", &error))
    }

    fn output(&mut self, run_id: Uuid, number: Option<u32>) -> Result<Option<Tails>> {
        reads::output(&mut self.client, run_id, number).map_err(|error| self.fail("read", &error))
    }

    rule_methods!();
    super::pauses::pause_methods!();

    fn pauses(&mut self, glob: Option<&str>) -> Result<Vec<super::Pause>> {
        pauses::read_pauses(&mut self.client, glob).map_err(|error| self.fail("read", &error))
    }

    fn hooks(&mut self, run_id: Uuid) -> Result<Vec<HookRun>> {
        reads::hooks(&mut self.client, run_id).map_err(|error| self.fail("read", &error))
    }

    fn now(&mut self) -> Result<Timestamp> {
        self.retrying(|client| time(&client.query_typed_one("SELECT now() AS now", &[])?, "now"))
            .map_err(|error| self.fail("read the clock of", &error))
    }

    fn prune(&mut self, before: Timestamp, dry_run: bool) -> Result<PruneReport> {
        if dry_run {
            return self
                .write_or_rehearse("prune", dry_run, |tx| rules::rehearse_prune(tx, before));
        }
        // Batches, each its own transaction, so no claim waits long.
        rules::prune(&mut prune::Batches(&mut self.client), before)
            .map_err(|error| self.fail("prune", &error))
    }

    fn export(&mut self, sink: &mut dyn FnMut(ExportedRun) -> Result<()>) -> Result<()> {
        self.export_runs(sink)
    }

    fn import(&mut self, feed: &mut Feed<'_>, report: &mut ImportReport) -> Result<()> {
        let result = (|| {
            let mut tx = begin(&mut self.client)?;
            let fed = rules::import_all(&mut Tx::new(&mut tx), feed, report)?;
            tx.commit()?;
            Ok(fed)
        })();
        result.map_err(|error: tokio_postgres::Error| self.fail("import runs into", &error))?
    }

    fn metrics(&mut self) -> Result<Vec<KeyMetrics>> {
        let result = (|| {
            let mut tx = begin(&mut self.client)?;
            let metrics = rules::metrics(&mut Tx::new(&mut tx))?;
            tx.commit()?;
            Ok(metrics)
        })();
        result.map_err(|error: tokio_postgres::Error| self.fail("read", &error))
    }

    fn jobs(&mut self, glob: Option<&str>) -> Result<Vec<JobState>> {
        reads::jobs(&mut self.client, glob).map_err(|error| self.fail("read", &error))
    }

    fn keys_matching(&mut self, glob: &str) -> Result<Vec<String>> {
        reads::keys_matching(&mut self.client, glob).map_err(|error| self.fail("read", &error))
    }
}

impl PostgresLedger {
    /// Runs `body` in one transaction; a dry run does the same work and
    /// rolls it back, so what it reports is exactly what a real one would
    /// do.
    fn write_or_rehearse<T>(
        &mut self,
        doing: &str,
        dry_run: bool,
        body: impl FnOnce(&mut Tx<'_, '_>) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T> {
        let result = (|| {
            let mut tx = begin(&mut self.client)?;
            let value = body(&mut Tx::new(&mut tx))?;
            if dry_run {
                tx.rollback()?;
            } else {
                tx.commit()?;
            }
            Ok(value)
        })();
        result.map_err(|error: tokio_postgres::Error| self.fail(doing, &error))
    }
}
