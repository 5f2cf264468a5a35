//! Subcommands other than `run`.

pub mod doctor;
pub mod ledger;
pub mod status;

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
        ErrorKind::UnknownArgument if negative_value(error).is_some() => {
            let (flag, value) = negative_value(error).unwrap_or_default();
            crate::exit::say(&format!(
                "invalid value '{value}' for '{flag}': it cannot be negative (see idem --help)"
            ));
            crate::exit::USAGE
        }
        ErrorKind::InvalidUtf8 => {
            crate::exit::say(&format!(
                "{} is not valid UTF-8; write it in UTF-8 (see idem --help)",
                not_utf8_argument()
            ));
            crate::exit::USAGE
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
            let line = name_the_variable(error, line);
            let line = line.strip_prefix("error: ").unwrap_or(&line);
            crate::exit::say(&format!("{line} (see idem --help)"));
            crate::exit::USAGE
        }
    }
}

/// `--backoff -1s` reaches clap as a flag `-1s` it does not know; finds the
/// flag it was meant for, so the message can name it.
fn negative_value(error: &clap::Error) -> Option<(String, String)> {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(value)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    if !value
        .strip_prefix('-')?
        .starts_with(|c: char| c.is_ascii_digit())
    {
        return None;
    }
    let args: Vec<String> = std::env::args_os()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    // clap names only the first letters of `-1s` (`-1`).
    args.windows(2)
        .find(|pair| pair[1].starts_with(value.as_str()) && pair[0].starts_with("--"))
        .map(|pair| (pair[0].clone(), pair[1].clone()))
}

/// clap does not say when a bad value came from an option's environment
/// twin (`IDEM_RETRIES=x`); names the variable in its message, and the fix.
fn name_the_variable(error: &clap::Error, line: String) -> String {
    match environment_source(error) {
        Some((flag, variable)) => format!(
            "{}; fix or unset {variable}",
            line.replacen(
                &format!("for '{flag}'"),
                &format!("for '{flag}' from {variable}"),
                1
            )
        ),
        None => line,
    }
}

/// The flag and variable a bad value came from, if from a variable: a flag
/// on the command line wins over its variable, so the value came from the
/// variable only when the flag was not given.
fn environment_source(error: &clap::Error) -> Option<(String, String)> {
    use clap::error::{ContextKind, ContextValue};
    use clap::CommandFactory;
    let Some(ContextValue::String(flag)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let Some(ContextValue::String(value)) = error.get(ContextKind::InvalidValue) else {
        return None;
    };
    let long = flag.strip_prefix("--")?.split(' ').next()?;
    let given = std::env::args_os()
        .skip(1)
        .take_while(|arg| arg != "--")
        .any(|arg| {
            let arg = arg.to_string_lossy();
            let name = arg.strip_prefix("--").unwrap_or_default();
            name == long || name.starts_with(&format!("{long}="))
        });
    if given {
        return None;
    }
    let command = crate::cli::Cli::command();
    let mut commands = vec![&command];
    while let Some(command) = commands.pop() {
        commands.extend(command.get_subcommands());
        let variable = command
            .get_arguments()
            .filter(|arg| arg.get_long() == Some(long))
            .find_map(|arg| arg.get_env());
        if let Some(variable) = variable {
            if std::env::var_os(variable).is_some_and(|set| set == value.as_str()) {
                return Some((flag.clone(), variable.to_string_lossy().into_owned()));
            }
        }
    }
    None
}

/// Names the argument clap found not to be UTF-8 (it does not say which).
fn not_utf8_argument() -> String {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let Some(at) = args.iter().position(|arg| arg.to_str().is_none()) else {
        return "an argument".into();
    };
    let bad = args[at].to_string_lossy();
    if let Some((flag, _)) = bad
        .split_once('=')
        .filter(|(flag, _)| flag.starts_with("--"))
    {
        return format!("the value of {flag}");
    }
    match args[..at].last().and_then(|before| before.to_str()) {
        Some(flag) if flag.starts_with("--") => format!("the value of {flag}"),
        _ => format!("argument '{bad}'"),
    }
}
