//! Runs and attempts for people (tables) and for scripts (JSON).

pub mod doctor;
pub mod json;
pub mod metrics;
pub mod show;
pub mod status;
pub mod summary;

use std::borrow::Cow;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::os::unix::ffi::OsStrExt;

use comfy_table::{presets, Cell, Color, ContentArrangement, Row, Table};
use jiff::Timestamp;

use crate::ledger::{Run, Status};

/// Text for a person's terminal: every character that would act on the
/// terminal or on the text around it rather than be seen (escape
/// sequences, carriage returns, bidirectional overrides: see
/// [`crate::key::is_hidden`]) is written as an escape, `\x1b` or
/// `\u{202e}`. Recorded commands, keys and output come from anyone who
/// can run idem on the ledger; JSON output escapes by itself.
pub fn printable(text: &str) -> Cow<'_, str> {
    escape_hidden(text, |_| false)
}

/// [`printable`] for a line of a command's output, which keeps its tabs.
pub fn printable_output(line: &str) -> Cow<'_, str> {
    escape_hidden(line, |c| c == '\t')
}

fn escape_hidden(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    let hidden = |c: char| crate::key::is_hidden(c) && !keep(c);
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !hidden(c) {
            escaped.push(c);
        } else if u32::from(c) < 0x100 {
            let _ = write!(escaped, "\\x{:02x}", u32::from(c));
        } else {
            let _ = write!(escaped, "\\u{{{:x}}}", u32::from(c));
        }
    }
    Cow::Owned(escaped)
}

/// Words for display: lossy where one is not UTF-8.
pub fn lossy_words(words: &[OsString]) -> Vec<String> {
    words
        .iter()
        .map(|word| String::from_utf8_lossy(word.as_bytes()).into_owned())
        .collect()
}

pub fn duration_ms(run: &Run) -> Option<i64> {
    run.finished_at
        .map(|end| end.as_millisecond() - run.started_at.as_millisecond())
}

/// A word as a POSIX shell would need it: quoted when it holds anything
/// but plain characters.
pub fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// A command line for a table cell, as a shell would take it back,
/// shortened to `width` characters; characters that would act on the
/// terminal are escaped (see [`printable`]).
pub fn short_command(run: &Run, width: usize) -> String {
    short_argv(&run.command, run.shell, width)
}

