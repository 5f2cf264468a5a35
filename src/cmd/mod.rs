//! Subcommands other than `run`, and the command line they come from.

pub mod complete;
pub mod completions;
pub mod deliver;
pub mod doctor;
pub mod ledger;
pub mod mark;
pub mod pause;
pub mod status;
pub mod stop;
pub mod upstreams;

use std::ffi::OsString;

use clap::FromArgMatches;

use crate::cli::{Cli, Command, Global, RunArgs};
use crate::exit::usage;

/// Parses the command line `argv`; on a usage error prints its line and
/// returns the exit code. A bad `IDEM_PROGRESS` only changes how waits
/// are drawn, so it is a warning, and the job runs as if the variable
/// were unset.
pub fn parse(argv: &[OsString]) -> Result<Cli, u8> {
    if let Some(code) = usage::refuse_single_dash_long(argv) {
        return Err(code);
    }
    if argv.get(1).is_some_and(|word| word == "run") {
        if let Ok(cli) = parse_run(&argv[1..]) {
            return Ok(cli);
        }
    }
    let error = match parse_with(<Cli as clap::CommandFactory>::command(), argv) {
        Ok(cli) => return Ok(cli),
        Err(error) => error,
    };
    let progress = error
        .get(clap::error::ContextKind::InvalidArg)
        .is_some_and(|flag| flag.to_string().starts_with("--progress"));
    let Some(twin) = usage::twin(&error, argv).filter(|_| progress) else {
        return Err(usage::report(&error, argv));
    };
    let value = std::env::var_os(&twin.variable).unwrap_or_default();
    crate::exit::say(&format!(
        "warning: {variable}={} is not auto or never; ignored (fix or unset {variable})",
        value.to_string_lossy(),
        variable = twin.variable,
    ));
    twin.without
        .and_then(|matches| Cli::from_arg_matches(&matches))
        .map_err(|error| usage::report(&error, argv))
}

/// As `Cli::try_parse_from`.
fn parse_with(mut command: clap::Command, argv: &[OsString]) -> Result<Cli, clap::Error> {
    let mut matches = command.try_get_matches_from_mut(argv)?;
    let cli =
        Cli::from_arg_matches_mut(&mut matches).map_err(|error| error.format(&mut command))?;
    leave_to_the_exit(command, matches);
    Ok(cli)
}

/// The words after `idem` of a line `idem run ...`, parsed by
/// [`crate::cli::run_line`].
fn parse_run(words: &[OsString]) -> Result<Cli, clap::Error> {
    let mut command = crate::cli::run_line();
    let mut matches = command.try_get_matches_from_mut(words)?;
    let global = Global::from_arg_matches_mut(&mut matches)?;
    let run = RunArgs::from_arg_matches_mut(&mut matches)?;
    leave_to_the_exit(command, matches);
    Ok(Cli {
        global,
        command: Command::Run(Box::new(run)),
    })
}

/// Freeing clap's tree of every flag and its matches is work for nothing
/// just before the process ends: 3% of a skip.
fn leave_to_the_exit(command: clap::Command, matches: clap::ArgMatches) {
    std::mem::forget(matches);
    std::mem::forget(command);
}

/// The ledger's status for a `--status` value: the ledger does not know
/// clap.
impl From<crate::cli::StatusArg> for crate::ledger::Status {
    fn from(status: crate::cli::StatusArg) -> crate::ledger::Status {
        use crate::cli::StatusArg;
        use crate::ledger::Status;
        match status {
            StatusArg::Running => Status::Running,
            StatusArg::Succeeded => Status::Succeeded,
            StatusArg::Failed => Status::Failed,
            StatusArg::Abandoned => Status::Abandoned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn a_run_line_parses_alone_as_it_does_among_all_subcommands() {
        crate::cli::run_line().debug_assert();
        for line in [
            "idem run --key k -- true",
            "idem run -k k true",
            "idem run --key k --db /l.db -q --retries 0 --backoff 2s -- sh -c 'exit 3'",
            "idem run --job nightly --key k{date} --color never --timeout 5m -- true",
            "idem run --key k --force=yes --lock a --lock b --on-failure 'echo x' -- true",
            "idem run --key k --capture 1MiB --replay never --no-retry-on 1,2 -- true",
            "idem run -v --key k -- --key other",
            // Refused, by both.
            "idem run",
            "idem run --key",
            "idem run --key k --retries many -- true",
            "idem run -q -v --key k -- true",
            "idem run --key k --no-such-flag -- true",
            "idem run --help",
            "idem run --version",
            "idem run --key k --color sometimes -- true",
        ] {
            let argv: Vec<OsString> = line.split(' ').map(OsString::from).collect();
            let all = parse_with(Cli::command(), &argv).map(|cli| format!("{cli:?}"));
            let alone = parse_run(&argv[1..]).map(|cli| format!("{cli:?}"));
            match all {
                Ok(all) => assert_eq!(alone.ok(), Some(all), "{line}"),
                Err(_) => assert!(alone.is_err(), "{line}: {alone:?}"),
            }
        }
    }
}
