//! The outbox in a shared ledger: events written in a claim's or an
//! outcome's transaction, taken for delivery with `FOR UPDATE SKIP
//! LOCKED` (deliverers on many hosts pass each other by), and settled by
//! their holder alone. Every time is the database's.

use anyhow::Result;
use jiff::Timestamp;
use tokio_postgres::Row;
use uuid::Uuid;

use super::super::outbox::{
    EventState, NewEvent, Outage, Outbox, Owed, Pick, Settled, Taken, GIVE_UP, LEASE,
};
use super::client::Client;
use super::rows::{maybe_time, time};
use super::{begin, interval, PostgresLedger};

/// Whether an event is owed: neither sent (nor being sent), superseded
/// nor lost.
const OWED: &str = "delivered_at IS NULL AND NOT lost AND NOT superseded AND sending_at IS NULL";

const STATE_COLUMNS: &str = "event_id, run_id, job, kind, target, created_at, attempts, \
    delivered_at, error, superseded, \
    CASE WHEN delivered_at IS NULL THEN sending_at END AS sending_at, \
    (sending_at IS NOT NULL AND delivered_at IS NULL \
        AND (held_until IS NULL OR held_until < now())) AS unconfirmed, \
    lost OR (delivered_at IS NULL AND NOT superseded AND sending_at IS NULL \
        AND created_at < now() - $2::text::interval) AS lost";

/// Writes `events` in the caller's transaction (one statement, or none),
/// each ordered by its run's start.
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
    db.execute_typed(
        "INSERT INTO idem.outbox (event_id, run_id, job, kind, target, address, payload, body,
             created_at, next_try_at, dest, run_started)
         SELECT e, r, j, k, t, a, p, b, now(), now(), d,
             coalesce((SELECT started_at FROM idem.runs WHERE run_id = u.r), now())
         FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],
             $7::text[], $8::bytea[], $9::text[]) AS u (e, r, j, k, t, a, p, b, d)
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
            &column(|event| event.dest.clone()) => TEXT_ARRAY,
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
            dest: row.try_get("dest")?,
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
        superseded: row.try_get("superseded")?,
        sending_at: maybe_time(row, "sending_at")?,
        unconfirmed: row.try_get("unconfirmed")?,
    })
}

/// Whether any event is due.
pub(super) fn any_due_sql() -> String {
    format!(
        "SELECT EXISTS (SELECT 1 FROM idem.outbox WHERE {OWED} AND next_try_at <= now()) AS due"
    )
}

/// The outages of `dests` (every one with `dests` empty), with the events
/// owed to each; `unsaid` only those not yet said, locked to be marked.
fn outages_sql(unsaid: bool) -> String {
    format!(
        "SELECT g.dest, g.target, g.since,
             (SELECT count(*) FROM idem.outbox o WHERE o.dest = g.dest AND {OWED}) AS owed
         FROM idem.outages g
         WHERE (cardinality($1::text[]) = 0 OR g.dest = ANY($1::text[])){}
         ORDER BY g.since, g.dest",
        if unsaid { " AND NOT g.said" } else { "" }
    )
}

