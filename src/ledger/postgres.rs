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

mod connect;
mod schema;

use std::time::Duration;

use anyhow::Result;
use jiff::Timestamp;
use postgres::error::SqlState;
use postgres::{Client, GenericClient, Row};
use uuid::Uuid;

use super::{
    decode_command, encode_command, Attempt, Claim, ExportedRun, ForgetReport, ForgottenKey, Head,
    HookRun, ImportReport, JobState, KeyMetrics, Ledger, ListFilter, Locks, Outcome, Owner, Plan,
    PruneReport, Run, RunAttempts, Status, Tails,
};
use crate::exit::{Failure, IDEM_FAILED};
use schema::{LATEST, MIGRATIONS};

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

/// Parameters with their types, so that a statement costs one round trip
/// to the server (no separate prepare): `typed![&key => TEXT, &n => INT4]`.
macro_rules! typed {
    ($($value:expr => $type:ident),* $(,)?) => {
        &[$(($value as &(dyn postgres::types::ToSql + Sync), postgres::types::Type::$type)),*]
    };
}

const RUN_COLUMNS: &str = "r.key, r.id, r.run_id, r.status, r.exit_code, r.signal, r.attempts, \
     r.started_at, r.finished_at, r.host, r.pid, r.command, r.shell, r.recovered, \
     coalesce(r.job, r.key), \
     EXISTS (SELECT 1 FROM idem.keys hk WHERE hk.key = r.key AND hk.head = r.id)";

pub struct PostgresLedger {
    client: Client,
    /// To connect again when the connection was cut (see [`Self::retrying`]).
    config: postgres::Config,
    /// The URL with its password masked, for messages.
    shown: String,
}

