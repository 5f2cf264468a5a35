//! `idem status`: one line per job, the jobs that need a person first.
//!
//! Everything comes from the ledger's per-job figures (one row a job, kept
//! by every claim and outcome), so it answers at once however many runs
//! the ledger holds. A job's period is its template's finest placeholder,
//! judged in the time zone its keys were made in.

use std::collections::HashMap;

use anyhow::Result;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::cli::StatusArgs;
use crate::exit::{self, Failure};
use crate::key::{Period, Template};
use crate::ledger::{JobState, Location, Pause, Status};
use crate::render;
use crate::render::status::{JobStatus, State, STRIP};

/// Finished periods `status` looks back over for ones with no success.
const WINDOW: i64 = 10;

/// Judges every job (or those `--job` matches) and prints them; exit 1
/// when one needs a person.
pub fn run(args: &StatusArgs, location: &Location, colour: crate::cli::ColorChoice) -> Result<u8> {
    let mut ledger = super::ledger::open_to_read(location)?;
    let owed: HashMap<String, u64> = ledger.owed().unwrap_or_default().into_iter().collect();
    let jobs = ledger.jobs(args.job.as_deref())?;
    let pauses = ledger.pauses(args.job.as_deref())?;
    if let (true, Some(glob)) = (jobs.is_empty(), &args.job) {
        // A check of a job that is not there is not a job that is fine.
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!(
                "no job matches {}; see `idem status` for the jobs there are",
                render::printable(glob)
            ),
        )
        .into());
    }
    let now = Timestamp::now();
    let mut statuses = judged(&jobs, &pauses, now);
    super::upstreams::apply(ledger.as_mut(), args.job.as_deref(), &mut statuses)?;
    for status in &mut statuses {
        status.owed = owed.get(&status.job).copied().unwrap_or(0);
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        render::status::json(&mut out, &statuses)?;
    } else if args.after {
        super::upstreams::text(&mut out, &statuses, render::Style::for_stdout(colour))?;
    } else {
        let style = render::Style::for_stdout(colour);
        render::status::text(&mut out, &statuses, now, style, args.wide)?;
        super::upstreams::blocked_lines(&mut out, &statuses)?;
    }
    Ok(if statuses.iter().any(|job| job.state.needs_a_person()) {
        exit::NOT_FOUND
    } else {
        exit::SUCCESS
    })
}

/// Every job judged at `now`, the jobs that need a person first: what
/// `idem status` prints and `idem serve` shows.
pub fn judged(jobs: &[JobState], pauses: &[Pause], now: Timestamp) -> Vec<JobStatus> {
    let mut zones = Zones::default();
    let host = crate::host::name();
    let mut statuses: Vec<JobStatus> = jobs
        .iter()
        .map(|job| {
            let pause = pauses.iter().find(|pause| pause.job == job.job);
            judge(job, pause, now, &mut zones, &host)
        })
        .collect();
    statuses.sort_by(|a, b| a.state.cmp(&b.state).then_with(|| a.job.cmp(&b.job)));
    statuses
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

/// A job's state and figures now; a paused job's periods since its pause
/// are not missed, and it is never overdue.
pub fn judge(
    job: &JobState,
    pause: Option<&Pause>,
    now: Timestamp,
    zones: &mut Zones,
    this_host: &str,
) -> JobStatus {
    let template = Template::parse(&job.template).ok();
    let period = template.as_ref().and_then(Template::period);
    let host = job.host.as_deref().unwrap_or(this_host);
    let periodic = match (&template, period) {
        (Some(template), Some(period)) => Some(Periodic {
            template,
            period,
            zone: zones.get(job.zone.as_deref()),
            host,
            paused_since: pause.map(|pause| pause.since),
        }),
        _ => None,
    };
    // Failing first, even while another run of the job is going: its
    // latest finished run failed (the figures follow the order in which runs
    // finished), and a slow job whose runs overlap always has one going.
    let died = job.last_status == Some(Status::Running) && job.live == 0;
    let missed = periodic.as_ref().map(|p| p.missed(job, now));
    let state = if pause.is_some() {
        State::Paused
    } else if job.failures > 0 || died {
        State::Failing
    } else if job.live > 0 {
        State::Running
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
        owed: 0,
        argv: job.command.clone(),
        paused: pause.map(super::pause::shown),
        after: Vec::new(),
        blocked_on: None,
    }
}

/// A job whose template makes a key per period.
struct Periodic<'a> {
    template: &'a Template,
    period: Period,
    zone: TimeZone,
    host: &'a str,
    /// Periods from this on are not owed anything: the job is paused.
    paused_since: Option<Timestamp>,
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
            .filter(|start| {
                self.paused_since
                    .is_none_or(|since| start.timestamp() < since)
            })
            .count() as u64
    }

    fn overdue(&self, job: &JobState, now: Timestamp) -> bool {
        let now = now.to_zoned(self.zone.clone());
        let (Some(first), Some(previous)) = (self.first(job), self.period.shift(&now, -1)) else {
            return false;
        };
        let current = self.period.start(&now);
        // No success since the start of the last finished period, owed since
        // the job existed then: a success in the current period (a
        // recovery) pays for the one before.
        let since =
            |start: &jiff::Zoned| job.last_success.is_some_and(|at| at >= start.timestamp());
        if previous >= first && !since(&previous) {
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
