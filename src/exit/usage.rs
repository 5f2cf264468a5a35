//! A command-line error as idem's one line and its exit code (2).
//!
//! clap's message keeps its substance on one line and names the help of
//! the command whose usage was wrong. What clap does not say is added from
//! its error's context, and from the words of the command line where only
//! they hold it: the variable a bad value came from, the line as it should
//! be when a command lacks its `--`, the flag a negative value was given
//! to, the argument that is not UTF-8, the flag or subcommand a typo most
//! likely meant, the duration split by a space. A long flag given one dash
//! is refused before clap parses the line, which could take it for short
//! flags and run.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgMatches, Command, CommandFactory};

use super::{say, SUCCESS, USAGE};
use crate::cli::Cli;

/// Prints `error` in one line (help and version as they are) and returns
/// its exit code; `argv` is the command line it came from.
pub fn report(error: &clap::Error, argv: &[OsString]) -> u8 {
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            USAGE
        }
        _ => {
            let path = command_path(error, argv);
            let help = format!("(see {} --help)", path.join(" "));
            say(&format!("{} {help}", line(error, argv, &path)));
            USAGE
        }
    }
}

/// The error's line, without its help.
fn line(error: &clap::Error, argv: &[OsString], path: &[String]) -> String {
    if error.kind() == ErrorKind::InvalidUtf8 {
        let what = not_utf8_argument(argv);
        return format!("{what} is not valid UTF-8; write it in UTF-8");
    }
    if let Some(line) = split_duration(error, argv, path) {
        return line;
    }
    if error.kind() == ErrorKind::UnknownArgument {
        if let Some((flag, value)) = negative_value(error, argv) {
            return format!("invalid value '{value}' for '{flag}': it cannot be negative");
        }
        if let Some((word, corrected)) = missing_double_dash(error, argv, path) {
            return format!(
                "'{word}' is taken for the command, which must follow --; put -- before the command: {corrected}"
            );
        }
        if let Some((typed, meant)) = meant_flag(error, path) {
            return format!("unknown option '{typed}'; did you mean '{meant}'?");
        }
    }
    if error.kind() == ErrorKind::InvalidSubcommand {
        if let Some((typed, meant)) = meant_subcommand(error, path) {
            return format!("unknown subcommand '{typed}'; did you mean '{meant}'?");
        }
    }
    // clap's message spans lines (usage, a tip); keep its substance.
    let text = error.render().to_string();
    let words: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("tip: to pass"))
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more information"))
        .collect();
    let mut line = words.join(" ");
    if let Some(twin) = twin(error, argv) {
        line = format!(
            "{}; fix or unset {}",
            line.replacen(
                &format!("for '{}'", twin.flag),
                &format!("for '{}' from {}", twin.flag, twin.variable),
                1
            ),
            twin.variable
        );
    }
    match line.strip_prefix("error: ") {
        Some(rest) => rest.to_owned(),
        None => line,
    }
}

/// A string of the error's context.
fn context(error: &clap::Error, kind: ContextKind) -> Option<&str> {
    match error.get(kind)? {
        ContextValue::String(text) => Some(text),
        _ => None,
    }
}

/// A bad value that came from an option's environment twin
/// (`IDEM_RETRIES=x`), which clap does not say.
pub struct Twin {
    /// The option as clap names it (`--retries <N>`).
    pub flag: String,
    pub variable: String,
    /// The command line parsed again without that twin.
    pub without: Result<ArgMatches, clap::Error>,
}

