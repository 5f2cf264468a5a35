//! `idem backfill`: the periods of a job that never succeeded, run now.

use clap::Args;

use super::RunArgs;

/// `idem backfill --help`: what it exits with.
pub const BACKFILL_EXIT_CODES_HELP: &str = "\
Examples:
  idem backfill 'report-{date}' --from 2026-12-01 --to 2026-12-03 --dry-run -- ./report.sh
  idem backfill 'report-{date}' --from 2026-12-01 --to 2026-12-03 -- ./report.sh
  idem backfill sync --from 2h --retries 1 -- /usr/local/bin/sync   the job sync's last two hours

Exit codes:
  0      every period due succeeded, or none was due (a dry run: 0)
  N      the first failed period's exit code (the periods after it still ran)
  75     none failed, but one was running elsewhere and was passed by
         (--conflict-exit-code)
  128+N  stopped by signal N (SIGINT, SIGTERM, SIGHUP) in a period: the
         backfill ends there, and the same backfill again starts from it
  2      usage error: bad flag, time, job or template
  125    idem itself failed (ledger unreadable, unwritable, corrupt, full or newer)

Environment:
  IDEM_DB   the ledger, as --db
  IDEM_*    the environment twins of idem run's options, as for idem run
  TZ        time zone of --from and --to, unless the job's keys were made in another";

/// The flags of `idem backfill`, before those it shares with `idem run`.
#[derive(Debug, Args)]
// The key is the first word here; `idem run`'s --key is not taken.
#[command(mut_arg("key", |key| key.required(false).default_value("").hide(true)))]
pub struct BackfillArgs {
    /// The job, as `idem status` names it, or its key template
    /// (sync-{minute/5})
    #[arg(value_name = "JOB|TEMPLATE")]
    pub target: String,

    /// The first period: the one holding this time (a duration ago like 3d,
    /// a date, a date and time, RFC 3339)
    #[arg(long, value_name = "T", help_heading = BACKFILL)]
    pub from: String,

    /// The last period: the one holding this time [default: now]
    #[arg(long, value_name = "T", help_heading = BACKFILL)]
    pub to: Option<String>,

    /// List the periods that would run, and run nothing
    #[arg(long, help_heading = BACKFILL)]
    pub dry_run: bool,

    /// Every period, its success too (as --force would)
    #[arg(long, help_heading = BACKFILL)]
    pub all: bool,

    #[command(flatten)]
    pub run: RunArgs,
}

const BACKFILL: &str = "Backfill";
