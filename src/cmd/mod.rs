//! Subcommands other than `run`.

pub mod complete;
pub mod completions;
pub mod doctor;
pub mod ledger;
pub mod status;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, FromArgMatches, Parser};

use crate::cli::Cli;

/// Parses the command line; on a usage error prints its line and returns
/// the exit code. A bad `IDEM_PROGRESS` only changes how waits are drawn,
/// so it is a warning, and the job runs as if the variable were unset.
pub fn parse() -> Result<Cli, u8> {
    let error = match Cli::try_parse_from(std::env::args_os()) {
        Ok(cli) => return Ok(cli),
        Err(error) => error,
    };
    if let Some((_, variable)) =
        environment_source(&error).filter(|(flag, _)| flag.starts_with("--progress"))
    {
        let value = std::env::var_os(&variable).unwrap_or_default();
        crate::exit::say(&format!(
            "warning: {variable}={} is not auto or never; ignored (fix or unset {variable})",
            value.to_string_lossy()
        ));
        let command = Cli::command()
            .mut_subcommand("run", |run| run.mut_arg("progress", |arg| arg.env(None)));
        let parsed = command
            .try_get_matches_from(std::env::args_os())
            .and_then(|matches| Cli::from_arg_matches(&matches));
        return parsed.map_err(|error| usage_error(&error));
    }
    Err(usage_error(&error))
}

/// Prints a command-line error in one line (help and version as they are)
/// and returns its exit code.
pub fn usage_error(error: &clap::Error) -> u8 {
    let help = format!("(see {} --help)", command_path(error).join(" "));
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
                "invalid value '{value}' for '{flag}': it cannot be negative {help}"
            ));
            crate::exit::USAGE
        }
        ErrorKind::UnknownArgument if missing_double_dash(error).is_some() => {
            let (word, corrected) = missing_double_dash(error).unwrap_or_default();
            crate::exit::say(&format!(
                "'{word}' is taken for the command, which must follow --; put -- before the command: {corrected} {help}"
            ));
            crate::exit::USAGE
        }
        ErrorKind::UnknownArgument if meant_flag(error).is_some() => {
            let (typed, meant) = meant_flag(error).unwrap_or_default();
            crate::exit::say(&format!(
                "unknown option '{typed}'; did you mean '{meant}'? {help}"
            ));
            crate::exit::USAGE
        }
        ErrorKind::InvalidUtf8 => {
            crate::exit::say(&format!(
                "{} is not valid UTF-8; write it in UTF-8 {help}",
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
                .filter(|line| !line.is_empty() && !line.starts_with("tip: to pass"))
                .take_while(|line| {
                    !line.starts_with("Usage:") && !line.starts_with("For more information")
                })
                .collect();
            let line = words.join(" ");
            let line = name_the_variable(error, line);
            let line = line.strip_prefix("error: ").unwrap_or(&line);
            crate::exit::say(&format!("{line} {help}"));
            crate::exit::USAGE
        }
    }
}

/// The words that name the command whose usage was wrong (`idem run`,
/// `idem ledger list`): from clap's usage line when the error has one,
/// else from the subcommand names on the command line.
fn command_path(error: &clap::Error) -> Vec<String> {
    if let Some(ContextValue::StyledStr(usage)) = error.get(ContextKind::Usage) {
        let usage = usage.to_string();
        let path: Vec<String> = usage
            .trim_start()
            .trim_start_matches("Usage:")
            .split_whitespace()
            .take_while(|word| {
                !word.starts_with(['[', '<', '-']) && *word != "help" && *word != "<COMMAND>"
            })
            .map(str::to_owned)
            .collect();
        if !path.is_empty() {
            return path;
        }
    }
    let mut path = vec!["idem".to_owned()];
    let mut command = Cli::command();
    for arg in std::env::args_os().skip(1) {
        if arg == "--" {
            break;
        }
        let Some(sub) = arg
            .to_str()
            .and_then(|name| command.find_subcommand(name))
            .cloned()
        else {
            continue;
        };
        path.push(sub.get_name().to_owned());
        command = sub;
    }
    path
}

/// `idem run --key k echo hi`: the first word of the command was taken for
/// an argument of idem's. Returns that word and the line as it should be.
fn missing_double_dash(error: &clap::Error) -> Option<(String, String)> {
    let Some(ContextValue::String(word)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    if word.starts_with('-') || command_path(error) != ["idem", "run"] {
        return None;
    }
    let mut command = Cli::command();
    command.build();
    let run = command.find_subcommand("run")?;
    let takes_value = |flag: &str| {
        let flag = flag.split('=').next().unwrap_or(flag);
        run.get_arguments().any(|arg| {
            let named = flag
                .strip_prefix("--")
                .is_some_and(|long| arg.get_long() == Some(long))
                || flag.strip_prefix('-').is_some_and(|short| {
                    short.chars().count() == 1 && arg.get_short() == short.chars().next()
                });
            named && !flag.contains('=') && arg.get_action().takes_values()
        })
    };
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let at = (0..args.len()).find(|&at| {
        args[at] == *word
            && (at == 0 || !args[at - 1].starts_with('-') || !takes_value(&args[at - 1]))
            && args[..at].iter().any(|arg| arg == "run")
    })?;
    let mut line = vec!["idem".to_owned()];
    line.extend(args[..at].iter().map(|arg| crate::render::shell_word(arg)));
    line.push("--".to_owned());
    line.extend(args[at..].iter().map(|arg| crate::render::shell_word(arg)));
    Some((word.clone(), line.join(" ")))
}

/// An unknown `--flag` and the flag of the same command it most likely
/// meant: clap suggests by likeness of letters, so `--retry` gets
/// `--retry-on`; a flag of as many words that is a few edits away (the
/// plural `--retries`) is a better guess.
fn meant_flag(error: &clap::Error) -> Option<(String, String)> {
    let Some(ContextValue::String(typed)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let name = typed.strip_prefix("--")?.split('=').next()?;
    let mut command = Cli::command();
    command.build();
    let mut target = &command;
    for word in command_path(error).iter().skip(1) {
        target = target.find_subcommand(word)?;
    }
    let words = |flag: &str| flag.split('-').count();
    let shared = |long: &str| {
        long.chars()
            .zip(name.chars())
            .take_while(|(a, b)| a == b)
            .count()
    };
    let (distance, _, meant) = target
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .filter_map(|arg| arg.get_long())
        .filter(|long| words(long) == words(name) && strsim::jaro(long, name) > 0.7)
        .map(|long| {
            let unshared = usize::MAX - shared(long);
            (strsim::levenshtein(long, name), unshared, long)
        })
        .min()?;
    (distance <= 3 && distance < name.len()).then(|| (typed.clone(), format!("--{meant}")))
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
