//! The docs' commands. Every `idem ...` line of a code block in the
//! repository's Markdown (README.md, docs/, benches/, examples/; not
//! CHANGELOG.md, which quotes what older versions took) and of the man
//! pages' examples parses as idem parses it, and each crontab line runs
//! under cron's environment (`cron.rs`).
//!
//! What counts as a command: a line of a `sh`, `bash`, `console` (after
//! `$ `) or `crontab` code block, and a man page's example. Inline code in
//! prose (`idem stop KEY|GLOB...`) names a command and is not checked. A
//! line of a code block is a command as typed: a placeholder in capitals
//! (KEY, JOB) must be a word idem takes as it is, and a value idem checks
//! (a duration, a count, a code) is written as an example, never as DUR or
//! N. A shell variable or substitution stands for one word (`"$SHA"`).

mod cron;
mod shell;

use std::path::{Path, PathBuf};

use clap::Parser;

/// A command line found in the docs.
pub struct Found {
    /// The file, from the repository's top, and the line's number in it.
    pub place: String,
    pub text: String,
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every Markdown file of the repository, but the CHANGELOG and what git
/// does not keep (target/).
pub fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("the repository's folders are readable")
            .map(|entry| entry.expect("a folder entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    walk(&path, files);
                }
            } else if name.ends_with(".md") && name != "CHANGELOG.md" {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root(), &mut files);
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A fenced code block: its language and its lines, with their numbers.
pub struct Block {
    pub lang: String,
    pub lines: Vec<(usize, String)>,
}

pub fn blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Block)> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match (&mut open, trimmed.strip_prefix("```")) {
            (None, Some(lang)) => {
                let lang = lang.trim().to_owned();
                open = Some((
                    indent,
                    Block {
                        lang,
                        lines: Vec::new(),
                    },
                ));
            }
            (Some(_), Some(_)) => blocks.push(open.take().unwrap().1),
            (Some((indent, block)), None) => {
                let cut = line.len() - line.trim_start().len();
                let text = line[cut.min(*indent)..].to_owned();
                block.lines.push((index + 1, text));
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The command of a crontab line after its schedule, if it has one.
pub fn cron_command(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    let fields = if rest.starts_with('@') { 1 } else { 5 };
    for _ in 0..fields {
        let end = rest.find(char::is_whitespace)?;
        let field = &rest[..end];
        let numeric = field
            .chars()
            .all(|c| c.is_ascii_digit() || "*/,-".contains(c));
        let named = field.len() == 3 && field.chars().all(|c| c.is_ascii_alphabetic());
        if !(numeric || named || (fields == 1 && field.starts_with('@'))) {
            return None;
        }
        rest = rest[end..].trim_start();
    }
    Some(rest)
}

/// `NAME=value`, a crontab's variable.
pub fn assignment(line: &str) -> Option<(&str, &str)> {
    let (name, value) = line.split_once('=')?;
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some((name, value))
}

/// The command lines of a Markdown file's code blocks.
fn markdown_commands(path: &Path, found: &mut Vec<Found>, errors: &mut Vec<String>) {
    let text = std::fs::read_to_string(path).expect("a readable Markdown file");
    for block in blocks(&text) {
        let mut pending: Option<(usize, String)> = None;
        for (number, line) in &block.lines {
            let place = format!("{}:{number}", relative(path));
            let command = match block.lang.as_str() {
                "sh" | "bash" | "shell" => Some(line.as_str()),
                "console" => line.strip_prefix("$ "),
                "crontab" => {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with('#') || assignment(line).is_some() {
                        continue;
                    }
                    match cron_command(line) {
                        Some(command) => {
                            check_percent(command, &place, errors);
                            found.push(Found {
                                place,
                                text: command.to_owned(),
                            });
                        }
                        None => errors
                            .push(format!("{place}: not a crontab line (no schedule): {line}")),
                    }
                    continue;
                }
                _ => None,
            };
            let Some(command) = command else { continue };
            // A line that ends in `\` goes on on the next.
            let (start, mut text) = pending.take().unwrap_or((*number, String::new()));
            match command.strip_suffix('\\') {
                Some(head) => {
                    text.push_str(head);
                    pending = Some((start, text));
                }
                None => {
                    text.push_str(command);
                    let place = format!("{}:{start}", relative(path));
                    found.push(Found { place, text });
                }
            }
        }
    }
}

/// cron reads an unescaped `%` in a command as a newline.
fn check_percent(command: &str, place: &str, errors: &mut Vec<String>) {
    let bytes = command.as_bytes();
    if (0..bytes.len()).any(|at| bytes[at] == b'%' && (at == 0 || bytes[at - 1] != b'\\')) {
        errors.push(format!(
            "{place}: an unescaped % in a crontab line, which cron makes a newline: {command}"
        ));
    }
}

/// The text of a roff line, as man shows it.
fn unroff(line: &str) -> String {
    let mut text = line.to_owned();
    for (roff, plain) in [
        ("\\*(Aq", "'"),
        ("\\(aq", "'"),
        ("\\-", "-"),
        ("\\fB", ""),
        ("\\fR", ""),
        ("\\fI", ""),
        ("\\fP", ""),
        ("\\&", ""),
        ("\\e", "\\"),
    ] {
        text = text.replace(roff, plain);
    }
    text
}

/// The examples of the man pages: the lines of each `.nf` block and each
/// `.TP` tag of their EXAMPLES section.
fn man_commands(found: &mut Vec<Found>) {
    let mut pages: Vec<_> = std::fs::read_dir(root().join("man"))
        .expect("man/ is there")
        .map(|entry| entry.expect("an entry of man/").path())
        .collect();
    pages.sort();
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("a readable man page");
        let (mut examples, mut literal, mut tag) = (false, false, false);
        for (index, line) in text.lines().enumerate() {
            if line.starts_with(".SH ") {
                examples = line == ".SH EXAMPLES";
                continue;
            }
            let take =
                examples && ((literal && line != ".fi") || (tag && line.starts_with("\\fB")));
            literal = match line {
                ".nf" => true,
                ".fi" => false,
                _ => literal,
            };
            tag = line == ".TP";
            if !take {
                continue;
            }
            let text = unroff(line);
            let place = format!("{}:{}", relative(&page), index + 1);
            match cron_command(&text) {
                Some(command) => found.push(Found {
                    place,
                    text: command.to_owned(),
                }),
                None => found.push(Found { place, text }),
            }
        }
    }
}

/// Every command line of the docs, and what is wrong with a crontab block.
pub fn commands() -> (Vec<Found>, Vec<String>) {
    let (mut found, mut errors) = (Vec::new(), Vec::new());
    for path in markdown_files() {
        markdown_commands(&path, &mut found, &mut errors);
    }
    man_commands(&mut found);
    (found, errors)
}

/// Parses `argv` as idem does, then checks what `idem run` checks of its
/// flags before it opens a ledger (the key's template, locks, pings,
/// lease): nothing runs and no ledger is opened.
fn parse(argv: &[String]) -> Result<(), String> {
    let cli = match idem::cli::Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(error) => {
            use clap::error::ErrorKind;
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) {
                return Ok(());
            }
            return Err(error
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned());
        }
    };
    if let idem::cli::Command::Run(args) = &cli.command {
        idem::run::Config::from_args(args).map_err(|error| format!("{error:#}"))?;
    }
    Ok(())
}

#[test]
fn every_documented_command_parses() {
    let (found, mut errors) = commands();
    let mut checked = 0;
    for command in &found {
        let line = match shell::split(&command.text) {
            Ok(line) => line,
            Err(why) => {
                errors.push(format!("{}: {why}: {}", command.place, command.text));
                continue;
            }
        };
        for words in &line.commands {
            let Some(argv) = shell::idem_argv(words) else {
                continue;
            };
            checked += 1;
            if let Err(why) = parse(&argv) {
                errors.push(format!("{}: {}\n    {why}", command.place, command.text));
            }
        }
    }
    assert!(
        errors.is_empty(),
        "documented commands that idem refuses:\n{}",
        errors.join("\n")
    );
    // The docs hold over ninety; far fewer means the search broke.
    assert!(
        checked >= 80,
        "only {checked} idem commands found in the docs"
    );
}
