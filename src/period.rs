//! Periods: how often a key template makes a new key (`{date}` a day,
//! `{minute/5}` every five minutes), where each period starts, and how a
//! period is told to monitors that keep a schedule.
//!
//! A period of N minutes or hours is aligned on the hour or the day, as
//! crontab's `*/N` is: N must divide an hour (minutes) or a day (hours), so
//! that every period has the same length and the same name every day.

/// The steps a `{minute/N}` may take: the divisors of an hour.
pub const MINUTE_STEPS: [u8; 11] = [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30];
/// The steps an `{hour/N}` may take: the divisors of a day.
pub const HOUR_STEPS: [u8; 7] = [1, 2, 3, 4, 6, 8, 12];

/// How often a periodic template makes a new key, finest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Period {
    /// Every N minutes, N in [`MINUTE_STEPS`].
    Minutes(u8),
    /// Every N hours, N in [`HOUR_STEPS`].
    Hours(u8),
    Day,
    Week,
    Month,
    Year,
}

/// The names `status --json` gives a period, one per step allowed, so a
/// name is a plain `&'static str` like the others.
const MINUTE_NAMES: [&str; 11] = [
    "minute",
    "minute/2",
    "minute/3",
    "minute/4",
    "minute/5",
    "minute/6",
    "minute/10",
    "minute/12",
    "minute/15",
    "minute/20",
    "minute/30",
];
const HOUR_NAMES: [&str; 7] = [
    "hour", "hour/2", "hour/3", "hour/4", "hour/6", "hour/8", "hour/12",
];

