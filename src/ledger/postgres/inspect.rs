//! A PostgreSQL ledger opened only to be read (`idem doctor`): the session
//! is made read-only before anything is read, so the server itself refuses
//! a write should one be tried; nothing is created or migrated.

use super::client::Client;

use super::super::inspect::{Inspect, Schema};
use super::super::Owner;
use super::rows::running_heads;
use super::schema::LATEST;
use super::stops::pending;
use super::{connect, PostgresLedger};

pub struct PostgresInspector {
    client: Client,
}

impl PostgresInspector {
    /// Connects to the ledger at `url` (`shown`: the URL for people) for
    /// reading; says in words why it cannot.
    pub fn open(url: &str, shown: &str) -> Result<PostgresInspector, String> {
        let config = connect::config(url, shown).map_err(|error| error.to_string())?;
        let mut client = connect::connect(&config)?;
        client
            .batch_execute("SET default_transaction_read_only = on; SET statement_timeout = '60s'")
            .map_err(|error| connect::describe(&error))?;
        Ok(PostgresInspector { client })
    }

    /// The read-only session, for what doctor asks of the server itself
    /// (its version, the role and the role's rights).
    pub fn session(&mut self) -> &mut Client {
        &mut self.client
    }
}

impl Inspect for PostgresInspector {
    fn lost_events(&mut self) -> Result<Vec<crate::ledger::EventState>, String> {
        super::outbox::lost_in(&mut self.client, 20).map_err(|error| connect::describe(&error))
    }

    fn owed_events(&mut self) -> Result<u64, String> {
        super::outbox::owed_in(&mut self.client).map_err(|error| connect::describe(&error))
    }

    fn schema(&mut self) -> Result<Schema, String> {
        match PostgresLedger::version(&mut self.client) {
            Ok(0) => Ok(Schema::None),
            Ok(version) => Ok(Schema::Idem {
                version: version.into(),
                latest: LATEST.into(),
            }),
            Err(error) => Err(connect::describe(&error)),
        }
    }

    fn running(&mut self) -> Result<Vec<(String, Owner)>, String> {
        let heads = running_heads(&mut self.client).map_err(|error| connect::describe(&error))?;
        Ok(heads
            .into_iter()
            .map(|(run, owner)| (run.key, owner))
            .collect())
    }

    fn pauses(&mut self) -> Result<Vec<super::super::Pause>, String> {
        let now = jiff::Timestamp::now();
        let held = |pauses: Vec<super::super::Pause>| {
            pauses.into_iter().filter(|p| p.holds_at(now)).collect()
        };
        match super::pauses::read_pauses(&mut self.client, None).map(held) {
            Err(error)
                if error.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) =>
            {
                Ok(Vec::new())
            }
            read => read.map_err(|error| connect::describe(&error)),
        }
    }

    fn pending_stops(&mut self) -> Result<Vec<super::super::StopRequest>, String> {
        pending(&mut self.client).map_err(|error| connect::describe(&error))
    }

    fn upstreams(&mut self) -> Result<Vec<(String, Vec<String>)>, String> {
        super::deps::upstream_graph(&mut self.client).map_err(|error| connect::describe(&error))
    }
}
