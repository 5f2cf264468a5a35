//! A SQLite ledger's part of jobs that wait for each other: the job row a
//! blocked call writes, and the upstreams `status` and `doctor` read.

use anyhow::Result;
use jiff::Timestamp;
use rusqlite::{params, OptionalExtension};

use super::super::marks::{decode_lines, encode_lines, still_blocked};
use super::super::{encode_command, Dependencies, JobInfo, Upstreams};
use super::durability::Sync;
use super::rows::{get, millis, time_at};
use super::SqliteLedger;

/// Makes the job's row when a blocked call comes first (before any claim),
/// else sets its upstreams and, when blocked, what it waits for; the
/// call's time is also the job's stamp (it was called).
const DEPEND: &str = "INSERT INTO jobs (job, template, zone, upstreams, blocked_on, blocked_at,
        checked_at, command, shell)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8)
    ON CONFLICT (job) DO UPDATE SET upstreams = excluded.upstreams,
        blocked_on = coalesce(excluded.blocked_on, jobs.blocked_on),
        blocked_at = coalesce(excluded.blocked_at, jobs.blocked_at),
        checked_at = coalesce(excluded.checked_at, jobs.checked_at)";

/// Each job that has upstreams: its template and theirs (`idem doctor`).
pub(super) fn upstream_graph(
    conn: &rusqlite::Connection,
) -> rusqlite::Result<Vec<(String, Vec<String>)>> {
    let mut statement =
        conn.prepare("SELECT template, upstreams FROM jobs WHERE upstreams IS NOT NULL")?;
    let rows = statement.query_map([], |row| {
        Ok((get(row, "template")?, decode_lines(get(row, "upstreams")?)))
    })?;
    rows.collect()
}

impl Dependencies for SqliteLedger {
    fn depend(
        &mut self,
        job: &JobInfo,
        command: (&[std::ffi::OsString], bool),
        templates: &[String],
        blocked_on: Option<&[String]>,
    ) -> Result<()> {
        let upstreams = encode_lines(templates);
        if blocked_on.is_none() {
            // The usual call: its upstreams as recorded, and no write.
            let stored: Option<Option<String>> = self
                .conn
                .prepare_cached("SELECT upstreams FROM jobs WHERE job = ?1")
                .and_then(|mut statement| {
                    statement
                        .query_row([&job.name], |row| get(row, 0))
                        .optional()
                })
                .map_err(|error| self.fail("read", &error))?;
            if stored.flatten().as_deref() == Some(upstreams.as_str()) {
                return Ok(());
            }
        }
        let blocked = blocked_on.map(encode_lines);
        let at = blocked_on.map(|_| millis(Timestamp::now()));
        self.write("record a job's upstreams in", Sync::Later, &[], |tx| {
            tx.conn.prepare_cached(DEPEND)?.execute(params![
                job.name,
                job.template,
                job.zone,
                upstreams,
                blocked,
                at,
                encode_command(command.0),
                command.1
            ])?;
            Ok(())
        })
    }

    fn upstreams(&mut self, glob: Option<&str>) -> Result<Vec<Upstreams>> {
        let result = (|| {
            let mut statement = self.conn.prepare(
                "SELECT job, upstreams, blocked_on, blocked_at, last_run, checked_at FROM jobs
                 WHERE (?1 IS NULL OR job GLOB ?1)
                     AND (upstreams IS NOT NULL OR blocked_at IS NOT NULL)
                 ORDER BY job",
            )?;
            let rows = statement.query_map([glob], |row| {
                let blocked_at = time_at(row, "blocked_at")?;
                let blocked = still_blocked(
                    blocked_at,
                    time_at(row, "last_run")?,
                    time_at(row, "checked_at")?,
                );
                let blocked_on: Option<String> = get(row, "blocked_on")?;
                Ok(Upstreams {
                    job: get(row, "job")?,
                    templates: decode_lines(get(row, "upstreams")?),
                    blocked_on: blocked.then(|| decode_lines(blocked_on)),
                    blocked_at,
                })
            })?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })();
        result.map_err(|error| self.fail("read", &error))
    }
}
