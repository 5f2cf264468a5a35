//! `idem status` for people (a table) and for scripts (JSON): a job's
//! state and figures as [`JobStatus`] holds them.

use std::ffi::OsString;
use std::io::Write;

use anyhow::Result;
use comfy_table::{Cell, Color, ColumnConstraint, ContentArrangement, Row, Table};
use jiff::Timestamp;
use serde::Serialize;

use crate::ledger::Status;
use crate::render;

/// Marks in the strip of latest runs.
pub const STRIP: usize = 10;

/// A job's state now, in the order they are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Its latest run failed (or died without an outcome).
    Failing,
    /// A periodic job whose last finished period has no success, or that
    /// nothing called in its current period by when it used to be called.
    Overdue,
    Running,
    Ok,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Failing => "failing",
            State::Overdue => "overdue",
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
    /// `failing`, `overdue`, `running` or `ok`.
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
    /// Its latest outcomes, oldest first, then `running` when one goes on.
    pub strip: Vec<&'static str>,
    /// Its latest run's argv, lossy where an argument is not UTF-8.
    pub command: Vec<String>,
    /// That argv ran as one `/bin/sh -c` script.
    pub shell: bool,
    /// The argv as bytes, for the table.
    #[serde(skip)]
    pub argv: Vec<OsString>,
}

/// `status --json`: every job, as an array.
pub fn json(out: &mut dyn Write, statuses: &[JobStatus]) -> Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(statuses)?)?;
    Ok(())
}

/// `status` for people: a table of the jobs, none when there are none.
pub fn text(
    out: &mut dyn Write,
    statuses: &[JobStatus],
    now: Timestamp,
    style: render::Style,
) -> Result<()> {
    if !statuses.is_empty() {
        writeln!(out, "{}", render::table_text(&table(statuses, now, style)))?;
    }
    Ok(())
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

/// A run's mark in the strip, without colour.
fn mark(status: Status) -> char {
    match status {
        Status::Succeeded => '+',
        Status::Failed => 'x',
        Status::Abandoned => '?',
        Status::Running => '>',
    }
}

/// The strip as one cell: marks side by side.
fn strip_cell(strip: &[&str], colour: bool) -> Cell {
    let statuses = strip
        .iter()
        .map(|status| Status::parse(status).unwrap_or(Status::Running));
    if !colour {
        return Cell::new(statuses.map(mark).collect::<String>());
    }
    // comfy-table colours a whole cell, so the marks are coloured by hand,
    // and every row gets as many slots (a dim dot when empty) so that the
    // escapes count the same in each and the columns stay aligned.
    let slot = |code: u8, glyph: char| format!("\x1b[{code}m{glyph}\x1b[0m");
    let empty = (STRIP + 1).saturating_sub(strip.len());
    let mut text: String = (0..empty).map(|_| slot(90, '·')).collect();
    for status in statuses.take(STRIP + 1) {
        text.push_str(&slot(render::status_ansi(status), '●'));
    }
    Cell::new(text)
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

fn table(statuses: &[JobStatus], now: Timestamp, style: render::Style) -> Table {
    let mut table = render::new_table(style);
    table.set_header(HEADERS);
    for job in statuses {
        let mut row = Row::from(row(job, now, style));
        row.max_height(1);
        table.add_row(row);
    }
    fit(&mut table, style.width);
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    table
}

/// A job's cells, in the order of [`HEADERS`].
fn row(job: &JobStatus, now: Timestamp, style: render::Style) -> Vec<Cell> {
    let when = |time: &Option<String>| {
        time.as_deref()
            .and_then(|text| text.parse::<Timestamp>().ok())
            .map_or("never".to_owned(), |time| ago(time, now))
    };
    // Within a known width the table cuts the command itself.
    let width = if style.width.is_some() {
        usize::MAX
    } else {
        render::COMMAND_WIDTH
    };
    vec![
        Cell::new(render::printable(&job.job)),
        state_cell(job.state, style.colour),
        Cell::new(when(&job.last_run)),
        Cell::new(when(&job.last_success)),
        Cell::new(job.failures),
        Cell::new(
            job.missed
                .map_or("-".to_owned(), |missed| missed.to_string()),
        ),
        strip_cell(&job.strip, style.colour),
        Cell::new(render::short_argv(&job.argv, job.shell, width)),
    ]
}

fn state_cell(state: State, colour: bool) -> Cell {
    let cell = Cell::new(state.as_str());
    if !colour {
        return cell;
    }
    cell.fg(match state {
        State::Failing => Color::Red,
        State::Overdue => Color::Magenta,
        State::Running => Color::Yellow,
        State::Ok => Color::Green,
    })
}

/// Within a known width every column but the command keeps its content
/// and the command gives way, down to 12 characters; without one the
/// table is as wide as it is.
fn fit(table: &mut Table, width: Option<u16>) {
    let Some(width) = width else {
        table.set_content_arrangement(ContentArrangement::Disabled);
        return;
    };
    table
        .set_width(width)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_truncation_indicator("…");
    let mut constraints = vec![ColumnConstraint::ContentWidth; HEADERS.len() - 1];
    constraints.push(ColumnConstraint::LowerBoundary(comfy_table::Width::Fixed(
        12,
    )));
    table.set_constraints(constraints);
}
