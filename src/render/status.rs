//! `idem status` for people (a table) and for scripts (JSON): a job's
//! state and figures as [`JobStatus`] holds them.

use std::ffi::OsString;
use std::io::Write;

use anyhow::Result;
use comfy_table::{Cell, Color, ContentArrangement, Row, Table};
use jiff::Timestamp;
use serde::Serialize;

use crate::ledger::Status;
use crate::render;

/// Marks in the strip of latest runs.
pub const STRIP: usize = 10;

/// What `status` says of a ledger that holds no job.
pub const NO_JOBS: &str = "no jobs yet: nothing has run under this ledger";

/// A job's state now, in the order they are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Its latest run failed (or died without an outcome).
    Failing,
    /// A periodic job whose last finished period has no success, or that
    /// nothing called in its current period by when it used to be called.
    Overdue,
    /// Paused (`idem pause`, `--pause-after`): its runs start nothing.
    Paused,
    /// Its latest call waited for an upstream job (`--after`) that had not
    /// succeeded: nothing for a person here, its upstream says why.
    Blocked,
    /// Its latest run was stopped by a person (`idem stop`, `--replace`):
    /// no failure.
    Stopped,
    Running,
    Ok,
}

impl State {
    /// Every state, in the order they are shown.
    pub const ALL: [State; 7] = [
        State::Failing,
        State::Overdue,
        State::Paused,
        State::Blocked,
        State::Stopped,
        State::Running,
        State::Ok,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Failing => "failing",
            State::Overdue => "overdue",
            State::Paused => "paused",
            State::Blocked => "blocked",
            State::Stopped => "stopped",
            State::Running => "running",
            State::Ok => "ok",
        }
    }

    pub fn needs_a_person(self) -> bool {
        matches!(self, State::Failing | State::Overdue)
    }
}

/// One job as `status --json` prints it.
#[derive(Debug, Serialize)]
pub struct JobStatus {
    /// The job's name (`--job`, else the key as typed).
    pub job: String,
    /// `failing`, `overdue`, `paused`, `blocked`, `stopped`, `running` or
    /// `ok`.
    pub state: State,
    /// The template's finest placeholder (`date`, `hour`...), or null.
    pub period: Option<&'static str>,
    /// The key as typed by its latest run.
    pub template: String,
    /// The time zone its keys were made in, when recorded.
    pub zone: Option<String>,
    /// When its latest run started (RFC 3339 UTC).
    pub last_run: Option<String>,
    /// When its latest success finished.
    pub last_success: Option<String>,
    /// When it was last called (a run, or a skip).
    pub last_called: Option<String>,
    /// Failed and abandoned runs in a row, across its keys.
    pub failures: u64,
    /// Finished periods of the window (the last 10, back to its first run)
    /// whose key has no success; null for a job without a period.
    pub missed: Option<u64>,
    /// Its latest outcomes, oldest first (`succeeded`, `failed`,
    /// `abandoned`, `stopped`), then `running` when one goes on.
    pub strip: Vec<&'static str>,
    /// Its latest run's argv, lossy where an argument is not UTF-8.
    pub command: Vec<String>,
    /// That argv ran as one `/bin/sh -c` script.
    pub shell: bool,
    /// Its pause, while one holds: {by, since, reason, until}; null.
    pub paused: Option<Paused>,
    /// The upstream key templates its runs wait for (`--after`).
    pub after: Vec<String>,
    /// While it is blocked: the upstream keys its latest call waited for;
    /// null otherwise.
    pub blocked_on: Option<Vec<String>>,
    /// Its pings and hooks not yet delivered (the outbox).
    pub owed: u64,
    /// The argv as bytes, for the table.
    #[serde(skip)]
    pub argv: Vec<OsString>,
}

/// A job's pause as `status` shows it.
#[derive(Debug, Serialize)]
pub struct Paused {
    /// Who paused it: user@host.
    pub by: String,
    /// Since when (RFC 3339 UTC).
    pub since: String,
    /// Why, when given.
    pub reason: Option<String>,
    /// When it ends by itself; null: at `idem resume`.
    pub until: Option<String>,
}

/// `status --json`: every job, as an array.
pub fn json(out: &mut dyn Write, statuses: &[JobStatus]) -> Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(statuses)?)?;
    Ok(())
}