fn named(steps: &[u8], names: &[&'static str], step: u8) -> &'static str {
    steps
        .iter()
        .position(|allowed| *allowed == step)
        .and_then(|at| names.get(at).copied())
        .unwrap_or(names[0])
}

/// `value` brought down to a multiple of `step` (a step of 0 is 1).
pub(crate) fn aligned(value: i8, step: u8) -> i8 {
    let step = i8::try_from(step.max(1)).unwrap_or(1);
    value - value.rem_euclid(step)
}

impl Period {
    /// The placeholder's name, as `status --json` says it: `minute`,
    /// `minute/5`, `hour/6`, `date`, ...
    pub fn name(self) -> &'static str {
        match self {
            Period::Minutes(step) => named(&MINUTE_STEPS, &MINUTE_NAMES, step),
            Period::Hours(step) => named(&HOUR_STEPS, &HOUR_NAMES, step),
            Period::Day => "date",
            Period::Week => "week",
            Period::Month => "month",
            Period::Year => "year",
        }
    }

    /// Five-field crontab of the period's starts: `*/5 * * * *` every five
    /// minutes, `0 */6 * * *` every six hours, `0 0 * * *` daily.
    pub fn crontab(self) -> String {
        match self {
            Period::Minutes(1) => "* * * * *".to_owned(),
            Period::Minutes(step) => format!("*/{step} * * * *"),
            Period::Hours(1) => "0 * * * *".to_owned(),
            Period::Hours(step) => format!("0 */{step} * * *"),
            Period::Day => "0 0 * * *".to_owned(),
            Period::Week => "0 0 * * 1".to_owned(),
            Period::Month => "0 0 1 * *".to_owned(),
            Period::Year => "0 0 1 1 *".to_owned(),
        }
    }

    /// The period's usual length in seconds (a month as 30 days, a year
    /// as 365), for a monitor's margins.
    pub fn seconds(self) -> u64 {
        match self {
            Period::Minutes(step) => u64::from(step) * 60,
            Period::Hours(step) => u64::from(step) * 3600,
            Period::Day => 86_400,
            Period::Week => 7 * 86_400,
            Period::Month => 30 * 86_400,
            Period::Year => 365 * 86_400,
        }
    }

    /// The start of the period holding `time`, in its zone (a day starts
    /// at its first instant, even when a DST change skips midnight).
    pub fn start(self, time: &jiff::Zoned) -> jiff::Zoned {
        let day = || time.start_of_day().unwrap_or_else(|_| time.clone());
        let on = |date: jiff::civil::Date| {
            date.to_zoned(time.time_zone().clone())
                .unwrap_or_else(|_| time.clone())
        };
        match self {
            Period::Minutes(step) => time
                .with()
                .minute(aligned(time.minute(), step))
                .second(0)
                .subsec_nanosecond(0)
                .build()
                .unwrap_or_else(|_| time.clone()),
            Period::Hours(step) => time
                .with()
                .hour(aligned(time.hour(), step))
                .minute(0)
                .second(0)
                .subsec_nanosecond(0)
                .build()
                .unwrap_or_else(|_| time.clone()),
            Period::Day => day(),
            Period::Week => {
                let back = i64::from(time.weekday().to_monday_zero_offset());
                on(time
                    .date()
                    .checked_sub(jiff::Span::new().days(back))
                    .unwrap_or(time.date()))
            }
            Period::Month => on(time.date().first_of_month()),
            Period::Year => on(time.date().first_of_year()),
        }
    }

    /// The start of the period `count` periods after the one holding
    /// `time` (before it when negative).
    pub fn shift(self, time: &jiff::Zoned, count: i64) -> Option<jiff::Zoned> {
        let start = self.start(time);
        let span = match self {
            Period::Minutes(step) => jiff::Span::new().try_minutes(count * i64::from(step)),
            Period::Hours(1) => jiff::Span::new().try_hours(count),
            // Several hours are counted on the wall clock: across the
            // change back from summer time, six real hours after midnight
            // are 05:00, still in the first period.
            Period::Hours(step) => return self.shift_civil(&start, count * i64::from(step)),
            Period::Day => jiff::Span::new().try_days(count),
            Period::Week => jiff::Span::new().try_weeks(count),
            Period::Month => jiff::Span::new().try_months(count),
            Period::Year => jiff::Span::new().try_years(count),
        }
        .ok()?;
        // Calendar units keep the wall clock; a start is re-found after,
        // in case a DST change moved it.
        Some(self.start(&start.checked_add(span).ok()?))
    }

    /// `start` moved by `hours` on the wall clock. A wall time that a DST
    /// change skips is taken on the side it was moved towards, so that a
    /// step back never lands after where it started.
    fn shift_civil(self, start: &jiff::Zoned, hours: i64) -> Option<jiff::Zoned> {
        let wall = start
            .datetime()
            .checked_add(jiff::Span::new().try_hours(hours).ok()?)
            .ok()?;
        let ambiguous = start.time_zone().to_ambiguous_zoned(wall);
        let moved = if hours < 0 {
            ambiguous.earlier()
        } else {
            ambiguous.later()
        }
        .ok()?;
        Some(self.start(&moved))
    }

    /// The starts of the periods from the one holding `from` to the one
    /// holding `to`, oldest first; each strictly after the one before.
    pub fn starts(self, from: &jiff::Zoned, to: &jiff::Zoned) -> Vec<jiff::Zoned> {
        let mut starts = Vec::new();
        let mut next = Some(self.start(from));
        while let Some(start) = next.take() {
            if start > *to {
                break;
            }
            // A DST change may bring a step back onto the period it left:
            // stepping on from further ahead always moves.
            next = (1..=3)
                .filter_map(|count| self.shift(&start, count))
                .find(|after| *after > start);
            starts.push(start);
        }
        starts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> jiff::Zoned {
        text.parse().expect("a valid zoned time")
    }

    fn text(time: jiff::Zoned) -> String {
        time.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
    }

    #[test]
    fn periods_start_and_shift() {
        let now = at("2026-03-04T23:05:09+01:00[Europe/Paris]");
        assert_eq!(text(Period::Day.start(&now)), "2026-03-04T00:00:00+01:00");
        assert_eq!(text(Period::Week.start(&now)), "2026-03-02T00:00:00+01:00");
        assert_eq!(text(Period::Month.start(&now)), "2026-03-01T00:00:00+01:00");
        assert_eq!(
            text(Period::Hours(1).start(&now)),
            "2026-03-04T23:00:00+01:00"
        );
        assert_eq!(
            text(Period::Day.shift(&now, -4).unwrap()),
            "2026-02-28T00:00:00+01:00"
        );
        // Across the change to summer time, a day still starts at midnight.
        let summer = at("2026-03-30T12:00:00+02:00[Europe/Paris]");
        assert_eq!(
            text(Period::Day.shift(&summer, -1).unwrap()),
            "2026-03-29T00:00:00+01:00"
        );
    }

    #[test]
    fn steps_align_on_the_hour_and_the_day() {
        let now = at("2026-03-04T23:07:09+01:00[Europe/Paris]");
        assert_eq!(
            text(Period::Minutes(5).start(&now)),
            "2026-03-04T23:05:00+01:00"
        );
        assert_eq!(
            text(Period::Minutes(5).shift(&now, 1).unwrap()),
            "2026-03-04T23:10:00+01:00"
        );
        assert_eq!(
            text(Period::Minutes(15).shift(&now, -2).unwrap()),
            "2026-03-04T22:30:00+01:00"
        );
        assert_eq!(
            text(Period::Hours(6).start(&now)),
            "2026-03-04T18:00:00+01:00"
        );
        assert_eq!(
            text(Period::Hours(6).shift(&now, 1).unwrap()),
            "2026-03-05T00:00:00+01:00"
        );
        assert!(Period::Minutes(5) < Period::Minutes(10));
        assert!(Period::Minutes(30) < Period::Hours(1));
        assert_eq!(Period::Minutes(5).name(), "minute/5");
        assert_eq!(Period::Hours(1).name(), "hour");
        assert_eq!(Period::Minutes(5).crontab(), "*/5 * * * *");
        assert_eq!(Period::Hours(6).crontab(), "0 */6 * * *");
        assert_eq!(Period::Minutes(1).crontab(), "* * * * *");
        assert_eq!(Period::Minutes(5).seconds(), 300);
    }

    #[test]
    fn six_hours_across_both_changes_of_summer_time() {
        // Back to winter time (02:00 to 03:00 twice): four periods a day.
        let from = at("2026-10-25T00:00:00+02:00[Europe/Paris]");
        let to = at("2026-10-25T23:59:00+01:00[Europe/Paris]");
        let hours: Vec<String> = Period::Hours(6)
            .starts(&from, &to)
            .into_iter()
            .map(text)
            .collect();
        assert_eq!(
            hours,
            [
                "2026-10-25T00:00:00+02:00",
                "2026-10-25T06:00:00+01:00",
                "2026-10-25T12:00:00+01:00",
                "2026-10-25T18:00:00+01:00"
            ]
        );
        // Two-hour periods on the day summer time starts: the 02:00 one
        // starts at 03:00, and a step back from it reaches midnight.
        let summer = at("2026-03-29T03:30:00+02:00[Europe/Paris]");
        let start = Period::Hours(2).start(&summer);
        assert_eq!(text(start.clone()), "2026-03-29T03:00:00+02:00");
        assert_eq!(
            text(Period::Hours(2).shift(&start, -1).unwrap()),
            "2026-03-29T00:00:00+01:00"
        );
    }

    #[test]
    fn starts_cover_the_bounds_oldest_first() {
        let from = at("2026-03-04T10:07:00+00:00[UTC]");
        let to = at("2026-03-04T10:20:00+00:00[UTC]");
        let minutes: Vec<String> = Period::Minutes(5)
            .starts(&from, &to)
            .into_iter()
            .map(|start| start.strftime("%H:%M").to_string())
            .collect();
        assert_eq!(minutes, ["10:05", "10:10", "10:15", "10:20"]);
    }
}
