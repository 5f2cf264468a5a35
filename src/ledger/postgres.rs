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

/// Parameters with their types, so that a statement costs one round trip
/// to the server (no separate prepare): `typed![&key => TEXT, &n => INT4]`.
// Before the modules, which use it too.
macro_rules! typed {
    ($($value:expr => $type:ident),* $(,)?) => {
        &[$(($value as &(dyn tokio_postgres::types::ToSql + Sync), tokio_postgres::types::Type::$type)),*]
    };
}

pub(crate) mod client;
pub(super) mod connect;
mod inspect;
mod rows;
mod schema;
mod tx;

use std::time::Duration;

use anyhow::Result;
use futures_util::future::{try_join, try_join3};
use jiff::Timestamp;
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;
use uuid::Uuid;

use super::columns::{attempt_list, JobCol};
use super::error::{LedgerError, Taker, Why};
use super::rules;
use super::{
    encode_command, Attempt, Claim, ExportedRun, Feed, ForgetReport, Head, HookRun, ImportReport,
    JobState, KeyMetrics, Ledger, ListFilter, Locks, NewRun, Outcome, Plan, PruneReport, Run,
    RunAttempts, Tails,
};
use client::{Client, Transaction, READ_COMMITTED};
pub use inspect::PostgresInspector;
use rows::{attempt_from_row, job_from_row, query_head, run_from_row, RunCol, Unreadable};
use schema::{LATEST, MIGRATIONS};
use tx::{
    job_after, job_of_run, owner_gone, release_locks, save_job, Tx, JOB_OF_RUN_COUNT,
    RELEASE_LOCKS, RELEASE_OWNER,
};

/// How long a claim waits for a key's row lock before giving up (exit 125).
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// How long the server lets an idem's transaction sit idle before ending
/// it and releasing its locks (idem's own are over in milliseconds).
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(60);

/// The schema idem owns in the database.
const SCHEMA: &str = "idem";

/// Any constant both idem processes agree on: the key of the advisory lock
/// taken while migrating ("idem" in ASCII, then a version of the lock).
const MIGRATION_LOCK: i64 = 0x6964_656d_0000_0001;

pub struct PostgresLedger {
    client: Client,
    /// To connect again when the connection was cut (see [`Self::retrying`]).
    config: tokio_postgres::Config,
    /// The URL with its password masked, for messages.
    shown: String,
}

impl PostgresLedger {
    /// Connects and creates or migrates the schema when needed. Unreachable
    /// or refusing: a [`LedgerError`] (exit code 125).
    pub fn open(url: &str, shown: &str) -> Result<PostgresLedger> {
        let config = connect::config(url, shown)?;
        let client = connect::connect(&config).map_err(|why| LedgerError::Unreachable {
            ledger: shown.to_owned(),
            why,
        })?;
        let mut ledger = PostgresLedger {
            client,
            config,
            shown: shown.to_owned(),
        };
        ledger.check_and_migrate()?;
        Ok(ledger)
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
                    self.client.batch_execute(&session_settings())?;
                    body(&mut self.client)
                }
                Err(_) => Err(error),
            },
            other => other,
        }
    }

    fn fail(&self, doing: &str, error: &tokio_postgres::Error) -> anyhow::Error {
        fault(doing, &self.shown, error).into()
    }

    /// The schema's version; 0 when there is no schema yet.
    fn version(client: &mut Client) -> Result<i32, tokio_postgres::Error> {
        match client.query_typed("SELECT version FROM idem.version", &[]) {
            Ok(rows) => rows.first().map_or(Ok(0), |row| row.try_get(0)),
            Err(error)
                if error.code() == Some(&SqlState::UNDEFINED_TABLE)
                    || error.code() == Some(&SqlState::INVALID_SCHEMA_NAME) =>
            {
                Ok(0)
            }
            Err(error) => Err(error),
        }
    }

    /// Session settings and the schema's version, in one round trip.
    ///
    /// A key's row is locked only for milliseconds; a wait longer than
    /// [`LOCK_WAIT`] means its holder is stuck (frozen, or cut off in the
    /// middle of a transaction), so give up as SQLite does, and let the
    /// server end a transaction left idle that long by a vanished idem.
    fn setup(&mut self) -> Result<i32, tokio_postgres::Error> {
        let settings = session_settings();
        // One implicit transaction: if the version table is missing, the
        // settings are rolled back with it, and made again alone.
        match self
            .client
            .simple_query(&format!("{settings} SELECT version FROM idem.version"))
        {
            Ok(messages) => Ok(messages
                .iter()
                .find_map(|message| match message {
                    tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0),
                    _ => None,
                })
                .and_then(|version| version.parse().ok())
                .unwrap_or(0)),
            Err(error)
                if error.code() == Some(&SqlState::UNDEFINED_TABLE)
                    || error.code() == Some(&SqlState::INVALID_SCHEMA_NAME) =>
            {
                self.client.batch_execute(&settings)?;
                Ok(0)
            }
            Err(error) => Err(error),
        }
    }

    fn check_and_migrate(&mut self) -> Result<()> {
        let version = self.setup().map_err(|e| self.fail("read", &e))?;
        if version == LATEST {
            return Ok(());
        }
        if version > LATEST {
            return Err(self.newer(version));
        }
        // Many hosts may start on a fresh database at once: the advisory
        // lock lets one migrate while the others wait, then find it done
        // (READ COMMITTED: the version is read after the wait, afresh).
        let result = (|| {
            let mut tx = begin(&mut self.client)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
            tx.batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS {SCHEMA};
                 CREATE TABLE IF NOT EXISTS idem.version (version integer NOT NULL);"
            ))?;
            let version = Self::version(&mut tx)?;
            if version > LATEST {
                return Ok(Some(version));
            }
            for migration in MIGRATIONS.iter().skip(version as usize) {
                tx.batch_execute(migration)?;
            }
            tx.execute("DELETE FROM idem.version", &[])?;
            tx.execute("INSERT INTO idem.version VALUES ($1)", &[&LATEST])?;
            tx.commit()?;
            Ok(None)
        })();
        let result: Result<Option<i32>, tokio_postgres::Error> = result;
        match result {
            Ok(None) => Ok(()),
            Ok(Some(version)) => Err(self.newer(version)),
            Err(error) if error.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
                Err(LedgerError::CannotCreateSchema {
                    schema: SCHEMA,
                    ledger: self.shown.clone(),
                    why: connect::describe(&error),
                }
                .into())
            }
            Err(error) => Err(self.fail("create or migrate", &error)),
        }
    }

    fn newer(&self, version: i32) -> anyhow::Error {
        LedgerError::Newer {
            ledger: self.shown.clone(),
            version: version.into(),
            latest: LATEST.into(),
        }
        .into()
    }

    fn lost(claim: &Claim) -> anyhow::Error {
        LedgerError::ClaimLost {
            run: claim.run_id.to_string(),
            key: claim.key.clone(),
        }
        .into()
    }
}