impl PostgresLedger {
    /// Connects and creates or migrates the schema when needed. Unreachable
    /// or refusing: a [`Failure`] with exit code 125.
    pub fn open(url: &str, shown: &str) -> Result<PostgresLedger> {
        let config = connect::config(url, shown)?;
        let client = connect::connect(&config).map_err(|why| {
            Failure::new(
                IDEM_FAILED,
                format!("could not connect to ledger {shown}: {why}; check the URL and that the server is up"),
            )
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
        mut body: impl FnMut(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
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

    fn fail(&self, doing: &str, error: &postgres::Error) -> anyhow::Error {
        let failure = Failure::new(
            IDEM_FAILED,
            format!(
                "could not {doing} ledger {}: {}",
                self.shown,
                connect::describe(error)
            ),
        );
        let passing = connection_lost(error) || error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE);
        if passing {
            failure.transient()
        } else {
            failure
        }
        .into()
    }

    /// The schema's version; 0 when there is no schema yet.
    fn version(client: &mut impl GenericClient) -> Result<i32, postgres::Error> {
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
    fn setup(&mut self) -> Result<i32, postgres::Error> {
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
                    postgres::SimpleQueryMessage::Row(row) => row.get(0),
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
        let result: Result<Option<i32>, postgres::Error> = result;
        match result {
            Ok(None) => Ok(()),
            Ok(Some(version)) => Err(self.newer(version)),
            Err(error) if error.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
                Err(Failure::new(
                    IDEM_FAILED,
                    format!(
                        "could not create schema {SCHEMA} in ledger {}: {}; let the database's owner run idem once, or grant CREATE on the database",
                        self.shown,
                        connect::describe(&error)
                    ),
                )
                .into())
            }
            Err(error) => Err(self.fail("create or migrate", &error)),
        }
    }

    fn newer(&self, version: i32) -> anyhow::Error {
        Failure::new(
            IDEM_FAILED,
            format!(
                "ledger {} was written by a newer idem (schema {version}, this idem knows {LATEST}); upgrade idem",
                self.shown
            ),
        )
        .into()
    }

    fn lost(claim: &Claim) -> anyhow::Error {
        Failure::new(
            IDEM_FAILED,
            format!(
            "run {} of key {} lost its claim: its lease ran out and another run took the key over",
            claim.run_id, claim.key
        ),
        )
        .into()
    }
}

/// A connection that only reads, for `idem doctor`: nothing is created
/// or migrated, and the session refuses writes should one be tried.
pub fn connect_read_only(url: &str, shown: &str) -> Result<Client, String> {
    let config = connect::config(url, shown).map_err(|failure| failure.message)?;
    let mut client = connect::connect(&config)?;
    client
        .batch_execute("SET default_transaction_read_only = on; SET statement_timeout = '60s'")
        .map_err(|error| connect::describe(&error))?;
    Ok(client)
}

/// The schema version of the ledger on `client` (0: no schema yet), and
/// the one this idem writes.
pub fn schema_versions(client: &mut Client) -> Result<(i32, i32), postgres::Error> {
    Ok((PostgresLedger::version(client)?, LATEST))
}

pub use connect::describe;

/// Reads the columns of [`RUN_COLUMNS`]: the run's row id and the run.
/// (`try_get` throughout: a schema changed behind idem's back is an error
/// to report, never a panic.)
fn run_from_row(row: &Row) -> Result<(i64, Run), postgres::Error> {
    let status: String = row.try_get(3)?;
    let run = Run {
        key: row.try_get(0)?,
        run_id: row.try_get(2)?,
        status: Status::parse(&status).unwrap_or(Status::Failed),
        exit_code: row.try_get(4)?,
        signal: row.try_get(5)?,
        attempts: row.try_get::<_, i32>(6)?.max(0) as u32,
        started_at: row.try_get(7)?,
        finished_at: row.try_get(8)?,
        host: row.try_get(9)?,
        pid: row.try_get::<_, i64>(10)? as u32,
        command: decode_command(row.try_get::<_, &[u8]>(11)?),
        shell: row.try_get(12)?,
        recovered: row.try_get(13)?,
        job: row.try_get(14)?,
        head: row.try_get(15)?,
    };
    Ok((row.try_get(1)?, run))
}

/// Reads the columns of [`ATTEMPT_COLUMNS`]: the run's row id and the attempt.
fn attempt_from_row(row: &Row) -> Result<(i64, Attempt), postgres::Error> {
    let attempt = Attempt {
        number: row.try_get::<_, i32>(1)?.max(0) as u32,
        started_at: Some(row.try_get(2)?),
        finished_at: row.try_get(3)?,
        exit_code: row.try_get(4)?,
        signal: row.try_get(5)?,
        timed_out: row.try_get(6)?,
        stdout_tail: row.try_get::<_, Option<Vec<u8>>>(7)?.unwrap_or_default(),
        stderr_tail: row.try_get::<_, Option<Vec<u8>>>(8)?.unwrap_or_default(),
        cut: row.try_get(9)?,
    };
    Ok((row.try_get(0)?, attempt))
}

const ATTEMPT_COLUMNS: &str = "a.run, a.n, a.started_at, a.finished_at, a.exit_code, a.signal, \
     a.timed_out, a.stdout_tail, a.stderr_tail, a.cut";

/// The key's head, with whether its lease has passed by the database's clock.
fn query_head(client: &mut impl GenericClient, key: &str) -> Result<Option<Head>, postgres::Error> {
    let row = client.query_typed_opt(
        &format!(
            "SELECT {RUN_COLUMNS}, k.owner_pgid,
                    coalesce(k.lease_until < clock_timestamp(), false), now(), j.checked_at
             FROM idem.keys k JOIN idem.runs r ON r.id = k.head
             LEFT JOIN idem.jobs j ON j.job = r.job WHERE k.key = $1"
        ),
        typed![&key => TEXT],
    )?;
    let Some(row) = row else {
        return Ok(None);
    };
    let (_, run) = run_from_row(&row)?;
    let owner = if run.status == Status::Running {
        let expired: bool = row.try_get(17)?;
        Some(Owner {
            host: run.host.clone(),
            pid: run.pid,
            pgid: row.try_get::<_, Option<i64>>(16)?.map(|pgid| pgid as u32),
            alive: Some(!expired),
        })
    } else {
        None
    };
    Ok(Some(Head {
        run,
        owner,
        read_at: Some(row.try_get(18)?),
        checked_at: row.try_get(19)?,
    }))
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
fn begin(client: &mut Client) -> Result<postgres::Transaction<'_>, postgres::Error> {
    client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::ReadCommitted)
        .start()
}

/// Locks the key's row if the claim's epoch still holds it; false if not.
fn lock_claimed(
    tx: &mut postgres::Transaction<'_>,
    claim: &Claim,
) -> Result<bool, postgres::Error> {
    Ok(tx
        .query_typed_opt(
            "SELECT 1 FROM idem.keys WHERE key = $1 AND epoch = $2 FOR UPDATE",
            typed![&claim.key => TEXT, &claim.token => INT8],
        )?
        .is_some())
}

fn upsert_attempt(
    tx: &mut postgres::Transaction<'_>,
    claim: &Claim,
    attempt: &Attempt,
) -> Result<(), postgres::Error> {
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
        self.retrying(|client| query_head(client, key))
            .map_err(|error| self.fail("read", &error))
    }

    fn claim(
        &mut self,
        key: &str,
        plan: &mut dyn FnMut(Option<&Head>, bool) -> Plan,
    ) -> Result<Option<Claim>> {
        let result = (|| {
            let mut tx = begin(&mut self.client)?;
            // Creates the key's row, or locks it without writing (a
            // conflicting row is locked even when WHERE is false). Every
            // claimer of the key queues here; the head is read after the
            // lock, in a statement of its own, so it sees the last commit.
            tx.execute_typed(
                "INSERT INTO idem.keys (key) VALUES ($1)
                 ON CONFLICT (key) DO UPDATE SET epoch = idem.keys.epoch WHERE false",
                typed![&key => TEXT],
            )?;
            let head = query_head(&mut tx, key)?;
            // A shared ledger's liveness is the lease alone: nothing lingers.
            let plan = plan(head.as_ref(), false);
            if plan.abandon_head {
                mark_abandoned(&mut tx, key)?;
            }
            let Some(new) = plan.claim else {
                tx.commit()?;
                return Ok(None);
            };
            // The job's row after the key's: every writer takes them in
            // that order, so none waits on another in a circle.
            tx.execute_typed(
                "INSERT INTO idem.jobs (job, template, zone, host, command, shell, first_run,
                     last_run, last_status, checked_at, running)
                 VALUES ($1, $2, $3, $4, $5, $6, now(), now(), 'running', now(), 1)
                 ON CONFLICT (job) DO UPDATE SET template = excluded.template,
                     zone = excluded.zone, host = excluded.host, command = excluded.command,
                     shell = excluded.shell,
                     first_run = coalesce(idem.jobs.first_run, now()), last_run = now(),
                     last_status = 'running', last_exit = NULL, checked_at = now(),
                     running = idem.jobs.running + 1",
                typed![
                    &new.job.name => TEXT,
                    &new.job.template => TEXT,
                    &new.job.zone => TEXT,
                    &new.host => TEXT,
                    &encode_command(&new.command) => BYTEA,
                    &new.shell => BOOL,
                ],
            )?;
            let row = tx.query_typed_one(
                "WITH run AS (
                     INSERT INTO idem.runs (run_id, key, status, started_at, host, pid,
                         command, shell, recovered, job)
                     VALUES ($2, $1, 'running', now(), $3, $4, $5, $6, $7, $9)
                     RETURNING id
                 )
                 UPDATE idem.keys SET head = run.id, epoch = nextval('idem.fences'),
                     owner_boot = NULL, owner_pid_start = NULL, owner_pgid = NULL,
                     owner_pgid_start = NULL, lease = $8::text::interval,
                     lease_until = clock_timestamp() + $8::text::interval
                 FROM run WHERE idem.keys.key = $1
                 RETURNING idem.keys.epoch",
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
                ],
            )?;
            tx.commit()?;
            let epoch: i64 = row.try_get(0)?;
            Ok(Some(Claim {
                key: key.to_owned(),
                run_id: new.run_id,
                token: epoch,
                fence: epoch,
                hold: None,
                locks: Vec::new(),
            }))
        })();
        result.map_err(|error: postgres::Error| {
            if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
                return Failure::new(
                    IDEM_FAILED,
                    format!(
                        "could not claim key {key} in ledger {}: another session held its row for {}s; look for a stuck one in pg_stat_activity",
                        self.shown,
                        LOCK_WAIT.as_secs()
                    ),
                )
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
            let mut tx = begin(client)?;
            // Under the key's lock, so no claim can read the run as running
            // (and abandon it) while this records its outcome.
            if !lock_claimed(&mut tx, claim)? {
                return Ok(false);
            }
            // The last attempt, the outcome and the key's release in one
            // statement. A repeat after a lost connection may find its
            // first commit: `recorded` looks at the run as it was before.
            let attempt = last.cloned().unwrap_or_default();
            let tail = |bytes: &Vec<u8>| (!bytes.is_empty()).then(|| bytes.clone());
            let row = tx.query_typed_one(
                "WITH a AS (
                     INSERT INTO idem.attempts (run, n, started_at, finished_at, exit_code,
                         signal, timed_out, stdout_tail, stderr_tail, cut)
                     SELECT id, $7, now(), now(), $8, $9, $10, $11, $12, $14
                     FROM idem.runs WHERE run_id = $1 AND $13
                     ON CONFLICT (run, n) DO UPDATE SET finished_at = now(), exit_code = $8,
                         signal = $9, timed_out = $10, stdout_tail = $11, stderr_tail = $12,
                         cut = $14
                 ), r AS (
                     UPDATE idem.runs SET status = $2, exit_code = $3, signal = $4,
                         finished_at = now(), attempts = greatest(attempts, $5)
                     WHERE run_id = $1 AND status = 'running'
                     RETURNING id
                 ), o AS (
                     UPDATE idem.keys SET owner_boot = NULL, owner_pid_start = NULL,
                         owner_pgid = NULL, owner_pgid_start = NULL, lease_until = NULL
                     WHERE key = $6
                 )
                 SELECT (SELECT count(*) FROM r) = 1
                     OR EXISTS (SELECT 1 FROM idem.runs
                                WHERE run_id = $1 AND status = $2 AND exit_code = $3),
                     (SELECT count(*) FROM r) = 1",
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
                ],
            )?;
            let recorded: bool = row.try_get(0)?;
            if row.try_get::<_, bool>(1)? {
                job_outcome(
                    &mut tx,
                    claim.run_id,
                    outcome.status,
                    Some(outcome.exit_code),
                )?;
                release_locks(&mut tx, claim.run_id)?;
            }
            tx.commit()?;
            Ok(recorded)
        });
        match result {
            Ok(true) => Ok(()),
            Ok(false) => Err(Failure::new(IDEM_FAILED, format!(
                "the outcome of run {} of key {} could not be recorded: its lease ran out and another run took the key over",
                claim.run_id, claim.key
            ))
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
        let mut sql = format!("SELECT {RUN_COLUMNS} FROM idem.runs r WHERE true");
        let glob = filter.key_glob.as_deref().map(glob_to_regex);
        let job_glob = filter.job_glob.as_deref().map(glob_to_regex);
        let statuses: Vec<String> = filter
            .statuses
            .iter()
            .map(|status| status.as_str().to_owned())
            .collect();
        let limit = i64::from(filter.limit);
        let mut values: Vec<&(dyn postgres::types::ToSql + Sync)> = Vec::new();
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
                    "SELECT {RUN_COLUMNS} FROM idem.runs r WHERE r.key = $1
                     ORDER BY r.started_at DESC, r.id DESC LIMIT $2"
                ),
                &[&key, &i64::from(limit)],
            )?;
            let ids: Vec<i64> = runs
                .iter()
                .map(|row| row.try_get(1))
                .collect::<Result<_, _>>()?;
            // The attempts without their output: see `output`.
            let attempts = self.client.query(
                "SELECT a.run, a.n, a.started_at, a.finished_at, a.exit_code, a.signal,
                     a.timed_out, NULL::bytea, NULL::bytea, a.cut
                 FROM idem.attempts a WHERE a.run = ANY($1) ORDER BY a.run, a.n",
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
        result.map_err(|error: postgres::Error| self.fail("read", &error))
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
        .map_err(|error: postgres::Error| self.fail("read", &error))
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
        let result = (|| {
            let mut tx = begin(&mut self.client)?;
            let report = forget_keys(&mut tx, keys, purge, force)?;
            // A dry run does the same work and rolls it back, so what it
            // reports is exactly what a real one would do.
            if dry_run || report.busy().next().is_some() {
                tx.rollback()?;
            } else {
                tx.commit()?;
            }
            Ok(report)
        })();
        result.map_err(|error: postgres::Error| self.fail("forget keys in", &error))
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
            .collect::<Result<_, postgres::Error>>()
            .map_err(|error| self.fail("read", &error))
    }

    fn now(&mut self) -> Result<Timestamp> {
        self.retrying(|client| client.query_typed_one("SELECT now()", &[])?.try_get(0))
            .map_err(|error| self.fail("read the clock of", &error))
    }

    fn prune(&mut self, before: Timestamp, dry_run: bool) -> Result<PruneReport> {
        let result = (|| {
            let mut tx = begin(&mut self.client)?;
            let report = prune_runs(&mut tx, before)?;
            if dry_run {
                tx.rollback()?;
            } else {
                tx.commit()?;
            }
            Ok(report)
        })();
        result.map_err(|error: postgres::Error| self.fail("prune", &error))
    }

    fn export(&mut self, sink: &mut dyn FnMut(ExportedRun) -> Result<()>) -> Result<()> {
        let shown = self.shown.clone();
        let read = |error: postgres::Error| -> anyhow::Error {
            Failure::new(
                IDEM_FAILED,
                format!(
                    "could not read ledger {shown}: {}",
                    connect::describe(&error)
                ),
            )
            .into()
        };
        // One snapshot while runs go on; runs and their attempts come in
        // batches from two cursors in the same order, so memory stays
        // bounded whatever the ledger holds.
        let mut tx = self
            .client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(read)?;
        let runs = tx
            .bind(
                &format!(
                    "SELECT {RUN_COLUMNS}, coalesce(k.head = r.id, false)
                     FROM idem.runs r JOIN idem.keys k ON k.key = r.key
                     ORDER BY r.started_at, r.id"
                ),
                &[],
            )
            .map_err(read)?;
        let attempts = tx
            .bind(
                &format!(
                    "SELECT {ATTEMPT_COLUMNS} FROM idem.attempts a JOIN idem.runs r ON r.id = a.run
                     ORDER BY r.started_at, r.id, a.n"
                ),
                &[],
            )
            .map_err(read)?;
        const BATCH: i32 = 256;
        let mut pending: std::collections::VecDeque<Row> = Default::default();
        let mut attempts_done = false;
        loop {
            let batch = tx.query_portal(&runs, BATCH).map_err(read)?;
            if batch.is_empty() {
                break;
            }
            for row in &batch {
                let (id, run) = run_from_row(row).map_err(read)?;
                let head: bool = row.try_get(16).map_err(read)?;
                let mut run_attempts = Vec::new();
                loop {
                    if pending.is_empty() && !attempts_done {
                        let more = tx.query_portal(&attempts, BATCH).map_err(read)?;
                        attempts_done = more.is_empty();
                        pending.extend(more);
                    }
                    let next = match pending.front() {
                        Some(next) => next.try_get::<_, i64>(0).map_err(read)?,
                        None => break,
                    };
                    if next != id {
                        break;
                    }
                    if let Some(next) = pending.pop_front() {
                        run_attempts.push(attempt_from_row(&next).map_err(read)?.1);
                    }
                }
                sink(ExportedRun {
                    run,
                    attempts: run_attempts,
                    head,
                })?;
            }
        }
        tx.commit().map_err(read)
    }

    fn import(&mut self, runs: &[ExportedRun]) -> Result<ImportReport> {
        let result = (|| {
            let mut tx = begin(&mut self.client)?;
            let report = import_runs(&mut tx, runs)?;
            tx.commit()?;
            Ok(report)
        })();
        result.map_err(|error: postgres::Error| self.fail("import runs into", &error))
    }

    fn metrics(&mut self) -> Result<Vec<KeyMetrics>> {
        key_metrics(&mut self.client).map_err(|error| self.fail("read", &error))
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
                    "SELECT {JOB_COLUMNS} FROM idem.jobs WHERE $1::text IS NULL OR job ~ $1
                     ORDER BY job COLLATE \"C\""
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
        result.map_err(|error: postgres::Error| self.fail("read", &error))
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
        result.map_err(|error: postgres::Error| self.fail("take a lock in", &error))
    }

    fn release_locks(&mut self, run_id: Uuid) -> Result<()> {
        self.client
            .execute(
                "UPDATE idem.locks SET holder = NULL, lease_until = NULL WHERE holder = $1",
                &[&run_id],
            )
            .map(|_| ())
            .map_err(|error| self.fail("release a lock in", &error))
    }
}

