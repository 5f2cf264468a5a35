//! The outbox in a shared ledger: events written in a claim's or an
//! outcome's transaction, taken for delivery with `FOR UPDATE SKIP
//! LOCKED` (deliverers on many hosts pass each other by), and settled by
//! their holder alone. Every time is the database's.

use anyhow::Result;
use jiff::Timestamp;
use tokio_postgres::Row;
use uuid::Uuid;

use super::super::outbox::{EventState, NewEvent, Outbox, Owed, Settled, GIVE_UP, LEASE};
use super::client::Client;
use super::rows::{maybe_time, time};
use super::{begin, interval, PostgresLedger};

/// Whether an event is owed and free to take now.
const DUE: &str = "delivered_at IS NULL AND NOT lost AND next_try_at <= now()
    AND (held_until IS NULL OR held_until < now())";

const STATE_COLUMNS: &str = "event_id, run_id, job, kind, target, created_at, attempts, \
    delivered_at, error, lost OR (delivered_at IS NULL \
    AND created_at < now() - $2::text::interval) AS lost";

/// Writes `events` in the caller's transaction (one statement, or none).
pub(super) async fn owe(
    db: &tokio_postgres::Client,
    events: &[NewEvent],
) -> Result<(), tokio_postgres::Error> {
    if events.is_empty() {
        return Ok(());
    }
    let column = |field: fn(&NewEvent) -> String| events.iter().map(field).collect::<Vec<_>>();
    let ids: Vec<Uuid> = events.iter().map(|event| event.event_id).collect();
    let runs: Vec<Uuid> = events.iter().map(|event| event.run_id).collect();
    let bodies: Vec<Vec<u8>> = events.iter().map(|event| event.body.clone()).collect();
    let held: Vec<bool> = events.iter().map(|event| event.held).collect();
    db.execute_typed(
        "INSERT INTO idem.outbox (event_id, run_id, job, kind, target, address, payload, body,
             created_at, next_try_at, holder, held_until)
         SELECT e, r, j, k, t, a, p, b, now(), now(), CASE WHEN h THEN r END,
             CASE WHEN h THEN now() + $10::text::interval END
         FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],
             $7::text[], $8::bytea[], $9::bool[]) AS u (e, r, j, k, t, a, p, b, h)
         -- A claim in one round trip starts its run only if the key's head
         -- is still the one it read: no run, no events.
         WHERE EXISTS (SELECT 1 FROM idem.runs WHERE run_id = u.r)",
        typed![
            &ids => UUID_ARRAY,
            &runs => UUID_ARRAY,
            &column(|event| event.job.clone()) => TEXT_ARRAY,
            &column(|event| event.kind.clone()) => TEXT_ARRAY,
            &column(|event| event.target.clone()) => TEXT_ARRAY,
            &column(|event| event.address.clone()) => TEXT_ARRAY,
            &column(|event| event.payload.clone()) => TEXT_ARRAY,
            &bodies => BYTEA_ARRAY,
            &held => BOOL_ARRAY,
            &interval(LEASE) => TEXT,
        ],
    )
    .await?;
    Ok(())
}

fn owed_from_row(row: &Row) -> Result<Owed, tokio_postgres::Error> {
    let holder: Option<Uuid> = row.try_get("holder")?;
    Ok(Owed {
        event: NewEvent {
            event_id: row.try_get("event_id")?,
            run_id: row.try_get("run_id")?,
            job: row.try_get("job")?,
            kind: row.try_get("kind")?,
            target: row.try_get("target")?,
            address: row.try_get("address")?,
            payload: row.try_get("payload")?,
            body: row.try_get("body")?,
            held: holder.is_some(),
        },
        created_at: time(row, "created_at")?,
        attempts: u32::try_from(row.try_get::<_, i32>("attempts")?).unwrap_or(0),
        holder: holder.unwrap_or_default(),
    })
}

fn state_from_row(row: &Row) -> Result<EventState, tokio_postgres::Error> {
    Ok(EventState {
        event_id: row.try_get("event_id")?,
        run_id: row.try_get("run_id")?,
        job: row.try_get("job")?,
        kind: row.try_get("kind")?,
        target: row.try_get("target")?,
        created_at: time(row, "created_at")?,
        attempts: u32::try_from(row.try_get::<_, i32>("attempts")?).unwrap_or(0),
        delivered_at: maybe_time(row, "delivered_at")?,
        lost: row.try_get("lost")?,
        error: row.try_get("error")?,
    })
}

