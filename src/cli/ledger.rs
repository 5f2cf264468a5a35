//! The arguments of `idem ledger`, `idem status` and `idem doctor`.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::help::{DELIVER_EXIT_CODES_HELP, LEDGER_EXIT_CODES_HELP};
use super::values::{count, duration};

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
        /// Also forget a running key whose owner idem cannot judge (its lock
        /// file moved or deleted while it ran, or a claim of an idem too old
        /// to lock); a live run is never forgotten
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
    /// Record a success that did not run (by whom, why): the key is skipped
    /// and the runs that wait for it (--after) go on; refused (75) while
    /// the key runs
    #[command(after_long_help = LEDGER_EXIT_CODES_HELP)]
    Mark {
        /// The key, or a template (daily-{date}) expanded now
        key: String,
        /// Mark it succeeded (the one mark there is)
        #[arg(long, required = true)]
        succeeded: bool,
        /// Why, for the people who read `ledger show` later
        #[arg(long, value_name = "TEXT", required = true)]
        reason: String,
        /// The job it belongs to [default: its latest run's, else the key as typed]
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
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
    /// Deliver the pings and hooks still owed (run it from a timer)
    #[command(after_long_help = DELIVER_EXIT_CODES_HELP)]
    Deliver(DeliverArgs),
}

#[derive(Debug, Args)]
pub struct DeliverArgs {
    /// Stop taking events after DUR (an event under way finishes)
    #[arg(long = "for", value_name = "DUR", default_value = "5m", value_parser = duration)]
    pub within: humantime::Duration,
    /// Print the counts as JSON
    #[arg(long)]
    pub json: bool,
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
    /// List each job's upstreams (--after) and what a blocked job waits for
    #[arg(long, conflicts_with = "json")]
    pub after: bool,
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
        allow_negative_numbers = true,
        value_parser = count
    )]
    pub limit: u32,
    /// Print a JSON array
    #[arg(long)]
    pub json: bool,
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