fn forget_keys(
    tx: &mut postgres::Transaction<'_>,
    keys: &[String],
    purge: bool,
    force: bool,
) -> Result<ForgetReport, postgres::Error> {
    // The keys' row locks, so no claim of them reads or writes meanwhile;
    // taken in one order, so two forgets of the same keys cannot deadlock.
    let locked: std::collections::HashSet<String> = tx
        .query(
            "SELECT key FROM idem.keys WHERE key = ANY($1) ORDER BY key COLLATE \"C\" FOR UPDATE",
            &[&keys],
        )?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
    let mut report = ForgetReport::default();
    let mut found = Vec::new();
    for key in keys {
        let known = locked.contains(key);
        let head = query_head(tx, key)?;
        let runs: i64 = tx
            .query_one("SELECT count(*) FROM idem.runs WHERE key = $1", &[key])?
            .try_get(0)?;
        let running = head
            .as_ref()
            .filter(|head| head.run.status == Status::Running);
        let busy = running
            .and_then(|head| head.owner.clone())
            .filter(|owner| owner.alive == Some(true) || (owner.alive.is_none() && !force));
        let abandoned = running.is_some() && busy.is_none();
        report.keys.push(ForgottenKey {
            key: key.clone(),
            known,
            head: head.as_ref().map(|head| head.run.status),
            abandoned,
            runs: runs.max(0) as u64,
            busy,
        });
        if known {
            found.push((key, abandoned));
        }
    }
    if report.busy().next().is_some() {
        return Ok(report);
    }
    for (key, abandoned) in found {
        if abandoned {
            mark_abandoned(tx, key)?;
        }
        if purge {
            tx.execute(
                "DELETE FROM idem.attempts
                 WHERE run IN (SELECT id FROM idem.runs WHERE key = $1)",
                &[key],
            )?;
            uncount_runs(tx, "key = $1", key)?;
            tx.execute("DELETE FROM idem.runs WHERE key = $1", &[key])?;
            tx.execute("DELETE FROM idem.keys WHERE key = $1", &[key])?;
        } else {
            // The epoch rises too: an owner presumed gone that comes back
            // finds its claim lost.
            tx.execute(
                "UPDATE idem.keys SET head = NULL, epoch = nextval('idem.fences'), owner_boot = NULL,
                     owner_pid_start = NULL, owner_pgid = NULL, owner_pgid_start = NULL,
                     lease_until = NULL
                 WHERE key = $1",
                &[key],
            )?;
        }
    }
    Ok(report)
}

