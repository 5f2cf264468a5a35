//! Rows of a PostgreSQL ledger as the ledger's types: each mapping once,
//! each column read by its name in one select list, with `try_get`
//! throughout (a schema changed behind idem's back is an error to report,
//! never a panic). A stored value that cannot be read (an unknown status,
//! a time out of range, a count below zero) is an [`Unreadable`] error,
//! which `fail` words as SQLite's are; never a made-up value in its place.

use std::error::Error;

use jiff::Timestamp;
use tokio_postgres::row::RowIndex;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::Row;

use super::client::Client;

use super::super::columns::{AttemptCol, JobCol};
use super::super::{decode_command, Attempt, Head, JobState, Judged, Owner, Run, Status};
use crate::process::Containment;

/// A stored value idem cannot read.
#[derive(Debug)]
pub(super) struct Unreadable(pub String);

impl std::fmt::Display for Unreadable {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.write_str(&self.0)
    }
}

impl Error for Unreadable {}

type FromSqlError = Box<dyn Error + Sync + Send>;

impl<'a> FromSql<'a> for Status {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Status, FromSqlError> {
        let text = <&str as FromSql>::from_sql(ty, raw)?;
        Status::parse(text).ok_or_else(|| Unreadable(format!("unknown run status {text:?}")).into())
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql>::accepts(ty)
    }
}

/// `attempts.containment`, by its name.
impl<'a> FromSql<'a> for Containment {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Containment, FromSqlError> {
        let text = <&str as FromSql>::from_sql(ty, raw)?;
        Containment::parse(text)
            .ok_or_else(|| Unreadable(format!("unknown attempt containment {text:?}")).into())
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql>::accepts(ty)
    }
}

/// A stored time, read as [`Unreadable`] when out of range.
struct Stamp(Timestamp);

impl<'a> FromSql<'a> for Stamp {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Stamp, FromSqlError> {
        Timestamp::from_sql(ty, raw)
            .map(Stamp)
            .map_err(|error| Unreadable(format!("a time out of range: {error}")).into())
    }

    fn accepts(ty: &Type) -> bool {
        <Timestamp as FromSql>::accepts(ty)
    }
}

/// A stored integer that idem keeps unsigned (a count, a number, a pid),
/// read as [`Unreadable`] when it does not fit: below zero, or too large.
struct Unsigned<T>(T);

impl<'a, T: TryFrom<i64>> FromSql<'a> for Unsigned<T> {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Unsigned<T>, FromSqlError> {
        let value = match *ty {
            Type::INT2 => i64::from(i16::from_sql(ty, raw)?),
            Type::INT4 => i64::from(i32::from_sql(ty, raw)?),
            _ => i64::from_sql(ty, raw)?,
        };
        T::try_from(value)
            .map(Unsigned)
            .map_err(|_| Unreadable(format!("the number {value} is out of range")).into())
    }

    fn accepts(ty: &Type) -> bool {
        matches!(*ty, Type::INT2 | Type::INT4 | Type::INT8)
    }
}

pub(super) fn time<I>(row: &Row, at: I) -> Result<Timestamp, tokio_postgres::Error>
where
    I: RowIndex + std::fmt::Display,
{
    Ok(row.try_get::<_, Stamp>(at)?.0)
}

pub(super) fn maybe_time<I>(row: &Row, at: I) -> Result<Option<Timestamp>, tokio_postgres::Error>
where
    I: RowIndex + std::fmt::Display,
{
    Ok(row.try_get::<_, Option<Stamp>>(at)?.map(|stamp| stamp.0))
}

/// Reads column `at` as an unsigned `T` (see [`Unsigned`]).
pub(super) fn unsigned<T, I>(row: &Row, at: I) -> Result<T, tokio_postgres::Error>
where
    T: TryFrom<i64>,
    I: RowIndex + std::fmt::Display,
{
    Ok(row.try_get::<_, Unsigned<T>>(at)?.0)
}

/// Reads column `at`, which may be NULL, as an unsigned `T`.
pub(super) fn maybe_unsigned<T, I>(row: &Row, at: I) -> Result<Option<T>, tokio_postgres::Error>
where
    T: TryFrom<i64>,
    I: RowIndex + std::fmt::Display,
{
    Ok(row
        .try_get::<_, Option<Unsigned<T>>>(at)?
        .map(|value| value.0))
}

