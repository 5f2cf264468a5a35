//! Command-line declarations, and nothing else.
//!
//! This module imports nothing from the rest of the crate, so tests and the
//! man-page generator can build the `clap::Command` on their own.

use std::ffi::OsString;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::str::FromStr;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

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

/// Run a command once per idempotency key.
///
/// idem records every run in a ledger, skips a command whose key already
/// succeeded, retries failures with backoff, and never lets two runs of one
/// key overlap.
#[derive(Debug, Parser)]
#[command(name = "idem", version, propagate_version = true, max_term_width = 100)]
#[command(after_long_help = RUN_NOTES)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

/// The options of every subcommand.
#[derive(Debug, Args)]
pub struct Global {
    /// Ledger: a SQLite file path, or a postgres:// URL for a shared ledger
    /// [default: <data dir>/idem/ledger.db]
    #[arg(
        long,
        global = true,
        env = "IDEM_DB",
        hide_env_values = true,
        value_name = "PATH|URL"
    )]
    pub db: Option<OsString>,

    /// Print none of idem's own lines (errors that stop idem still print)
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Also print the lines idem keeps quiet under cron (skips)
    #[arg(short, long, global = true)]
    pub verbose: bool,

    /// Colour in tables: auto (at a terminal, unless NO_COLOR is set or
    /// TERM is dumb), always or never
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = ColorChoice::Auto,
        value_name = "WHEN"
    )]
    pub color: ColorChoice,
}

/// `idem run`'s flags and the global ones in one command, with no
/// subcommand: the words after `idem` of a line that is `idem run ...`
/// parse the same as the whole line does under [`Cli`], but clap builds,
/// fills in and checks the flags of one command instead of all, and has no
/// subcommand to hand global values down to (a sixth of a skip's
/// instructions). Only a line it parses is taken from it; help, versions
/// and errors come from [`Cli`].
pub fn run_line() -> clap::Command {
    Global::augment_args(RunArgs::augment_args(clap::Command::new("run")))
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run COMMAND under KEY unless KEY already succeeded
    #[command(after_long_help = RUN_NOTES)]
    Run(Box<RunArgs>),
    /// Inspect and maintain the ledger
    #[command(subcommand, after_long_help = LEDGER_EXIT_CODES_HELP)]
    Ledger(LedgerCommand),
    /// One line per job: its state, last run and success, failures in a row
    ///
    /// A job is what a crontab line is: its runs under every key its
    /// template made (`--job`, else the key as typed). Jobs that need a
    /// person come first: failing (its latest finished run failed), overdue
    /// (a periodic job with no success since its last finished period
    /// began, or that nothing called in its current period by the time it
    /// used to be called), then running and ok. Its figures follow the
    /// order in which its runs finished, however they overlap. Exit 0 when
    /// every job is ok or running, 1 otherwise, so it can serve as a check.
    #[command(after_long_help = STATUS_EXIT_CODES_HELP)]
    Status(StatusArgs),
    /// Check a ledger for problems without changing anything
    ///
    /// Checks the ledger of --db. A SQLite file: schema version, PRAGMA
    /// integrity_check, permissions of the file and its folder, leftover
    /// -wal/-shm files, keys stuck in running whose owner is gone, and free
    /// disk space. A postgres:// ledger: the connection, schema version,
    /// the role's rights, and keys stuck in running. Says what is wrong and
    /// how to fix it. Creates and changes nothing (the file is opened
    /// read-only; the database session is read-only). Exit 0 when healthy,
    /// 1 when not.
    Doctor(DoctorArgs),
    /// Serve the ledger read-only over HTTP: a status board, each job's
    /// runs, metrics
    ///
    /// Pages: / the status board (what `idem status` shows), /job/JOB a
    /// job's runs, newest first, with their attempts and output tails,
    /// /metrics (what `idem ledger metrics` prints), /api/status (what
    /// `idem status --json` prints) and /healthz (200 when the ledger can
    /// be read, 503 otherwise). Pages work without JavaScript and refresh
    /// themselves every 30 seconds. The ledger is opened for each request,
    /// read-only, and nothing holds it between requests. Listens on the
    /// loopback address unless told otherwise; any other address needs
    /// --auth-file or IDEM_SERVE_TOKEN, and then every request must carry
    /// the credentials. Stops on SIGTERM or SIGINT once the requests under
    /// way are answered.
    #[command(after_long_help = SERVE_EXIT_CODES_HELP)]
    Serve(ServeArgs),
    /// Print a shell completion script
    ///
    /// After --, the scripts complete a command name, then hand over to
    /// that command's own completion; `ledger show`, `ledger forget` and
    /// `run --key` complete keys from the ledger (of --db or IDEM_DB).
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
    /// What the completion scripts ask the ledger: keys starting with PREFIX
    #[command(name = "__complete", hide = true)]
    Complete {
        /// What to list
        what: Completable,
        /// Only what starts with this
        #[arg(default_value = "")]
        prefix: String,
    },
}

