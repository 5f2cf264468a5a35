use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match idem::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return ExitCode::from(idem::cmd::usage_error(&error)),
    };
    match idem::run(cli) {
        Ok(code) => ExitCode::from(code),
        // A closed pipe (`idem ledger list | head`) is the reader's choice.
        Err(error) if idem::exit::is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            idem::exit::say(&format!("{error:#}"));
            ExitCode::from(idem::exit::code_for(&error))
        }
    }
}
