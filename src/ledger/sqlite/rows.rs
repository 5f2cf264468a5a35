//! Rows of a SQLite ledger as the ledger's types: each mapping once, each
//! column read by its name in one select list. A stored value that cannot
//! be read (a run id that is not a UUID, an unknown status, a time out of
//! range) is an error, which `describe` turns into words naming the ledger;
//! never a made-up value in its place.

use jiff::Timestamp;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, Row, RowIndex};
use uuid::Uuid;

use super::super::columns::{AttemptCol, JobCol};
use super::super::error::LedgerError;
use super::super::runlock::RunLocks;
use super::super::{
    decode_command, Attempt, Head, HookRun, JobState, Judged, Owner, Run, Status, Tails,
};
use super::containment::ContainmentCode;
use crate::exit::io_words;

/// Runs with their keys and jobs, for [`RunCol`].
pub(super) const RUNS: &str =
    "runs r JOIN keys k ON k.id = r.key_id LEFT JOIN jobs j ON j.id = r.job_id";

select_list! {
    /// A run, over [`RUNS`].
    pub(super) enum RunCol {
        Key = "k.key",
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
        Job = "coalesce(j.job, k.key)",
        Head = "coalesce(k.head = r.id, 0)",
    }
}

select_list! {
    /// Who owns a key's running head, after a [`RunCol`] list.
    pub(super) enum OwnerCol {
        KeyId = "k.id",
        Locked = "k.owner_lock",
        Boot = "k.owner_boot",
        Pgid = "k.owner_pgid",
    }
}

select_list! {
    /// An attempt's kept output (`a`: the attempts table).
    pub(super) enum TailCol {
        Stdout = "a.stdout_tail",
        Stderr = "a.stderr_tail",
        Cut = "a.cut",
    }
}

select_list! {
    /// A hook that ran (`h`: the hooks table).
    pub(super) enum HookCol {
        Event = "h.event",
        ExitCode = "h.exit_code",
        At = "h.at",
    }
}

pub(super) fn millis(time: Timestamp) -> i64 {
    time.as_millisecond()
}

/// A stored time out of range, in Unix milliseconds: `describe` words it
/// apart from other values that cannot be read.
#[derive(Debug)]
pub(super) struct TimeOutOfRange(pub i64);

impl std::fmt::Display for TimeOutOfRange {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(out, "a time out of range ({})", self.0)
    }
}

impl std::error::Error for TimeOutOfRange {}

/// A stored time; one out of range cannot be read.
pub(super) fn timestamp(ms: i64) -> rusqlite::Result<Timestamp> {
    Timestamp::from_millisecond(ms).map_err(|_| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Integer,
            Box::new(TimeOutOfRange(ms)),
        )
    })
}

/// The value at column `at`; one out of the range of `T`, or of another
/// type, cannot be read, said with the column's name.
pub(super) fn get<T: FromSql>(row: &Row<'_>, at: impl RowIndex) -> rusqlite::Result<T> {
    row.get(at).map_err(|error| match error {
        rusqlite::Error::IntegralValueOutOfRange(at, value) => {
            let name = row.as_ref().column_name(at).unwrap_or("?").to_owned();
            rusqlite::Error::FromSqlConversionFailure(
                at,
                rusqlite::types::Type::Integer,
                format!("{value} is out of range in column {name}").into(),
            )
        }
        error => error,
    })
}

/// A count at column `at`: a negative one cannot be read, and NULL (which
/// the schema keeps out) is no zero either.
pub(super) fn count_at(row: &Row<'_>, at: impl RowIndex) -> rusqlite::Result<u64> {
    let at = at.idx(row.as_ref())?;
    let value: i64 = get(row, at)?;
    u64::try_from(value).map_err(|_| {
        let name = row.as_ref().column_name(at).unwrap_or("?").to_owned();
        rusqlite::Error::FromSqlConversionFailure(
            at,
            rusqlite::types::Type::Integer,
            format!("a negative count ({value}) in column {name}").into(),
        )
    })
}

pub(super) fn time_at(row: &Row<'_>, at: impl RowIndex) -> rusqlite::Result<Option<Timestamp>> {
    get::<Option<i64>>(row, at)?.map(timestamp).transpose()
}

/// `jobs.last_status`: a status by its name.
impl FromSql for Status {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Status> {
        let text = value.as_str()?;
        Status::parse(text)
            .ok_or_else(|| FromSqlError::Other(format!("unknown run status {text:?}").into()))
    }
}

/// `runs.status`: a status by its code (schema 8), which SQLite keeps in
/// the row's header alone for 0 and 1 where a name took up to 9 bytes of
/// every run. SQL text names the codes by these constants.
pub(super) struct StatusCode(pub Status);