select_list! {
    /// A run (`r`: idem.runs).
    pub(super) enum RunCol {
        Key = "r.key",
        RowId = "r.id",
        RunId = "r.run_id",
        Status = "r.status",
        ExitCode = "r.exit_code",
        Signal = "r.signal",
        Attempts = "r.attempts",
        StartedAt = "r.started_at",
        FinishedAt = "r.finished_at",
        Host = "r.host",
        Pid = "r.pid",
        Command = "r.command",
        Shell = "r.shell",
        Recovered = "r.recovered",
        Note = "r.note",
        Job = "coalesce(r.job, r.key)",
        Head = "EXISTS (SELECT 1 FROM idem.keys hk WHERE hk.key = r.key AND hk.head = r.id)",
    }
}

select_list! {
    /// Who owns a key's running head (`k`: idem.keys), after a [`RunCol`]
    /// list: an owner is judged by its lease, on the database's clock, and
    /// once that has passed, by what its run left running on this host.
    pub(super) enum OwnerCol {
        Pgid = "k.owner_pgid",
        Expired = "coalesce(k.lease_until < clock_timestamp(), false)",
        Boot = "k.owner_boot",
    }
}

/// Reads a [`RunCol`] list: the run's row id and the run.
pub(super) fn run_from_row(row: &Row) -> Result<(i64, Run), tokio_postgres::Error> {
    let run = Run {
        key: row.try_get(RunCol::Key.at())?,
        run_id: row.try_get(RunCol::RunId.at())?,
        status: row.try_get(RunCol::Status.at())?,
        exit_code: row.try_get(RunCol::ExitCode.at())?,
        signal: row.try_get(RunCol::Signal.at())?,
        attempts: unsigned(row, RunCol::Attempts.at())?,
        started_at: time(row, RunCol::StartedAt.at())?,
        finished_at: maybe_time(row, RunCol::FinishedAt.at())?,
        host: row.try_get(RunCol::Host.at())?,
        pid: unsigned(row, RunCol::Pid.at())?,
        command: decode_command(row.try_get::<_, &[u8]>(RunCol::Command.at())?),
        shell: row.try_get(RunCol::Shell.at())?,
        recovered: row.try_get(RunCol::Recovered.at())?,
        note: row.try_get(RunCol::Note.at())?,
        job: row.try_get(RunCol::Job.at())?,
        head: row.try_get(RunCol::Head.at())?,
    };
    Ok((row.try_get(RunCol::RowId.at())?, run))
}

/// Reads an [`AttemptCol`] list: the run's row id and the attempt.
pub(super) fn attempt_from_row(row: &Row) -> Result<(i64, Attempt), tokio_postgres::Error> {
    let tail = |col: AttemptCol| -> Result<Vec<u8>, tokio_postgres::Error> {
        Ok(row
            .try_get::<_, Option<Vec<u8>>>(col.at())?
            .unwrap_or_default())
    };
    let attempt = Attempt {
        number: unsigned(row, AttemptCol::Number.at())?,
        started_at: Some(time(row, AttemptCol::StartedAt.at())?),
        finished_at: maybe_time(row, AttemptCol::FinishedAt.at())?,
        exit_code: row.try_get(AttemptCol::ExitCode.at())?,
        signal: row.try_get(AttemptCol::Signal.at())?,
        timed_out: row.try_get(AttemptCol::TimedOut.at())?,
        stdout_tail: tail(AttemptCol::Stdout)?,
        stderr_tail: tail(AttemptCol::Stderr)?,
        cut: row.try_get(AttemptCol::Cut.at())?,
        containment: row.try_get(AttemptCol::Containment.at())?,
        cause: row.try_get(AttemptCol::Cause.at())?,
        peak_memory: row.try_get(AttemptCol::PeakMemory.at())?,
        cpu_ms: row.try_get(AttemptCol::CpuMs.at())?,
    };
    Ok((row.try_get(AttemptCol::Run.at())?, attempt))
}

