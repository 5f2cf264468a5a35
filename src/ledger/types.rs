//! The values the ledger keeps and hands out: runs, attempts, heads,
//! claims, and what each command's report counts. Both backends and every
//! reader share them.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use anyhow::Result;
use jiff::Timestamp;
use uuid::Uuid;

use super::runlock;
use crate::process::Containment;

/// The status of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Running,
    Succeeded,
    Failed,
    Abandoned,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Abandoned => "abandoned",
        }
    }

    pub fn parse(text: &str) -> Option<Status> {
        Some(match text {
            "running" => Status::Running,
            "succeeded" => Status::Succeeded,
            "failed" => Status::Failed,
            "abandoned" => Status::Abandoned,
            _ => return None,
        })
    }
}

/// Who owns a running key, and whether it still lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Where and as which pid idem ran the claim: for people to read, never
    /// to decide (a pid means nothing in another PID namespace).
    pub host: String,
    pub pid: u32,
    /// The process group of the command's current attempt, once spawned.
    pub pgid: Option<u32>,
    /// The run, whose processes carry it (`IDEM_RUN_ID`): they, not idem's
    /// pid, hold the key once idem is gone.
    pub run_id: Uuid,
    /// Whether the run lives, as the ledger knows it: by the kernel lock the
    /// run holds (a local ledger) or by its lease (a shared one). `None`:
    /// it cannot be judged (a claim of an idem that did not lock), so it is
    /// presumed alive until a person frees it (`ledger forget --force`).
    pub alive: Option<bool>,
    /// What told it: a line naming the owner says why it is unjudged.
    pub judged: super::Judged,
}

impl Owner {
    /// Whether a run must be presumed to go on: alive, or not judged.
    pub fn presumed_alive(&self) -> bool {
        self.alive != Some(false)
    }
}

/// One run, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub key: String,
    /// The job the run belongs to (`--job`, else the key as typed).
    pub job: String,
    /// The run decides its key (it is the key's head).
    pub head: bool,
    pub run_id: Uuid,
    pub status: Status,
    /// The code idem reported for the run: the command's, 124, or 128+N.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub attempts: u32,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub host: String,
    pub pid: u32,
    pub command: Vec<OsString>,
    pub shell: bool,
    /// The previous run of the key was abandoned when this one started.
    pub recovered: bool,
    /// Set only on a success marked by hand (`ledger mark`): by whom, and
    /// why. Such a run never ran a command.
    pub note: Option<String>,
}

impl Run {
    pub fn fingerprint(&self) -> [u8; 32] {
        crate::key::fingerprint(&self.command, self.shell)
    }
}

/// A run with its attempts.
pub type RunAttempts = (Run, Vec<Attempt>);

/// A key's deciding run, with its owner while it is running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub run: Run,
    pub owner: Option<Owner>,
    /// The time by the clock that stamped the run, when that is not this
    /// host's (a shared database's `now()`), so a TTL is judged on one clock.
    pub read_at: Option<Timestamp>,
    /// When the head run's job was last called, by the ledger's clock (so
    /// a skip can tell whether its stamp is due).
    pub checked_at: Option<Timestamp>,
}

/// One attempt of a run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attempt {
    pub number: u32,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
    /// The output was longer than what was kept: the tails lack its start.
    pub cut: bool,
    /// What held its processes together, recorded as it started; `None`:
    /// not recorded (an older idem's attempt, or an older export's).
    pub containment: Option<Containment>,
    /// What it died of where `exit_code` and `signal` do not say it
    /// (`timeout`, `killed for memory`, `stopped: WHY`); see
    /// [`Attempt::cause`].
    pub cause: Option<String>,
    /// Its peak memory in bytes, and its CPU time in ms; `None`: not
    /// recorded.
    pub peak_memory: Option<i64>,
    pub cpu_ms: Option<i64>,
}

impl Attempt {
    /// This attempt with its cause kept only where its exit code and
    /// signal do not tell it (as the ledger stores it).
    pub fn told_cause(mut self) -> Attempt {
        let cause = self.cause.take();
        self.cause = cause.filter(|cause| Some(cause) != self.cause().as_ref());
        self
    }