/// The twin `error`'s bad value came from, if it came from one: parsed
/// again without that twin, the line no longer fails so. A flag on the
/// command line wins over its variable (clap's rule, so clap is asked),
/// and a bad value given on the line fails again the same way.
pub fn twin(error: &clap::Error, argv: &[OsString]) -> Option<Twin> {
    let flag = context(error, ContextKind::InvalidArg)?;
    let value = context(error, ContextKind::InvalidValue)?;
    let long = flag.strip_prefix("--")?.split(' ').next()?;
    let variable = variable_of(&Cli::command(), long)?;
    let without = without_twin(Cli::command(), long).try_get_matches_from(argv);
    if let Err(again) = &without {
        let same = again.kind() == error.kind()
            && context(again, ContextKind::InvalidArg) == Some(flag)
            && context(again, ContextKind::InvalidValue) == Some(value);
        if same {
            return None;
        }
    }
    Some(Twin {
        flag: flag.to_owned(),
        variable,
        without,
    })
}

/// The environment twin of the option `--long`, in any subcommand.
fn variable_of(command: &Command, long: &str) -> Option<String> {
    let mut commands = vec![command];
    while let Some(command) = commands.pop() {
        commands.extend(command.get_subcommands());
        let variable = command
            .get_arguments()
            .filter(|arg| arg.get_long() == Some(long))
            .find_map(|arg| arg.get_env());
        if let Some(variable) = variable {
            return Some(variable.to_string_lossy().into_owned());
        }
    }
    None
}

/// `command` with the option `--long` read from the command line only.
fn without_twin(command: Command, long: &str) -> Command {
    let ids: Vec<clap::Id> = command
        .get_arguments()
        .filter(|arg| arg.get_long() == Some(long) && arg.get_env().is_some())
        .map(|arg| arg.get_id().clone())
        .collect();
    let subcommands: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    let mut command = ids.into_iter().fold(command, |command, id| {
        command.mut_arg(id, |arg| arg.env(None))
    });
    for name in subcommands {
        command = command.mut_subcommand(name, |sub| without_twin(sub, long));
    }
    command
}

/// The words that name the command whose usage was wrong (`idem run`,
/// `idem ledger list`): from clap's usage line when the error has one,
/// else (a bad value) the subcommands clap parsed.
fn command_path(error: &clap::Error, argv: &[OsString]) -> Vec<String> {
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
    let parsed = Cli::command()
        .ignore_errors(true)
        .try_get_matches_from(argv);
    let mut matches = parsed.as_ref().ok();
    while let Some((name, sub)) = matches.and_then(ArgMatches::subcommand) {
        path.push(name.to_owned());
        matches = Some(sub);
    }
    path
}