/// Reads an [`OwnerCol`] list starting at column `at`: the owner of `run`.
/// A lease that has passed ends the run unless processes of it still live
/// here (see [`left_running`](super::super::left::left_running)).
pub(super) fn owner_from_row(
    row: &Row,
    at: usize,
    run: &Run,
) -> Result<Owner, tokio_postgres::Error> {
    let expired: bool = row.try_get(at + OwnerCol::Expired.at())?;
    let boot: Option<&str> = row.try_get(at + OwnerCol::Boot.at())?;
    let left = expired && super::super::left::left_running(run, boot);
    Ok(Owner {
        host: run.host.clone(),
        pid: run.pid,
        run_id: run.run_id,
        pgid: maybe_unsigned(row, at + OwnerCol::Pgid.at())?,
        alive: Some(!expired || left),
        judged: if left {
            Judged::LeftRunning
        } else {
            Judged::Held
        },
    })
}

/// Reads a [`JobCol`] list.
pub(super) fn job_from_row(row: &Row) -> Result<JobState, tokio_postgres::Error> {
    let count = |col: JobCol| -> Result<u64, tokio_postgres::Error> { unsigned(row, col.at()) };
    Ok(JobState {
        job: row.try_get(JobCol::Job.at())?,
        template: row.try_get(JobCol::Template.at())?,
        zone: row.try_get(JobCol::Zone.at())?,
        host: row.try_get(JobCol::Host.at())?,
        command: decode_command(
            &row.try_get::<_, Option<Vec<u8>>>(JobCol::Command.at())?
                .unwrap_or_default(),
        ),
        shell: row.try_get(JobCol::Shell.at())?,
        first_run: maybe_time(row, JobCol::FirstRun.at())?,
        last_run: maybe_time(row, JobCol::LastRun.at())?,
        last_status: row.try_get(JobCol::LastStatus.at())?,
        last_exit: row.try_get(JobCol::LastExit.at())?,
        last_success: maybe_time(row, JobCol::LastSuccess.at())?,
        failures: count(JobCol::Failures)?,
        runs: [
            count(JobCol::Running)?,
            count(JobCol::Succeeded)?,
            count(JobCol::Failed)?,
            count(JobCol::Abandoned)?,
        ],
        checked_at: maybe_time(row, JobCol::CheckedAt.at())?,
        strip: row.try_get(JobCol::Strip.at())?,
        ok_keys: super::super::decode_keys(row.try_get::<_, &str>(JobCol::OkKeys.at())?),
        live: 0,
    })
}

select_list! {
    /// What a head is read with, after a [`RunCol`] and an [`OwnerCol`]
    /// list: the database's clock, and when the run's job was last called.
    pub(super) enum HeadCol {
        ReadAt = "now()",
        CheckedAt = "j.checked_at",
    }
}

/// The key's head with its row id, its owner judged by its lease on the
/// database's clock.
pub(super) async fn query_head(
    db: &tokio_postgres::Client,
    key: &str,
) -> Result<Option<(i64, Head)>, tokio_postgres::Error> {
    let row = db
        .query_typed_opt(
            &format!(
                "SELECT {}, {}, {}
             FROM idem.keys k JOIN idem.runs r ON r.id = k.head
             LEFT JOIN idem.jobs j ON j.job = r.job WHERE k.key = $1",
                RunCol::LIST,
                OwnerCol::LIST,
                HeadCol::LIST
            ),
            &[(&key, Type::TEXT)],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let (id, run) = run_from_row(&row)?;
    let owner = match run.status {
        Status::Running => Some(owner_from_row(&row, RunCol::COUNT, &run)?),
        _ => None,
    };
    let at = RunCol::COUNT + OwnerCol::COUNT;
    let head = Head {
        owner,
        read_at: Some(time(&row, at + HeadCol::ReadAt.at())?),
        checked_at: maybe_time(&row, at + HeadCol::CheckedAt.at())?,
        run,
    };
    Ok(Some((id, head)))
}

/// Every key whose head is running, in key order, with its owner judged by
/// its lease on the database's clock.
pub(super) fn running_heads(
    client: &mut Client,
) -> Result<Vec<(Run, Owner)>, tokio_postgres::Error> {
    let rows = client.query_typed(
        &format!(
            "SELECT {}, {} FROM idem.runs r JOIN idem.keys k ON k.key = r.key AND k.head = r.id
             WHERE r.status = 'running' ORDER BY k.key",
            RunCol::LIST,
            OwnerCol::LIST
        ),
        &[],
    )?;
    rows.iter()
        .map(|row| {
            let (_, run) = run_from_row(row)?;
            let owner = owner_from_row(row, RunCol::COUNT, &run)?;
            Ok((run, owner))
        })
        .collect()
}