    /// What it died of, in the words `ledger show`, its JSON and hooks
    /// (`IDEM_CAUSE`) give: `exit N`, `signal N`, `timeout`, `killed for
    /// memory`, `stopped: WHY`; `None` while it runs.
    pub fn cause(&self) -> Option<String> {
        if let Some(cause) = &self.cause {
            return Some(cause.clone());
        }
        match (self.signal, self.exit_code) {
            (Some(signal), _) => Some(format!("signal {signal}")),
            (None, Some(code)) => Some(format!("exit {code}")),
            (None, None) => None,
        }
    }
}

/// A hook that ran for a run (`--on-failure`, `--on-recovery`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRun {
    /// `failure`, `recovery` or `slow`.
    pub event: String,
    /// Its exit code (128+N for signal N); `None`: it could not start.
    pub exit_code: Option<i32>,
    pub at: Timestamp,
}

/// An attempt's kept output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tails {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The output was longer than what was kept: its start is missing.
    pub cut: bool,
}

/// What a claim writes about the new run.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub run_id: Uuid,
    pub command: Vec<OsString>,
    pub shell: bool,
    pub host: String,
    pub pid: u32,
    pub recovered: bool,
    /// Shared ledgers: how long the claim lives without a heartbeat.
    pub lease: std::time::Duration,
    /// The job the run belongs to.
    pub job: JobInfo,
    /// The events the claim owes (`start` pings), written with it.
    pub owed: Vec<super::NewEvent>,
}

/// What a run tells the ledger about its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub name: String,
    /// The key as typed, before expansion: its finest placeholder is the
    /// job's period.
    pub template: String,
    /// The IANA time zone the key was expanded in (`None`: no time
    /// placeholder, or a zone without a name).
    pub zone: Option<String>,
}

/// What the run logic asks of one claim transaction, having seen the head.
#[derive(Debug, Default)]
pub struct Plan {
    /// Mark the head (running, its owner gone) as abandoned.
    pub abandon_head: bool,
    /// Start a new run and make it the key's head.
    pub claim: Option<NewRun>,
}

/// A claimed run: the handle for the writes that follow.
#[derive(Debug, Clone)]
pub struct Claim {
    pub key: String,
    pub run_id: Uuid,
    /// Backend-specific: a row id, or a claim epoch that fences later writes.
    pub token: i64,
    /// The fencing token (`IDEM_FENCE`): larger than that of every earlier
    /// claim of any key in this ledger, purged keys included.
    pub fence: i64,
    /// A local ledger's kernel lock that says the run lives; the run's
    /// processes inherit it. Dropped (with every clone) once the outcome is
    /// recorded.
    pub hold: Option<runlock::Hold>,
    /// The named locks (`--lock`) the run holds; a shared ledger renews
    /// their leases with the claim's and releases them with its outcome.
    pub locks: Vec<String>,
    /// `--pause-after N`: the outcome that is the job's Nth failure in a
    /// row, or a later one, pauses the job in the transaction recording it.
    pub pause_after: Option<u32>,
}

/// What a heartbeat found of its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The lease runs on.
    Renewed,
    /// The lease runs on, and a person asked to stop the run with this
    /// signal (`idem stop`, see `ledger::stops`).
    Stop(i32),
    /// Another run holds the key or one of its named locks now (the lease
    /// ran out), or the run was marked abandoned.
    TakenOver,
    /// The ledger has no trace of the run: it lost the claim's commit (a
    /// failover to a standby that had not received it).
    Gone,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: Status,
    pub exit_code: i32,
    pub signal: Option<i32>,
    /// A person stopped the run (`idem stop`, `--replace`): recorded
    /// `failed`, but no failure of its job: it counts in no failures in a
    /// row and pauses nothing.
    pub stopped: bool,
}

/// Filters of `ledger list`.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub key_glob: Option<String>,
    pub job_glob: Option<String>,
    pub statuses: Vec<Status>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub limit: u32,
}

/// What `forget` found for one key (and, unless a dry run, changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgottenKey {
    pub key: String,
    /// The key is in the ledger (it has a row, even without runs).
    pub known: bool,
    /// The status of the key's head before `forget`; `None` when the key had
    /// no deciding run (new, or forgotten already).
    pub head: Option<Status>,
    /// The head was `running` with a dead owner: it is marked `abandoned`.
    pub abandoned: bool,
    /// Runs of the key in the ledger (removed with `purge`).
    pub runs: u64,
    /// The head is running under a live owner: nothing was changed.
    pub busy: Option<Owner>,
    /// The head was running and is no longer (its owner gone, or not
    /// judged and forgotten with `--force`): its owner, whose processes
    /// may live on.
    pub left: Option<Owner>,
}