/// What `idem __complete` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Completable {
    /// Keys of the ledger, in order
    Keys,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Idempotency key; may hold {date} {hour} {minute} {week} {month}
    /// {year} {host} (local time, TZ honoured); {{ and }} for braces
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
        allow_negative_numbers = true
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
        value_name = "N"
    )]
    pub catch_up: Option<u32>,

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

    /// A named lock held while the command runs: runs of different keys
    /// sharing it never overlap (repeatable; the variable takes a list, a,b)
    #[arg(
        long,
        env = "IDEM_LOCK",
        hide_env_values = true,
        help_heading = CONCURRENCY,
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub lock: Vec<String>,

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

    /// Healthchecks-style pings: URL/start at the claim, URL on success,
    /// URL/fail on an alert, URL/log otherwise; a secret, never printed whole
    #[arg(
        long,
        env = "IDEM_PING_URL",
        hide_env_values = true,
        help_heading = ALERTS,
        value_name = "URL",
        value_hint = clap::ValueHint::Url
    )]
    pub ping: Option<String>,

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
pub enum OnAbandoned {
    /// Run again, with IDEM_RECOVERED=1 in the command's environment
    Rerun,
    /// Exit 69 and leave the key for a person
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Progress {
    /// A spinner when stderr is a terminal
    Auto,
    /// Plain lines only
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// At a terminal, unless NO_COLOR is set or TERM is dumb
    Auto,
    /// Always, even into a pipe
    Always,
    /// Never
    Never,
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Runs, newest first
    #[command(after_long_help = LEDGER_EXIT_CODES_HELP)]
    List(ListArgs),
    /// A key's state, its runs and attempts, with captured output
    #[command(after_long_help = LEDGER_EXIT_CODES_HELP)]
    Show {
        /// The key, or a template (daily-{date}) expanded now
        key: String,
        /// Print JSON
        #[arg(long)]
        json: bool,
        /// The latest N runs (their output is read one attempt at a time)
        #[arg(long, default_value_t = 10, value_name = "N")]
        limit: u32,
    },
    /// Make keys run again next time; history stays unless --purge
    #[command(after_long_help = LEDGER_EXIT_CODES_HELP)]
    Forget {
        /// Keys to forget, or globs (* ? [..]) matching keys
        #[arg(required = true)]
        keys: Vec<String>,
        /// Remove the keys' history too
        #[arg(long)]
        purge: bool,
        /// Say what would change, change nothing
        #[arg(long)]
        dry_run: bool,
        /// Also forget a running key whose owner idem cannot judge (a claim
        /// made by an older idem); a live run is never forgotten
        #[arg(long)]
        force: bool,
    },
    /// Drop old history and output; never changes what `run` decides
    #[command(after_long_help = LEDGER_EXIT_CODES_HELP)]
    Prune {
        /// Drop runs that finished longer ago than DUR
        #[arg(long, value_name = "DUR", value_parser = duration)]
        older_than: humantime::Duration,
        /// Say what would be dropped, change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Every run with its attempts, as JSON Lines
    #[command(after_long_help = LEDGER_EXIT_CODES_HELP)]
    Export,
    /// Read an export stream from stdin into this ledger (idempotent)
    #[command(after_long_help = LEDGER_EXIT_CODES_HELP)]
    Import {
        /// Read this file instead of stdin
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// Print the resolved ledger location
    #[command(after_long_help = LEDGER_EXIT_CODES_HELP)]
    Path,
    /// Per-job metrics in the Prometheus text format
    #[command(after_long_help = LEDGER_EXIT_CODES_HELP)]
    Metrics {
        /// Also the per-key families (idem_key_*), a series set per key
        #[arg(long)]
        per_key: bool,
    },
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only jobs matching this glob (* ? [..])
    #[arg(long, value_name = "GLOB")]
    pub job: Option<String>,
    /// Print a JSON array
    #[arg(long)]
    pub json: bool,
    /// Every column and the whole command, however wide the table
    #[arg(long)]
    pub wide: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only keys matching this glob (* ? [..])
    #[arg(long, value_name = "GLOB")]
    pub key: Option<String>,
    /// Only runs of jobs matching this glob (* ? [..])
    #[arg(long, value_name = "GLOB")]
    pub job: Option<String>,
    /// Only runs with this status (repeatable)
    #[arg(long, value_enum, value_name = "S")]
    pub status: Vec<StatusArg>,
    /// Only runs started within DUR, or since a time: 2026-12-01,
    /// "2026-12-01 08:15", or RFC 3339 (local time unless it says)
    #[arg(long, value_name = "DUR|TIME")]
    pub since: Option<String>,
    /// Only runs started before DUR ago, or up to a time (as --since)
    #[arg(long, value_name = "DUR|TIME")]
    pub until: Option<String>,
    /// At most N runs
    #[arg(
        long,
        default_value_t = 50,
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub limit: u32,
    /// Print a JSON array
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address and port to listen on: 127.0.0.1:8417, [::1]:8417,
    /// localhost:8417; any address that is not loopback needs --auth-file
    /// or IDEM_SERVE_TOKEN
    #[arg(
        long,
        env = "IDEM_SERVE_LISTEN",
        default_value = "127.0.0.1:8417",
        value_name = "ADDR",
        value_parser = listen_address
    )]
    pub listen: std::net::SocketAddr,

    /// Ask every request for a user and password (HTTP basic
    /// authentication) from FILE: one `user:bcrypt-hash` a line, as
    /// `htpasswd -nbB user password` writes them
    #[arg(long, env = "IDEM_SERVE_AUTH_FILE", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
}

/// Parses `--listen`: an IP address and port, or `localhost:PORT`.
pub fn listen_address(text: &str) -> Result<std::net::SocketAddr, String> {
    const HINT: &str =
        "give an address and port such as 127.0.0.1:8417, [::1]:8417 or localhost:8417";
    let text = text.trim();
    if let Some(port) = text.strip_prefix("localhost:") {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("'{port}' is not a port from 0 to 65535; {HINT}"))?;
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse()
        .map_err(|_| format!("'{text}' is not an address and port; {HINT}"))
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

/// The status of a run, as `--status` takes it (the ledger's `Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum StatusArg {
    Running,
    Succeeded,
    Failed,
    Abandoned,
}

/// The longest duration any flag takes: deadlines computed from it must fit
/// the clock (a far larger one would overflow it).
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);