pub(super) const RUNNING: i64 = 0;
pub(super) const SUCCEEDED: i64 = 1;
pub(super) const FAILED: i64 = 2;
pub(super) const ABANDONED: i64 = 3;

impl StatusCode {
    pub(super) fn code(&self) -> i64 {
        match self.0 {
            Status::Running => RUNNING,
            Status::Succeeded => SUCCEEDED,
            Status::Failed => FAILED,
            Status::Abandoned => ABANDONED,
        }
    }
}

impl ToSql for StatusCode {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.code()))
    }
}

impl FromSql for StatusCode {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<StatusCode> {
        let status = match value {
            ValueRef::Integer(RUNNING) => Status::Running,
            ValueRef::Integer(SUCCEEDED) => Status::Succeeded,
            ValueRef::Integer(FAILED) => Status::Failed,
            ValueRef::Integer(ABANDONED) => Status::Abandoned,
            // Only a hand-edited row holds another code, or a name.
            ValueRef::Integer(code) => return Err(unknown_status(code)),
            ValueRef::Text(text) => {
                return Err(unknown_status(format!(
                    "{:?}",
                    String::from_utf8_lossy(text)
                )))
            }
            _ => return Err(FromSqlError::InvalidType),
        };
        Ok(StatusCode(status))
    }
}

fn unknown_status(shown: impl std::fmt::Display) -> FromSqlError {
    FromSqlError::Other(format!("unknown run status {shown}").into())
}

/// A run id stored as 16 bytes.
pub(super) fn uuid_at(row: &Row<'_>, at: usize) -> rusqlite::Result<Uuid> {
    let bytes: Vec<u8> = get(row, at)?;
    Uuid::from_slice(&bytes).map_err(|error| {
        rusqlite::Error::FromSqlConversionFailure(at, rusqlite::types::Type::Blob, error.into())
    })
}

/// Reads a [`RunCol`] list: the run's row id and the run.
pub(super) fn run_from_row(row: &Row<'_>) -> rusqlite::Result<(i64, Run)> {
    let run = Run {
        key: get(row, RunCol::Key.at())?,
        run_id: uuid_at(row, RunCol::RunId.at())?,
        status: get::<StatusCode>(row, RunCol::Status.at())?.0,
        exit_code: get(row, RunCol::ExitCode.at())?,
        signal: get(row, RunCol::Signal.at())?,
        attempts: get(row, RunCol::Attempts.at())?,
        started_at: timestamp(get(row, RunCol::StartedAt.at())?)?,
        finished_at: time_at(row, RunCol::FinishedAt.at())?,
        host: get(row, RunCol::Host.at())?,
        pid: get(row, RunCol::Pid.at())?,
        command: decode_command(&get::<Vec<u8>>(row, RunCol::Command.at())?),
        shell: get(row, RunCol::Shell.at())?,
        recovered: get(row, RunCol::Recovered.at())?,
        note: get(row, RunCol::Note.at())?,
        job: get(row, RunCol::Job.at())?,
        head: get(row, RunCol::Head.at())?,
    };
    Ok((get(row, RunCol::RowId.at())?, run))
}

/// Reads an [`AttemptCol`] list; a tail read as NULL is empty.
pub(super) fn attempt_from_row(row: &Row<'_>) -> rusqlite::Result<Attempt> {
    let tail = |col: AttemptCol| -> rusqlite::Result<Vec<u8>> {
        Ok(get::<Option<Vec<u8>>>(row, col.at())?.unwrap_or_default())
    };
    Ok(Attempt {
        number: get(row, AttemptCol::Number.at())?,
        started_at: Some(timestamp(get(row, AttemptCol::StartedAt.at())?)?),
        finished_at: time_at(row, AttemptCol::FinishedAt.at())?,
        exit_code: get(row, AttemptCol::ExitCode.at())?,
        signal: get(row, AttemptCol::Signal.at())?,
        timed_out: get(row, AttemptCol::TimedOut.at())?,
        stdout_tail: tail(AttemptCol::Stdout)?,
        stderr_tail: tail(AttemptCol::Stderr)?,
        cut: get(row, AttemptCol::Cut.at())?,
        containment: get::<Option<ContainmentCode>>(row, AttemptCol::Containment.at())?
            .map(|code| code.0),
        cause: get(row, AttemptCol::Cause.at())?,
        peak_memory: get(row, AttemptCol::PeakMemory.at())?,
        cpu_ms: get(row, AttemptCol::CpuMs.at())?,
    })
}

/// Reads a [`TailCol`] list; a tail read as NULL is empty.
pub(super) fn tails_from_row(row: &Row<'_>) -> rusqlite::Result<Tails> {
    let tail = |col: TailCol| -> rusqlite::Result<Vec<u8>> {
        Ok(get::<Option<Vec<u8>>>(row, col.at())?.unwrap_or_default())
    };
    Ok(Tails {
        stdout: tail(TailCol::Stdout)?,
        stderr: tail(TailCol::Stderr)?,
        cut: get(row, TailCol::Cut.at())?,
    })
}

