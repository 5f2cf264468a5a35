//! Subcommands other than `run`, and the command line they come from.

pub mod complete;
pub mod completions;
pub mod doctor;
pub mod ledger;
pub mod status;

use std::ffi::OsString;

use clap::FromArgMatches;

use crate::cli::Cli;
use crate::exit::usage;

/// Parses the command line `argv`; on a usage error prints its line and
/// returns the exit code. A bad `IDEM_PROGRESS` only changes how waits
/// are drawn, so it is a warning, and the job runs as if the variable
/// were unset.
pub fn parse(argv: &[OsString]) -> Result<Cli, u8> {
    // As `Cli::try_parse_from`, keeping the command and its matches.
    let mut command = <Cli as clap::CommandFactory>::command();
    let parsed = command
        .try_get_matches_from_mut(argv)
        .and_then(
            |mut matches| match Cli::from_arg_matches_mut(&mut matches) {
                Ok(cli) => Ok((cli, matches)),
                Err(error) => Err(error.format(&mut command)),
            },
        );
    let error = match parsed {
        Ok((cli, matches)) => {
            // Freeing clap's tree of every flag and its matches is work
            // for nothing just before the process ends: 3% of a skip.
            std::mem::forget(matches);
            std::mem::forget(command);
            return Ok(cli);
        }
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