/// A signal, by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalNumber(pub i32);

/// Parses a signal: `TERM`, `SIGTERM`, `term` or `15`.
pub fn signal(text: &str) -> Result<SignalNumber, String> {
    const HINT: &str = "write a signal like TERM, INT, HUP, KILL or its number";
    let upper = text.trim().to_ascii_uppercase();
    let named = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    let found = match text.trim().parse::<i32>() {
        Ok(number) => nix::sys::signal::Signal::try_from(number).ok(),
        Err(_) => named.parse::<nix::sys::signal::Signal>().ok(),
    };
    found
        .map(|signal| SignalNumber(signal as i32))
        .ok_or_else(|| format!("{text} is not a signal; {HINT}"))
}

/// Parses a human duration (`500ms`, `30s`, `1h30m`) of at most 100 years.
pub fn duration(text: &str) -> Result<humantime::Duration, String> {
    const HINT: &str = "write a duration like 500ms, 30s, 5m or 1h30m";
    if text.trim_start().starts_with('-') {
        return Err(format!("a duration cannot be negative; {HINT}"));
    }
    let parsed: humantime::Duration = text.parse().map_err(|error| format!("{error}; {HINT}"))?;
    if *parsed > MAX_DURATION {
        return Err(format!("{text} is longer than the 100 years idem accepts"));
    }
    Ok(parsed)
}