/// Reads a [`HookCol`] list.
pub(super) fn hook_from_row(row: &Row<'_>) -> rusqlite::Result<HookRun> {
    Ok(HookRun {
        event: get(row, HookCol::Event.at())?,
        exit_code: get(row, HookCol::ExitCode.at())?,
        at: timestamp(get(row, HookCol::At.at())?)?,
    })
}

/// Reads a [`JobCol`] list starting at column `at`.
pub(super) fn job_from_row(row: &Row<'_>, at: usize) -> rusqlite::Result<JobState> {
    let time = |col: JobCol| time_at(row, at + col.at());
    let count = |col: JobCol| count_at(row, at + col.at());
    let col = |col: JobCol| at + col.at();
    Ok(JobState {
        job: get(row, col(JobCol::Job))?,
        template: get(row, col(JobCol::Template))?,
        zone: get(row, col(JobCol::Zone))?,
        host: get(row, col(JobCol::Host))?,
        command: decode_command(
            &get::<Option<Vec<u8>>>(row, col(JobCol::Command))?.unwrap_or_default(),
        ),
        shell: get(row, col(JobCol::Shell))?,
        first_run: time(JobCol::FirstRun)?,
        last_run: time(JobCol::LastRun)?,
        last_status: get(row, col(JobCol::LastStatus))?,
        last_exit: get(row, col(JobCol::LastExit))?,
        last_success: time(JobCol::LastSuccess)?,
        failures: count(JobCol::Failures)?,
        runs: [
            count(JobCol::Running)?,
            count(JobCol::Succeeded)?,
            count(JobCol::Failed)?,
            count(JobCol::Abandoned)?,
        ],
        checked_at: time(JobCol::CheckedAt)?,
        strip: get(row, col(JobCol::Strip))?,
        ok_keys: super::super::decode_keys(&get::<String>(row, col(JobCol::OkKeys))?),
        live: 0,
    })
}

/// Tells whether the owner of the running head of key row `key_id` lives,
/// by the key's `owner_lock` (which lock file its claim holds a byte of,
/// when it locked; see [`runlock`](super::super::runlock)), else by its
/// `owner_boot` (the boot its claim was made in).
pub(super) type Judge<'a> =
    dyn FnMut(i64, Option<i64>, Option<&str>) -> rusqlite::Result<Option<bool>> + 'a;

/// The judge outside a claim: asks the kernel who holds the key's byte.
pub(super) fn by_the_kernel(
    locks: &RunLocks,
) -> impl FnMut(i64, Option<i64>, Option<&str>) -> rusqlite::Result<Option<bool>> + '_ {
    move |key_id, lock, boot| judge_local_owner(locks, key_id, lock, boot)
}

/// Whether the owner of the running head of key row `key_id` lives, by
/// the key's columns `owner_lock` (`lock`) and `owner_boot` (`boot`). A
/// lock file deleted or replaced since the claim cannot tell: then only a
/// reboot since says the run is over.
fn judge_local_owner(
    locks: &RunLocks,
    key_id: i64,
    lock: Option<i64>,
    boot: Option<&str>,
) -> rusqlite::Result<Option<bool>> {
    let judged = match lock {
        Some(stamp) if stamp != 0 => locks
            .judge(key_id, stamp)
            .map_err(|error| lock_file_error(locks, error))?,
        _ => None,
    };
    Ok(judged.or_else(|| unlocked_owner(boot)))
}

/// The judge inside a claim, which has just tried the key's byte on the
/// lock file at the path: `taken` is that file's stamp when the byte was
/// free. Whoever holds the byte is a live run of the key (claims take it
/// only under the writers' lock); a free byte on another file than the one
/// the head's claim locked says nothing of that run.
pub(super) fn judge_in_claim(
    taken: Option<i64>,
    lock: Option<i64>,
    boot: Option<&str>,
) -> Option<bool> {
    match (lock, taken) {
        (Some(stamp), None) if stamp != 0 => Some(true),
        (Some(stamp), Some(now)) if stamp != 0 => {
            RunLocks::judge_taken(now, stamp).or_else(|| unlocked_owner(boot))
        }
        _ => unlocked_owner(boot),
    }
}