fn interval(duration: Duration) -> String {
    format!("{} milliseconds", duration.as_millis().max(1))
}

/// The settings every connection makes (see [`PostgresLedger::setup`]).
fn session_settings() -> String {
    format!(
        "SET lock_timeout = '{}ms'; SET idle_in_transaction_session_timeout = '{}ms';",
        LOCK_WAIT.as_millis(),
        IDLE_IN_TRANSACTION.as_millis()
    )
}

/// Starts a write transaction in READ COMMITTED whatever the database's
/// default: a claim reads the head in a statement after taking the key's
/// row lock, and must see the commit of whoever held the lock before.
fn begin(client: &mut Client) -> Result<Transaction<'_>, tokio_postgres::Error> {
    Transaction::begin(client, READ_COMMITTED)
}

/// Locks the key's row if the claim's epoch still holds it; false if not.
fn lock_claimed(tx: &mut Transaction<'_>, claim: &Claim) -> Result<bool, tokio_postgres::Error> {
    Ok(tx
        .query_typed_opt(
            "SELECT 1 FROM idem.keys WHERE key = $1 AND epoch = $2 FOR UPDATE",
            typed![&claim.key => TEXT, &claim.token => INT8],
        )?
        .is_some())
}

fn upsert_attempt(
    tx: &mut Transaction<'_>,
    claim: &Claim,
    attempt: &Attempt,
) -> Result<(), tokio_postgres::Error> {
    // An upsert: an attempt whose command could not even be spawned was
    // never recorded as started.
    let tail = |bytes: &Vec<u8>| (!bytes.is_empty()).then(|| bytes.clone());
    tx.execute_typed(
        "INSERT INTO idem.attempts (run, n, started_at, finished_at, exit_code, signal,
             timed_out, stdout_tail, stderr_tail, cut)
         SELECT id, $2, now(), now(), $3, $4, $5, $6, $7, $8 FROM idem.runs WHERE run_id = $1
         ON CONFLICT (run, n) DO UPDATE SET finished_at = now(), exit_code = $3, signal = $4,
             timed_out = $5, stdout_tail = $6, stderr_tail = $7, cut = $8",
        typed![
            &claim.run_id => UUID,
            &(attempt.number as i32) => INT4,
            &attempt.exit_code => INT4,
            &attempt.signal => INT4,
            &attempt.timed_out => BOOL,
            &tail(&attempt.stdout_tail) => BYTEA,
            &tail(&attempt.stderr_tail) => BYTEA,
            &attempt.cut => BOOL,
        ],
    )?;
    Ok(())
}

