//! Stop requests in a SQLite ledger (see `ledger::stops`).

use anyhow::Result;
use jiff::Timestamp;
use rusqlite::{params, OptionalExtension, Row};
use uuid::Uuid;

use super::durability::Sync;
use super::rows::{get, millis, timestamp, uuid_at, RUNNING};
use super::SqliteLedger;
use crate::ledger::stops::{StopRequest, Stops};

const COLUMNS: &str = "run_id, key, by, requested_at, signal, seen_at";

fn request_from_row(row: &Row<'_>) -> rusqlite::Result<StopRequest> {
    Ok(StopRequest {
        run_id: uuid_at(row, 0)?,
        key: get(row, 1)?,
        by: get(row, 2)?,
        requested_at: timestamp(get(row, 3)?)?,
        signal: get(row, 4)?,
        seen_at: get::<Option<i64>>(row, 5)?.map(timestamp).transpose()?,
    })
}

/// The requests to stop a running run not yet seen by its owner, oldest
/// first; none in a ledger from before stops were kept.
pub(super) fn pending(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<StopRequest>> {
    let tables: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'stops'",
        [],
        |row| row.get(0),
    )?;
    if tables == 0 {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {} FROM stops s JOIN runs r ON r.run_id = s.run_id
         WHERE s.seen_at IS NULL AND r.status = {RUNNING} ORDER BY s.id",
        COLUMNS
            .split(", ")
            .map(|column| format!("s.{column}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut query = conn.prepare(&sql)?;
    let rows = query.query_map([], request_from_row)?;
    rows.collect()
}

impl Stops for SqliteLedger {
    fn request_stop(&mut self, request: &StopRequest) -> Result<()> {
        self.write("record a stop request in", Sync::InCommit, &[], |tx| {
            tx.conn
                .prepare_cached(
                    "INSERT INTO stops (run_id, key, by, requested_at, signal)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![
                    request.run_id.as_bytes().as_slice(),
                    request.key,
                    request.by,
                    millis(Timestamp::now()),
                    request.signal
                ])?;
            Ok(())
        })
    }

    fn stop_seen(&mut self, run_id: Uuid) -> Result<Option<StopRequest>> {
        // Read first: a run nobody asked to stop writes nothing.
        let Some(request) = self.stop_of(run_id)? else {
            return Ok(None);
        };
        if request.seen_at.is_some() {
            return Ok(Some(request));
        }
        let now = Timestamp::now();
        self.write("record a stop request seen in", Sync::Later, &[], |tx| {
            tx.conn
                .prepare_cached(
                    "UPDATE stops SET seen_at = ?2 WHERE run_id = ?1 AND seen_at IS NULL",
                )?
                .execute(params![run_id.as_bytes().as_slice(), millis(now)])?;
            Ok(())
        })?;
        Ok(Some(StopRequest {
            seen_at: Some(now),
            ..request
        }))
    }

    fn stop_of(&mut self, run_id: Uuid) -> Result<Option<StopRequest>> {
        let sql = format!("SELECT {COLUMNS} FROM stops WHERE run_id = ?1 ORDER BY id LIMIT 1");
        self.conn
            .prepare_cached(&sql)
            .and_then(|mut query| {
                query
                    .query_row(params![run_id.as_bytes().as_slice()], request_from_row)
                    .optional()
            })
            .or_else(|error| match error {
                // A ledger read-only, from before stops were kept, has none.
                rusqlite::Error::SqliteFailure(_, Some(ref message))
                    if message.starts_with("no such table") =>
                {
                    Ok(None)
                }
                error => Err(self.fail("read", &error)),
            })
    }
}
