//! The arguments of `idem run`, grouped by the headings of its help.

use std::ffi::OsString;

use clap::{ArgAction, Args, ValueEnum};

use super::values::{
    count, duration, ionice, nice, signal, switch, ByteSize, CodeSet, IoNice, SignalNumber,
};

// The groups of `idem run --help` (and sections of its man page). A new
// `run` option joins one of them and gets its environment twin: `IDEM_` and
// the flag's name in upper snake case, with `hide_env_values` (a value may
// be a secret).
const RETRIES: &str = "Retries";
const TIME: &str = "Time";
const CONCURRENCY: &str = "Concurrency";
const OUTPUT: &str = "Output";
const FLEET: &str = "Fleet";
const ALERTS: &str = "Alerts";
const DEPENDENCIES: &str = "Dependencies";
const RESOURCES: &str = "Resources";

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Idempotency key; may hold {date} {hour} {minute} {week} {month}
    /// {year} {host} (local time, TZ honoured), {minute/N} and {hour/N}
    /// (every N minutes or hours); {{ and }} for braces
    // No environment twin: the command itself gets IDEM_KEY, and a nested
    // idem must not take its parent's key for its own.
    #[arg(short, long, value_name = "KEY")]
    pub key: String,

    /// The job this run belongs to, for `idem status` and metrics
    /// [default: the key as typed, before expansion]
    // No environment twin: the command itself gets IDEM_JOB, and a nested
    // idem must not take its parent's job for its own.
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,

    /// Run the words after -- as one /bin/sh -c script
    #[arg(
        long,
        env = "IDEM_SHELL",
        hide_env_values = true,
        action = ArgAction::SetTrue,
        value_parser = switch
    )]
    pub shell: bool,

    /// Further attempts after a failed one; 0 = one attempt
    #[arg(
        long,
        env = "IDEM_RETRIES",
        hide_env_values = true,
        help_heading = RETRIES,
        default_value_t = 3,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = count
    )]
    pub retries: u32,

    /// Base delay before a retry; attempt n waits a random time in
    /// [d/2, d] with d = min(max-backoff, backoff * 2^(n-1))
    #[arg(
        long,
        env = "IDEM_BACKOFF",
        hide_env_values = true,
        help_heading = RETRIES,
        default_value = "1s",
        value_name = "DUR",
        value_parser = duration
    )]
    pub backoff: humantime::Duration,

    /// Cap on one delay between attempts
    #[arg(
        long,
        env = "IDEM_MAX_BACKOFF",
        hide_env_values = true,
        help_heading = RETRIES,
        default_value = "5m",
        value_name = "DUR",
        value_parser = duration
    )]
    pub max_backoff: humantime::Duration,

    /// Retry only these exit codes, e.g. 1,3,10-20
    #[arg(
        long,
        env = "IDEM_RETRY_ON",
        hide_env_values = true,
        help_heading = RETRIES,
        value_name = "CODES"
    )]
    pub retry_on: Option<CodeSet>,

    /// Never retry these exit codes
    #[arg(
        long,
        env = "IDEM_NO_RETRY_ON",
        hide_env_values = true,
        help_heading = RETRIES,
        default_value = "126,127",
        value_name = "CODES"
    )]
    pub no_retry_on: CodeSet,

    /// Per attempt: SIGTERM the command's process group after DUR, SIGKILL
    /// after --kill-after more; counts as exit 124 and is retried
    #[arg(
        long,
        env = "IDEM_TIMEOUT",
        hide_env_values = true,
        help_heading = TIME,
        value_name = "DUR",
        value_parser = duration
    )]
    pub timeout: Option<humantime::Duration>,

    /// Grace between SIGTERM and SIGKILL on timeout
    #[arg(
        long,
        env = "IDEM_KILL_AFTER",
        hide_env_values = true,
        help_heading = TIME,
        default_value = "10s",
        value_name = "DUR",
        value_parser = duration
    )]
    pub kill_after: humantime::Duration,

    /// The signal --timeout sends first (a name like TERM, INT, HUP, or a number)
    #[arg(
        long,
        env = "IDEM_TIMEOUT_SIGNAL",
        hide_env_values = true,
        help_heading = TIME,
        default_value = "TERM",
        value_name = "SIG",
        value_parser = signal
    )]
    pub timeout_signal: SignalNumber,

    /// Wait a random time in [0, DUR] before claiming (spreads a fleet's load)
    #[arg(
        long,
        env = "IDEM_SPLAY",
        hide_env_values = true,
        help_heading = CONCURRENCY,
        value_name = "DUR",
        value_parser = duration
    )]
    pub splay: Option<humantime::Duration>,

    /// A success counts for DUR; after that the key runs again [default: forever]
    #[arg(
        long,
        env = "IDEM_TTL",
        hide_env_values = true,
        help_heading = TIME,
        value_name = "DUR",
        value_parser = duration
    )]
    pub ttl: Option<humantime::Duration>,

    /// First run, oldest first, the earlier periods of the key's template
    /// within the last N whose key never succeeded, back to the job's first
    /// run (each its own key, IDEM_SLOT set; one still running is passed
    /// by until the next call)
    #[arg(
        long,
        env = "IDEM_CATCH_UP",
        hide_env_values = true,
        help_heading = TIME,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = count
    )]
    pub catch_up: Option<u32>,

    /// With --catch-up: run every period due (all), or only the newest and
    /// record the older ones skipped by policy (latest)
    #[arg(
        long,
        env = "IDEM_MISFIRE",
        hide_env_values = true,
        help_heading = TIME,
        value_enum,
        default_value_t = Misfire::All,
        value_name = "WHICH"
    )]
    pub misfire: Misfire,

    /// Run even though the key succeeded (or its command changed)
    #[arg(
        long,
        env = "IDEM_FORCE",
        hide_env_values = true,
        action = ArgAction::SetTrue,
        value_parser = switch
    )]
    pub force: bool,

    /// If the key is running elsewhere, wait up to DUR and adopt its outcome
    #[arg(
        long,
        env = "IDEM_WAIT",
        hide_env_values = true,
        help_heading = CONCURRENCY,
        value_name = "DUR",
        value_parser = duration
    )]
    pub wait: Option<humantime::Duration>,

    /// If the key is running elsewhere, stop that run (as `idem stop`
    /// does), wait until none of it lives, then run this one
    #[arg(
        long,
        env = "IDEM_REPLACE",
        hide_env_values = true,
        help_heading = CONCURRENCY,
        action = ArgAction::SetTrue,
        value_parser = switch
    )]
    pub replace: bool,

    /// A named lock held while the command runs: runs of different keys
    /// sharing it never overlap; NAME:N gives it N slots, so at most N run
    /// at once (repeatable; the variable takes a list, a,b:2)
    #[arg(
        long,
        env = "IDEM_LOCK",
        hide_env_values = true,
        help_heading = CONCURRENCY,
        value_name = "NAME[:N]",
        value_delimiter = ','
    )]
    pub lock: Vec<String>,

    /// When a run of the same job (any key) is running: allow both, skip
    /// (a conflict), queue behind it (at most one waits per job), or
    /// replace it (stop it, as --replace does)
    #[arg(
        long,
        env = "IDEM_OVERLAP",
        hide_env_values = true,
        help_heading = CONCURRENCY,
        value_enum,
        default_value_t = Overlap::Allow,
        value_name = "POLICY"
    )]
    pub overlap: Overlap,

    /// What to do when the last run died without an outcome
    #[arg(
        long,
        env = "IDEM_ON_ABANDONED",
        hide_env_values = true,
        help_heading = CONCURRENCY,
        value_enum,
        default_value_t = OnAbandoned::Rerun,
        value_name = "WHAT"
    )]
    pub on_abandoned: OnAbandoned,

    /// Exit code when skipped because the key succeeded
    #[arg(
        long,
        env = "IDEM_SKIPPED_EXIT_CODE",
        hide_env_values = true,
        default_value_t = 0,
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub skipped_exit_code: u8,

    /// Exit code when the key is running elsewhere
    #[arg(
        long,
        env = "IDEM_CONFLICT_EXIT_CODE",
        hide_env_values = true,
        help_heading = CONCURRENCY,
        default_value_t = 75,
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub conflict_exit_code: u8,

    /// Exit code when the job is paused (`idem pause`); nothing ran
    #[arg(
        long,
        env = "IDEM_PAUSED_EXIT_CODE",
        hide_env_values = true,
        help_heading = FLEET,
        default_value_t = 0,
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub paused_exit_code: u8,

    /// Pause the job by itself at its Nth failure in a row (or a later
    /// one), an alert with IDEM_EVENT=paused; `idem resume JOB` ends it
    #[arg(
        long,
        env = "IDEM_PAUSE_AFTER",
        hide_env_values = true,
        help_heading = FLEET,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub pause_after: Option<u32>,

    /// Hold the command's output and print it only if the run fails
    #[arg(
        long,
        env = "IDEM_QUIET_SUCCESS",
        hide_env_values = true,
        help_heading = OUTPUT,
        action = ArgAction::SetTrue,
        value_parser = switch
    )]
    pub quiet_success: bool,

    /// Bytes of the output tail kept per attempt and stream (0 = none, at
    /// most 1MiB); --capture 0 keeps secrets a command prints out of the ledger
    #[arg(
        long,
        env = "IDEM_CAPTURE",
        hide_env_values = true,
        help_heading = OUTPUT,
        default_value = "64KiB",
        value_name = "BYTES"
    )]
    pub capture: ByteSize,

    /// When skipping, print the recorded output of the successful run
    #[arg(
        long,
        env = "IDEM_REPLAY",
        hide_env_values = true,
        help_heading = OUTPUT,
        action = ArgAction::SetTrue,
        value_parser = switch
    )]
    pub replay: bool,

    /// Spinner for waits (backoff, --wait): auto (when stderr is a
    /// terminal) or never; a bad IDEM_PROGRESS is a warning, not an error
    #[arg(
        long,
        value_enum,
        env = "IDEM_PROGRESS",
        hide_env_values = true,
        help_heading = OUTPUT,
        default_value_t = Progress::Auto,
        value_name = "WHEN"
    )]
    pub progress: Progress,

    /// Shared ledger: how long a claim lives without a heartbeat (at least 1s)
    #[arg(
        long,
        env = "IDEM_LEASE",
        hide_env_values = true,
        help_heading = FLEET,
        default_value = "60s",
        value_name = "DUR",
        value_parser = duration
    )]
    pub lease: humantime::Duration,

    /// Run `sh -c CMD` after a failed run is recorded, when it is an alert
    /// (see --alert-after), and with IDEM_EVENT=slow for --warn-after
    #[arg(
        long,
        env = "IDEM_ON_FAILURE",
        hide_env_values = true,
        help_heading = ALERTS,
        value_name = "CMD"
    )]
    pub on_failure: Option<OsString>,

    /// Run `sh -c CMD` after the first success that follows an alerted failure
    #[arg(
        long,
        env = "IDEM_ON_RECOVERY",
        hide_env_values = true,
        help_heading = ALERTS,
        value_name = "CMD"
    )]
    pub on_recovery: Option<OsString>,

    /// A failure is an alert only when it is the job's Nth in a row or later;
    /// below that it is recorded but quiet (output held as with --quiet-success)
    #[arg(
        long,
        env = "IDEM_ALERT_AFTER",
        hide_env_values = true,
        help_heading = ALERTS,
        default_value_t = 1,
        value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub alert_after: u64,

    /// Send a trace of the run over OTLP/HTTP to URL, the collector's
    /// traces endpoint (/v1/traces included); without it,
    /// OTEL_EXPORTER_OTLP_ENDPOINT and OpenTelemetry's other variables
    /// say where
    #[arg(
        long,
        env = "IDEM_TRACE",
        hide_env_values = true,
        help_heading = ALERTS,
        value_name = "URL"
    )]
    pub trace: Option<String>,

    /// Report an attempt still running after DUR, once (a line, the slow
    /// event of --on-failure, a ping to URL/log); it keeps running
    #[arg(
        long,
        env = "IDEM_WARN_AFTER",
        hide_env_values = true,
        help_heading = ALERTS,
        value_name = "DUR",
        value_parser = duration
    )]
    pub warn_after: Option<humantime::Duration>,

    /// With --warn-after: report the attempt again every DUR while it
    /// runs (each a line, a slow event, a ping)
    #[arg(
        long,
        env = "IDEM_WARN_EVERY",
        hide_env_values = true,
        help_heading = ALERTS,
        value_name = "DUR",
        value_parser = duration,
        requires = "warn_after"
    )]
    pub warn_every: Option<humantime::Duration>,

    /// A monitor to ping (repeatable): a Healthchecks URL (URL/start at the
    /// claim, URL on success, URL/fail on an alert, URL/log otherwise),
    /// sentry:DSN (cron check-ins) or cronitor:URL (telemetry); a secret,
    /// never printed whole
    #[arg(
        long,
        env = "IDEM_PING_URL",
        hide_env_values = true,
        help_heading = ALERTS,
        value_name = "URL",
        value_hint = clap::ValueHint::Url
    )]
    pub ping: Vec<String>,

    /// Start only once the upstream key TEMPLATE has succeeded (expanded
    /// now, or at IDEM_SLOT under --catch-up); until then the run is
    /// blocked and claims nothing (repeatable; the variable takes a list, a,b)
    #[arg(
        long,
        env = "IDEM_AFTER",
        hide_env_values = true,
        help_heading = DEPENDENCIES,
        value_name = "TEMPLATE",
        value_delimiter = ','
    )]
    pub after: Vec<String>,

    /// When blocked by --after, wait up to DUR for the upstream keys to
    /// succeed, and start as soon as they have
    #[arg(
        long,
        env = "IDEM_AFTER_WAIT",
        hide_env_values = true,
        help_heading = DEPENDENCIES,
        value_name = "DUR",
        value_parser = duration
    )]
    pub after_wait: Option<humantime::Duration>,

    /// Exit code when blocked by --after (nothing ran)
    #[arg(
        long,
        env = "IDEM_BLOCKED_EXIT_CODE",
        hide_env_values = true,
        help_heading = DEPENDENCIES,
        default_value_t = 0,
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub blocked_exit_code: u8,

    /// What holds the run's processes together: auto (a cgroup of the
    /// attempt's own where cgroup v2 is writable, else the guardian; never
    /// one that changes the command's pids), or the one named
    #[arg(
        long,
        env = "IDEM_CONTAIN",
        hide_env_values = true,
        help_heading = RESOURCES,
        value_enum,
        default_value_t = Contain::Auto,
        value_name = "HOW"
    )]
    pub contain: Contain,

    /// Run the command at nice value N, -20 (first) to 19 (last), as
    /// nice(1) does; below idem's own takes root
    #[arg(
        long,
        env = "IDEM_NICE",
        hide_env_values = true,
        help_heading = RESOURCES,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = nice
    )]
    pub nice: Option<i32>,

    /// Run the command in I/O scheduling class CLASS (idle, best-effort or
    /// realtime, this one root's) at LEVEL 0 (first) to 7 (last), as
    /// ionice(1) does
    #[arg(
        long,
        env = "IDEM_IONICE",
        hide_env_values = true,
        help_heading = RESOURCES,
        value_name = "CLASS[:LEVEL]",
        value_parser = ionice
    )]
    pub ionice: Option<IoNice>,

    /// The command and its arguments, after --
    #[arg(
        last = true,
        required = true,
        value_name = "COMMAND",
        value_hint = clap::ValueHint::CommandWithArguments
    )]
    pub command: Vec<OsString>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Overlap {
    /// Runs of the job's keys may overlap (each key still runs once)
    Allow,
    /// Exit --conflict-exit-code while a run of the job is running
    Skip,
    /// Wait for it, then run; a later arrival while one waits exits as a
    /// conflict
    Queue,
    /// Stop it (as idem stop does), wait until it is gone, then run
    Replace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Misfire {
    /// Every missed period, oldest first, then the current one
    All,
    /// The newest period due only; the older ones are recorded skipped
    Latest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnAbandoned {
    /// Run again, with IDEM_RECOVERED=1 in the command's environment
    Rerun,
    /// Exit 69 and leave the key for a person
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Contain {
    /// A cgroup where cgroup v2 is writable, else the guardian
    Auto,
    /// A cgroup of the attempt's own, or refuse to run
    Cgroup,
    /// A PID namespace: the command's pid and its parent's are not the host's
    PidNamespace,
    /// The guardian alone: a subreaper, and the IDEM_RUN_ID look
    Guardian,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Progress {
    /// A spinner when stderr is a terminal
    Auto,
    /// Plain lines only
    Never,
}