/// Parses the value of a switch's environment twin (`IDEM_QUIET_SUCCESS=1`);
/// on the command line the switch takes no value.
pub fn switch(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("write 1 or 0, true or false, yes or no, on or off".to_owned()),
    }
}

/// A set of exit codes: `1,3,10-20`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeSet(pub Vec<RangeInclusive<u8>>);

impl CodeSet {
    pub fn contains(&self, code: u8) -> bool {
        self.0.iter().any(|range| range.contains(&code))
    }
}

impl FromStr for CodeSet {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut ranges = Vec::new();
        for part in text.split(',') {
            let code = |number: &str| {
                number.trim().parse::<u8>().map_err(|_| {
                    format!(
                        "'{part}' is not an exit code from 0 to 255; write codes like 1,3,10-20"
                    )
                })
            };
            let range = match part.split_once('-') {
                Some((low, high)) => {
                    let (low, high) = (code(low)?, code(high)?);
                    if low > high {
                        return Err(format!("range '{part}' runs backwards; write it low-high"));
                    }
                    low..=high
                }
                None => {
                    let single = code(part)?;
                    single..=single
                }
            };
            ranges.push(range);
        }
        Ok(CodeSet(ranges))
    }
}

/// A byte count: `0`, `4096`, `64KiB`, `1MiB`, `64k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// The largest `--capture`: it bounds idem's memory (two streams, twice each).
pub const MAX_CAPTURE: u64 = 1 << 20;

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let unit = &text[digits.len()..];
        let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            _ => {
                return Err(format!(
                    "unknown unit '{unit}'; use a byte count like 65536, 64KiB or 1MiB"
                ))
            }
        };
        let count: u64 = digits.parse().map_err(|_| {
            format!("'{text}' is not a byte count; use a byte count like 65536, 64KiB or 1MiB")
        })?;
        let bytes = count.saturating_mul(multiplier);
        if bytes > MAX_CAPTURE {
            return Err(format!(
                "{text} is more than the 1MiB idem keeps per stream"
            ));
        }
        Ok(ByteSize(bytes))
    }
}

