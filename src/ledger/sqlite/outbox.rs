//! The outbox in a SQLite ledger: events written in a claim's or an
//! outcome's transaction, taken for delivery under the writers' lock, and
//! settled by their holder alone.

use anyhow::Result;
use jiff::Timestamp;
use rusqlite::{params, Connection, Row};
use uuid::Uuid;

use super::super::outbox::{EventState, NewEvent, Outbox, Owed, Settled, GIVE_UP, LEASE};
use super::durability::Sync;
use super::rows::{get, millis, time_at, timestamp};
use super::SqliteLedger;

/// Whether an event is owed and free to take at `?1` (now).
const DUE: &str = "delivered_at IS NULL AND lost = 0 AND next_try_at <= ?1
    AND (held_until IS NULL OR held_until < ?1)";

const OWED_COLUMNS: &str = "event_id, run_id, job, kind, target, address, payload, body, \
    created_at, attempts, holder";

const STATE_COLUMNS: &str = "event_id, run_id, job, kind, target, created_at, attempts, \
    delivered_at, lost, error";

/// Writes `events` in the caller's transaction.
pub(super) fn owe(conn: &Connection, events: &[NewEvent]) -> rusqlite::Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let now = millis(Timestamp::now());
    let until = now + i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX);
    let mut insert = conn.prepare_cached(
        "INSERT INTO outbox (event_id, run_id, job, kind, target, address, payload, body,
             created_at, next_try_at, holder, held_until)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10, ?11)",
    )?;
    for event in events {
        let holder = event.held.then_some(event.run_id.as_bytes().as_slice());
        insert.execute(params![
            event.event_id.as_bytes().as_slice(),
            event.run_id.as_bytes().as_slice(),
            event.job,
            event.kind,
            event.target,
            event.address,
            event.payload,
            event.body,
            now,
            holder,
            event.held.then_some(until),
        ])?;
    }
    Ok(())
}

/// Events created before this (Unix milliseconds) are given up.
fn given_up() -> i64 {
    millis(Timestamp::now()) - i64::try_from(GIVE_UP.as_millis()).unwrap_or(i64::MAX)
}

fn uuid_at(row: &Row<'_>, at: &str) -> rusqlite::Result<Uuid> {
    let bytes: Vec<u8> = get(row, at)?;
    Uuid::from_slice(&bytes).map_err(|error| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Blob,
            format!("column {at} holds no event id ({error})").into(),
        )
    })
}

fn owed_from_row(row: &Row<'_>) -> rusqlite::Result<Owed> {
    let holder: Option<Vec<u8>> = get(row, "holder")?;
    Ok(Owed {
        event: NewEvent {
            event_id: uuid_at(row, "event_id")?,
            run_id: uuid_at(row, "run_id")?,
            job: get(row, "job")?,
            kind: get(row, "kind")?,
            target: get(row, "target")?,
            address: get(row, "address")?,
            payload: get(row, "payload")?,
            body: get(row, "body")?,
            held: holder.is_some(),
        },
        created_at: timestamp(get(row, "created_at")?)?,
        attempts: get(row, "attempts")?,
        holder: holder
            .and_then(|bytes| Uuid::from_slice(&bytes).ok())
            .unwrap_or_default(),
    })
}

fn state_from_row(row: &Row<'_>) -> rusqlite::Result<EventState> {
    let created: i64 = get(row, "created_at")?;
    let delivered_at = time_at(row, "delivered_at")?;
    // One past its day is lost, even before a deliverer gives it up.
    let lost = get::<bool>(row, "lost")? || (delivered_at.is_none() && created < given_up());
    Ok(EventState {
        event_id: uuid_at(row, "event_id")?,
        run_id: uuid_at(row, "run_id")?,
        job: get(row, "job")?,
        kind: get(row, "kind")?,
        target: get(row, "target")?,
        created_at: timestamp(created)?,
        attempts: get(row, "attempts")?,
        delivered_at,
        lost,
        error: get(row, "error")?,
    })
}

impl Outbox for SqliteLedger {
    fn any_due(&mut self) -> Result<bool> {
        self.conn
            .prepare_cached(&format!("SELECT EXISTS (SELECT 1 FROM outbox WHERE {DUE})"))
            .and_then(|mut due| due.query_row([millis(Timestamp::now())], |row| row.get(0)))
            .map_err(|error| self.fail("read", &error))
    }

