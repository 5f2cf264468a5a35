//! A job's period and what it owes in each: the periods missed in the
//! window and whether the job is overdue, judged in the time zone its keys
//! were made in.

use std::collections::HashMap;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::key::{Period, Template};
use crate::ledger::JobState;

/// Finished periods `status` looks back over for ones with no success.
pub const WINDOW: i64 = 10;

/// Time zones by name, each read once.
#[derive(Default)]
pub struct Zones(HashMap<Option<String>, TimeZone>);

impl Zones {
    pub fn get(&mut self, name: Option<&str>) -> TimeZone {
        self.0
            .entry(name.map(str::to_owned))
            .or_insert_with(|| {
                name.and_then(crate::host::zone_named)
                    .unwrap_or_else(crate::host::zone)
            })
            .clone()
    }
}

/// A job whose template makes a key per period.
pub struct Periodic<'a> {
    pub template: &'a Template,
    pub period: Period,
    pub zone: TimeZone,
    pub host: &'a str,
    /// The job's latest pause, from when to when (none: it holds still):
    /// the periods that start within it are owed nothing, and a job resumed
    /// is owed nothing before a whole period has begun since.
    pub paused: Option<(Timestamp, Option<Timestamp>)>,
}

impl Periodic<'_> {
    /// The start of the period holding the job's first run: no period
    /// before it is owed anything.
    fn first(&self, job: &JobState) -> Option<jiff::Zoned> {
        job.first_run
            .map(|first| self.period.start(&first.to_zoned(self.zone.clone())))
    }

    /// The start of the first period owed a success: the first run's, or
    /// after a resume the first that began after it.
    fn owed_from(&self, job: &JobState) -> Option<jiff::Zoned> {
        let first = self.first(job)?;
        let Some((_, Some(resumed))) = self.paused else {
            return Some(first);
        };
        let resumed = self.period.start(&resumed.to_zoned(self.zone.clone()));
        match self.period.shift(&resumed, 1) {
            Some(next) if next > first => Some(next),
            _ => Some(first),
        }
    }

    /// Whether the period starting at `start` began while the job was
    /// paused.
    fn paused_in(&self, start: &jiff::Zoned) -> bool {
        self.paused.is_some_and(|(since, until)| {
            let start = start.timestamp();
            start >= since && until.is_none_or(|until| start < until)
        })
    }

    fn succeeded(&self, job: &JobState, start: &jiff::Zoned) -> bool {
        self.template
            .expand(start, self.host)
            .is_ok_and(|key| job.ok_keys.contains(&key))
    }

    /// Finished periods of the window with no success.
    pub fn missed(&self, job: &JobState, now: Timestamp) -> u64 {
        let now = now.to_zoned(self.zone.clone());
        let Some(first) = self.first(job) else {
            return 0;
        };
        (1..=WINDOW)
            .filter_map(|back| self.period.shift(&now, -back))
            .filter(|start| *start >= first && !self.succeeded(job, start))
            .filter(|start| !self.paused_in(start))
            .count() as u64
    }

    pub fn overdue(&self, job: &JobState, now: Timestamp) -> bool {
        let now = now.to_zoned(self.zone.clone());
        let (Some(first), Some(previous)) = (self.owed_from(job), self.period.shift(&now, -1))
        else {
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
