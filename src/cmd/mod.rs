//! Subcommands other than `run`.

pub mod doctor;
pub mod ledger;

use clap::error::ErrorKind;

/// Prints a command-line error in one line (help and version as they are)
/// and returns its exit code.
pub fn usage_error(error: &clap::Error) -> u8 {
    match error.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                crate::exit::USAGE
            } else {
                crate::exit::SUCCESS
            }
        }
        _ => {
            // clap's message spans lines (usage, a tip); keep its substance.
            let text = error.render().to_string();
            let words: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .take_while(|line| {
                    !line.starts_with("Usage:") && !line.starts_with("For more information")
                })
                .collect();
            let line = words.join(" ");
            let line = line.strip_prefix("error: ").unwrap_or(&line);
            eprintln!("idem: {line} (see idem --help)");
            crate::exit::USAGE
        }
    }
}