    fn take_due(
        &mut self,
        holder: Uuid,
        limit: u32,
        hooks: bool,
        except: Option<Uuid>,
    ) -> Result<Vec<Owed>> {
        let except = except.map(|run| run.as_bytes().to_vec());
        let now = millis(Timestamp::now());
        let until = now + i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX);
        let given_up = given_up();
        self.write("take events owed in", Sync::InCommit, &[], |tx| {
            tx.conn.execute(
                &format!(
                    "UPDATE outbox SET lost = 1, address = '', body = x''
                     WHERE {DUE} AND created_at < ?2"
                ),
                params![now, given_up],
            )?;
            let mut taken = tx
                .conn
                .prepare(&format!(
                    "SELECT {OWED_COLUMNS} FROM outbox WHERE {DUE}
                         AND (?3 OR target NOT LIKE '--on-%')
                         AND run_id IS NOT ?4
                         AND NOT EXISTS (SELECT 1 FROM runs r
                             WHERE r.run_id = outbox.run_id AND r.status = 0)
                     ORDER BY next_try_at, id LIMIT ?2"
                ))?
                .query_map(params![now, limit, hooks, except], owed_from_row)?
                .collect::<rusqlite::Result<Vec<Owed>>>()?;
            let mut hold = tx
                .conn
                .prepare("UPDATE outbox SET holder = ?2, held_until = ?3 WHERE event_id = ?1")?;
            for owed in &mut taken {
                hold.execute(params![
                    owed.event.event_id.as_bytes().as_slice(),
                    holder.as_bytes().as_slice(),
                    until
                ])?;
                owed.holder = holder;
            }
            Ok(taken)
        })
    }

    fn take_held(&mut self, run_id: Uuid) -> Result<Vec<Owed>> {
        let read = || -> rusqlite::Result<Vec<Owed>> {
            let mut held = self.conn.prepare_cached(&format!(
                "SELECT {OWED_COLUMNS} FROM outbox
                 WHERE run_id = ?1 AND holder = ?1 AND delivered_at IS NULL AND lost = 0
                 ORDER BY id"
            ))?;
            let rows = held.query_map([run_id.as_bytes().as_slice()], owed_from_row)?;
            rows.collect()
        };
        read().map_err(|error| self.fail("read", &error))
    }

    fn settle(&mut self, holder: Uuid, settled: &[(Uuid, Settled)]) -> Result<u64> {
        let now = Timestamp::now();
        self.write("settle events in", Sync::InCommit, &[], |tx| {
            let mut update = tx.conn.prepare_cached(
                "UPDATE outbox SET delivered_at = ?3, error = ?4, next_try_at = ?5,
                     attempts = attempts + 1, holder = NULL, held_until = NULL,
                     address = CASE WHEN ?3 IS NULL THEN address ELSE '' END,
                     body = CASE WHEN ?3 IS NULL THEN body ELSE x'' END
                 WHERE event_id = ?1 AND holder = ?2 AND delivered_at IS NULL",
            )?;
            let mut changed = 0;
            for (event_id, settled) in settled {
                let (delivered, error, next) = match settled {
                    Settled::Delivered => (Some(millis(now)), None, millis(now)),
                    Settled::Failed { error, retry_in } => {
                        let wait = jiff::SignedDuration::try_from(*retry_in).unwrap_or_default();
                        let next = now.checked_add(wait).unwrap_or(now);
                        (None, Some(error.as_str()), millis(next))
                    }
                };
                changed += update.execute(params![
                    event_id.as_bytes().as_slice(),
                    holder.as_bytes().as_slice(),
                    delivered,
                    error,
                    next
                ])? as u64;
            }
            Ok(changed)
        })
    }

    fn owed(&mut self) -> Result<Vec<(String, u64)>> {
        let read = || -> rusqlite::Result<Vec<(String, u64)>> {
            let mut owed = self.conn.prepare_cached(
                "SELECT job, count(*) FROM outbox
                 WHERE delivered_at IS NULL AND lost = 0 AND created_at >= ?1
                 GROUP BY job ORDER BY job",
            )?;
            let rows = owed.query_map([given_up()], |row| Ok((get(row, 0)?, get(row, 1)?)))?;
            rows.collect()
        };
        read().map_err(|error| self.fail("read", &error))
    }

    fn events(&mut self, run_id: Uuid) -> Result<Vec<EventState>> {
        let read = || -> rusqlite::Result<Vec<EventState>> {
            let mut events = self.conn.prepare_cached(&format!(
                "SELECT {STATE_COLUMNS} FROM outbox WHERE run_id = ?1 ORDER BY id"
            ))?;
            let rows = events.query_map([run_id.as_bytes().as_slice()], state_from_row)?;
            rows.collect()
        };
        read().map_err(|error| self.fail("read", &error))
    }

    fn lost(&mut self, limit: u32) -> Result<Vec<EventState>> {
        lost_in(&self.conn, limit).map_err(|error| self.fail("read", &error))
    }

    fn prune_events(&mut self, before: Timestamp, dry_run: bool) -> Result<u64> {
        let settled = "created_at < ?1 AND (delivered_at IS NOT NULL OR lost = 1)";
        if dry_run {
            return self
                .conn
                .query_row(
                    &format!("SELECT count(*) FROM outbox WHERE {settled}"),
                    [millis(before)],
                    |row| get(row, 0),
                )
                .map_err(|error| self.fail("read", &error));
        }
        self.write("prune events in", Sync::InCommit, &[], |tx| {
            let dropped = tx.conn.execute(
                &format!("DELETE FROM outbox WHERE {settled}"),
                [millis(before)],
            )?;
            Ok(dropped as u64)
        })
    }
}

/// How many events are still owed; none when the ledger has no outbox.
pub(super) fn owed_in(conn: &Connection) -> rusqlite::Result<u64> {
    if !has_outbox(conn)? {
        return Ok(0);
    }
    conn.query_row(
        "SELECT count(*) FROM outbox
         WHERE delivered_at IS NULL AND lost = 0 AND created_at >= ?1",
        [given_up()],
        |row| get(row, 0),
    )
}

fn has_outbox(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'outbox')",
        [],
        |row| row.get(0),
    )
}

/// The events given up, newest first, at most `limit`; none when the
/// ledger has no outbox yet (an older idem's, read by `doctor`).
pub(super) fn lost_in(conn: &Connection, limit: u32) -> rusqlite::Result<Vec<EventState>> {
    if !has_outbox(conn)? {
        return Ok(Vec::new());
    }
    let mut lost = conn.prepare_cached(&format!(
        "SELECT {STATE_COLUMNS} FROM outbox
         WHERE lost = 1 OR (delivered_at IS NULL AND created_at < ?2)
         ORDER BY id DESC LIMIT ?1"
    ))?;
    let rows = lost.query_map(params![limit, given_up()], state_from_row)?;
    rows.collect()
}