/// [`short_command`] of an argv and its `--shell` flag.
pub fn short_argv(command: &[OsString], shell: bool, width: usize) -> String {
    let words: Vec<String> = lossy_words(command)
        .iter()
        .map(|word| printable(word).into_owned())
        .collect();
    let mut text = if shell {
        format!("sh -c {}", shell_word(&words.join(" ")))
    } else {
        words
            .iter()
            .map(|word| shell_word(word))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if text.chars().count() > width {
        text = text
            .chars()
            .take(width.saturating_sub(1))
            .collect::<String>()
            + "…";
    }
    text
}

/// A command line in `width` characters by what identifies it: whole when
/// it fits; else the program's base name and as many of its last words as
/// fit, an ellipsis for those left out (`backup.sh … --daily`): the start
/// of a long path says little, its end and the last arguments say which
/// job it is. A `--shell` script is taken by its words alike. Only a base
/// name wider than `width` is cut.
pub fn identifying_argv(command: &[OsString], shell: bool, width: usize) -> String {
    let whole = short_argv(command, shell, usize::MAX);
    if whole.chars().count() <= width {
        return whole;
    }
    let raw = lossy_words(command);
    let words: Vec<String> = if shell {
        let script = raw.join(" ");
        script.split_whitespace().map(str::to_owned).collect()
    } else {
        raw
    };
    let Some((program, args)) = words.split_first() else {
        return cut(&whole, width);
    };
    let base = program.rsplit('/').find(|part| !part.is_empty());
    let word = |word: &str| {
        let word = printable(word);
        if shell {
            word.into_owned()
        } else {
            shell_word(&word)
        }
    };
    let base = word(base.unwrap_or(program));
    let args: Vec<String> = args.iter().map(|arg| word(arg)).collect();
    // The most last words that fit, down to none.
    let mut shortest = String::new();
    for kept in (0..=args.len()).rev() {
        let mut text = base.clone();
        if kept < args.len() {
            text.push_str(" …");
        }
        for arg in &args[args.len() - kept..] {
            text.push(' ');
            text.push_str(arg);
        }
        if text.chars().count() <= width {
            return text;
        }
        shortest = text;
    }
    cut(&shortest, width)
}

/// An exit code for people (`-` when there is none).
pub fn exit_text(code: Option<i32>) -> String {
    code.map_or("-".into(), |code| code.to_string())
}

/// `1 run`, `2 runs`: a count and its noun, plural but for one.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A duration in milliseconds for people (`-` when unknown).
pub fn human_ms(ms: Option<i64>) -> String {
    ms.map_or("-".into(), |ms| {
        human_duration(std::time::Duration::from_millis(ms.max(0) as u64))
    })
}

/// A duration for people: `250ms`, `3.1s`, `2m05s`; the one format of
/// every duration idem prints.
pub fn human_duration(duration: std::time::Duration) -> String {
    let secs = duration.as_secs_f64();
    if duration < std::time::Duration::from_secs(1) {
        format!("{}ms", duration.as_millis())
    } else if secs < 60.0 {
        format!("{secs:.1}s")
    } else {
        let whole = duration.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

/// Local time for people: the one format of every time idem prints.
pub fn local(time: Timestamp, zone: &jiff::tz::TimeZone) -> String {
    time.to_zoned(zone.clone())
        .strftime("%Y-%m-%d %H:%M:%S")
        .to_string()
}

/// Local time in this host's zone, with the zone's name (for lines that
/// stand alone, without a table's header).
pub fn local_with_zone(time: Timestamp) -> String {
    let zone = crate::host::zone();
    let named = time.to_zoned(zone.clone()).strftime("%Z").to_string();
    format!("{} {named}", local(time, &zone))
}

/// How a table is drawn: its colour and its width (the terminal's, else
/// `$COLUMNS`, else unbounded).
#[derive(Debug, Clone, Copy, Default)]
pub struct Style {
    pub colour: bool,
    pub width: Option<u16>,
}

impl Style {
    /// `--color`: `auto` colours a terminal unless `NO_COLOR` is set or
    /// `TERM` is `dumb`; `always` and `never` say so whatever stdout is.
    pub fn for_stdout(choice: crate::cli::ColorChoice) -> Style {
        use crate::cli::ColorChoice;
        let tty = std::io::stdout().is_terminal();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
        let dumb = std::env::var_os("TERM").is_some_and(|term| term == "dumb");
        // A pseudo-terminal may report a width of 0: no width then.
        let width = if tty { Table::new().width() } else { None }
            .filter(|width| *width > 0)
            .or_else(|| {
                std::env::var("COLUMNS")
                    .ok()
                    .and_then(|columns| columns.trim().parse().ok())
            })
            .filter(|width| *width > 0);
        let colour = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => tty && !no_color && !dumb,
        };
        Style { colour, width }
    }
}

/// The longest command shown in a table when the width is unknown.
const COMMAND_WIDTH: usize = 60;

/// The columns of `ledger list`, and the order in which they give way when
/// the width is short, after the command has shrunk to its header: the
/// host first, the key and status never.
const HEADERS: [&str; 8] = [
    "KEY", "STATUS", "EXIT", "ATTEMPTS", "STARTED", "DURATION", "HOST", "COMMAND",
];
const KEY: usize = 0;
const COMMAND: usize = 7;
const GIVE_WAY: [usize; 6] = [6, 3, 5, 2, COMMAND, 4];

/// Blanks between two columns.
const GAP: usize = 2;

/// The colour of a status, wherever one is shown.
pub fn status_colour(status: Status) -> Color {
    match status {
        Status::Running => Color::Yellow,
        Status::Succeeded => Color::Green,
        Status::Failed => Color::Red,
        Status::Abandoned => Color::Magenta,
    }
}

/// A table without borders, coloured or not as `style` says, whatever
/// stdout is.
pub fn new_table(style: Style) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::NOTHING).force_no_tty();
    if style.colour {
        table.enforce_styling();
    }
    table
}

/// `text` cut to `width` characters, the last one an ellipsis when cut.
pub fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Which columns show, and how wide each may be, for `width`: every
/// column as wide as its content; when that is too wide the command
/// shrinks first (down to its header), then whole columns give way
/// (`GIVE_WAY`), then the key is cut. A header is never cut.
fn fit(content: &[usize; 8], width: Option<usize>) -> Vec<(usize, usize)> {
    let mut shown: Vec<usize> = (0..HEADERS.len()).collect();
    let mut widths: [usize; 8] = std::array::from_fn(|at| content[at].max(HEADERS[at].len()));
    let Some(width) = width else {
        widths[COMMAND] = widths[COMMAND].min(COMMAND_WIDTH.max(HEADERS[COMMAND].len()));
        return shown.iter().map(|&at| (at, widths[at])).collect();
    };
    let total = |shown: &[usize], widths: &[usize; 8]| {
        shown.iter().map(|&at| widths[at]).sum::<usize>() + GAP * shown.len().saturating_sub(1)
    };
    let mut giving_way = GIVE_WAY.iter();
    while total(&shown, &widths) > width {
        let over = total(&shown, &widths) - width;
        if shown.contains(&COMMAND) && widths[COMMAND] > HEADERS[COMMAND].len() {
            let room = widths[COMMAND] - HEADERS[COMMAND].len();
            widths[COMMAND] -= over.min(room);
            continue;
        }
        match giving_way.next() {
            Some(&column) => {
                shown.retain(|&at| at != column);
                // What the column left, the command may take back.
                if shown.contains(&COMMAND) {
                    widths[COMMAND] = content[COMMAND].max(HEADERS[COMMAND].len());
                }
            }
            None => {
                let room = widths[KEY].saturating_sub(HEADERS[KEY].len());
                widths[KEY] -= over.min(room);
                break;
            }
        }
    }
    shown.iter().map(|&at| (at, widths[at])).collect()
}

