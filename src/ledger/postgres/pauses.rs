//! The pause rules' transaction ([`PauseTx`]) in PostgreSQL's SQL, and the
//! reads of pauses. Whether a pause holds is judged on the database's
//! clock, as leases are, so that every host agrees when one ends.

use jiff::Timestamp;
use tokio_postgres::Row;
use uuid::Uuid;

use super::super::pauses::{Pause, PauseTx};
use super::client::{Client, Transaction};
use super::glob::glob_to_regex;
use super::rows::{maybe_time, time};
use super::tx::Tx;

const COLUMNS: &str = "job, paused_by, since, reason, until, run_id";

/// The pause of `job` that holds now, if any: one statement.
pub(super) fn read_pause(
    client: &mut Client,
    job: &str,
) -> Result<Option<Pause>, tokio_postgres::Error> {
    client.pipeline(async |db| query_pause(db, job).await)
}

/// [`read_pause`], to be sent in a pipeline with other statements.
pub(super) async fn query_pause(
    db: &tokio_postgres::Client,
    job: &str,
) -> Result<Option<Pause>, tokio_postgres::Error> {
    db.query_typed_opt(
        &format!(
            "SELECT {COLUMNS} FROM idem.pauses
             WHERE job = $1 AND (until IS NULL OR until > now())"
        ),
        typed![&job => TEXT],
    )
    .await?
    .as_ref()
    .map(pause_from_row)
    .transpose()
}

/// The pauses of the jobs matching `glob` (all without one), held or
/// ended (the job's latest), in job order.
pub(super) fn read_pauses(
    client: &mut Client,
    glob: Option<&str>,
) -> Result<Vec<Pause>, tokio_postgres::Error> {
    let regex = glob.map(glob_to_regex);
    client
        .query(
            &format!(
                "SELECT {COLUMNS} FROM idem.pauses
                 WHERE $1::text IS NULL OR job ~ $1
                 ORDER BY job COLLATE \"C\""
            ),
            &[&regex],
        )?
        .iter()
        .map(pause_from_row)
        .collect()
}

fn pause_from_row(row: &Row) -> Result<Pause, tokio_postgres::Error> {
    Ok(Pause {
        job: row.try_get("job")?,
        by: row.try_get("paused_by")?,
        since: time(row, "since")?,
        reason: row.try_get("reason")?,
        until: maybe_time(row, "until")?,
        run_id: row.try_get("run_id")?,
    })
}

/// `--pause-after`: a run of `job` just failed, the job's `failures`th in
/// a row, in `tx`, which holds the job's row lock; pauses the job when the
/// rule says so.
pub(super) fn after_failure(
    tx: &mut Transaction<'_>,
    job: &str,
    failures: u64,
    pause_after: u32,
    run_id: Uuid,
) -> Result<bool, tokio_postgres::Error> {
    super::super::pauses::after_failure(&mut Tx::new(tx), job, failures, pause_after, run_id)
}

impl PauseTx for Tx<'_, '_> {
    type Error = tokio_postgres::Error;

    fn now(&mut self) -> Result<Timestamp, tokio_postgres::Error> {
        let row = self.tx.query_typed_one("SELECT now() AS now", &[])?;
        time(&row, "now")
    }

    fn jobs_matching(&mut self, glob: &str) -> Result<Vec<String>, tokio_postgres::Error> {
        let regex = glob_to_regex(glob);
        self.tx
            .query(
                "SELECT job FROM (SELECT job FROM idem.jobs WHERE job ~ $1
                     UNION SELECT job FROM idem.pauses WHERE job ~ $1) known
                 ORDER BY job COLLATE \"C\"",
                &[&regex],
            )?
            .iter()
            .map(|row| row.try_get("job"))
            .collect()
    }

    fn put_pause(&mut self, pause: &Pause) -> Result<(), tokio_postgres::Error> {
        self.tx.execute(
            &format!(
                "INSERT INTO idem.pauses ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (job) DO UPDATE SET paused_by = excluded.paused_by,
                     since = excluded.since, reason = excluded.reason,
                     until = excluded.until, run_id = excluded.run_id"
            ),
            &[
                &pause.job,
                &pause.by,
                &pause.since,
                &pause.reason,
                &pause.until,
                &pause.run_id,
            ],
        )?;
        Ok(())
    }

    fn add_pause(&mut self, pause: &Pause, _now: Timestamp) -> Result<bool, tokio_postgres::Error> {
        // One statement: a pause that holds is kept, one that ended is
        // written over; two writers queue on the row.
        let written = self.tx.execute(
            &format!(
                "INSERT INTO idem.pauses ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (job) DO UPDATE SET paused_by = excluded.paused_by,
                     since = excluded.since, reason = excluded.reason,
                     until = excluded.until, run_id = excluded.run_id
                 WHERE idem.pauses.until IS NOT NULL AND idem.pauses.until <= now()"
            ),
            &[
                &pause.job,
                &pause.by,
                &pause.since,
                &pause.reason,
                &pause.until,
                &pause.run_id,
            ],
        )?;
        Ok(written == 1)
    }

    fn end_pauses(
        &mut self,
        jobs: &[String],
        now: Timestamp,
    ) -> Result<Vec<String>, tokio_postgres::Error> {
        self.tx
            .query(
                "UPDATE idem.pauses SET until = $2
                 WHERE job = ANY($1) AND (until IS NULL OR until > $2)
                 RETURNING job",
                &[&jobs, &now],
            )?
            .iter()
            .map(|row| row.try_get("job"))
            .collect()
    }
}
