//! The outbox in a SQLite ledger: events written in a claim's or an
//! outcome's transaction, taken for delivery under the writers' lock, and
//! settled by their holder alone.

use anyhow::Result;
use jiff::Timestamp;
use rusqlite::{params, Connection, OptionalExtension, Row};
use uuid::Uuid;

use super::super::outbox::{
    EventState, NewEvent, Outage, Outbox, Owed, Pick, Settled, Taken, GIVE_UP, LEASE,
};
use super::durability::Sync;
use super::rows::{get, millis, time_at, timestamp};
use super::SqliteLedger;

/// Whether an event is owed: neither sent (nor being sent), superseded
/// nor lost.
const OWED: &str = "delivered_at IS NULL AND lost = 0 AND superseded = 0 AND sending_at IS NULL";

/// The order a target hears its events in: its runs' starts, a run's
/// start before the rest, then as written.
const ORDER: &str = "run_started, run_id, kind <> 'start', id";

const OWED_COLUMNS: &str = "event_id, run_id, job, kind, target, address, payload, body, \
    created_at, attempts, holder, dest";

const STATE_COLUMNS: &str = "event_id, run_id, job, kind, target, created_at, attempts, \
    delivered_at, lost, error, superseded, sending_at, held_until";

/// Writes `events` in the caller's transaction, each ordered by its run's
/// start (the run is written first, in the same transaction).
pub(super) fn owe(conn: &Connection, events: &[NewEvent]) -> rusqlite::Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let now = millis(Timestamp::now());
    let mut insert = conn.prepare_cached(
        "INSERT INTO outbox (event_id, run_id, job, kind, target, address, payload, body,
             created_at, next_try_at, dest, run_started)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10,
             coalesce((SELECT started_at FROM runs WHERE run_id = ?2), ?9))",
    )?;
    for event in events {
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
            event.dest,
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
            dest: get(row, "dest")?,
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
    let superseded: bool = get(row, "superseded")?;
    let sending_at = time_at(row, "sending_at")?.filter(|_| delivered_at.is_none());
    let held_until: Option<i64> = get(row, "held_until")?;
    let unconfirmed =
        sending_at.is_some() && held_until.is_none_or(|until| until < millis(Timestamp::now()));
    // One past its day is lost, even before a deliverer gives it up.
    let lost = get::<bool>(row, "lost")?
        || (delivered_at.is_none() && !superseded && sending_at.is_none() && created < given_up());
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
        superseded,
        sending_at,
        unconfirmed,
    })
}

/// Takes the next event of each target that may go out now (see
/// [`Outbox::take_next`]), in the caller's transaction.
fn take(conn: &Connection, holder: Uuid, pick: &Pick<'_>) -> rusqlite::Result<Taken> {
    let now = millis(Timestamp::now());
    let until = now + i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX);
    conn.execute(
        &format!(
            "UPDATE outbox SET lost = 1, address = '', body = x''
             WHERE {OWED} AND created_at < ?1"
        ),
        [given_up()],
    )?;
    // Overtaken: a newer run's outcome to the same target went out (or
    // is going, or may have gone). A trace is never overtaken: each run's
    // spans are its own.
    let superseded = conn.execute(
        &format!(
            "UPDATE outbox SET superseded = 1, address = '', body = x''
             WHERE {OWED} AND target NOT LIKE '--on-%' AND kind <> 'trace' AND EXISTS (SELECT 1 FROM outbox n
                 WHERE n.dest = outbox.dest AND n.kind <> 'start' AND n.sending_at IS NOT NULL
                     AND (n.run_started, n.run_id) > (outbox.run_started, outbox.run_id))"
        ),
        [],
    )? as u64;
    // A comma-joined list: `,a,b,` holds `,a,` for each of its targets.
    let joined = |dests: &[String]| format!(",{},", dests.join(","));
    let mut taken = conn
        .prepare_cached(&format!(
            "SELECT {OWED_COLUMNS} FROM outbox o
             WHERE {OWED} AND (next_try_at <= ?1 OR ?6)
                 AND (?2 = ',,' OR instr(?2, ',' || dest || ',') > 0)
                 AND instr(?3, ',' || dest || ',') = 0
                 AND (?4 OR target NOT LIKE '--on-%')
                 AND (?7 IS NULL OR run_id = ?7)
                 AND (target LIKE '--on-%' OR NOT EXISTS (SELECT 1 FROM outbox p
                     WHERE p.dest = o.dest AND p.id <> o.id
                     AND ((p.delivered_at IS NULL AND p.lost = 0 AND p.superseded = 0
                             AND p.sending_at IS NULL
                             AND (p.run_started, p.run_id, p.kind <> 'start', p.id)
                                 < (o.run_started, o.run_id, o.kind <> 'start', o.id))
                         OR (p.sending_at IS NOT NULL AND p.delivered_at IS NULL
                             AND p.held_until >= ?1))))
             ORDER BY {ORDER} LIMIT ?5"
        ))?
        .query_map(
            params![
                now,
                joined(pick.targets),
                joined(pick.skip),
                pick.hooks,
                pick.limit,
                pick.now,
                pick.run.map(|run| run.as_bytes().to_vec())
            ],
            owed_from_row,
        )?
        .collect::<rusqlite::Result<Vec<Owed>>>()?;
    let mut sending = conn.prepare_cached(
        "UPDATE outbox SET holder = ?2, held_until = ?3, sending_at = ?4,
             attempts = attempts + 1
         WHERE event_id = ?1",
    )?;
    for owed in &mut taken {
        sending.execute(params![
            owed.event.event_id.as_bytes().as_slice(),
            holder.as_bytes().as_slice(),
            until,
            now
        ])?;
        owed.holder = holder;
    }
    Ok(Taken {
        owed: taken,
        superseded,
    })
}