/// `idem run --key k echo hi`: the first word of the command was taken for
/// an argument of idem's. Returns that word and the line as it should be.
fn missing_double_dash(
    error: &clap::Error,
    argv: &[OsString],
    path: &[String],
) -> Option<(String, String)> {
    let word = context(error, ContextKind::InvalidArg)?;
    if word.starts_with('-') || path != ["idem", "run"] {
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
    let args = words(argv);
    let at = (0..args.len()).find(|&at| {
        args[at] == *word
            && (at == 0 || !args[at - 1].starts_with('-') || !takes_value(&args[at - 1]))
            && args[..at].iter().any(|arg| arg == "run")
    })?;
    let mut line = vec!["idem".to_owned()];
    line.extend(args[..at].iter().map(|arg| crate::render::shell_word(arg)));
    line.push("--".to_owned());
    line.extend(args[at..].iter().map(|arg| crate::render::shell_word(arg)));
    Some((word.to_owned(), line.join(" ")))
}

/// `--timeout 5 minutes`: a duration split by a space, whose second word
/// clap took for the command (or, after `--timeout=5`, whose first word it
/// found no duration). Taken so when the two words make a duration and the
/// first alone does not, or they make one with the space between (`1h
/// 30m`); a whole value then a word is a missing `--`.
fn split_duration(error: &clap::Error, argv: &[OsString], path: &[String]) -> Option<String> {
    let args = words(argv);
    let end = args
        .iter()
        .position(|arg| arg == "--")
        .unwrap_or(args.len());
    let at = match error.kind() {
        ErrorKind::UnknownArgument => {
            let word = context(error, ContextKind::InvalidArg)?;
            (1..end).find(|&at| args[at] == *word)?
        }
        ErrorKind::ValueValidation => {
            let value = context(error, ContextKind::InvalidValue)?;
            1 + (0..end)
                .find(|&at| args[at] == value || args[at].ends_with(&format!("={value}")))?
        }
        _ => return None,
    };
    let word = args[..end].get(at).filter(|word| !word.starts_with('-'))?;
    let (long, value) = match args[at - 1].split_once('=') {
        Some((flag, value)) => (flag.strip_prefix("--")?, value),
        None => (
            args.get(at.checked_sub(2)?)?.strip_prefix("--")?,
            &*args[at - 1],
        ),
    };
    let is_duration = |arg: &clap::Arg| {
        arg.get_value_parser().type_id()
            == clap::builder::ValueParser::new(crate::cli::duration).type_id()
    };
    let target = named(&built(), path)?;
    if !target
        .get_arguments()
        .any(|arg| arg.get_long() == Some(long) && is_duration(arg))
    {
        return None;
    }
    let spaced = format!("{value} {word}");
    let fits = |text: &str| crate::cli::duration(text).ok();
    let (parsed, how) = match fits(&spaced) {
        Some(parsed) => (parsed, "quote it or write it without the space"),
        None if fits(value).is_none() => (
            fits(&format!("{value}{word}"))?,
            "write it without the space",
        ),
        None => return None,
    };
    let whole = humantime::format_duration(*parsed)
        .to_string()
        .replace(' ', "");
    Some(format!(
        "invalid value '{spaced}' for '--{long}': {how}: --{long} {whole}"
    ))
}

/// The arguments after the program's name, lossy where not UTF-8.
fn words(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect()
}

/// The built command that `path` (`idem ledger list`) names.
fn named(command: &Command, path: &[String]) -> Option<Command> {
    let mut target = command;
    for word in path.iter().skip(1) {
        target = target.find_subcommand(word)?;
    }
    Some(target.clone())
}

/// The whole command line, built, so that each subcommand has the global
/// flags.
fn built() -> Command {
    let mut command = Cli::command();
    command.build();
    command
}

/// `-key`: a long flag of its command given one dash, which clap reads
/// as short flags (`-k ey`): a key "ey" that runs without complaint, or a
/// failure on whatever follows. Refused before clap parses the line: prints
/// its one line and returns the exit code. A short flag glued to its value
/// (`-kbackup`) is not such a word and stays as clap reads it.
pub fn refuse_single_dash_long(argv: &[OsString]) -> Option<u8> {
    let (typed, meant, path) = single_dash_long(argv)?;
    say(&format!(
        "unknown option '{typed}'; did you mean '{meant}'? (see {} --help)",
        path.join(" ")
    ));
    Some(USAGE)
}

/// The first word before `--` whose letters after one dash are a long
/// flag's name (or name=value) of the command it falls in; that word, the
/// flag, and the words naming that command (`idem ledger list`).
fn single_dash_long(argv: &[OsString]) -> Option<(String, String, Vec<String>)> {
    // Most lines have no such word: the words are copied and clap's tree
    // is built only for one that might be, since building it costs a skip
    // a good share of its time.
    let idem_s = || argv.iter().skip(1).take_while(|arg| *arg != "--");
    if !idem_s().any(|arg| arg.to_str().and_then(one_dash_name).is_some()) {
        return None;
    }
    let args: Vec<String> = idem_s()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let command = built();
    let mut target = &command;
    let mut path = vec!["idem".to_owned()];
    let mut is_value = false;
    for arg in &args {
        if let Some(name) = one_dash_name(arg) {
            let long = target
                .get_arguments()
                .any(|flag| !flag.is_hide_set() && flag.get_long() == Some(name));
            if long {
                return Some((arg.clone(), format!("--{name}"), path));
            }
        }
        // clap takes no value that starts with a dash here but a negative
        // number, which names no subcommand either.
        if std::mem::take(&mut is_value) && !arg.starts_with('-') {
            continue;
        }
        if arg.starts_with('-') {
            is_value = takes_value(target, arg);
        } else if let Some(sub) = target.find_subcommand(arg) {
            target = sub;
            path.push(sub.get_name().to_owned());
        }
    }
    None
}

/// The letters after the one dash of `-key` or `-key=x`, when there are
/// at least two (a long flag's name is never shorter).
fn one_dash_name(arg: &str) -> Option<&str> {
    let name = arg.strip_prefix('-')?.split('=').next()?;
    (!name.starts_with('-') && name.chars().count() >= 2).then_some(name)
}

/// Whether the flag `arg` (`--key`, `-k`) of `command` takes the next word
/// for its value.
fn takes_value(command: &Command, arg: &str) -> bool {
    let named = |flag: &clap::Arg| match arg.strip_prefix("--") {
        Some(long) => !long.contains('=') && flag.get_long() == Some(long),
        None => {
            let mut shorts = arg[1..].chars();
            shorts
                .next()
                .is_some_and(|short| flag.get_short() == Some(short))
                && shorts.next().is_none()
        }
    };
    command
        .get_arguments()
        .any(|flag| named(flag) && flag.get_action().takes_values())
}

/// An unknown `--flag` and the flag of the same command it most likely
/// meant, else the one clap suggests.
fn meant_flag(error: &clap::Error, path: &[String]) -> Option<(String, String)> {
    let typed = context(error, ContextKind::InvalidArg)?;
    let name = typed.strip_prefix("--")?.split('=').next()?;
    let target = named(&built(), path)?;
    let longs = target
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .filter_map(|arg| arg.get_long());
    let meant = match nearest(name, longs) {
        Some(long) => format!("--{long}"),
        None => suggested(error, ContextKind::SuggestedArg)?,
    };
    Some((typed.to_owned(), meant))
}

/// An unknown subcommand and the one of the same command it most likely
/// meant, else the one clap suggests.
fn meant_subcommand(error: &clap::Error, path: &[String]) -> Option<(String, String)> {
    let typed = context(error, ContextKind::InvalidSubcommand)?;
    let target = named(&built(), path)?;
    let names = target
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .flat_map(|sub| std::iter::once(sub.get_name()).chain(sub.get_visible_aliases()));
    let meant = match nearest(typed, names) {
        Some(name) => name.to_owned(),
        None => suggested(error, ContextKind::SuggestedSubcommand)?,
    };
    Some((typed.to_owned(), meant))
}

/// clap's first suggestion of `kind`.
fn suggested(error: &clap::Error, kind: ContextKind) -> Option<String> {
    match error.get(kind)? {
        ContextValue::String(text) => Some(text.clone()),
        ContextValue::Strings(texts) => texts.first().cloned(),
        _ => None,
    }
}

/// The name among `names` that `typed` most likely meant, if one is a few
/// edits away and alike in letters (clap's likeness, which misses a short
/// name one edit away: `--ky`). Of names as near, one of as many words
/// wins (`--retry` meant the plural `--retries`, not `--retry-on`), then
/// one sharing a longer start.
fn nearest<'a>(typed: &str, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let words = |name: &str| name.split('-').count();
    let shared = |name: &str| {
        name.chars()
            .zip(typed.chars())
            .take_while(|(a, b)| a == b)
            .count()
    };
    let (distance, .., meant) = names
        .map(|name| {
            let distance = strsim::levenshtein(name, typed);
            let other_words = words(name) != words(typed);
            (distance, other_words, usize::MAX - shared(name), name)
        })
        .filter(|&(distance, .., name)| distance <= 1 || strsim::jaro(name, typed) > 0.7)
        .min()?;
    (distance <= 3 && distance < typed.chars().count()).then_some(meant)
}