/// Ends the key's running head with an unknown outcome: its owner's lease
/// ran out.
fn mark_abandoned(tx: &mut postgres::Transaction<'_>, key: &str) -> Result<(), postgres::Error> {
    let abandoned = tx.query_typed_opt(
        "UPDATE idem.runs SET status = 'abandoned', finished_at = now()
         WHERE id = (SELECT head FROM idem.keys WHERE key = $1) AND status = 'running'
         RETURNING run_id",
        typed![&key => TEXT],
    )?;
    if let Some(row) = abandoned {
        let run_id: Uuid = row.try_get(0)?;
        job_outcome(tx, run_id, Status::Abandoned, None)?;
        release_locks(tx, run_id)?;
    }
    Ok(())
}

const JOB_COLUMNS: &str = "job, template, zone, host, command, shell, first_run, last_run, \
     last_status, last_exit, last_success, failures, running, succeeded, failed, abandoned, \
     checked_at, strip, ok_keys";

fn job_from_row(row: &Row) -> Result<JobState, postgres::Error> {
    let count = |index: usize| -> Result<u64, postgres::Error> {
        Ok(row.try_get::<_, i64>(index)?.max(0) as u64)
    };
    Ok(JobState {
        job: row.try_get(0)?,
        template: row.try_get(1)?,
        zone: row.try_get(2)?,
        host: row.try_get(3)?,
        command: decode_command(&row.try_get::<_, Option<Vec<u8>>>(4)?.unwrap_or_default()),
        shell: row.try_get(5)?,
        first_run: row.try_get(6)?,
        last_run: row.try_get(7)?,
        last_status: row
            .try_get::<_, Option<String>>(8)?
            .and_then(|status| Status::parse(&status)),
        last_exit: row.try_get(9)?,
        last_success: row.try_get(10)?,
        failures: count(11)?,
        runs: [count(12)?, count(13)?, count(14)?, count(15)?],
        checked_at: row.try_get(16)?,
        strip: row.try_get(17)?,
        ok_keys: super::decode_keys(row.try_get::<_, &str>(18)?),
        live: 0,
    })
}

