//! Stop requests in a shared PostgreSQL ledger (see `ledger::stops`),
//! stamped by the database's clock.

use anyhow::Result;
use tokio_postgres::Row;
use uuid::Uuid;

use super::client::Client;
use super::rows::{maybe_time, time};
use super::PostgresLedger;
use crate::ledger::stops::{channel, StopRequest, Stops};

const COLUMNS: &str = "run_id, key, by, requested_at, signal, seen_at";

fn request_from_row(row: &Row) -> Result<StopRequest, tokio_postgres::Error> {
    Ok(StopRequest {
        run_id: row.try_get("run_id")?,
        key: row.try_get("key")?,
        by: row.try_get("by")?,
        requested_at: time(row, "requested_at")?,
        signal: row.try_get("signal")?,
        seen_at: maybe_time(row, "seen_at")?,
    })
}

/// The requests to stop a running run not yet seen by its owner, oldest
/// first; none in a schema from before stops were kept.
pub(super) fn pending(client: &mut Client) -> Result<Vec<StopRequest>, tokio_postgres::Error> {
    let exists = client.query_typed_one("SELECT to_regclass('idem.stops') IS NOT NULL", &[])?;
    if !exists.try_get::<_, bool>(0)? {
        return Ok(Vec::new());
    }
    client
        .query_typed(
            "SELECT s.run_id, s.key, s.by, s.requested_at, s.signal, s.seen_at
             FROM idem.stops s JOIN idem.runs r ON r.run_id = s.run_id
             WHERE s.seen_at IS NULL AND r.status = 'running' ORDER BY s.requested_at",
            &[],
        )?
        .iter()
        .map(request_from_row)
        .collect()
}

impl Stops for PostgresLedger {
    fn request_stop(&mut self, request: &StopRequest) -> Result<()> {
        // The owner's heartbeat connection listens: it hears at commit.
        let channel = channel(request.run_id);
        self.client
            .query_typed_one(
                "WITH made AS (
                     INSERT INTO idem.stops (run_id, key, by, requested_at, signal)
                     VALUES ($1, $2, $3, clock_timestamp(), $4) RETURNING 1)
                 SELECT pg_notify($5, '') FROM made",
                typed![&request.run_id => UUID, &request.key => TEXT, &request.by => TEXT,
                    &request.signal => INT4, &channel => TEXT],
            )
            .map(|_| ())
            .map_err(|error| self.fail("record a stop request in", &error))
    }

    fn stop_seen(&mut self, run_id: Uuid) -> Result<Option<StopRequest>> {
        // One statement: stamps the first unseen request, then reads the
        // first request (the update's row shows through RETURNING).
        let sql = format!(
            "WITH seen AS (
                 UPDATE idem.stops SET seen_at = clock_timestamp()
                 WHERE run_id = $1 AND seen_at IS NULL
                 RETURNING {COLUMNS})
             SELECT {COLUMNS} FROM seen
             UNION ALL SELECT {COLUMNS} FROM idem.stops WHERE run_id = $1 AND seen_at IS NOT NULL
             ORDER BY requested_at LIMIT 1"
        );
        self.retrying(|client| {
            client
                .query_typed_opt(&sql, typed![&run_id => UUID])?
                .as_ref()
                .map(request_from_row)
                .transpose()
        })
        .map_err(|error| self.fail("read", &error))
    }

    fn listen_for_stop(&mut self, run_id: Uuid) -> Result<()> {
        // A channel is an identifier: the name is quoted, and made of hex.
        let sql = format!("LISTEN \"{}\"", channel(run_id));
        self.client
            .batch_execute(&sql)
            .map_err(|error| self.fail("listen for stop requests in", &error))
    }

    fn stop_heard(&mut self) -> bool {
        self.client.notified()
    }

    fn stop_of(&mut self, run_id: Uuid) -> Result<Option<StopRequest>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM idem.stops WHERE run_id = $1 ORDER BY requested_at LIMIT 1"
        );
        self.retrying(|client| {
            client
                .query_typed_opt(&sql, typed![&run_id => UUID])?
                .as_ref()
                .map(request_from_row)
                .transpose()
        })
        .or_else(|error| match error.code() {
            // A schema from before stops were kept (read by an older
            // role's session) has none.
            Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => Ok(None),
            _ => Err(self.fail("read", &error)),
        })
    }
}