/// Whether any event is due.
pub(super) fn any_due_sql() -> String {
    format!("SELECT EXISTS (SELECT 1 FROM idem.outbox WHERE {DUE}) AS due")
}

impl Outbox for PostgresLedger {
    fn any_due(&mut self) -> Result<bool> {
        // Read already with this run's outcome, a moment ago: once.
        if let Some(due) = self.due.take() {
            return Ok(due);
        }
        let sql = any_due_sql();
        self.retrying(|client| client.query_typed_one(&sql, &[])?.try_get("due"))
            .map_err(|error| self.fail("read", &error))
    }

    fn take_due(
        &mut self,
        holder: Uuid,
        limit: u32,
        hooks: bool,
        except: Option<Uuid>,
    ) -> Result<Vec<Owed>> {
        let give_up = format!(
            "UPDATE idem.outbox SET lost = true, address = '', body = ''::bytea
             WHERE {DUE} AND created_at < now() - $1::text::interval"
        );
        let take = format!(
            "WITH due AS (SELECT id FROM idem.outbox WHERE {DUE}
                     AND ($4 OR target NOT LIKE '--on-%')
                     AND run_id IS DISTINCT FROM $5
                     AND NOT EXISTS (SELECT 1 FROM idem.runs r
                         WHERE r.run_id = idem.outbox.run_id AND r.status = 'running')
                 ORDER BY next_try_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
             UPDATE idem.outbox o SET holder = $1, held_until = now() + $3::text::interval
             FROM due WHERE o.id = due.id RETURNING o.*"
        );
        let taken = self.retrying(|client| {
            let mut tx = begin(client)?;
            tx.execute_typed(&give_up, typed![&interval(GIVE_UP) => TEXT])?;
            let rows = tx.query_typed(
                &take,
                typed![
                    &holder => UUID,
                    &i64::from(limit) => INT8,
                    &interval(LEASE) => TEXT,
                    &hooks => BOOL,
                    &except => UUID,
                ],
            )?;
            tx.commit()?;
            rows.iter()
                .map(owed_from_row)
                .collect::<Result<Vec<_>, _>>()
        });
        let mut taken = taken.map_err(|error| self.fail("take events owed in", &error))?;
        taken.sort_by_key(|owed| owed.created_at);
        Ok(taken)
    }

    fn take_held(&mut self, run_id: Uuid) -> Result<Vec<Owed>> {
        self.retrying(|client| {
            client
                .query_typed(
                    "SELECT * FROM idem.outbox
                     WHERE run_id = $1 AND holder = $1 AND delivered_at IS NULL AND NOT lost
                     ORDER BY id",
                    typed![&run_id => UUID],
                )?
                .iter()
                .map(owed_from_row)
                .collect()
        })
        .map_err(|error| self.fail("read", &error))
    }

    fn settle(&mut self, holder: Uuid, settled: &[(Uuid, Settled)]) -> Result<u64> {
        let ids: Vec<Uuid> = settled.iter().map(|(id, _)| *id).collect();
        let delivered: Vec<bool> = settled
            .iter()
            .map(|(_, settled)| *settled == Settled::Delivered)
            .collect();
        let (errors, waits): (Vec<Option<String>>, Vec<String>) = settled
            .iter()
            .map(|(_, settled)| match settled {
                Settled::Delivered => (None, interval(std::time::Duration::ZERO)),
                Settled::Failed { error, retry_in } => (Some(error.clone()), interval(*retry_in)),
            })
            .unzip();
        // One statement: the events settle together or not at all.
        self.retrying(|client| {
            client.execute_typed(
                "UPDATE idem.outbox o SET delivered_at = CASE WHEN s.d THEN now() END,
                     error = s.e, next_try_at = now() + s.w::interval,
                     attempts = o.attempts + 1, holder = NULL, held_until = NULL,
                     address = CASE WHEN s.d THEN '' ELSE o.address END,
                     body = CASE WHEN s.d THEN ''::bytea ELSE o.body END
                 FROM unnest($2::uuid[], $3::bool[], $4::text[], $5::text[]) AS s (id, d, e, w)
                 WHERE o.event_id = s.id AND o.holder = $1 AND o.delivered_at IS NULL",
                typed![
                    &holder => UUID,
                    &ids => UUID_ARRAY,
                    &delivered => BOOL_ARRAY,
                    &errors => TEXT_ARRAY,
                    &waits => TEXT_ARRAY,
                ],
            )
        })
        .map_err(|error| self.fail("settle events in", &error))
    }

