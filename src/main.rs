use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match idem::cmd::parse() {
        Ok(cli) => cli,
        Err(code) => return ExitCode::from(code),
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
