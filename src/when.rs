//! Times people type (`--since`, `--until`, a pause's end): a duration,
//! RFC 3339, or local civil time, read in one place.

use anyhow::Result;
use jiff::Timestamp;

use crate::exit::Failure;

/// A time for `--since`/`--until`: a duration (that long ago), RFC 3339
/// (`2026-11-29T08:00:00Z`), or local civil time: a date (`2026-12-01`) or
/// a date and time (`2026-12-01 08:15`, as `list` prints). A bare date
/// given to `--until` means the end of that day.
pub fn parse_time(flag: &str, text: &str, until: bool) -> Result<When> {
    let text = text.trim();
    if let Ok(duration) = humantime::parse_duration(text) {
        let ago = jiff::SignedDuration::try_from(duration).unwrap_or(jiff::SignedDuration::MAX);
        return Ok(When::Ago(ago));
    }
    parse_instant(flag, text, until).map(When::At)
}

/// A time on the command line: an instant, or a duration before now.
#[derive(Debug, Clone, Copy)]
pub enum When {
    At(Timestamp),
    Ago(jiff::SignedDuration),
}

impl When {
    /// The instant, "now" being `now` (the clock that stamps the runs).
    pub fn at(self, now: Timestamp) -> Timestamp {
        match self {
            When::At(time) => time,
            When::Ago(ago) => now.checked_sub(ago).unwrap_or(Timestamp::MIN),
        }
    }
}

fn parse_instant(flag: &str, text: &str, until: bool) -> Result<Timestamp> {
    if let Ok(time) = text.parse::<Timestamp>() {
        return Ok(time);
    }
    let zone = crate::host::zone();
    let bare_date = text.len() == "2026-12-01".len();
    if let Ok(date) = text
        .parse::<jiff::civil::Date>()
        .ok()
        .filter(|_| bare_date)
        .ok_or(())
    {
        let day = if until {
            date.tomorrow().unwrap_or(date)
        } else {
            date
        };
        if let Ok(start) = day.to_zoned(zone.clone()) {
            let start = start.timestamp();
            return Ok(if until && day != date {
                start - jiff::SignedDuration::from_millis(1)
            } else {
                start
            });
        }
    }
    if let Ok(civil) = text.parse::<jiff::civil::DateTime>() {
        if let Ok(zoned) = civil.to_zoned(zone) {
            // `--until 08:15` takes in the whole minute it names (and
            // `08:15:34` the whole second), as `list` prints them.
            let unit = if text.matches(':').count() >= 2 {
                jiff::SignedDuration::from_secs(1)
            } else {
                jiff::SignedDuration::from_secs(60)
            };
            let within = if until && civil.subsec_nanosecond() == 0 {
                unit - jiff::SignedDuration::from_millis(1)
            } else {
                jiff::SignedDuration::ZERO
            };
            return Ok(zoned.timestamp() + within);
        }
    }
    Err(Failure::usage(format!(
        "invalid {flag} '{text}': give a duration like 2h, a date like 2026-12-01, a local time like '2026-12-01 08:15', or RFC 3339 like 2026-11-29T08:00:00Z"
    ))
    .into())
}
