//! The session a connection sets up and the schema it finds: its version
//! read, and created or migrated (one host at a time) when it is behind.
//! A schema ahead of this idem's is refused.

use std::time::Duration;

use anyhow::Result;
use tokio_postgres::error::SqlState;

use super::super::error::LedgerError;
use super::client::Client;
use super::schema::{LATEST, MIGRATIONS};
use super::{begin, connect, PostgresLedger};

/// How long a claim waits for a key's row lock before giving up (exit 125).
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(10);

/// How long the server lets an idem's transaction sit idle before ending
/// it and releasing its locks (idem's own are over in milliseconds).
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(60);

/// The schema idem owns in the database.
const SCHEMA: &str = "idem";

/// Any constant both idem processes agree on: the key of the advisory lock
/// taken while migrating ("idem" in ASCII, then a version of the lock).
const MIGRATION_LOCK: i64 = 0x6964_656d_0000_0001;

impl PostgresLedger {
    /// The schema's version; 0 when there is no schema yet.
    pub(super) fn version(client: &mut Client) -> Result<i32, tokio_postgres::Error> {
        match client.query_typed("SELECT version FROM idem.version", &[]) {
            Ok(rows) => rows.first().map_or(Ok(0), |row| row.try_get("version")),
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
        match self.client.simple_query(&setup_sql()) {
            Ok(messages) => Ok(version_of(&messages)),
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

    pub(super) fn check_and_migrate(&mut self) -> Result<()> {
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
}

/// The session's settings and the read of the schema's version, in one
/// simple query (see [`PostgresLedger::setup`]).
pub(super) fn setup_sql() -> String {
    format!("{} SELECT version FROM idem.version", session_settings())
}

/// The schema's version, as [`setup_sql`] answered it.
pub(super) fn version_of(messages: &[tokio_postgres::SimpleQueryMessage]) -> i32 {
    messages
        .iter()
        .find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get("version"),
            _ => None,
        })
        .and_then(|version| version.parse().ok())
        .unwrap_or(0)
}

/// The settings every connection makes (see [`PostgresLedger::setup`]).
pub(super) fn session_settings() -> String {
    format!(
        "SET lock_timeout = '{}ms'; SET idle_in_transaction_session_timeout = '{}ms';",
        LOCK_WAIT.as_millis(),
        IDLE_IN_TRANSACTION.as_millis()
    )
}