/// The exit-code table, shown by `--help` and in the man pages.
macro_rules! exit_codes_help {
    () => {
        "\
Exit codes:
  0        the command succeeded, or the key had already succeeded (skipped)
  N        the command's own exit code on its final attempt
  2        usage error: bad flag, duration, key or template
  65       the key succeeded with a different command; nothing ran (--force runs it)
  69       the last run was abandoned and --on-abandoned fail was given
  75       the key is running elsewhere (and --wait ran out or was not given)
  124      the final attempt timed out
  125      idem itself failed (ledger unreadable, unwritable, corrupt, full or newer)
  126/127  the command could not be executed / was not found
  128+N    the command was killed by signal N

Environment:
  IDEM_DB        the ledger, as --db
  IDEM_<OPTION>  a run option's default: IDEM_RETRIES=5, IDEM_QUIET_SUCCESS=1; a flag wins
  IDEM_PROGRESS  auto or never: the spinner of waits (a bad value is a warning)
  CI             when set, skips are told as at a terminal (a CI log says why a step did nothing)
  TZ             time zone of key templates (unset: the zone /etc/localtime links to)
  NO_COLOR       no colour in tables
  TERM           dumb: no colour
  PGHOST, PGPORT, PGUSER, PGDATABASE  what a postgres:// URL leaves out
  PGPASSWORD, PGPASSFILE, PGSSLROOTCERT  a shared ledger's password and TLS roots
The command gets IDEM_KEY, IDEM_JOB, IDEM_RUN_ID, IDEM_ATTEMPT, IDEM_MAX_ATTEMPTS,
IDEM_FENCE, IDEM_SLOT (with --catch-up), and IDEM_RECOVERED=1 when the previous
run of its key was abandoned."
    };
}
pub const EXIT_CODES_HELP: &str = exit_codes_help!();

/// Where the ledger lives, for the man pages.
macro_rules! files_help {
    () => {
        "\
Files:
  ~/.local/share/idem/ledger.db       the ledger: <data dir>/idem/ledger.db, or --db, or IDEM_DB
  ~/.local/share/idem/ledger.db-wal   its write-ahead log, while a connection is open
  ~/.local/share/idem/ledger.db-shm   the log's index, beside it
  ~/.local/share/idem/ledger.db-lock  the runs' kernel locks: a run holds its key's byte while it lives"
    };
}
pub const FILES_HELP: &str = files_help!();

/// Related manual pages.
macro_rules! see_also_help {
    () => {
        "\
See also:
flock(1), timeout(1), chronic(1), crontab(5), systemd.timer(5)"
    };
}
pub const SEE_ALSO_HELP: &str = see_also_help!();

/// The exit codes of `idem status`, shown by `--help` and in the man pages.
pub const STATUS_EXIT_CODES_HELP: &str = "\
Columns:
  JOB           the job: --job, else the key as typed (backup-{date})
  STATE         failing, overdue, running or ok (above)
  LAST RUN      when its latest run started
  LAST SUCCESS  when its latest success was recorded (never: none yet)
  FAILS         failed and abandoned runs in a row, across its keys, in the order they finished
  MISSED        of its last 10 finished periods (back to its first run), those with no success;
                - for a job without a period ({date}, {hour}, ... in its key)
  RECENT        its latest 10 outcomes, oldest first: + succeeded, x failed, ? abandoned,
                > running; at a colour terminal dots of the same order (green succeeded,
                red failed, magenta abandoned, yellow running)
  COMMAND       what it runs: the program's base name and its last arguments where the width
                is short (backup.sh … --daily)

  The table fits the terminal (else $COLUMNS): the command shrinks first, then LAST SUCCESS,
  MISSED and LAST RUN give way, RECENT keeps its latest 6, then FAILS and RECENT give way.
  --wide shows every column and the whole command.

Examples:
  idem status                       every job, those that need a person first
  idem status --job 'backup-*'      the backup jobs only
  idem status --json | jq '.[] | select(.state != \"ok\")'
  idem status >/dev/null || echo 'a job needs a person'   a check for a monitor

Exit codes:
  0    every job is ok or running (or there are none)
  1    a job is failing or overdue; or no ledger at --db (nothing has run with it yet), or no
       job matches --job
  2    usage error: bad flag or glob
  125  idem itself failed (ledger unreadable, corrupt or newer)

Environment:
  IDEM_DB   the ledger, as --db
  TZ        time zone of the times shown
  NO_COLOR  no colour in the strip of latest runs
  COLUMNS   the width of the table when stdout is not a terminal

See also:
idem-run(1), idem-ledger(1), idem-doctor(1), crontab(5)";

