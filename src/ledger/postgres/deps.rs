//! A shared ledger's part of jobs that wait for each other: the job row a
//! blocked call writes (by the database's clock, as claims are), and the
//! upstreams `status` and `doctor` read.

use anyhow::Result;

use super::super::marks::{decode_lines, encode_lines, still_blocked};
use super::super::{encode_command, Dependencies, JobInfo, Upstreams};
use super::glob::glob_to_regex;
use super::rows::maybe_time;
use super::PostgresLedger;

/// Each job that has upstreams: its template and theirs (`idem doctor`).
pub(super) fn upstream_graph(
    client: &mut super::client::Client,
) -> Result<Vec<(String, Vec<String>)>, tokio_postgres::Error> {
    client
        .query(
            "SELECT template, upstreams FROM idem.jobs WHERE upstreams IS NOT NULL",
            &[],
        )?
        .iter()
        .map(|row| {
            Ok((
                row.try_get("template")?,
                decode_lines(row.try_get("upstreams")?),
            ))
        })
        .collect()
}

impl Dependencies for PostgresLedger {
    fn depend(
        &mut self,
        job: &JobInfo,
        command: (&[std::ffi::OsString], bool),
        templates: &[String],
        blocked_on: Option<&[String]>,
    ) -> Result<()> {
        let upstreams = encode_lines(templates);
        let blocked = blocked_on.map(encode_lines);
        // One statement: it writes only when the call is blocked or the
        // upstreams changed, and its commit does not wait for the server's
        // disk (bookkeeping, as a skip's stamp).
        self.client
            .query_typed_one(
                "WITH u AS (
                     INSERT INTO idem.jobs AS j (job, template, zone, upstreams, blocked_on,
                         blocked_at, checked_at, command, shell)
                     SELECT $1, $2, $3, $4, $5, now(), now(), $6, $7
                     WHERE $5::text IS NOT NULL OR NOT EXISTS (
                         SELECT 1 FROM idem.jobs WHERE job = $1 AND upstreams = $4)
                     ON CONFLICT (job) DO UPDATE SET upstreams = excluded.upstreams,
                         blocked_on = coalesce($5, j.blocked_on),
                         blocked_at = CASE WHEN $5::text IS NULL THEN j.blocked_at ELSE now() END,
                         checked_at = CASE WHEN $5::text IS NULL THEN j.checked_at ELSE now() END
                     RETURNING 1)
                 SELECT (SELECT count(*) FROM u), set_config('synchronous_commit', 'off', true)",
                typed![
                    &job.name => TEXT,
                    &job.template => TEXT,
                    &job.zone => TEXT,
                    &upstreams => TEXT,
                    &blocked => TEXT,
                    &encode_command(command.0) => BYTEA,
                    &command.1 => BOOL,
                ],
            )
            .map(|_| ())
            .map_err(|error| self.fail("record a job's upstreams in", &error))
    }

    fn upstreams(&mut self, glob: Option<&str>) -> Result<Vec<Upstreams>> {
        let regex = glob.map(glob_to_regex);
        let read = (|| {
            let rows = self.client.query(
                "SELECT job, upstreams, blocked_on, blocked_at, last_run, checked_at
                 FROM idem.jobs
                 WHERE ($1::text IS NULL OR job ~ $1)
                     AND (upstreams IS NOT NULL OR blocked_at IS NOT NULL)
                 ORDER BY job COLLATE \"C\"",
                &[&regex],
            )?;
            rows.iter()
                .map(|row| {
                    let blocked_at = maybe_time(row, "blocked_at")?;
                    let blocked = still_blocked(
                        blocked_at,
                        maybe_time(row, "last_run")?,
                        maybe_time(row, "checked_at")?,
                    );
                    let blocked_on: Option<String> = row.try_get("blocked_on")?;
                    Ok(Upstreams {
                        job: row.try_get("job")?,
                        templates: decode_lines(row.try_get("upstreams")?),
                        blocked_on: blocked.then(|| decode_lines(blocked_on)),
                        blocked_at,
                    })
                })
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
        })();
        read.map_err(|error| self.fail("read", &error))
    }
}