/// Whether some running head's claim locked another lock file than the one
/// of stamp `taken` (deleted or replaced since) and its run cannot be
/// judged over: a named lock taken on `taken`'s file cannot see whether
/// that run holds it on its own.
pub(super) fn runs_on_a_moved_file(conn: &Connection, taken: i64) -> rusqlite::Result<bool> {
    // The literal term lets the planner use the partial index.
    let mut statement = conn.prepare(&format!(
        "SELECT k.owner_lock AS lock, k.owner_boot AS boot
         FROM runs r CROSS JOIN keys k ON k.id = r.key_id
         WHERE r.status = {RUNNING} AND r.status <> {SUCCEEDED} AND k.head = r.id
           AND k.owner_lock > 1"
    ))?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let boot: Option<String> = get(row, "boot")?;
        if judge_in_claim(Some(taken), get(row, "lock")?, boot.as_deref()).is_none() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A claim made without the lock file lives, for all idem can tell, until
/// its host reboots.
fn unlocked_owner(boot: Option<&str>) -> Option<bool> {
    let this_boot = crate::host::boot_id();
    match boot {
        Some(boot) if !boot.is_empty() && !this_boot.is_empty() && boot != this_boot => Some(false),
        _ => None,
    }
}

/// The lock file that tells whether a run lives failed with `error`.
pub(super) fn lock_file_fault(locks: &RunLocks, error: &std::io::Error) -> LedgerError {
    LedgerError::LockFile {
        file: locks.path().display().to_string(),
        why: io_words(error),
    }
}

/// [`lock_file_fault`] inside a statement's work.
pub(super) fn lock_file_error(locks: &RunLocks, error: std::io::Error) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(lock_file_fault(locks, &error).to_string().into())
}

/// Reads an [`OwnerCol`] list starting at column `at`: the owner of `run`,
/// a running head, judged by `judge`.
fn owner_from_row(
    row: &Row<'_>,
    at: usize,
    run: &Run,
    judge: &mut Judge<'_>,
) -> rusqlite::Result<Owner> {
    let lock: Option<i64> = get(row, at + OwnerCol::Locked.at())?;
    let boot: Option<String> = get(row, at + OwnerCol::Boot.at())?;
    let (alive, judged) = match judge(get(row, at + OwnerCol::KeyId.at())?, lock, boot.as_deref())?
    {
        Some(false) if super::super::left::left_running(run, boot.as_deref()) => {
            (Some(true), Judged::LeftRunning)
        }
        // A claim that locked names the lock file it locked: unjudged, that
        // file is no longer the one at the path.
        None if lock.is_some_and(|stamp| stamp != 0) => (None, Judged::LockMoved),
        None => (None, Judged::Unlocked),
        alive => (alive, Judged::Held),
    };
    Ok(Owner {
        host: run.host.clone(),
        pid: run.pid,
        run_id: run.run_id,
        pgid: get(row, at + OwnerCol::Pgid.at())?,
        alive,
        judged,
    })
}

/// The key's head with its row id, its owner judged by `judge`.
pub(super) fn query_head(
    conn: &Connection,
    key: &str,
    judge: &mut Judge<'_>,
) -> rusqlite::Result<Option<(i64, Head)>> {
    let checked_at = RunCol::COUNT + OwnerCol::COUNT;
    conn.prepare_cached(&format!(
        "SELECT {}, {}, j.checked_at
         FROM keys k JOIN runs r ON r.id = k.head LEFT JOIN jobs j ON j.id = r.job_id
         WHERE k.key = ?1",
        RunCol::LIST,
        OwnerCol::LIST
    ))?
    .query_row([key], |row| {
        let (id, run) = run_from_row(row)?;
        let owner = match run.status {
            Status::Running => Some(owner_from_row(row, RunCol::COUNT, &run, judge)?),
            _ => None,
        };
        let head = Head {
            owner,
            read_at: None,
            checked_at: time_at(row, checked_at)?,
            run,
        };
        Ok((id, head))
    })
    .optional()
}

/// Every key whose head is running, in key order, with its job's row id
/// and its owner (judged by the kernel).
pub(super) fn running_heads(
    conn: &Connection,
    locks: &RunLocks,
) -> rusqlite::Result<Vec<(Option<i64>, Run, Owner)>> {
    // The literal term lets the planner use the partial index.
    let mut statement = conn.prepare(&format!(
        "SELECT {}, {}, r.job_id FROM runs r CROSS JOIN keys k ON k.id = r.key_id
         LEFT JOIN jobs j ON j.id = r.job_id
         WHERE r.status = {RUNNING} AND r.status <> {SUCCEEDED} AND k.head = r.id
         ORDER BY k.key",
        RunCol::LIST,
        OwnerCol::LIST
    ))?;
    let mut judge = by_the_kernel(locks);
    let mut rows = statement.query([])?;
    let mut heads = Vec::new();
    while let Some(row) = rows.next()? {
        let (_, run) = run_from_row(row)?;
        let owner = owner_from_row(row, RunCol::COUNT, &run, &mut judge)?;
        heads.push((get(row, RunCol::COUNT + OwnerCol::COUNT)?, run, owner));
    }
    Ok(heads)
}