/// Settles one event in the caller's transaction; whether `holder` held
/// it. A delivery ends its target's outage; a ping's failure begins one.
fn settle_one(
    conn: &Connection,
    holder: Uuid,
    event_id: Uuid,
    settled: &Settled,
    now: Timestamp,
) -> rusqlite::Result<bool> {
    let (delivered, error, next) = match settled {
        Settled::Delivered => (Some(millis(now)), None, millis(now)),
        Settled::Failed { error, retry_in } => {
            let wait = jiff::SignedDuration::try_from(*retry_in).unwrap_or_default();
            let next = now.checked_add(wait).unwrap_or(now);
            (None, Some(error.as_str()), millis(next))
        }
    };
    let mut update = conn.prepare_cached(
        "UPDATE outbox SET delivered_at = ?3, error = ?4, next_try_at = ?5,
             holder = NULL, held_until = NULL,
             sending_at = CASE WHEN ?3 IS NULL THEN NULL ELSE sending_at END,
             address = CASE WHEN ?3 IS NULL THEN address ELSE '' END,
             body = CASE WHEN ?3 IS NULL THEN body ELSE x'' END
         WHERE event_id = ?1 AND holder = ?2 AND delivered_at IS NULL
             AND held_until >= ?6
         RETURNING dest, target",
    )?;
    let held: Option<(String, String)> = update
        .query_row(
            params![
                event_id.as_bytes().as_slice(),
                holder.as_bytes().as_slice(),
                delivered,
                error,
                next,
                millis(now)
            ],
            |row| Ok((get(row, "dest")?, get(row, "target")?)),
        )
        .optional()?;
    let Some((dest, target)) = held else {
        return Ok(false);
    };
    if delivered.is_some() {
        // Reached: no outage, and what it is owed need wait no longer.
        conn.prepare_cached("DELETE FROM outages WHERE dest = ?1")?
            .execute([&dest])?;
        conn.prepare_cached(&format!(
            "UPDATE outbox SET next_try_at = ?2 WHERE dest = ?1 AND {OWED} AND next_try_at > ?2"
        ))?
        .execute(params![dest, millis(now)])?;
    } else if !target.starts_with("--on-") {
        conn.prepare_cached(
            "INSERT INTO outages (dest, target, since) VALUES (?1, ?2, ?3)
             ON CONFLICT (dest) DO NOTHING",
        )?
        .execute(params![dest, target, millis(now)])?;
    }
    Ok(true)
}

