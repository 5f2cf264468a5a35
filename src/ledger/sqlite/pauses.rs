//! The pause rules' transaction ([`PauseTx`]) in SQLite's SQL, and the
//! reads of pauses: the one a run makes before it claims, and `status`'s.
//! Times are Unix milliseconds, UTC, as everywhere in this ledger.

use jiff::Timestamp;
use rusqlite::{params, Connection, OptionalExtension, Row};
use uuid::Uuid;

use super::super::pauses::{Pause, PauseTx};
use super::rows::{get, millis, time_at, timestamp};
use super::tx::Tx;

const COLUMNS: &str = "job, paused_by, since, reason, until, run_id";

/// The pause of `job` that holds at `now`, if any.
pub(super) fn read_pause(
    conn: &Connection,
    job: &str,
    now: Timestamp,
) -> rusqlite::Result<Option<Pause>> {
    let pause = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM pauses WHERE job = ?1"))?
        .query_row([job], pause_from_row)
        .optional()?;
    Ok(pause.filter(|pause| pause.holds_at(now)))
}

/// The pauses of the jobs matching `glob` (all without one), held or
/// ended (the job's latest), in job order. A ledger from before pauses
/// (read, not migrated, by a reader) has none.
pub(super) fn read_pauses(conn: &Connection, glob: Option<&str>) -> rusqlite::Result<Vec<Pause>> {
    let mut statement = match conn.prepare(&format!(
        "SELECT {COLUMNS} FROM pauses WHERE ?1 IS NULL OR job GLOB ?1 ORDER BY job"
    )) {
        Err(error) if error.to_string().contains("no such table") => return Ok(Vec::new()),
        statement => statement?,
    };
    let pauses = statement
        .query_map([glob], pause_from_row)?
        .collect::<rusqlite::Result<Vec<Pause>>>();
    pauses
}

fn pause_from_row(row: &Row<'_>) -> rusqlite::Result<Pause> {
    let run_id: Option<Vec<u8>> = get(row, "run_id")?;
    Ok(Pause {
        job: get(row, "job")?,
        by: get(row, "paused_by")?,
        since: timestamp(get(row, "since")?)?,
        reason: get(row, "reason")?,
        until: time_at(row, "until")?,
        run_id: run_id.and_then(|bytes| Uuid::from_slice(&bytes).ok()),
    })
}

/// `--pause-after`: run `run` of job row `job_id` just failed, its
/// figures counted; pauses the job when the rule says so.
pub(super) fn after_failure(
    tx: &mut Tx<'_>,
    job_id: i64,
    pause_after: u32,
    run_id: Uuid,
) -> rusqlite::Result<bool> {
    let (job, failures): (String, i64) = tx
        .conn
        .prepare_cached("SELECT job, failures FROM jobs WHERE id = ?1")?
        .query_row([job_id], |row| {
            Ok((get(row, "job")?, get(row, "failures")?))
        })?;
    let failures = u64::try_from(failures).unwrap_or(0);
    super::super::pauses::after_failure(tx, &job, failures, pause_after, run_id)
}

impl PauseTx for Tx<'_> {
    type Error = rusqlite::Error;

    fn now(&mut self) -> rusqlite::Result<Timestamp> {
        Ok(Timestamp::now())
    }

    fn jobs_matching(&mut self, glob: &str) -> rusqlite::Result<Vec<String>> {
        self.conn
            .prepare_cached(
                "SELECT job FROM jobs WHERE job GLOB ?1
                 UNION SELECT job FROM pauses WHERE job GLOB ?1 ORDER BY job",
            )?
            .query_map([glob], |row| get(row, "job"))?
            .collect()
    }

    fn put_pause(&mut self, pause: &Pause) -> rusqlite::Result<()> {
        self.conn
            .prepare_cached(&format!(
                "INSERT OR REPLACE INTO pauses ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
            ))?
            .execute(params![
                pause.job,
                pause.by,
                millis(pause.since),
                pause.reason,
                pause.until.map(millis),
                pause.run_id.map(|id| id.as_bytes().to_vec()),
            ])?;
        Ok(())
    }

    fn add_pause(&mut self, pause: &Pause, now: Timestamp) -> rusqlite::Result<bool> {
        // The writers' lock is held: nothing writes between the look and
        // the write.
        if read_pause(self.conn, &pause.job, now)?.is_some() {
            return Ok(false);
        }
        self.put_pause(pause)?;
        Ok(true)
    }

    fn end_pauses(&mut self, jobs: &[String], now: Timestamp) -> rusqlite::Result<Vec<String>> {
        let mut held = Vec::new();
        for job in jobs {
            // The writers' lock is held: nothing writes between the look
            // and the write.
            if read_pause(self.conn, job, now)?.is_some() {
                self.conn
                    .prepare_cached("UPDATE pauses SET until = ?2 WHERE job = ?1")?
                    .execute(params![job, millis(now)])?;
                held.push(job.clone());
            }
        }
        Ok(held)
    }
}
