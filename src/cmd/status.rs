//! `idem status`: one line per job, the jobs that need a person first.
//!
//! Everything comes from the ledger's per-job figures (one row a job, kept
//! by every claim and outcome), so it answers at once however many runs
//! the ledger holds. A job's period is its template's finest placeholder,
//! judged in the time zone its keys were made in.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;

use anyhow::Result;
use comfy_table::{Cell, Color, ColumnConstraint, ContentArrangement, Row, Table};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use crate::cli::StatusArgs;
use crate::exit;
use crate::key::{Period, Template};
use crate::ledger::{self, JobState, Location, Status};
use crate::render;

/// Finished periods `status` looks back over for ones with no success.
const WINDOW: i64 = 10;

/// Marks in the strip of latest runs.
const STRIP: usize = 10;

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
    fn as_str(self) -> &'static str {
        match self {
            State::Failing => "failing",
            State::Overdue => "overdue",
            State::Running => "running",
            State::Ok => "ok",
        }
    }

    fn needs_a_person(self) -> bool {
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
    argv: Vec<OsString>,
}

pub fn run(args: &StatusArgs, location: &Location, colour: crate::cli::ColorChoice) -> Result<u8> {
    let jobs = match ledger::open_existing(location)? {
        Some(mut ledger) => ledger.jobs(args.job.as_deref())?,
        None => Vec::new(),
    };
    let now = Timestamp::now();
    let mut zones = Zones::default();
    let host = crate::host::name();
    let mut statuses: Vec<JobStatus> = jobs
        .iter()
        .map(|job| judge(job, now, &mut zones, &host))
        .collect();
    statuses.sort_by(|a, b| a.state.cmp(&b.state).then_with(|| a.job.cmp(&b.job)));
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&statuses)?)?;
    } else if !statuses.is_empty() {
        let table = table(&statuses, now, render::Style::for_stdout(colour));
        writeln!(out, "{}", render::table_text(&table))?;
    }
    Ok(if statuses.iter().any(|job| job.state.needs_a_person()) {
        exit::NOT_FOUND
    } else {
        exit::SUCCESS
    })
}

/// Time zones by name, each read once.
#[derive(Default)]
pub struct Zones(HashMap<Option<String>, TimeZone>);

impl Zones {
    fn get(&mut self, name: Option<&str>) -> TimeZone {
        self.0
            .entry(name.map(str::to_owned))
            .or_insert_with(|| {
                name.and_then(crate::host::zone_named)
                    .unwrap_or_else(crate::host::zone)
            })
            .clone()
    }
}

/// A job's state and figures now.
pub fn judge(job: &JobState, now: Timestamp, zones: &mut Zones, this_host: &str) -> JobStatus {
    let template = Template::parse(&job.template).ok();
    let period = template.as_ref().and_then(Template::period);
    let host = job.host.as_deref().unwrap_or(this_host);
    let periodic = match (&template, period) {
        (Some(template), Some(period)) => Some(Periodic {
            template,
            period,
            zone: zones.get(job.zone.as_deref()),
            host,
        }),
        _ => None,
    };
    let died = job.last_status == Some(Status::Running) && job.live == 0;
    let failed = matches!(job.last_status, Some(Status::Failed | Status::Abandoned));
    let missed = periodic.as_ref().map(|p| p.missed(job, now));
    let state = if job.live > 0 {
        State::Running
    } else if failed || died {
        State::Failing
    } else if periodic.as_ref().is_some_and(|p| p.overdue(job, now)) {
        State::Overdue
    } else {
        State::Ok
    };
    let marks: Vec<char> = job.strip.chars().collect();
    let mut strip: Vec<&'static str> = marks[marks.len().saturating_sub(STRIP)..]
        .iter()
        .map(|mark| match mark {
            's' => "succeeded",
            'f' => "failed",
            'a' => "abandoned",
            _ => "running",
        })
        .collect();
    if job.live > 0 {
        strip.push("running");
    }
    JobStatus {
        job: job.job.clone(),
        state,
        period: period.map(Period::name),
        template: job.template.clone(),
        zone: job.zone.clone(),
        last_run: job.last_run.map(render::json::rfc3339),
        last_success: job.last_success.map(render::json::rfc3339),
        last_called: job.checked_at.map(render::json::rfc3339),
        failures: job.failures,
        missed,
        strip,
        command: render::lossy_words(&job.command),
        shell: job.shell,
        argv: job.command.clone(),
    }
}

/// A job whose template makes a key per period.
struct Periodic<'a> {
    template: &'a Template,
    period: Period,
    zone: TimeZone,
    host: &'a str,
}

impl Periodic<'_> {
    /// The start of the period holding the job's first run: no period
    /// before it is owed anything.
    fn first(&self, job: &JobState) -> Option<jiff::Zoned> {
        job.first_run
            .map(|first| self.period.start(&first.to_zoned(self.zone.clone())))
    }

    fn succeeded(&self, job: &JobState, start: &jiff::Zoned) -> bool {
        self.template
            .expand(start, self.host)
            .is_ok_and(|key| job.ok_keys.contains(&key))
    }

    /// Finished periods of the window with no success.
    fn missed(&self, job: &JobState, now: Timestamp) -> u64 {
        let now = now.to_zoned(self.zone.clone());
        let Some(first) = self.first(job) else {
            return 0;
        };
        (1..=WINDOW)
            .filter_map(|back| self.period.shift(&now, -back))
            .filter(|start| *start >= first && !self.succeeded(job, start))
            .count() as u64
    }

    fn overdue(&self, job: &JobState, now: Timestamp) -> bool {
        let now = now.to_zoned(self.zone.clone());
        let (Some(first), Some(previous)) = (self.first(job), self.period.shift(&now, -1)) else {
            return false;
        };
        let current = self.period.start(&now);
        // The last finished period, owed since the job existed then.
        if previous >= first && !self.succeeded(job, &previous) {
            return true;
        }
        // Nothing called it in this period by the time into the period it
        // was last called (plus a tenth of a period, at most an hour):
        // cron stopped calling it.
        let Some(called) = job.checked_at else {
            return false;
        };
        let called = called.to_zoned(self.zone.clone());
        if called >= current || first >= current {
            return false;
        }
        let into = called
            .timestamp()
            .duration_since(self.period.start(&called).timestamp());
        let length = self
            .period
            .shift(&now, 1)
            .map_or(SignedDuration::from_hours(1), |next| {
                next.timestamp().duration_since(current.timestamp())
            });
        let grace =
            (length / 10).clamp(SignedDuration::from_secs(5), SignedDuration::from_hours(1));
        let expected = current.timestamp() + into.min(length) + grace;
        now.timestamp() > expected
    }
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

/// The longest command shown when the width is unknown.
const COMMAND_WIDTH: usize = 60;

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
        COMMAND_WIDTH
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