/// `ledger list` for people: see [`fit`] for how it meets the width.
pub fn runs_table(runs: &[Run], style: Style) -> Table {
    let zone = crate::host::zone();
    let rows: Vec<[String; 8]> = runs
        .iter()
        .map(|run| {
            [
                printable(&run.key).into_owned(),
                status_text(run),
                exit_text(run.exit_code),
                run.attempts.to_string(),
                local(run.started_at, &zone),
                human_ms(duration_ms(run)),
                printable(&run.host).into_owned(),
                short_command(run, usize::MAX),
            ]
        })
        .collect();
    let content: [usize; 8] = std::array::from_fn(|at| {
        rows.iter()
            .map(|row| row[at].chars().count())
            .max()
            .unwrap_or(0)
    });
    let columns = fit(&content, style.width.map(usize::from));
    let mut table = new_table(style);
    table.set_content_arrangement(ContentArrangement::Disabled);
    table.set_header(columns.iter().map(|&(at, _)| HEADERS[at]));
    for (run, cells) in runs.iter().zip(&rows) {
        let row: Vec<Cell> = columns
            .iter()
            .map(|&(at, width)| {
                let cell = Cell::new(cut(&cells[at], width));
                if at == 1 && style.colour {
                    cell.fg(status_colour(run.status))
                } else {
                    cell
                }
            })
            .collect();
        let mut row = Row::from(row);
        row.max_height(1);
        table.add_row(row);
    }
    let last = columns.len().saturating_sub(1);
    for (at, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, if at == last { 0 } else { GAP as u16 }));
    }
    table
}

/// A table as text, without the trailing blanks of its padding.
pub fn table_text(table: &Table) -> String {
    table
        .lines()
        .map(|line| line.trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A byte count for people: `512 B`, `4.0 KiB`, `1.5 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A run's status for people: a success marked by hand says so.
pub fn status_text(run: &Run) -> String {
    match &run.note {
        Some(note) if note == crate::ledger::MISFIRE_NOTE => "skipped (misfire)".to_owned(),
        Some(_) => format!("{} (marked)", run.status.as_str()),
        None => run.status.as_str().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_words_for_the_shell() {
        assert_eq!(shell_word("plain/path-1.txt"), "plain/path-1.txt");
        assert_eq!(shell_word("two words"), "'two words'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn a_command_is_shortened_to_what_identifies_it() {
        let argv = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        let backup = argv(&[
            "/usr/local/bin/backup.sh",
            "--target",
            "/srv/data",
            "--daily",
        ]);
        let whole = "/usr/local/bin/backup.sh --target /srv/data --daily";
        assert_eq!(identifying_argv(&backup, false, 80), whole);
        assert_eq!(
            identifying_argv(&backup, false, 40),
            "backup.sh --target /srv/data --daily"
        );
        assert_eq!(
            identifying_argv(&backup, false, 30),
            "backup.sh … /srv/data --daily"
        );
        assert_eq!(identifying_argv(&backup, false, 19), "backup.sh … --daily");
        assert_eq!(identifying_argv(&backup, false, 12), "backup.sh …");
        assert_eq!(identifying_argv(&backup, false, 6), "backu…");
        let spaced = argv(&["/opt/my tools/run it", "a b"]);
        assert_eq!(identifying_argv(&spaced, false, 14), "'run it' 'a b'");
        let script = argv(&["./report.sh --daily; exit 3"]);
        assert_eq!(
            identifying_argv(&script, true, 40),
            "sh -c './report.sh --daily; exit 3'"
        );
        assert_eq!(identifying_argv(&script, true, 20), "report.sh … exit 3");
    }

    #[test]
    fn escapes_what_would_act_on_a_terminal() {
        assert_eq!(printable("plain café\tx"), "plain café\\x09x");
        assert_eq!(printable_output("a\tb"), "a\tb");
        assert_eq!(
            printable("\x1b]0;t\x07\r\u{202e}\u{9b}"),
            "\\x1b]0;t\\x07\\x0d\\u{202e}\\x9b"
        );
        assert!(matches!(printable("ok"), Cow::Borrowed("ok")));
    }
}