fn outage_from_row(row: &Row) -> Result<Outage, tokio_postgres::Error> {
    let owed: i64 = row.try_get("owed")?;
    Ok(Outage {
        dest: row.try_get("dest")?,
        target: row.try_get("target")?,
        since: time(row, "since")?,
        owed: u64::try_from(owed).unwrap_or(0),
    })
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

    fn take_next(&mut self, holder: Uuid, pick: &Pick<'_>) -> Result<Taken> {
        let give_up = format!(
            "UPDATE idem.outbox SET lost = true, address = '', body = ''::bytea
             WHERE {OWED} AND created_at < now() - $1::text::interval"
        );
        // Overtaken: a newer run's outcome to the same target went out (or
        // is going, or may have gone). A trace is never overtaken: each
        // run's spans are its own.
        let supersede = format!(
            "UPDATE idem.outbox o SET superseded = true, address = '', body = ''::bytea
             WHERE {OWED} AND target NOT LIKE '--on-%' AND kind <> 'trace' AND EXISTS (SELECT 1 FROM idem.outbox n
                 WHERE n.dest = o.dest AND n.kind <> 'start' AND n.sending_at IS NOT NULL
                     AND (n.run_started, n.run_id) > (o.run_started, o.run_id))"
        );
        let take = format!(
            "WITH next AS (SELECT id FROM idem.outbox o
                 WHERE {OWED} AND (next_try_at <= now() OR $7)
                     AND (cardinality($4::text[]) = 0 OR dest = ANY($4::text[]))
                     AND NOT (dest = ANY($5::text[]))
                     AND ($6 OR target NOT LIKE '--on-%')
                     AND ($8::uuid IS NULL OR run_id = $8)
                     AND (target LIKE '--on-%' OR NOT EXISTS (SELECT 1 FROM idem.outbox p
                         WHERE p.dest = o.dest AND p.id <> o.id
                         AND ((p.delivered_at IS NULL AND NOT p.lost AND NOT p.superseded
                                 AND p.sending_at IS NULL
                                 AND (p.run_started, p.run_id, p.kind <> 'start', p.id)
                                     < (o.run_started, o.run_id, o.kind <> 'start', o.id))
                             OR (p.sending_at IS NOT NULL AND p.delivered_at IS NULL
                                 AND p.held_until >= now()))))
                 ORDER BY run_started, run_id, kind <> 'start', id
                 LIMIT $2 FOR UPDATE SKIP LOCKED)
             UPDATE idem.outbox o SET holder = $1, held_until = now() + $3::text::interval,
                 sending_at = now(), attempts = o.attempts + 1
             FROM next WHERE o.id = next.id
             RETURNING o.event_id, o.run_id, o.job, o.kind, o.target, o.address, o.payload,
                 o.body, o.created_at, o.attempts - 1 AS attempts, o.holder, o.dest"
        );
        let taken = self.retrying(|client| {
            let mut tx = begin(client)?;
            tx.execute_typed(&give_up, typed![&interval(GIVE_UP) => TEXT])?;
            let superseded = tx.execute_typed(&supersede, &[])?;
            let rows = tx.query_typed(
                &take,
                typed![
                    &holder => UUID,
                    &i64::from(pick.limit) => INT8,
                    &interval(LEASE) => TEXT,
                    &pick.targets => TEXT_ARRAY,
                    &pick.skip => TEXT_ARRAY,
                    &pick.hooks => BOOL,
                    &pick.now => BOOL,
                    &pick.run => UUID,
                ],
            )?;
            tx.commit()?;
            let owed = rows
                .iter()
                .map(owed_from_row)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Taken { owed, superseded })
        });
        let mut taken =
            taken.map_err(|error| self.fail("record events as being sent in", &error))?;
        taken.owed.sort_by_key(|owed| owed.created_at);
        Ok(taken)
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
        // One statement: the events settle together or not at all, with
        // their targets' outages (a delivery ends one, and makes what the
        // target is owed due at once; a ping's failure begins one).
        self.retrying(|client| {
            let held: i64 = client
                .query_typed_one(
                    "WITH s AS (
                     UPDATE idem.outbox o SET delivered_at = CASE WHEN s.d THEN now() END,
                         error = s.e, next_try_at = now() + s.w::interval,
                         holder = NULL, held_until = NULL,
                         sending_at = CASE WHEN s.d THEN o.sending_at END,
                         address = CASE WHEN s.d THEN '' ELSE o.address END,
                         body = CASE WHEN s.d THEN ''::bytea ELSE o.body END
                     FROM unnest($2::uuid[], $3::bool[], $4::text[], $5::text[])
                         AS s (id, d, e, w)
                     WHERE o.event_id = s.id AND o.holder = $1 AND o.delivered_at IS NULL
                         AND o.held_until >= now()
                     RETURNING o.dest, o.target, s.d),
                 reached AS (DELETE FROM idem.outages g USING s
                     WHERE g.dest = s.dest AND s.d),
                 due AS (UPDATE idem.outbox o SET next_try_at = now() FROM s
                     WHERE o.dest = s.dest AND s.d AND o.delivered_at IS NULL AND NOT o.lost
                         AND NOT o.superseded AND o.sending_at IS NULL
                         AND o.next_try_at > now()),
                 down AS (INSERT INTO idem.outages (dest, target, since)
                     SELECT DISTINCT ON (dest) dest, target, now() FROM s
                     WHERE NOT s.d AND s.target NOT LIKE '--on-%'
                     ON CONFLICT (dest) DO NOTHING)
                 SELECT count(*) AS held FROM s",
                    typed![
                        &holder => UUID,
                        &ids => UUID_ARRAY,
                        &delivered => BOOL_ARRAY,
                        &errors => TEXT_ARRAY,
                        &waits => TEXT_ARRAY,
                    ],
                )?
                .try_get("held")?;
            Ok(u64::try_from(held).unwrap_or(0))
        })
        .map_err(|error| self.fail("settle events in", &error))
    }

    fn owed(&mut self) -> Result<Vec<(String, u64)>> {
        let sql = format!(
            "SELECT job, count(*) AS owed FROM idem.outbox
             WHERE {OWED} AND created_at >= now() - $1::text::interval
             GROUP BY job ORDER BY job"
        );
        self.retrying(|client| {
            let rows = client.query_typed(&sql, typed![&interval(GIVE_UP) => TEXT])?;
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

    fn outages(&mut self) -> Result<Vec<Outage>> {
        let sql = outages_sql(false);
        let none: Vec<String> = Vec::new();
        self.retrying(|client| {
            client
                .query_typed(&sql, typed![&none => TEXT_ARRAY])?
                .iter()
                .map(outage_from_row)
                .collect()
        })
        .map_err(|error| self.fail("read", &error))
    }

    fn say_outages(&mut self, dests: &[String]) -> Result<Vec<Outage>> {
        if dests.is_empty() {
            return Ok(Vec::new());
        }
        let sql = outages_sql(true);
        self.retrying(|client| {
            let mut tx = begin(client)?;
            let unsaid = tx
                .query_typed(&sql, typed![&dests => TEXT_ARRAY])?
                .iter()
                .map(outage_from_row)
                .collect::<Result<Vec<_>, _>>()?;
            let said: Vec<String> = unsaid.iter().map(|outage| outage.dest.clone()).collect();
            tx.execute_typed(
                "UPDATE idem.outages SET said = true WHERE dest = ANY($1::text[]) AND NOT said",
                typed![&said => TEXT_ARRAY],
            )?;
            tx.commit()?;
            Ok(unsaid)
        })
        .map_err(|error| self.fail("record an outage said in", &error))
    }

    fn prune_events(&mut self, before: Timestamp, dry_run: bool) -> Result<u64> {
        let settled = format!("created_at < $1 AND NOT ({OWED})");
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
    // An older idem's outbox (read by `doctor`) knows no sending.
    let owed = if in_order(client)? {
        OWED
    } else {
        "delivered_at IS NULL AND NOT lost"
    };
    let owed: i64 = client
        .query_typed_one(
            &format!(
                "SELECT count(*) AS owed FROM idem.outbox
                 WHERE {owed} AND created_at >= now() - $1::text::interval"
            ),
            typed![&interval(GIVE_UP) => TEXT],
        )?
        .try_get("owed")?;
    Ok(u64::try_from(owed).unwrap_or(0))
}

/// Whether the outbox keeps its targets' order (schema 12 on).
fn in_order(client: &mut Client) -> Result<bool, tokio_postgres::Error> {
    client
        .query_typed_one(
            "SELECT to_regclass('idem.outages') IS NOT NULL AS exists",
            &[],
        )?
        .try_get("exists")
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
    if !in_order(client)? {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {STATE_COLUMNS} FROM idem.outbox
         WHERE lost OR ({OWED} AND created_at < now() - $2::text::interval)
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