impl Ledger for PostgresLedger {
    fn head(&mut self, key: &str) -> Result<Option<Head>> {
        // A read, safe to repeat on a new connection after a cut one.
        self.retrying(|client| client.pipeline(async |db| query_head(db, key).await))
            .map(|head| head.map(|(_, head)| head))
            .map_err(|error| self.fail("read", &error))
    }

    fn claim(
        &mut self,
        key: &str,
        plan: &mut dyn FnMut(Option<&Head>, bool) -> Plan,
    ) -> Result<Option<Claim>> {
        let result = (|| {
            // Begins; creates the key's row, or locks it without writing (a
            // conflicting row is locked even when WHERE is false); reads the
            // head: one round trip. Every claimer of the key queues at the
            // lock. The server runs a pipeline's statements one after the
            // other, so the head's statement starts after the lock is taken
            // and sees the last commit.
            let mut tx = Transaction::pipelined(&mut self.client);
            let head = tx.pipeline(async |db| {
                let ((), _, head) = try_join3(
                    db.batch_execute(READ_COMMITTED),
                    db.execute_typed(
                        "INSERT INTO idem.keys (key) VALUES ($1)
                         ON CONFLICT (key) DO UPDATE SET epoch = idem.keys.epoch WHERE false",
                        typed![&key => TEXT],
                    ),
                    query_head(db, key),
                )
                .await?;
                Ok(head)
            })?;
            // A shared ledger's liveness is the lease alone: nothing lingers.
            let plan = plan(head.as_ref().map(|(_, head)| head), false);
            if let (true, Some((id, _))) = (plan.abandon_head, &head) {
                rules::Tx::mark_abandoned(&mut Tx::new(&mut tx), *id)?;
            }
            let Some(new) = plan.claim else {
                tx.commit()?;
                return Ok(None);
            };
            // The run and the commit: one round trip.
            let epoch = tx.pipeline(async |db| {
                let (epoch, ()) =
                    try_join(start_run(db, key, &new), db.batch_execute("COMMIT")).await?;
                Ok(epoch)
            })?;
            tx.committed();
            Ok(Some(Claim {
                key: key.to_owned(),
                run_id: new.run_id,
                token: epoch,
                fence: epoch,
                hold: None,
                locks: Vec::new(),
            }))
        })();
        result.map_err(|error: tokio_postgres::Error| {
            if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
                return LedgerError::RowHeld {
                    key: key.to_owned(),
                    ledger: self.shown.clone(),
                    secs: LOCK_WAIT.as_secs(),
                }
                .into();
            }
            self.fail("claim a key in", &error)
        })
    }

    fn attempt_started(&mut self, claim: &Claim, number: u32, pgid: u32) -> Result<()> {
        let result = self.retrying(|client| {
            // One statement, fenced by the epoch: the key's row is updated
            // (and locked) only while the claim is still this run's. It is
            // bookkeeping that matters only while this host stays up, so
            // its commit does not wait for the server's disk.
            let row = client.query_typed_one(
                "WITH k AS (
                     UPDATE idem.keys SET owner_pgid = $3
                     WHERE key = $1 AND epoch = $2
                     RETURNING head
                 ), r AS (
                     UPDATE idem.runs SET attempts = $4
                     WHERE id = (SELECT head FROM k) AND status = 'running'
                     RETURNING id
                 ), a AS (
                     INSERT INTO idem.attempts (run, n, started_at)
                     SELECT id, $4, now() FROM r
                     ON CONFLICT (run, n) DO NOTHING
                 )
                 SELECT (SELECT count(*) FROM r),
                        set_config('synchronous_commit', 'off', true)",
                typed![
                    &claim.key => TEXT,
                    &claim.token => INT8,
                    &i64::from(pgid) => INT8,
                    &(number as i32) => INT4,
                ],
            )?;
            Ok(row.try_get::<_, i64>(0)? == 1)
        });
        match result {
            Ok(true) => Ok(()),
            Ok(false) => Err(Self::lost(claim)),
            Err(error) => Err(self.fail("record an attempt in", &error)),
        }
    }

    fn attempt_finished(&mut self, claim: &Claim, attempt: &Attempt) -> Result<()> {
        let result = self.retrying(|client| {
            let mut tx = begin(client)?;
            if !lock_claimed(&mut tx, claim)? {
                return Ok(false);
            }
            upsert_attempt(&mut tx, claim, attempt)?;
            tx.commit()?;
            Ok(true)
        });
        match result {
            Ok(true) => Ok(()),
            Ok(false) => Err(Self::lost(claim)),
            Err(error) => Err(self.fail("record an attempt in", &error)),
        }
    }

    fn finish(&mut self, claim: &Claim, last: Option<&Attempt>, outcome: &Outcome) -> Result<()> {
        let result = self.retrying(|client| {
            // Begins and records: one round trip.
            let mut tx = Transaction::pipelined(client);
            let recorded = tx.pipeline(async |db| {
                let ((), recorded) = try_join(
                    db.batch_execute(READ_COMMITTED),
                    record_outcome(db, claim, last, outcome),
                )
                .await?;
                Ok(recorded)
            })?;
            let Some(recorded) = recorded else {
                return Ok(false);
            };
            let job = match (&recorded.job, recorded.ended) {
                (Some(row), true) => Some(job_after(row, outcome.status, Some(outcome.exit_code))?),
                _ => None,
            };
            let locks = recorded.ended && !claim.locks.is_empty();
            // The job's figures, the run's named locks (most runs take
            // none) and the commit: one round trip.
            tx.pipeline(async |db| {
                try_join3(
                    async {
                        match &job {
                            Some(job) => save_job(db, job).await,
                            None => Ok(()),
                        }
                    },
                    async {
                        if locks {
                            release_locks(db, claim.run_id).await
                        } else {
                            Ok(())
                        }
                    },
                    db.batch_execute("COMMIT"),
                )
                .await?;
                Ok(())
            })?;
            tx.committed();
            Ok(recorded.recorded)
        });
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

    fn heartbeat(&mut self, claim: &Claim) -> Result<bool> {
        let renewed = self
            .client
            .execute_typed(
                "UPDATE idem.keys k SET lease_until = clock_timestamp() + k.lease
                 FROM idem.runs r
                 WHERE k.key = $1 AND k.epoch = $2 AND r.id = k.head AND r.status = 'running'",
                typed![&claim.key => TEXT, &claim.token => INT8],
            )
            .map(|changed| changed == 1)
            .map_err(|error| self.fail("renew the lease in", &error))?;
        if !renewed || claim.locks.is_empty() {
            return Ok(renewed);
        }
        // A lock whose lease ran out may have gone to another run: then
        // this one has lost it, like a key, and must stop.
        self.client
            .execute_typed(
                "UPDATE idem.locks SET lease_until = clock_timestamp() + lease
                 WHERE holder = $1 AND name = ANY($2) AND lease_until IS NOT NULL",
                typed![&claim.run_id => UUID, &claim.locks => TEXT_ARRAY],
            )
            .map(|changed| changed as usize == claim.locks.len())
            .map_err(|error| self.fail("renew the lease in", &error))
    }

    fn list(&mut self, filter: &ListFilter) -> Result<Vec<Run>> {
        let mut sql = format!("SELECT {} FROM idem.runs r WHERE true", RunCol::LIST);
        let glob = filter.key_glob.as_deref().map(glob_to_regex);
        let job_glob = filter.job_glob.as_deref().map(glob_to_regex);
        let statuses: Vec<String> = filter
            .statuses
            .iter()
            .map(|status| status.as_str().to_owned())
            .collect();
        let limit = i64::from(filter.limit);
        let mut values: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = Vec::new();
        if let Some(glob) = &glob {
            values.push(glob);
            sql.push_str(&format!(" AND r.key ~ ${}", values.len()));
        }
        if let Some(glob) = &job_glob {
            values.push(glob);
            sql.push_str(&format!(" AND coalesce(r.job, r.key) ~ ${}", values.len()));
        }
        if !statuses.is_empty() {
            values.push(&statuses);
            sql.push_str(&format!(" AND r.status = ANY(${})", values.len()));
        }
        if let Some(since) = &filter.since {
            values.push(since);
            sql.push_str(&format!(" AND r.started_at >= ${}", values.len()));
        }
        if let Some(until) = &filter.until {
            values.push(until);
            sql.push_str(&format!(" AND r.started_at <= ${}", values.len()));
        }
        values.push(&limit);
        sql.push_str(&format!(
            " ORDER BY r.started_at DESC, r.id DESC LIMIT ${}",
            values.len()
        ));
        let rows = self
            .client
            .query(&sql, &values)
            .map_err(|error| self.fail("read", &error))?;
        rows.iter()
            .map(|row| run_from_row(row).map(|(_, run)| run))
            .collect::<Result<_, _>>()
            .map_err(|error| self.fail("read", &error))
    }

    fn history(&mut self, key: &str, limit: u32) -> Result<(Vec<RunAttempts>, u64)> {
        let result = (|| {
            let total: i64 = self
                .client
                .query_one("SELECT count(*) FROM idem.runs WHERE key = $1", &[&key])?
                .try_get(0)?;
            let runs = self.client.query(
                &format!(
                    "SELECT {} FROM idem.runs r WHERE r.key = $1
                     ORDER BY r.started_at DESC, r.id DESC LIMIT $2",
                    RunCol::LIST
                ),
                &[&key, &i64::from(limit)],
            )?;
            let ids: Vec<i64> = runs
                .iter()
                .map(|row| row.try_get(RunCol::RowId.at()))
                .collect::<Result<_, _>>()?;
            // The attempts without their output: see `output`.
            let attempts = self.client.query(
                &format!(
                    "SELECT {} FROM idem.attempts a WHERE a.run = ANY($1) ORDER BY a.run, a.n",
                    attempt_list(false, "NULL::bytea")
                ),
                &[&ids],
            )?;
            // Runs come newest first, attempts by run id: match them by id.
            let mut by_run: std::collections::HashMap<i64, Vec<Attempt>> = Default::default();
            for row in &attempts {
                let (run, attempt) = attempt_from_row(row)?;
                by_run.entry(run).or_default().push(attempt);
            }
            let mut history = Vec::new();
            for row in &runs {
                let (id, run) = run_from_row(row)?;
                history.push((run, by_run.remove(&id).unwrap_or_default()));
            }
            Ok((history, total.max(0) as u64))
        })();
        result.map_err(|error: tokio_postgres::Error| self.fail("read", &error))
    }

    fn output(&mut self, run_id: Uuid, number: Option<u32>) -> Result<Option<Tails>> {
        let number = number.map(|number| i32::try_from(number).unwrap_or(i32::MAX));
        let row = self
            .client
            .query_opt(
                "SELECT a.stdout_tail, a.stderr_tail, a.cut FROM idem.attempts a
                 JOIN idem.runs r ON r.id = a.run
                 WHERE r.run_id = $1 AND ($2::int IS NULL OR a.n = $2)
                 ORDER BY a.n DESC LIMIT 1",
                &[&run_id, &number],
            )
            .map_err(|error| self.fail("read", &error))?;
        row.map(|row| {
            Ok(Tails {
                stdout: row.try_get::<_, Option<Vec<u8>>>(0)?.unwrap_or_default(),
                stderr: row.try_get::<_, Option<Vec<u8>>>(1)?.unwrap_or_default(),
                cut: row.try_get(2)?,
            })
        })
        .transpose()
        .map_err(|error: tokio_postgres::Error| self.fail("read", &error))
    }

    fn leased(&self) -> bool {
        true
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

    fn hooks_ran(&mut self, run_id: Uuid, hooks: &[HookRun]) -> Result<()> {
        let result = self.retrying(|client| {
            let mut tx = begin(client)?;
            for hook in hooks {
                tx.execute(
                    "INSERT INTO idem.hooks (run, event, exit_code, at)
                     SELECT id, $2, $3, $4 FROM idem.runs WHERE run_id = $1",
                    &[&run_id, &hook.event, &hook.exit_code, &hook.at],
                )?;
            }
            tx.commit()
        });
        result.map_err(|error| self.fail("record hooks in", &error))
    }

    fn hooks(&mut self, run_id: Uuid) -> Result<Vec<HookRun>> {
        let rows = self
            .client
            .query(
                "SELECT h.event, h.exit_code, h.at FROM idem.hooks h
                 JOIN idem.runs r ON r.id = h.run WHERE r.run_id = $1 ORDER BY h.at",
                &[&run_id],
            )
            .map_err(|error| self.fail("read", &error))?;
        rows.iter()
            .map(|row| {
                Ok(HookRun {
                    event: row.try_get(0)?,
                    exit_code: row.try_get(1)?,
                    at: row.try_get(2)?,
                })
            })
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(|error| self.fail("read", &error))
    }

    fn now(&mut self) -> Result<Timestamp> {
        self.retrying(|client| client.query_typed_one("SELECT now()", &[])?.try_get(0))
            .map_err(|error| self.fail("read the clock of", &error))
    }

    fn prune(&mut self, before: Timestamp, dry_run: bool) -> Result<PruneReport> {
        self.write_or_rehearse("prune", dry_run, |tx| rules::prune(tx, before))
    }

    fn export(&mut self, sink: &mut dyn FnMut(ExportedRun) -> Result<()>) -> Result<()> {
        let shown = self.shown.clone();
        let read = |error: tokio_postgres::Error| -> anyhow::Error {
            fault("read", &shown, &error).into()
        };
        // One snapshot while runs go on; runs and their attempts come in
        // batches from two cursors in the same order, so memory stays
        // bounded whatever the ledger holds.
        let mut tx = Transaction::begin(
            &mut self.client,
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        )
        .map_err(read)?;
        let mut cursors = Cursors::open(&mut tx).map_err(read)?;
        while let Some((run, attempts)) = cursors.next(&mut tx).map_err(read)? {
            sink(ExportedRun {
                head: run.head,
                run,
                attempts,
            })?;
        }
        tx.commit().map_err(read)
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

    fn jobs(&mut self, glob: Option<&str>) -> Result<Vec<JobState>> {
        let regex = glob.map(glob_to_regex);
        let result = (|| {
            let rows = self.client.query(
                &format!(
                    "SELECT {} FROM idem.jobs WHERE $1::text IS NULL OR job ~ $1
                     ORDER BY job COLLATE \"C\"",
                    JobCol::LIST
                ),
                &[&regex],
            )?;
            let mut jobs = rows
                .iter()
                .map(job_from_row)
                .collect::<Result<Vec<_>, _>>()?;
            let live = self.client.query(
                "SELECT r.job, count(*) FROM idem.keys k JOIN idem.runs r ON r.id = k.head
                 WHERE r.status = 'running' AND k.lease_until >= clock_timestamp()
                 GROUP BY r.job",
                &[],
            )?;
            for row in &live {
                let job: Option<String> = row.try_get(0)?;
                let count: i64 = row.try_get(1)?;
                if let Some(state) = jobs
                    .iter_mut()
                    .find(|state| Some(&state.job) == job.as_ref())
                {
                    state.live = count.max(0) as u64;
                }
            }
            Ok(jobs)
        })();
        result.map_err(|error: tokio_postgres::Error| self.fail("read", &error))
    }

    fn keys_matching(&mut self, glob: &str) -> Result<Vec<String>> {
        let regex = glob_to_regex(glob);
        let result = (|| {
            self.client
                .query(
                    "SELECT key FROM idem.keys WHERE key ~ $1 ORDER BY key COLLATE \"C\"",
                    &[&regex],
                )?
                .iter()
                .map(|row| row.try_get(0))
                .collect::<Result<Vec<String>, _>>()
        })();
        result.map_err(|error| self.fail("read", &error))
    }

    fn take_locks(
        &mut self,
        names: &[String],
        run_id: Uuid,
        lease: Duration,
    ) -> Result<Result<Locks, String>> {
        let result = (|| {
            let mut tx = begin(&mut self.client)?;
            for name in names {
                // Taken only when free or when its holder's lease ran out;
                // a new epoch fences the one who lost it.
                let taken = tx.query_typed_opt(
                    "INSERT INTO idem.locks (name, holder, epoch, lease, lease_until)
                     VALUES ($1, $2, nextval('idem.fences'), $3::text::interval,
                         clock_timestamp() + $3::text::interval)
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,
                         epoch = excluded.epoch, lease = excluded.lease,
                         lease_until = excluded.lease_until
                     WHERE idem.locks.lease_until IS NULL
                         OR idem.locks.lease_until < clock_timestamp()
                     RETURNING epoch",
                    typed![&name => TEXT, &run_id => UUID, &interval(lease) => TEXT],
                )?;
                if taken.is_none() {
                    tx.rollback()?;
                    return Ok(Err(name.clone()));
                }
            }
            tx.commit()?;
            Ok(Ok(Locks {
                holds: Vec::new(),
                names: names.to_vec(),
            }))
        })();
        result.map_err(|error: tokio_postgres::Error| self.fail("take a lock in", &error))
    }

    fn release_locks(&mut self, run_id: Uuid) -> Result<()> {
        self.client
            .execute_typed(RELEASE_LOCKS, typed![&run_id => UUID])
            .map(|_| ())
            .map_err(|error| self.fail("release a lock in", &error))
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

/// Starts the new run of `key` (its row locked) and makes it the key's
/// head under a new epoch and lease: the epoch.
async fn start_run(
    db: &tokio_postgres::Client,
    key: &str,
    new: &NewRun,
) -> Result<i64, tokio_postgres::Error> {
    // One statement, one round trip. The key's row is locked already, so
    // the job's row is the only lock it takes: every writer takes them in
    // that order (key, then job), so none waits on another in a circle.
    let row = db
        .query_typed_one(
            concat!(
                "WITH job AS (
                 INSERT INTO idem.jobs (job, template, zone, host, command, shell, first_run,
                     last_run, last_status, checked_at, running)
                 VALUES ($9, $10, $11, $3, $5, $6, now(), now(), 'running', now(), 1)
                 ON CONFLICT (job) DO UPDATE SET template = excluded.template,
                     zone = excluded.zone, host = excluded.host, command = excluded.command,
                     shell = excluded.shell,
                     first_run = coalesce(idem.jobs.first_run, now()), last_run = now(),
                     last_status = 'running', last_exit = NULL, checked_at = now(),
                     running = idem.jobs.running + 1
             ), run AS (
                 INSERT INTO idem.runs (run_id, key, status, started_at, host, pid,
                     command, shell, recovered, job)
                 VALUES ($2, $1, 'running', now(), $3, $4, $5, $6, $7, $9)
                 RETURNING id
             )
             UPDATE idem.keys SET head = run.id, epoch = nextval('idem.fences'), ",
                owner_gone!(),
                ", lease = $8::text::interval,
                 lease_until = clock_timestamp() + $8::text::interval
             FROM run WHERE idem.keys.key = $1
             RETURNING idem.keys.epoch"
            ),
            typed![
                &key => TEXT,
                &new.run_id => UUID,
                &new.host => TEXT,
                &i64::from(new.pid) => INT8,
                &encode_command(&new.command) => BYTEA,
                &new.shell => BOOL,
                &new.recovered => BOOL,
                &interval(new.lease) => TEXT,
                &new.job.name => TEXT,
                &new.job.template => TEXT,
                &new.job.zone => TEXT,
            ],
        )
        .await?;
    row.try_get(0)
}

/// What [`record_outcome`] found.
struct Recorded {
    /// The outcome is recorded. A repeat after a lost connection may find
    /// its first commit: this looks at the run as it was before.
    recorded: bool,
    /// This statement ended the run.
    ended: bool,
    /// The run's job, read for its figures (see [`job_of_run`]).
    job: Option<Row>,
}

/// The key's lock, the last attempt, the outcome, the key's release and
/// the run's job in one statement; None if the claim's epoch no longer
/// holds the key.
async fn record_outcome(
    db: &tokio_postgres::Client,
    claim: &Claim,
    last: Option<&Attempt>,
    outcome: &Outcome,
) -> Result<Option<Recorded>, tokio_postgres::Error> {
    let attempt = last.cloned().unwrap_or_default();
    let tail = |bytes: &Vec<u8>| (!bytes.is_empty()).then(|| bytes.clone());
    // `k` takes the key's row lock first (every write below waits on it),
    // so no claim can read the run as running (and abandon it) while this
    // records its outcome; each write is void unless the epoch held.
    let row = db
        .query_typed_one(
            &format!(
                "WITH k AS (
                 SELECT 1 FROM idem.keys WHERE key = $6 AND epoch = $15 FOR UPDATE
             ), a AS (
                 INSERT INTO idem.attempts (run, n, started_at, finished_at, exit_code,
                     signal, timed_out, stdout_tail, stderr_tail, cut)
                 SELECT id, $7, now(), now(), $8, $9, $10, $11, $12, $14
                 FROM idem.runs WHERE run_id = $1 AND $13 AND EXISTS (SELECT 1 FROM k)
                 ON CONFLICT (run, n) DO UPDATE SET finished_at = now(), exit_code = $8,
                     signal = $9, timed_out = $10, stdout_tail = $11, stderr_tail = $12,
                     cut = $14
             ), r AS (
                 UPDATE idem.runs SET status = $2, exit_code = $3, signal = $4,
                     finished_at = now(), attempts = greatest(attempts, $5)
                 WHERE run_id = $1 AND status = 'running' AND EXISTS (SELECT 1 FROM k)
                 RETURNING id
             ), o AS (
                 UPDATE idem.keys SET {RELEASE_OWNER}
                 WHERE key = $6 AND EXISTS (SELECT 1 FROM k)
             ), j AS ({job})
             SELECT j.*, j.job IS NOT NULL, EXISTS (SELECT 1 FROM k),
                 (SELECT count(*) FROM r) = 1
                     OR EXISTS (SELECT 1 FROM idem.runs
                                WHERE run_id = $1 AND status = $2 AND exit_code = $3),
                 (SELECT count(*) FROM r) = 1
             FROM (SELECT 1) one LEFT JOIN j ON true",
                job = job_of_run("AND EXISTS (SELECT 1 FROM k)")
            ),
            typed![
                &claim.run_id => UUID,
                &outcome.status.as_str() => TEXT,
                &outcome.exit_code => INT4,
                &outcome.signal => INT4,
                &(attempt.number as i32) => INT4,
                &claim.key => TEXT,
                &(attempt.number as i32) => INT4,
                &attempt.exit_code => INT4,
                &attempt.signal => INT4,
                &attempt.timed_out => BOOL,
                &tail(&attempt.stdout_tail) => BYTEA,
                &tail(&attempt.stderr_tail) => BYTEA,
                &last.is_some() => BOOL,
                &attempt.cut => BOOL,
                &claim.token => INT8,
            ],
        )
        .await?;
    let at = JOB_OF_RUN_COUNT;
    if !row.try_get::<_, bool>(at + 1)? {
        return Ok(None);
    }
    Ok(Some(Recorded {
        recorded: row.try_get(at + 2)?,
        ended: row.try_get(at + 3)?,
        job: row.try_get::<_, bool>(at)?.then_some(row),
    }))
}

/// The two cursors of `export`: runs, and their attempts in the same
/// order, each read in batches.
struct Cursors {
    batch: std::collections::VecDeque<Row>,
    pending: std::collections::VecDeque<Row>,
    attempts_done: bool,
}

/// The next rows of each cursor, 256 at a time.
const FETCH_RUNS: &str = "FETCH 256 FROM runs";
const FETCH_ATTEMPTS: &str = "FETCH 256 FROM attempts";

impl Cursors {
    fn open(tx: &mut Transaction<'_>) -> Result<Cursors, tokio_postgres::Error> {
        tx.batch_execute(&format!(
            "DECLARE runs NO SCROLL CURSOR FOR
                 SELECT {} FROM idem.runs r ORDER BY r.started_at, r.id;
             DECLARE attempts NO SCROLL CURSOR FOR
                 SELECT {} FROM idem.attempts a JOIN idem.runs r ON r.id = a.run
                 ORDER BY r.started_at, r.id, a.n",
            RunCol::LIST,
            attempt_list(true, "NULL::bytea")
        ))?;
        Ok(Cursors {
            batch: Default::default(),
            pending: Default::default(),
            attempts_done: false,
        })
    }

    /// The next run with its attempts; `None` after the last.
    fn next(
        &mut self,
        tx: &mut Transaction<'_>,
    ) -> Result<Option<(Run, Vec<Attempt>)>, tokio_postgres::Error> {
        if self.batch.is_empty() {
            self.batch.extend(tx.query_typed(FETCH_RUNS, &[])?);
        }
        let Some(row) = self.batch.pop_front() else {
            return Ok(None);
        };
        let (id, run) = run_from_row(&row)?;
        let mut attempts = Vec::new();
        loop {
            if self.pending.is_empty() && !self.attempts_done {
                let more = tx.query_typed(FETCH_ATTEMPTS, &[])?;
                self.attempts_done = more.is_empty();
                self.pending.extend(more);
            }
            match self.pending.front() {
                Some(next) if attempt_from_row(next)?.0 == id => {}
                _ => break,
            }
            if let Some(next) = self.pending.pop_front() {
                attempts.push(attempt_from_row(&next)?.1);
            }
        }
        Ok(Some((run, attempts)))
    }
}

/// `doing` the ledger `shown` failed with `error`: a stored value that
/// cannot be read is said as SQLite's are; anything else as the server or
/// the connection says it, a lost connection or a lock not granted being
/// worth riding out.
fn fault(doing: &str, shown: &str, error: &tokio_postgres::Error) -> LedgerError {
    let passing = connection_lost(error) || error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE);
    let why = match unreadable(error) {
        Some(what) => Why::Unreadable(what),
        None if passing => Why::Passing(connect::describe(error)),
        None => Why::Said(connect::describe(error)),
    };
    LedgerError::Could {
        doing: doing.to_owned(),
        ledger: shown.to_owned(),
        why,
    }
}

/// The words of a stored value that cannot be read, if that is `error`.
fn unreadable(error: &tokio_postgres::Error) -> Option<String> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(unreadable) = cause.downcast_ref::<Unreadable>() {
            return Some(unreadable.to_string());
        }
        source = cause.source();
    }
    None
}