/// `status` for people: a table of the jobs, none when there are none.
/// `wide` shows every column and the whole command, whatever the width.
pub fn text(
    out: &mut dyn Write,
    statuses: &[JobStatus],
    now: Timestamp,
    style: render::Style,
    wide: bool,
) -> Result<()> {
    if !statuses.is_empty() {
        let table = table(statuses, now, style, wide);
        writeln!(out, "{}", render::table_text(&table))?;
    }
    for job in statuses {
        if let Some(paused) = &job.paused {
            writeln!(out, "{}", paused_line(&job.job, paused, now))?;
        }
    }
    owed_line(out, statuses)
}

/// The line under `status`'s table naming the jobs with events owed.
fn owed_line(out: &mut dyn Write, statuses: &[JobStatus]) -> Result<()> {
    let owed: Vec<String> = statuses
        .iter()
        .filter(|status| status.owed > 0)
        .map(|status| format!("{} {}", render::printable(&status.job), status.owed))
        .collect();
    if !owed.is_empty() {
        writeln!(
            out,
            "owed (pings and hooks not yet delivered): {}; `idem ledger deliver` sends them",
            owed.join(", ")
        )?;
    }
    Ok(())
}

/// `JOB paused by u@h 5m ago[ until T][: REASON]`, under the table.
fn paused_line(job: &str, paused: &Paused, now: Timestamp) -> String {
    let time = |text: &str| text.parse::<Timestamp>().ok();
    let mut line = format!(
        "{} paused by {} {}",
        render::printable(job),
        render::printable(&paused.by),
        time(&paused.since).map_or_else(String::new, |since| ago(since, now))
    );
    if let Some(until) = paused.until.as_deref().and_then(time) {
        line.push_str(&format!(" until {}", render::local_with_zone(until)));
    }
    if let Some(reason) = &paused.reason {
        line.push_str(&format!(": {}", render::printable(reason)));
    }
    line
}