    fn owed(&mut self) -> Result<Vec<(String, u64)>> {
        self.retrying(|client| {
            let rows = client.query_typed(
                "SELECT job, count(*) AS owed FROM idem.outbox
                 WHERE delivered_at IS NULL AND NOT lost
                     AND created_at >= now() - $1::text::interval
                 GROUP BY job ORDER BY job",
                typed![&interval(GIVE_UP) => TEXT],
            )?;
            rows.iter()
                .map(|row| {
                    let owed: i64 = row.try_get("owed")?;
                    Ok((row.try_get("job")?, u64::try_from(owed).unwrap_or(0)))
                })
                .collect()
        })
        .map_err(|error| self.fail("read", &error))
    }

    fn events(&mut self, run_id: Uuid) -> Result<Vec<EventState>> {
        let sql = format!("SELECT {STATE_COLUMNS} FROM idem.outbox WHERE run_id = $1 ORDER BY id");
        self.retrying(|client| {
            client
                .query_typed(&sql, typed![&run_id => UUID, &interval(GIVE_UP) => TEXT])?
                .iter()
                .map(state_from_row)
                .collect()
        })
        .map_err(|error| self.fail("read", &error))
    }

    fn lost(&mut self, limit: u32) -> Result<Vec<EventState>> {
        self.retrying(|client| lost_in(client, limit))
            .map_err(|error| self.fail("read", &error))
    }

    fn prune_events(&mut self, before: Timestamp, dry_run: bool) -> Result<u64> {
        let settled = "created_at < $1 AND (delivered_at IS NOT NULL OR lost)";
        let sql = if dry_run {
            format!("SELECT count(*) AS n FROM idem.outbox WHERE {settled}")
        } else {
            format!("WITH d AS (DELETE FROM idem.outbox WHERE {settled} RETURNING 1) SELECT count(*) AS n FROM d")
        };
        self.retrying(|client| {
            client
                .query_typed_one(&sql, typed![&before => TIMESTAMPTZ])?
                .try_get::<_, i64>("n")
        })
        .map(|n| u64::try_from(n).unwrap_or(0))
        .map_err(|error| self.fail("prune events in", &error))
    }
}

/// How many events are still owed; none when the schema has no outbox.
pub(super) fn owed_in(client: &mut Client) -> Result<u64, tokio_postgres::Error> {
    if !has_outbox(client)? {
        return Ok(0);
    }
    let owed: i64 = client
        .query_typed_one(
            "SELECT count(*) AS owed FROM idem.outbox
             WHERE delivered_at IS NULL AND NOT lost
                 AND created_at >= now() - $1::text::interval",
            typed![&interval(GIVE_UP) => TEXT],
        )?
        .try_get("owed")?;
    Ok(u64::try_from(owed).unwrap_or(0))
}

fn has_outbox(client: &mut Client) -> Result<bool, tokio_postgres::Error> {
    client
        .query_typed_one(
            "SELECT to_regclass('idem.outbox') IS NOT NULL AS exists",
            &[],
        )?
        .try_get("exists")
}

/// The events given up, newest first, at most `limit`; none when the
/// schema has no outbox yet (an older idem's, read by `doctor`).
pub(super) fn lost_in(
    client: &mut Client,
    limit: u32,
) -> Result<Vec<EventState>, tokio_postgres::Error> {
    let exists: bool = client
        .query_typed_one(
            "SELECT to_regclass('idem.outbox') IS NOT NULL AS exists",
            &[],
        )?
        .try_get("exists")?;
    if !exists {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {STATE_COLUMNS} FROM idem.outbox
         WHERE lost OR (delivered_at IS NULL AND created_at < now() - $2::text::interval)
         ORDER BY id DESC LIMIT $1"
    );
    client
        .query_typed(
            &sql,
            typed![&i64::from(limit) => INT8, &interval(GIVE_UP) => TEXT],
        )?
        .iter()
        .map(state_from_row)
        .collect()
}