/// Whether `error` broke the connection (rather than being the server's
/// answer to a statement): worth one more try on a new connection.
fn connection_lost(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        // Class 08: connection exception; 57P01-03: the server shut down.
        Some(code) => {
            code.code().starts_with("08") || matches!(code.code(), "57P01" | "57P02" | "57P03")
        }
        None => error.as_db_error().is_none(),
    }
}

/// A shell glob (`*`, `?`, `[...]`, as SQLite's GLOB) as an anchored
/// POSIX regular expression.
fn glob_to_regex(glob: &str) -> String {
    let mut regex = String::from("^");
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => regex.push_str(".*"),
            '?' => regex.push('.'),
            '[' => {
                let mut class = String::from("[");
                if chars.peek() == Some(&'^') {
                    chars.next();
                    class.push('^');
                }
                let mut closed = false;
                let mut first = true;
                for c in chars.by_ref() {
                    if c == ']' && !first {
                        closed = true;
                        break;
                    }
                    first = false;
                    if c == '\\' {
                        class.push_str("\\\\");
                    } else {
                        class.push(c);
                    }
                }
                if closed {
                    regex.push_str(&class);
                    regex.push(']');
                } else {
                    regex.push_str(&regex_escape(&class));
                }
            }
            c => regex.push_str(&regex_escape(&c.to_string())),
        }
    }
    regex.push('$');
    regex
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_punctuation() {
                format!("\\{c}")
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_become_anchored_regexes() {
        assert_eq!(glob_to_regex("backup-*"), "^backup\\-.*$");
        assert_eq!(glob_to_regex("a?c"), "^a.c$");
        assert_eq!(glob_to_regex("[ab]x"), "^[ab]x$");
        assert_eq!(glob_to_regex("[^a]"), "^[^a]$");
        assert_eq!(glob_to_regex("a.b"), "^a\\.b$");
        assert_eq!(glob_to_regex("[oops"), "^\\[oops$");
    }
}
