//! What `ledger list`, `show`, `status` and completion read: runs by
//! filter, a key's history and an attempt's output, the hooks of a run,
//! jobs and keys by glob. Reads only, each error left to the caller to say.

use std::collections::HashMap;

use uuid::Uuid;

use super::super::columns::{attempt_list, JobCol};
use super::super::{Attempt, HookRun, JobState, ListFilter, Run, RunAttempts, Tails};
use super::client::Client;
use super::glob::glob_to_regex;
use super::rows::{attempt_from_row, job_from_row, run_from_row, time, unsigned, RunCol};

/// Runs chosen by `filter`, newest first.
pub(super) fn list(
    client: &mut Client,
    filter: &ListFilter,
) -> Result<Vec<Run>, tokio_postgres::Error> {
    let mut sql = format!("SELECT {} FROM idem.runs r WHERE true", RunCol::LIST);
    let glob = filter.key_glob.as_deref().map(glob_to_regex);
    let job_glob = filter.job_glob.as_deref().map(glob_to_regex);
    let statuses: Vec<String> = filter
        .statuses
        .iter()
        .map(|status| status.as_str().to_owned())
        .collect();
    let limit = i64::from(filter.limit);
    let mut values: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = Vec::new();
    if let Some(glob) = &glob {
        values.push(glob);
        sql.push_str(&format!(" AND r.key ~ ${}", values.len()));
    }
    if let Some(glob) = &job_glob {
        values.push(glob);
        sql.push_str(&format!(" AND coalesce(r.job, r.key) ~ ${}", values.len()));
    }
    if !statuses.is_empty() {
        values.push(&statuses);
        sql.push_str(&format!(" AND r.status = ANY(${})", values.len()));
    }
    if let Some(since) = &filter.since {
        values.push(since);
        sql.push_str(&format!(" AND r.started_at >= ${}", values.len()));
    }
    if let Some(until) = &filter.until {
        values.push(until);
        sql.push_str(&format!(" AND r.started_at <= ${}", values.len()));
    }
    values.push(&limit);
    sql.push_str(&format!(
        " ORDER BY r.started_at DESC, r.id DESC LIMIT ${}",
        values.len()
    ));
    let rows = client.query(&sql, &values)?;
    rows.iter()
        .map(|row| run_from_row(row).map(|(_, run)| run))
        .collect()
}

/// The latest `limit` runs of `key`, newest first, with their attempts
/// but not their output, and how many runs the key has.
pub(super) fn history(
    client: &mut Client,
    key: &str,
    limit: u32,
) -> Result<(Vec<RunAttempts>, u64), tokio_postgres::Error> {
    let total = client.query_one(
        "SELECT count(*) AS runs FROM idem.runs WHERE key = $1",
        &[&key],
    )?;
    let runs = client.query(
        &format!(
            "SELECT {} FROM idem.runs r WHERE r.key = $1
             ORDER BY r.started_at DESC, r.id DESC LIMIT $2",
            RunCol::LIST
        ),
        &[&key, &i64::from(limit)],
    )?;
    let ids: Vec<i64> = runs
        .iter()
        .map(|row| row.try_get(RunCol::RowId.at()))
        .collect::<Result<_, _>>()?;
    // The attempts without their output: see `output`.
    let attempts = client.query(
        &format!(
            "SELECT {} FROM idem.attempts a WHERE a.run = ANY($1) ORDER BY a.run, a.n",
            attempt_list(false, "NULL::bytea")
        ),
        &[&ids],
    )?;
    // Runs come newest first, attempts by run id: match them by id.
    let mut by_run: HashMap<i64, Vec<Attempt>> = Default::default();
    for row in &attempts {
        let (run, attempt) = attempt_from_row(row)?;
        by_run.entry(run).or_default().push(attempt);
    }
    let mut history = Vec::new();
    for row in &runs {
        let (id, run) = run_from_row(row)?;
        history.push((run, by_run.remove(&id).unwrap_or_default()));
    }
    Ok((history, unsigned(&total, "runs")?))
}

/// The output tails of attempt `number` of run `run_id`, or of its last.
pub(super) fn output(
    client: &mut Client,
    run_id: Uuid,
    number: Option<u32>,
) -> Result<Option<Tails>, tokio_postgres::Error> {
    let number = number.map(|number| i32::try_from(number).unwrap_or(i32::MAX));
    let row = client.query_opt(
        "SELECT a.stdout_tail, a.stderr_tail, a.cut FROM idem.attempts a
             JOIN idem.runs r ON r.id = a.run
             WHERE r.run_id = $1 AND ($2::int IS NULL OR a.n = $2)
             ORDER BY a.n DESC LIMIT 1",
        &[&run_id, &number],
    )?;
    row.map(|row| {
        Ok(Tails {
            stdout: row
                .try_get::<_, Option<Vec<u8>>>("stdout_tail")?
                .unwrap_or_default(),
            stderr: row
                .try_get::<_, Option<Vec<u8>>>("stderr_tail")?
                .unwrap_or_default(),
            cut: row.try_get("cut")?,
        })
    })
    .transpose()
}

/// The hooks that ran for run `run_id`, in order.
pub(super) fn hooks(
    client: &mut Client,
    run_id: Uuid,
) -> Result<Vec<HookRun>, tokio_postgres::Error> {
    let rows = client.query(
        "SELECT h.event, h.exit_code, h.at FROM idem.hooks h
             JOIN idem.runs r ON r.id = h.run WHERE r.run_id = $1 ORDER BY h.at",
        &[&run_id],
    )?;
    rows.iter()
        .map(|row| {
            Ok(HookRun {
                event: row.try_get("event")?,
                exit_code: row.try_get("exit_code")?,
                at: time(row, "at")?,
            })
        })
        .collect()
}

/// Every job matching `glob` (all without one), in job order.
pub(super) fn jobs(
    client: &mut Client,
    glob: Option<&str>,
) -> Result<Vec<JobState>, tokio_postgres::Error> {
    let regex = glob.map(glob_to_regex);
    let rows = client.query(
        &format!(
            "SELECT {} FROM idem.jobs WHERE $1::text IS NULL OR job ~ $1
             ORDER BY job COLLATE \"C\"",
            JobCol::LIST
        ),
        &[&regex],
    )?;
    let mut jobs = rows
        .iter()
        .map(job_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    // From the running runs (an index on status) to their keys (by the
    // key's primary key): `keys.head` has no index, and starting from the
    // keys read every key of the ledger, 370 ms at ten million runs.
    let live = client.query(
        "SELECT r.job, count(*) AS live
         FROM idem.runs r JOIN idem.keys k ON k.key = r.key AND k.head = r.id
         WHERE r.status = 'running' AND k.lease_until >= clock_timestamp()
         GROUP BY r.job",
        &[],
    )?;
    for row in &live {
        let job: Option<String> = row.try_get("job")?;
        let live = unsigned(row, "live")?;
        if let Some(state) = jobs
            .iter_mut()
            .find(|state| Some(&state.job) == job.as_ref())
        {
            state.live = live;
        }
    }
    Ok(jobs)
}

/// The keys matching `glob`, in key order.
pub(super) fn keys_matching(
    client: &mut Client,
    glob: &str,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let regex = glob_to_regex(glob);
    client
        .query(
            "SELECT key FROM idem.keys WHERE key ~ $1 ORDER BY key COLLATE \"C\"",
            &[&regex],
        )?
        .iter()
        .map(|row| row.try_get("key"))
        .collect()
}
