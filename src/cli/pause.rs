//! `idem pause` and `idem resume`: their arguments and help.

use clap::Args;

/// Exit codes and examples of `idem pause` and `idem resume`, shown by
/// `--help` and in the man pages.
pub const PAUSE_EXIT_CODES_HELP: &str = "\
Examples:
  idem pause backup --reason 'disk swap' --until 2h   every host skips backup for two hours
  idem pause 'etl-*' --reason 'warehouse migration'   every etl job, until resumed
  idem resume 'etl-*'

Exit codes:
  0    done (resume: also when the job was not paused)
  1    a GLOB matched no job
  2    usage error: bad flag, --until that cannot be read or has passed
  125  idem itself failed (ledger unreadable, unwritable, corrupt, full or newer)

Environment:
  IDEM_DB   the ledger, as --db
  TZ        time zone of --until and of the times shown";

#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The job (a job yet to run may be paused), or a glob of known jobs
    #[arg(value_name = "JOB|GLOB")]
    pub target: String,
    /// Why, shown by `status` and by every run it holds back
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// End the pause by itself: after DUR, or at a time: 2026-12-01,
    /// "2026-12-01 08:15", or RFC 3339 (local time unless it says)
    #[arg(long, value_name = "DUR|TIME")]
    pub until: Option<String>,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The job, or a glob of known jobs
    #[arg(value_name = "JOB|GLOB")]
    pub target: String,
}