/// "3h ago", for people.
pub fn ago(time: Timestamp, now: Timestamp) -> String {
    let secs = now.duration_since(time).as_secs();
    match secs {
        i64::MIN..=0 => "just now".to_owned(),
        1..=59 => format!("{secs}s ago"),
        60..=3599 => format!("{}m ago", secs / 60),
        3600..=172_799 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// A run's mark in the strip, and its colour: a run's status, or
/// `stopped` (by a person).
pub fn strip_mark(outcome: &str) -> (char, Color) {
    match Status::parse(outcome) {
        Some(status @ Status::Succeeded) => ('+', render::status_colour(status)),
        Some(status @ Status::Failed) => ('x', render::status_colour(status)),
        Some(status @ Status::Abandoned) => ('?', render::status_colour(status)),
        _ if outcome == "stopped" => ('-', Color::Blue),
        _ => ('>', render::status_colour(Status::Running)),
    }
}

fn mark(outcome: &str) -> char {
    strip_mark(outcome).0
}

/// The columns of `status`.
const HEADERS: [&str; 8] = [
    "JOB",
    "STATE",
    "LAST RUN",
    "LAST SUCCESS",
    "FAILS",
    "MISSED",
    "RECENT",
    "COMMAND",
];
const JOB: usize = 0;
const STATE: usize = 1;
const LAST_RUN: usize = 2;
const LAST_SUCCESS: usize = 3;
const FAILS: usize = 4;
const MISSED: usize = 5;
const RECENT: usize = 6;
const COMMAND: usize = 7;

/// The narrowest the command shrinks to before a column gives way: room
/// for a program's base name and its last argument or two.
const COMMAND_FLOOR: usize = 24;

/// What gives way, in this order, when the table is wider than the
/// terminal and the command has shrunk to [`COMMAND_FLOOR`]: whole
/// columns, or RECENT down to the latest outcomes its header is wide.
#[derive(Clone, Copy)]
enum GiveWay {
    Drop(usize),
    Shorten(usize),
}

const GIVE_WAY: [GiveWay; 6] = [
    GiveWay::Drop(LAST_SUCCESS),
    GiveWay::Drop(MISSED),
    GiveWay::Drop(LAST_RUN),
    GiveWay::Shorten(RECENT),
    GiveWay::Drop(FAILS),
    GiveWay::Drop(RECENT),
];

/// Blanks between two columns.
const GAP: usize = 2;

/// Which columns show, and how wide each is, within `width` characters as
/// they are seen: every column as wide as its content; when that is too
/// wide the command shrinks (to [`COMMAND_FLOOR`]), then [`GIVE_WAY`] in
/// its order (the command taking back what each left), then the command
/// shrinks to its header and the job's name is cut. JOB and STATE always
/// show; a header is never cut.
fn fit(content: &[usize; 8], width: usize) -> Vec<(usize, usize)> {
    let mut shown: Vec<usize> = (0..HEADERS.len()).collect();
    let full: [usize; 8] = std::array::from_fn(|at| content[at].max(HEADERS[at].len()));
    let mut widths = full;
    let floor = full[COMMAND].min(COMMAND_FLOOR);
    let total = |shown: &[usize], widths: &[usize; 8]| {
        shown.iter().map(|&at| widths[at]).sum::<usize>() + GAP * shown.len().saturating_sub(1)
    };
    let mut giving_way = GIVE_WAY.iter();
    while total(&shown, &widths) > width {
        let over = total(&shown, &widths) - width;
        if shown.contains(&COMMAND) && widths[COMMAND] > floor {
            widths[COMMAND] -= over.min(widths[COMMAND] - floor);
            continue;
        }
        match giving_way.next() {
            Some(GiveWay::Drop(column)) => shown.retain(|&at| at != *column),
            Some(GiveWay::Shorten(column)) => {
                widths[*column] = widths[*column].min(HEADERS[*column].len());
            }
            None => {
                for (column, least) in
                    [(COMMAND, HEADERS[COMMAND].len()), (JOB, HEADERS[JOB].len())]
                {
                    let over = total(&shown, &widths).saturating_sub(width);
                    widths[column] -= over.min(widths[column].saturating_sub(least));
                }
                break;
            }
        }
        widths[COMMAND] = full[COMMAND];
    }
    shown.iter().map(|&at| (at, widths[at])).collect()
}

/// A job's cells as text, in the order of [`HEADERS`]: RECENT's marks
/// without colour, the command whole.
fn texts(job: &JobStatus, now: Timestamp) -> [String; 8] {
    let when = |time: &Option<String>| {
        time.as_deref()
            .and_then(|text| text.parse::<Timestamp>().ok())
            .map_or("never".to_owned(), |time| ago(time, now))
    };
    [
        render::printable(&job.job).into_owned(),
        job.state.as_str().to_owned(),
        when(&job.last_run),
        when(&job.last_success),
        job.failures.to_string(),
        job.missed
            .map_or("-".to_owned(), |missed| missed.to_string()),
        job.strip.iter().copied().map(mark).collect(),
        render::short_argv(&job.argv, job.shell, usize::MAX),
    ]
}

/// The table within the width (see [`fit`]); unbounded when the width is
/// unknown (the command then cut at [`render::COMMAND_WIDTH`]) or `wide`.
fn table(statuses: &[JobStatus], now: Timestamp, style: render::Style, wide: bool) -> Table {
    let rows: Vec<[String; 8]> = statuses.iter().map(|job| texts(job, now)).collect();
    let mut content: [usize; 8] = std::array::from_fn(|at| {
        rows.iter()
            .map(|row| row[at].chars().count())
            .max()
            .unwrap_or(0)
    });
    if style.colour {
        // At a colour terminal every row has all its slots, dim when empty.
        content[RECENT] = STRIP + 1;
    }
    let columns = match (wide, style.width) {
        (false, Some(width)) => fit(&content, usize::from(width)),
        (wide, _) => {
            if !wide {
                content[COMMAND] = content[COMMAND].min(render::COMMAND_WIDTH);
            }
            (0..HEADERS.len())
                .map(|at| (at, content[at].max(HEADERS[at].len())))
                .collect()
        }
    };
    let mut table = render::new_table(style);
    table.set_content_arrangement(ContentArrangement::Disabled);
    table.set_header(header(&columns, style.colour));
    for (job, texts) in statuses.iter().zip(&rows) {
        let mut row = Row::from(cells(job, texts, &columns, style.colour));
        row.max_height(1);
        table.add_row(row);
    }
    let gaps = gaps(&columns, style.colour);
    for (column, gap) in table.column_iter_mut().zip(gaps) {
        column.set_padding((0, gap));
    }
    table
}

/// The header's cells. At a colour terminal RECENT is a column per mark,
/// so that comfy-table colours each and counts what is seen (colour
/// escapes written into a cell would count as width); its header is then
/// spelt across them.
fn header(columns: &[(usize, usize)], colour: bool) -> Vec<String> {
    let mut cells = Vec::new();
    for &(at, width) in columns {
        if at == RECENT && colour {
            let mut letters = HEADERS[RECENT].chars().map(String::from);
            cells.extend((0..width).map(|_| letters.next().unwrap_or_default()));
        } else {
            cells.push(HEADERS[at].to_owned());
        }
    }
    cells
}

/// A job's cells, in the order of [`header`].
fn cells(
    job: &JobStatus,
    texts: &[String; 8],
    columns: &[(usize, usize)],
    colour: bool,
) -> Vec<Cell> {
    let mut cells = Vec::new();
    for &(at, width) in columns {
        match at {
            STATE if colour => cells.push(Cell::new(&texts[STATE]).fg(state_colour(job.state))),
            RECENT => cells.extend(strip_cells(&job.strip, width, colour)),
            COMMAND => cells.push(Cell::new(render::identifying_argv(
                &job.argv, job.shell, width,
            ))),
            _ => cells.push(Cell::new(render::cut(&texts[at], width))),
        }
    }
    cells
}

/// The latest `width` outcomes: marks in one cell, or at a colour
/// terminal a dot per slot, coloured by comfy-table, dim when empty.
fn strip_cells(strip: &[&str], width: usize, colour: bool) -> Vec<Cell> {
    let latest = &strip[strip.len().saturating_sub(width)..];
    if !colour {
        return vec![Cell::new(
            latest.iter().copied().map(mark).collect::<String>(),
        )];
    }
    let empty = width - latest.len();
    let dim = (0..empty).map(|_| Cell::new('·').fg(Color::DarkGrey));
    let marks = latest
        .iter()
        .map(|&outcome| Cell::new('●').fg(strip_mark(outcome).1));
    dim.chain(marks).collect()
}

/// The blanks after each of comfy-table's columns: [`GAP`], but none
/// between RECENT's slots and none after the last column.
fn gaps(columns: &[(usize, usize)], colour: bool) -> Vec<u16> {
    let mut gaps = Vec::new();
    for &(at, width) in columns {
        if at == RECENT && colour {
            gaps.extend(std::iter::repeat_n(0, width.saturating_sub(1)));
        }
        gaps.push(GAP as u16);
    }
    if let Some(last) = gaps.last_mut() {
        *last = 0;
    }
    gaps
}

fn state_colour(state: State) -> Color {
    match state {
        State::Failing => Color::Red,
        State::Overdue => Color::Magenta,
        State::Paused => Color::Blue,
        State::Blocked => Color::Cyan,
        State::Stopped => Color::Blue,
        State::Running => Color::Yellow,
        State::Ok => Color::Green,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The columns `fit` keeps at `width`, and how wide each is.
    fn kept(width: usize) -> Vec<(&'static str, usize)> {
        // backup-nightly, failing, "12s ago", never, 4, -, 11 slots, 71.
        let content = [14, 7, 7, 5, 1, 1, 11, 71];
        fit(&content, width)
            .into_iter()
            .map(|(at, width)| (HEADERS[at], width))
            .collect()
    }

    fn headers(width: usize) -> Vec<&'static str> {
        kept(width).into_iter().map(|(header, _)| header).collect()
    }

    fn command(width: usize) -> usize {
        kept(width)
            .into_iter()
            .find(|&(header, _)| header == "COMMAND")
            .map_or(0, |(_, width)| width)
    }

    #[test]
    fn columns_give_way_in_their_order() {
        assert_eq!(headers(200), HEADERS);
        assert_eq!(command(200), 71);
        assert_eq!(headers(120), HEADERS);
        assert_eq!(command(120), 43);
        let some = ["JOB", "STATE", "LAST RUN", "FAILS", "RECENT", "COMMAND"];
        assert_eq!(headers(80), some);
        assert_eq!(command(80), 25);
        assert_eq!(headers(79), some);
        assert_eq!(command(79), 24);
        assert_eq!(headers(78), ["JOB", "STATE", "FAILS", "RECENT", "COMMAND"]);
        // RECENT down to its header's width, its latest 6.
        assert_eq!(kept(64)[3], ("RECENT", 6));
        assert_eq!(command(64), 24);
        assert_eq!(headers(63), ["JOB", "STATE", "RECENT", "COMMAND"]);
        assert_eq!(headers(56), ["JOB", "STATE", "COMMAND"]);
        // The narrowest: the command down to its header, the job cut.
        assert_eq!(kept(21), [("JOB", 3), ("STATE", 7), ("COMMAND", 7)]);
        assert_eq!(kept(20), kept(21), "no narrower than 21");
    }
}