/// Reads a job's figures under its row lock, with the database's `now()`.
fn load_job(
    tx: &mut postgres::Transaction<'_>,
    job: &str,
) -> Result<(JobState, Timestamp), postgres::Error> {
    let row = tx.query_one(
        &format!("SELECT {JOB_COLUMNS}, now() FROM idem.jobs WHERE job = $1 FOR UPDATE"),
        &[&job],
    )?;
    Ok((job_from_row(&row)?, row.try_get(19)?))
}

fn save_job(tx: &mut postgres::Transaction<'_>, job: &JobState) -> Result<(), postgres::Error> {
    tx.execute(
        "UPDATE idem.jobs SET first_run = $2, last_run = $3, last_status = $4, last_exit = $5,
             last_success = $6, failures = $7, running = $8, succeeded = $9, failed = $10,
             abandoned = $11, checked_at = $12, strip = $13, ok_keys = $14, host = $15,
             command = $16, shell = $17
         WHERE job = $1",
        &[
            &job.job,
            &job.first_run,
            &job.last_run,
            &job.last_status.map(Status::as_str),
            &job.last_exit,
            &job.last_success,
            &(job.failures as i64),
            &(job.runs[0] as i64),
            &(job.runs[1] as i64),
            &(job.runs[2] as i64),
            &(job.runs[3] as i64),
            &job.checked_at,
            &job.strip,
            &super::encode_keys(&job.ok_keys),
            &job.host,
            &encode_command(&job.command),
            &job.shell,
        ],
    )?;
    Ok(())
}

