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