/// `--backoff -1s` reaches clap as a flag `-1s` it does not know; finds the
/// flag it was meant for, so the message can name it.
fn negative_value(error: &clap::Error, argv: &[OsString]) -> Option<(String, String)> {
    let value = context(error, ContextKind::InvalidArg)?;
    if !value
        .strip_prefix('-')?
        .starts_with(|c: char| c.is_ascii_digit())
    {
        return None;
    }
    let args: Vec<String> = argv
        .iter()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    // clap names only the first letters of `-1s` (`-1`).
    args.windows(2)
        .find(|pair| pair[1].starts_with(value) && pair[0].starts_with("--"))
        .map(|pair| (pair[0].clone(), pair[1].clone()))
}

/// Names the argument clap found not to be UTF-8 (it does not say which).
fn not_utf8_argument(argv: &[OsString]) -> String {
    let Some(at) = argv.iter().position(|arg| arg.to_str().is_none()) else {
        return "an argument".into();
    };
    let bad = argv[at].to_string_lossy();
    if let Some((flag, _)) = bad
        .split_once('=')
        .filter(|(flag, _)| flag.starts_with("--"))
    {
        return format!("the value of {flag}");
    }
    match argv[..at].last().and_then(|before| before.to_str()) {
        Some(flag) if flag.starts_with("--") => format!("the value of {flag}"),
        _ => format!("argument '{bad}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The long flags of `idem run`.
    fn run_flags() -> Vec<String> {
        let command = named(&built(), &["idem".into(), "run".into()]).unwrap();
        command
            .get_arguments()
            .filter_map(|arg| arg.get_long().map(str::to_owned))
            .collect()
    }

    #[test]
    fn the_nearest_flag_is_a_few_edits_away_and_of_as_many_words() {
        let flags = run_flags();
        let nearest = |typed: &str| nearest(typed, flags.iter().map(String::as_str));
        for (typed, meant) in [
            ("ky", "key"),
            ("retry", "retries"),
            ("retryon", "retry-on"),
            ("kil-after", "kill-after"),
            ("shel", "shell"),
            ("no-retry", "no-retry-on"),
        ] {
            assert_eq!(nearest(typed), Some(meant), "{typed}");
        }
        for typed in ["nope", "foo", "x", "zzzzzzzz"] {
            assert_eq!(nearest(typed), None, "{typed}");
        }
    }

    #[test]
    fn a_long_flag_with_one_dash_is_found_in_its_command() {
        let found = |line: &str| {
            let argv: Vec<OsString> = std::iter::once("idem")
                .chain(line.split(' '))
                .map(OsString::from)
                .collect();
            single_dash_long(&argv).map(|(typed, meant, path)| (typed, meant, path.join(" ")))
        };
        let named = |typed: &str, meant: &str, path: &str| {
            Some((typed.to_owned(), meant.to_owned(), path.to_owned()))
        };
        assert_eq!(
            found("run -key -- true"),
            named("-key", "--key", "idem run")
        );
        assert_eq!(
            found("--db ledger ledger list -limit 3"),
            named("-limit", "--limit", "idem ledger list")
        );
        assert_eq!(found("-quiet status"), named("-quiet", "--quiet", "idem"));
        for line in [
            "run -kbackup -- true",
            "run -k-key -- true",
            "run -vq --key k -- true",
            "run --key k -- echo -key",
            "run --backoff -1s --key k -- true",
            "status -retries",
        ] {
            assert_eq!(found(line), None, "{line}");
        }
    }

    #[test]
    fn the_nearest_subcommand_is_one_edit_away() {
        let names = ["run", "ledger", "status", "doctor", "completions", "help"];
        assert_eq!(nearest("rn", names.into_iter()), Some("run"));
        assert_eq!(nearest("ledgr", names.into_iter()), Some("ledger"));
        assert_eq!(nearest("nosuch", names.into_iter()), None);
        assert_eq!(nearest("x", ["export", "list"].into_iter()), None);
    }
}