/// A running run ended `status`: its job's figures follow, in the
/// transaction that records it.
fn job_outcome(
    tx: &mut postgres::Transaction<'_>,
    run_id: Uuid,
    status: Status,
    exit: Option<i32>,
) -> Result<(), postgres::Error> {
    let Some(row) = tx.query_opt(
        "SELECT job, key, started_at FROM idem.runs WHERE run_id = $1",
        &[&run_id],
    )?
    else {
        return Ok(());
    };
    let Some(job) = row.try_get::<_, Option<String>>(0)? else {
        return Ok(());
    };
    let key: String = row.try_get(1)?;
    let (mut state, now) = load_job(tx, &job)?;
    state.runs[0] = state.runs[0].saturating_sub(1);
    let index = Status::ALL
        .iter()
        .position(|each| *each == status)
        .unwrap_or(0);
    state.runs[index] += 1;
    state.outcome(&key, status, row.try_get(2)?, exit, now);
    save_job(tx, &state)
}

/// Frees the named locks run `run_id` holds.
fn release_locks(tx: &mut postgres::Transaction<'_>, run_id: Uuid) -> Result<(), postgres::Error> {
    tx.execute(
        "UPDATE idem.locks SET holder = NULL, lease_until = NULL WHERE holder = $1",
        &[&run_id],
    )?;
    Ok(())
}

/// The job of an imported run, made when new, with the run counted in.
fn import_job(tx: &mut postgres::Transaction<'_>, run: &Run) -> Result<(), postgres::Error> {
    tx.execute(
        "INSERT INTO idem.jobs (job, template) VALUES ($1, $1) ON CONFLICT (job) DO NOTHING",
        &[&run.job],
    )?;
    let (mut job, _) = load_job(tx, &run.job)?;
    job.imported(run);
    save_job(tx, &job)
}

