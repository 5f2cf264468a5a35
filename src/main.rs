use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let code = match idem::cmd::parse(&argv) {
        Ok(cli) => idem::exit::outcome(idem::run(cli)),
        Err(code) => code,
    };
    ExitCode::from(code)
}