/// The pages, exit codes and environment of `idem serve`, shown by
/// `--help` and in the man pages.
pub const SERVE_EXIT_CODES_HELP: &str = "\
Pages:
  /             the status board: every job, those that need a person first
  /job/JOB      the job's latest runs, newest first, with attempts and output tails
  /metrics      what `idem ledger metrics` prints (Prometheus text format)
  /api/status   what `idem status --json` prints
  /healthz      200 \"ok\" when the ledger can be read, 503 and why otherwise

Examples:
  idem serve                                         the board on http://127.0.0.1:8417/
  idem serve --listen 0.0.0.0:8417 --auth-file FILE  for the network, each user with a password
  IDEM_SERVE_TOKEN=... idem serve --listen [::]:8417  for the network, one token for scripts

Exit codes:
  0    stopped by SIGTERM or SIGINT
  2    usage error: a bad --listen or auth file; an address that is not loopback without --auth-file or IDEM_SERVE_TOKEN
  125  idem itself failed: the address is in use, or cannot be listened on

Environment:
  IDEM_DB               the ledger, as --db
  IDEM_SERVE_LISTEN     as --listen
  IDEM_SERVE_AUTH_FILE  as --auth-file
  IDEM_SERVE_TOKEN      a bearer token every request must carry (Authorization: Bearer TOKEN)
  TZ                    time zone of the times shown

See also:
idem-status(1), idem-ledger(1)";

/// The exit codes and environment of `idem ledger`, shown by `--help` and
/// in the man pages.
pub const LEDGER_EXIT_CODES_HELP: &str = "\
Exit codes:
  0    done
  1    list, show, metrics: no ledger at --db (nothing has run with it yet); show: the key is
       not in the ledger; forget: a key is not (the others are forgotten)
  2    usage error: bad flag, duration, time, or a line import cannot read
  75   forget: a key is running under a live owner; nothing was forgotten
  125  idem itself failed (ledger unreadable, unwritable, corrupt, full or newer)

Environment:
  IDEM_DB   the ledger, as --db
  TZ        time zone of the times shown
  NO_COLOR  no colour in tables
  TERM      dumb: no colour
  COLUMNS   the width of tables when stdout is not a terminal
  PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD  as for idem run

Files:
  ~/.local/share/idem/ledger.db  the ledger, unless --db or IDEM_DB names another (and its -wal, -shm and -lock)

See also:
idem-run(1), flock(1), crontab(5), systemd.timer(5)";

/// `idem run --help` and the man pages of idem and idem run: the exit
/// codes, the environment, the key templates' formats, examples, files.
pub const RUN_NOTES: &str = concat!(
    "\
Key templates:
In local time (TZ honoured), as they read on 1 December 2026 at 08:30:
  {date}    2026-12-01
  {hour}    2026-12-01T08
  {minute}  2026-12-01T08:30
  {week}    2026-W49 (the ISO week and its year)
  {month}   2026-12
  {year}    2026
  {host}    the host's name
  {{ }}     a literal { or }

",
    exit_codes_help!(),
    "

Examples:
A crontab line: the backup runs once a day, however often cron calls it; a
failure is retried, and cron mails only what went wrong.
    0 * * * * idem run --key backup-{date} --quiet-success -- /usr/local/bin/backup
A CI step that a rerun of the pipeline skips once it succeeded (the skip is
told in the log, since CI is set):
    idem run --key deploy-$CI_COMMIT_SHA --retries 2 -- ./deploy.sh
A fleet on a shared ledger: one host of many runs the report each hour, the
others skip or wait for its outcome.
    idem --db postgres://idem@db.example/idem run --key report-{hour} --wait 10m -- ./report
Catching up: called every hour, a daily job whose day was missed (the host
was down at 03:00) runs at the first call that finds its key unfinished.
    0 * * * * idem run --key rotate-{date} -- /usr/local/bin/rotate
See what ran, and make a key run again:
    idem ledger list --since 1d
    idem ledger forget backup-2026-12-01

",
    files_help!(),
    "

",
    see_also_help!(),
);