/// Takes the runs chosen by `filter` (`$1` bound to `value`) out of their
/// jobs' counts, before they are deleted.
fn uncount_runs(
    tx: &mut postgres::Transaction<'_>,
    filter: &str,
    value: &(dyn postgres::types::ToSql + Sync),
) -> Result<(), postgres::Error> {
    tx.execute(
        &format!(
            "UPDATE idem.jobs j SET running = greatest(j.running - c.running, 0),
                 succeeded = greatest(j.succeeded - c.succeeded, 0),
                 failed = greatest(j.failed - c.failed, 0),
                 abandoned = greatest(j.abandoned - c.abandoned, 0)
             FROM (SELECT job, count(*) FILTER (WHERE status = 'running') AS running,
                       count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
                       count(*) FILTER (WHERE status = 'failed') AS failed,
                       count(*) FILTER (WHERE status = 'abandoned') AS abandoned
                   FROM idem.runs WHERE {filter} GROUP BY job) AS c
             WHERE j.job = c.job"
        ),
        &[value],
    )?;
    Ok(())
}

fn prune_runs(
    tx: &mut postgres::Transaction<'_>,
    before: Timestamp,
) -> Result<PruneReport, postgres::Error> {
    // Finished before the cutoff, never running, never a key's head.
    let ids: Vec<i64> = tx
        .query(
            "SELECT r.id FROM idem.runs r
             WHERE r.started_at < $1 AND r.finished_at < $1 AND r.status <> 'running'
               AND NOT EXISTS (SELECT 1 FROM idem.keys k WHERE k.head = r.id)",
            &[&before],
        )?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
    let stats = tx.query_one(
        "SELECT count(*),
                coalesce(sum(octet_length(stdout_tail)), 0)
                    + coalesce(sum(octet_length(stderr_tail)), 0)
         FROM idem.attempts WHERE run = ANY($1)",
        &[&ids],
    )?;
    tx.execute("DELETE FROM idem.attempts WHERE run = ANY($1)", &[&ids])?;
    uncount_runs(tx, "id = ANY($1)", &ids)?;
    let runs = tx.execute("DELETE FROM idem.runs WHERE id = ANY($1)", &[&ids])?;
    let keys = tx.execute(
        "DELETE FROM idem.keys k WHERE k.head IS NULL
           AND NOT EXISTS (SELECT 1 FROM idem.runs r WHERE r.key = k.key)",
        &[],
    )?;
    Ok(PruneReport {
        runs,
        attempts: stats.try_get::<_, i64>(0)?.max(0) as u64,
        output_bytes: stats.try_get::<_, i64>(1)?.max(0) as u64,
        keys,
    })
}

fn insert_attempts(
    tx: &mut postgres::Transaction<'_>,
    run: i64,
    attempts: &[Attempt],
) -> Result<(), postgres::Error> {
    let insert = tx.prepare(
        "INSERT INTO idem.attempts (run, n, started_at, finished_at, exit_code, signal,
             timed_out, stdout_tail, stderr_tail, cut)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )?;
    let tail = |bytes: &Vec<u8>| (!bytes.is_empty()).then(|| bytes.clone());
    for attempt in attempts {
        tx.execute(
            &insert,
            &[
                &run,
                &(attempt.number as i32),
                &attempt.started_at.unwrap_or(Timestamp::UNIX_EPOCH),
                &attempt.finished_at,
                &attempt.exit_code,
                &attempt.signal,
                &attempt.timed_out,
                &tail(&attempt.stdout_tail),
                &tail(&attempt.stderr_tail),
                &attempt.cut,
            ],
        )?;
    }
    Ok(())
}

