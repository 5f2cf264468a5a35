//! `idem stop`'s arguments.

use clap::Args;

use super::values::{duration, signal, SignalNumber};

/// The exit codes of `idem stop`, after its help.
pub const STOP_EXIT_CODES_HELP: &str = "\
Exit codes:
  0    a running run was stopped (or found with its owner gone, and marked abandoned)
  1    nothing of those keys was running
  2    usage error
  75   a stopped run still ran when --wait ran out
  125  idem itself failed (ledger unreadable, unwritable, corrupt, full or newer)

Environment:
  IDEM_DB   the ledger, as --db
  TZ        time zone of the times shown
  PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD  as for idem run

See also:
idem-run(1), idem-ledger-show(1), kill(1)";

#[derive(Debug, Args)]
pub struct StopArgs {
    /// Keys to stop, or globs (* ? [..]) matching keys
    #[arg(required = true, value_name = "KEY|GLOB")]
    pub keys: Vec<String>,

    /// The signal the run's processes get first; SIGKILL follows after
    /// --kill-after
    #[arg(long, default_value = "TERM", value_name = "SIG", value_parser = signal)]
    pub signal: SignalNumber,

    /// Grace between the signal and SIGKILL on this host's ledger (a
    /// shared ledger's owner uses its run's --kill-after)
    #[arg(long, default_value = "10s", value_name = "DUR", value_parser = duration)]
    pub kill_after: humantime::Duration,

    /// How long to wait for the stopped runs to be recorded over
    #[arg(long, default_value = "1m", value_name = "DUR", value_parser = duration)]
    pub wait: humantime::Duration,
}