/// The outages of `dests` (every one with `dests` empty), with the events
/// owed to each; `unsaid` only those not yet said.
fn outages_in(conn: &Connection, dests: &[String], unsaid: bool) -> rusqlite::Result<Vec<Outage>> {
    let joined = format!(",{},", dests.join(","));
    let mut read = conn.prepare_cached(&format!(
        "SELECT g.dest, g.target, g.since,
             (SELECT count(*) FROM outbox o WHERE o.dest = g.dest AND {OWED}) AS owed
         FROM outages g
         WHERE (?1 = ',,' OR instr(?1, ',' || g.dest || ',') > 0) AND (NOT ?2 OR g.said = 0)
         ORDER BY g.since, g.dest"
    ))?;
    let rows = read.query_map(params![joined, unsaid], |row| {
        Ok(Outage {
            dest: get(row, "dest")?,
            target: get(row, "target")?,
            since: timestamp(get(row, "since")?)?,
            owed: get(row, "owed")?,
        })
    })?;
    rows.collect()
}

impl Outbox for SqliteLedger {
    fn any_due(&mut self) -> Result<bool> {
        self.conn
            .prepare_cached(&format!(
                "SELECT EXISTS (SELECT 1 FROM outbox WHERE {OWED} AND next_try_at <= ?1)"
            ))
            .and_then(|mut due| due.query_row([millis(Timestamp::now())], |row| row.get(0)))
            .map_err(|error| self.fail("read", &error))
    }

    fn take_next(&mut self, holder: Uuid, pick: &Pick<'_>) -> Result<Taken> {
        self.write(
            "record events as being sent in",
            Sync::InCommit,
            &[],
            |tx| take(tx.conn, holder, pick),
        )
    }

    fn settle(&mut self, holder: Uuid, settled: &[(Uuid, Settled)]) -> Result<u64> {
        let now = Timestamp::now();
        self.write("settle events in", Sync::InCommit, &[], |tx| {
            let mut held = 0;
            for (event_id, settled) in settled {
                held += u64::from(settle_one(tx.conn, holder, *event_id, settled, now)?);
            }
            Ok(held)
        })
    }

    fn owed(&mut self) -> Result<Vec<(String, u64)>> {
        let read = || -> rusqlite::Result<Vec<(String, u64)>> {
            let mut owed = self.conn.prepare_cached(&format!(
                "SELECT job, count(*) FROM outbox WHERE {OWED} AND created_at >= ?1
                 GROUP BY job ORDER BY job"
            ))?;
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

    fn outages(&mut self) -> Result<Vec<Outage>> {
        outages_in(&self.conn, &[], false).map_err(|error| self.fail("read", &error))
    }

    fn say_outages(&mut self, dests: &[String]) -> Result<Vec<Outage>> {
        if dests.is_empty() {
            return Ok(Vec::new());
        }
        self.write("record an outage said in", Sync::Later, &[], |tx| {
            let unsaid = outages_in(tx.conn, dests, true)?;
            let mut said = tx
                .conn
                .prepare_cached("UPDATE outages SET said = 1 WHERE dest = ?1")?;
            for outage in &unsaid {
                said.execute([&outage.dest])?;
            }
            Ok(unsaid)
        })
    }

    fn prune_events(&mut self, before: Timestamp, dry_run: bool) -> Result<u64> {
        let settled = format!("created_at < ?1 AND NOT ({OWED})");
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
    // An older idem's outbox (read by `doctor`) knows no sending.
    let owed = if in_order(conn)? {
        OWED
    } else {
        "delivered_at IS NULL AND lost = 0"
    };
    conn.query_row(
        &format!("SELECT count(*) FROM outbox WHERE {owed} AND created_at >= ?1"),
        [given_up()],
        |row| get(row, 0),
    )
}

/// Whether the outbox keeps its targets' order (schema 14 on).
fn in_order(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('outbox') WHERE name = 'superseded')",
        [],
        |row| row.get(0),
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
    if !has_outbox(conn)? || !in_order(conn)? {
        return Ok(Vec::new());
    }
    let mut lost = conn.prepare_cached(&format!(
        "SELECT {STATE_COLUMNS} FROM outbox
         WHERE lost = 1 OR ({OWED} AND created_at < ?2)
         ORDER BY id DESC LIMIT ?1"
    ))?;
    let rows = lost.query_map(params![limit, given_up()], state_from_row)?;
    rows.collect()
}
