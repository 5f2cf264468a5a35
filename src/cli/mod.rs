//! Command-line declarations, and nothing else.
//!
//! This module imports nothing from the rest of the crate, so tests and the
//! man-page generator can build the `clap::Command` on their own. It owns
//! the top of the line (`Cli`, the global options, the subcommands); each
//! subcommand's arguments, the value parsers and the help texts have a
//! module of their own, re-exported here.

mod backfill;
mod help;
mod ledger;
mod pause;
mod run;
mod serve;
mod stop;
mod values;

use std::ffi::OsString;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use backfill::{BackfillArgs, BACKFILL_EXIT_CODES_HELP};
pub use help::{
    DELIVER_EXIT_CODES_HELP, EXIT_CODES_HELP, FILES_HELP, LEDGER_EXIT_CODES_HELP, RUN_NOTES,
    SEE_ALSO_HELP, SERVE_EXIT_CODES_HELP, STATUS_EXIT_CODES_HELP,
};
pub use ledger::{DeliverArgs, DoctorArgs, LedgerCommand, ListArgs, StatusArg, StatusArgs};
pub use pause::{PauseArgs, ResumeArgs, PAUSE_EXIT_CODES_HELP};
pub use run::{Contain, Misfire, OnAbandoned, Overlap, Progress, RunArgs};
pub use serve::{listen_address, ServeArgs};
pub use stop::{StopArgs, STOP_EXIT_CODES_HELP};
pub use values::{
    duration, signal, switch, ByteSize, CodeSet, IoNice, SignalNumber, MAX_CAPTURE, MAX_DURATION,
};

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

    /// idem's own lines: text, or json (one object a line: time, level,
    /// event, key, job, run_id, attempt, exit_code, cause, message); under
    /// systemd they go to the journal with fields either way
    #[arg(
        long,
        global = true,
        env = "IDEM_LOG_FORMAT",
        value_enum,
        default_value_t = crate::console::Format::Text,
        value_name = "FORMAT"
    )]
    pub log_format: crate::console::Format,
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
    /// Run the periods of a job between two times that never succeeded
    ///
    /// Each period of the job's key template from --from to --to whose key
    /// has no success (every period with --all) runs now, oldest first and
    /// one at a time: each is a run of its own key, as `idem run` would make
    /// it in that period, with IDEM_SLOT set to the period's start, and the
    /// options `idem run` takes (retries, --lock, --after waits for the
    /// upstream's same period, pings). A success marked by hand counts as a
    /// success. A period running elsewhere is passed by and said; a paused
    /// job runs nothing more. --dry-run lists the periods and runs nothing.
    /// At a terminal a progress bar, elsewhere a line per period.
    #[command(after_long_help = BACKFILL_EXIT_CODES_HELP)]
    Backfill(Box<BackfillArgs>),
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
    /// used to be called), then paused (`idem pause`), blocked (its latest
    /// call waited for an upstream, `--after`), stopped (its latest run was
    /// stopped by a person: no failure), running and ok. Its figures follow
    /// the order in which its runs finished, however they overlap; a paused
    /// job's periods since its pause are not missed. Exit 0 when every job
    /// is ok, paused, blocked, stopped or running, 1 otherwise, so it can
    /// serve as a check.
    #[command(after_long_help = STATUS_EXIT_CODES_HELP)]
    Status(StatusArgs),
    /// Pause a job: its runs start nothing until `idem resume` or --until
    ///
    /// A pause is kept in the ledger per job: who (user@host), since when,
    /// why, until when. A run of a paused job starts nothing and claims
    /// nothing: it exits --paused-exit-code [0], saying so only where a skip
    /// would (a terminal, CI, -v). Every run reads it before it claims, so
    /// on a shared PostgreSQL ledger it holds for every host from its next
    /// claim; a run already going finishes. A JOB that has not run yet may
    /// be paused; a GLOB (* ? [..]) names the jobs the ledger knows.
    #[command(after_long_help = PAUSE_EXIT_CODES_HELP)]
    Pause(PauseArgs),
    /// Resume a paused job: its next run runs
    #[command(after_long_help = PAUSE_EXIT_CODES_HELP)]
    Resume(ResumeArgs),
    /// Stop the running runs of keys, wherever they run
    ///
    /// The whole run (its command and every process it started) gets
    /// --signal, then SIGKILL after the grace, as a signal passed on by its
    /// idem would; the run is recorded failed, "stopped by user@host", and
    /// never retried. The request is written in the ledger: on a shared
    /// ledger the run's owner reads it with its next heartbeat (within a
    /// third of its lease); on a local one idem also signals the run's
    /// processes itself, so a frozen owner's run stops too. A run whose
    /// owner is gone is marked abandoned. Waits until the stopped runs are
    /// recorded over (--wait).
    #[command(after_long_help = STOP_EXIT_CODES_HELP)]
    Stop(StopArgs),
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
    /// Serve the ledger over HTTP: a status board, each job's runs,
    /// metrics, and buttons that pause, resume and stop
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
    /// the credentials. With credentials, the board and a job's page also
    /// show Pause, Resume and Stop buttons, recorded in the ledger as
    /// USER@host (token@host for the token); without, the pages are
    /// read-only. Stops on SIGTERM or SIGINT once the requests under way
    /// are answered.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// At a terminal, unless NO_COLOR is set or TERM is dumb
    Auto,
    /// Always, even into a pipe
    Always,
    /// Never
    Never,
}