fn import_runs(
    tx: &mut postgres::Transaction<'_>,
    runs: &[ExportedRun],
) -> Result<ImportReport, postgres::Error> {
    let mut report = ImportReport::default();
    for item in runs {
        let run = &item.run;
        tx.execute(
            "INSERT INTO idem.keys (key) VALUES ($1) ON CONFLICT (key) DO NOTHING",
            &[&run.key],
        )?;
        // The key's row lock, as a claim takes it.
        tx.execute(
            "SELECT 1 FROM idem.keys WHERE key = $1 FOR UPDATE",
            &[&run.key],
        )?;
        let existing = tx.query_opt(
            "SELECT id, status FROM idem.runs WHERE run_id = $1",
            &[&run.run_id],
        )?;
        let finishes = match &existing {
            Some(row) => row.try_get::<_, &str>(1)? == "running" && run.status != Status::Running,
            None => false,
        };
        // A copy never overrides a run that goes on here.
        let lives = finishes
            && query_head(tx, &run.key)?
                .and_then(|head| head.owner)
                .is_some_and(|owner| owner.presumed_alive());
        let id: i64 = match existing {
            Some(_) if lives => {
                report.unchanged += 1;
                continue;
            }
            Some(row) if finishes => {
                // Exported again after it finished: take the outcome.
                let id: i64 = row.try_get(0)?;
                tx.execute(
                    "UPDATE idem.runs SET status = $2, exit_code = $3, signal = $4,
                         attempts = $5, finished_at = $6
                     WHERE id = $1",
                    &[
                        &id,
                        &run.status.as_str(),
                        &run.exit_code,
                        &run.signal,
                        &(run.attempts as i32),
                        &run.finished_at,
                    ],
                )?;
                tx.execute("DELETE FROM idem.attempts WHERE run = $1", &[&id])?;
                insert_attempts(tx, id, &item.attempts)?;
                job_outcome(tx, run.run_id, run.status, run.exit_code)?;
                tx.execute(
                    "UPDATE idem.keys SET owner_boot = NULL, owner_pid_start = NULL,
                         owner_pgid = NULL, owner_pgid_start = NULL, lease_until = NULL
                     WHERE head = $1",
                    &[&id],
                )?;
                report.updated += 1;
                id
            }
            Some(_) => {
                report.unchanged += 1;
                continue;
            }
            None => {
                import_job(tx, run)?;
                let id: i64 = tx
                    .query_one(
                        "INSERT INTO idem.runs (run_id, key, status, exit_code, signal, attempts,
                             started_at, finished_at, host, pid, command, shell, recovered, job)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                         RETURNING id",
                        &[
                            &run.run_id,
                            &run.key,
                            &run.status.as_str(),
                            &run.exit_code,
                            &run.signal,
                            &(run.attempts as i32),
                            &run.started_at,
                            &run.finished_at,
                            &run.host,
                            &i64::from(run.pid),
                            &encode_command(&run.command),
                            &run.shell,
                            &run.recovered,
                            &run.job,
                        ],
                    )?
                    .try_get(0)?;
                insert_attempts(tx, id, &item.attempts)?;
                report.added += 1;
                id
            }
        };
        // A running run's owner is not in this ledger, so it cannot decide.
        if !item.head || run.status == Status::Running {
            continue;
        }
        let row = tx.query_one(
            "SELECT (SELECT status FROM idem.runs WHERE id = k.head),
                    (SELECT max(started_at) FROM idem.runs WHERE key = k.key AND id <> $2)
             FROM idem.keys k WHERE k.key = $1",
            &[&run.key, &id],
        )?;
        let head_status: Option<String> = row.try_get(0)?;
        let latest: Option<Timestamp> = row.try_get(1)?;
        let newer = latest.is_none_or(|latest| latest < run.started_at);
        if newer && head_status.as_deref() != Some("running") {
            tx.execute(
                "UPDATE idem.keys SET head = $2, owner_boot = NULL, owner_pid_start = NULL,
                     owner_pgid = NULL, owner_pgid_start = NULL, lease_until = NULL
                 WHERE key = $1",
                &[&run.key, &id],
            )?;
            report.heads += 1;
        }
    }
    Ok(report)
}

fn key_metrics(client: &mut Client) -> Result<Vec<KeyMetrics>, postgres::Error> {
    let rows = client.query(
        "WITH ok AS (
             SELECT key, max(started_at) AS started, max(finished_at) AS finished
             FROM idem.runs WHERE status = 'succeeded' GROUP BY key
         ),
         last AS (
             SELECT DISTINCT ON (key) key, id FROM idem.runs ORDER BY key, started_at DESC, id DESC
         )
         SELECT k.key, last.id, ok.finished,
             count(*) FILTER (WHERE r.status = 'running'),
             count(*) FILTER (WHERE r.status = 'succeeded'),
             count(*) FILTER (WHERE r.status = 'failed'),
             count(*) FILTER (WHERE r.status = 'abandoned'),
             count(*) FILTER (WHERE r.status IN ('failed', 'abandoned')
                 AND r.started_at > coalesce(ok.started, '-infinity'))
         FROM idem.keys k
         JOIN idem.runs r ON r.key = k.key
         JOIN last ON last.key = k.key
         LEFT JOIN ok ON ok.key = k.key
         GROUP BY k.key, last.id, ok.finished, ok.started
         ORDER BY k.key COLLATE \"C\"",
        &[],
    )?;
    let ids = rows
        .iter()
        .map(|row| row.try_get(1))
        .collect::<Result<Vec<i64>, _>>()?;
    let mut last: std::collections::HashMap<i64, Run> = client
        .query(
            &format!("SELECT {RUN_COLUMNS} FROM idem.runs r WHERE r.id = ANY($1)"),
            &[&ids],
        )?
        .iter()
        .map(run_from_row)
        .collect::<Result<_, _>>()?;
    let count = |row: &Row, index: usize| -> Result<u64, postgres::Error> {
        Ok(row.try_get::<_, i64>(index)?.max(0) as u64)
    };
    rows.iter()
        .map(|row| {
            Ok(KeyMetrics {
                key: row.try_get(0)?,
                last_run: last.remove(&row.try_get::<_, i64>(1)?),
                last_success: row.try_get(2)?,
                consecutive_failures: count(row, 7)?,
                runs: [
                    count(row, 3)?,
                    count(row, 4)?,
                    count(row, 5)?,
                    count(row, 6)?,
                ],
            })
        })
        .collect()
}

/// Whether `error` broke the connection (rather than being the server's
/// answer to a statement): worth one more try on a new connection.
fn connection_lost(error: &postgres::Error) -> bool {
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