/// What `forget` did. When any key is busy, nothing at all was changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForgetReport {
    pub keys: Vec<ForgottenKey>,
}

impl ForgetReport {
    /// The keys refused because a live owner runs them.
    pub fn busy(&self) -> impl Iterator<Item = &ForgottenKey> {
        self.keys.iter().filter(|key| key.busy.is_some())
    }
}

/// What `prune` dropped (or would drop, on a dry run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub runs: u64,
    pub attempts: u64,
    /// Bytes of captured output (stdout and stderr tails).
    pub output_bytes: u64,
    /// Keys left with neither runs nor a head, removed too.
    pub keys: u64,
}

/// One run with its attempts, as `export` writes it and `import` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedRun {
    pub run: Run,
    pub attempts: Vec<Attempt>,
    /// The run was its key's head (the run that decides) in its ledger.
    pub head: bool,
    /// The highest fence (`IDEM_FENCE`) its ledger had handed out when the
    /// export read it: an import raises its own counter to at least it, so
    /// that the claims after a move draw larger fences than any before.
    pub ledger_fence: i64,
}

/// What `import` did with a batch of runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Runs new to this ledger.
    pub added: u64,
    /// Runs this ledger held as `running` and the stream held finished.
    pub updated: u64,
    /// Runs this ledger already held (by `run_id`): left as they are.
    pub unchanged: u64,
    /// Imported runs that became their key's head.
    pub heads: u64,
}

/// Where `import` puts the runs of a stream, one at a time: each run, then
/// its attempts, so that memory holds one attempt whatever the run holds.
pub trait ImportSink {
    /// The highest fence of the ledger the stream came from, read before
    /// the run of its line.
    fn ledger_fence(&mut self, fence: i64) -> Result<()>;

    /// A run (`head`: it was its key's head in its ledger); its attempts
    /// follow.
    fn run(&mut self, run: &Run, head: bool) -> Result<()>;

    /// An attempt of the run handed over last.
    fn attempt(&mut self, attempt: &Attempt) -> Result<()>;
}

/// Hands one run of a stream to the sink; `false` when it has none left
/// for this transaction.
pub type Feed<'a> = dyn FnMut(&mut dyn ImportSink) -> Result<bool> + 'a;

/// Per-key figures for `metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMetrics {
    pub key: String,
    /// The key's latest run (by start time), if it has any.
    pub last_run: Option<Run>,
    /// When the key's latest success finished.
    pub last_success: Option<Timestamp>,
    /// `failed` and `abandoned` runs since the latest success.
    pub consecutive_failures: u64,
    /// Runs in the ledger by status, in the order of [`Status::ALL`].
    pub runs: [u64; 4],
}

impl Status {
    pub const ALL: [Status; 4] = [
        Status::Running,
        Status::Succeeded,
        Status::Failed,
        Status::Abandoned,
    ];
}

/// Named locks a run holds: kernel locks (a local ledger), or lock rows
/// leased to its run id (a shared one), released by `finish` or their lease.
#[derive(Debug, Clone, Default)]
pub struct Locks {
    pub holds: Vec<runlock::Hold>,
    pub names: Vec<String>,
}

/// A named lock a run asks for (`--lock NAME:N`): at most `slots` runs
/// holding `name` run at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedLock {
    pub name: String,
    pub slots: u32,
}

/// Encodes argv for storage: NUL-separated raw bytes (argv cannot hold NUL),
/// so non-UTF-8 arguments survive byte for byte.
pub fn encode_command(command: &[OsString]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for (index, arg) in command.iter().enumerate() {
        if index > 0 {
            bytes.push(0);
        }
        bytes.extend_from_slice(arg.as_bytes());
    }
    bytes
}

pub fn decode_command(bytes: &[u8]) -> Vec<OsString> {
    bytes
        .split(|byte| *byte == 0)
        .map(|arg| OsString::from_vec(arg.to_vec()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip_bytes() {
        let command = vec![
            OsString::from("printf"),
            OsString::from(""),
            OsString::from_vec(vec![0xff, b'x']),
        ];
        assert_eq!(decode_command(&encode_command(&command)), command);
    }
}
