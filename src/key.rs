//! Keys: templates like `report-{date}`, their validation and expansion, and
//! the fingerprint that tells whether a key is asked to run a different
//! command.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use sha2::{Digest, Sha256};

use crate::exit::Failure;

/// The longest expanded key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;

const PLACEHOLDERS: &str = "{date} {hour} {minute} {week} {month} {year} {host}";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placeholder {
    Date,
    Hour,
    Minute,
    Week,
    Month,
    Year,
    Host,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(Placeholder),
}

/// A parsed `--key` template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

fn usage(message: String) -> Failure {
    Failure::usage(format!("invalid --key: {message}"))
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, Failure> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find(['{', '}']) {
            literal.push_str(&rest[..at]);
            let tail = &rest[at..];
            if tail.starts_with("{{") || tail.starts_with("}}") {
                literal.push_str(&tail[..1]);
                rest = &tail[2..];
                continue;
            }
            if tail.starts_with('}') {
                return Err(usage(format!(
                    "lone '}}' in '{text}'; write }}}} for a literal brace"
                )));
            }
            let Some(end) = tail.find('}') else {
                return Err(usage(format!(
                    "unclosed '{{' in '{text}'; write {{{{ for a literal brace"
                )));
            };
            let field = match &tail[1..end] {
                "date" => Placeholder::Date,
                "hour" => Placeholder::Hour,
                "minute" => Placeholder::Minute,
                "week" => Placeholder::Week,
                "month" => Placeholder::Month,
                "year" => Placeholder::Year,
                "host" => Placeholder::Host,
                other => {
                    return Err(usage(format!(
                        "unknown placeholder {{{other}}}; use one of {PLACEHOLDERS}, or {{{{ }}}} for braces"
                    )))
                }
            };
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Field(field));
            rest = &tail[end + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template(pieces))
    }

    /// The job's period: the template's finest time placeholder.
    pub fn period(&self) -> Option<Period> {
        self.0
            .iter()
            .filter_map(|piece| match piece {
                Piece::Field(Placeholder::Minute) => Some(Period::Minute),
                Piece::Field(Placeholder::Hour) => Some(Period::Hour),
                Piece::Field(Placeholder::Date) => Some(Period::Day),
                Piece::Field(Placeholder::Week) => Some(Period::Week),
                Piece::Field(Placeholder::Month) => Some(Period::Month),
                Piece::Field(Placeholder::Year) => Some(Period::Year),
                _ => None,
            })
            .min()
    }

    /// True when expansion needs the clock (and so the time-zone database).
    pub fn needs_time(&self) -> bool {
        self.0
            .iter()
            .any(|piece| matches!(piece, Piece::Field(field) if *field != Placeholder::Host))
    }

    /// Expands the template at the current local time, then validates it.
    pub fn expand_now(&self) -> Result<String, Failure> {
        // Only a template with a time placeholder pays for the time zone.
        let now = if self.needs_time() {
            crate::host::now()
        } else {
            jiff::Timestamp::UNIX_EPOCH.to_zoned(jiff::tz::TimeZone::UTC)
        };
        self.expand(&now, &crate::host::name())
    }

    /// Expands the template at `now` on `host`, then validates the result.
    pub fn expand(&self, now: &jiff::Zoned, host: &str) -> Result<String, Failure> {
        let mut key = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(text) => key.push_str(text),
                Piece::Field(Placeholder::Host) => key.push_str(host),
                Piece::Field(field) => {
                    let text = match field {
                        Placeholder::Date => now.strftime("%Y-%m-%d").to_string(),
                        Placeholder::Hour => now.strftime("%Y-%m-%dT%H").to_string(),
                        Placeholder::Minute => now.strftime("%Y-%m-%dT%H:%M").to_string(),
                        Placeholder::Week => {
                            let week = now.date().iso_week_date();
                            format!("{:04}-W{:02}", week.year(), week.week())
                        }
                        Placeholder::Month => now.strftime("%Y-%m").to_string(),
                        Placeholder::Year => now.strftime("%Y").to_string(),
                        Placeholder::Host => unreachable!("handled above"),
                    };
                    key.push_str(&text);
                }
            }
        }
        validate(&key)?;
        Ok(key)
    }
}

/// How often a periodic template makes a new key, finest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Period {
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Period {
    /// The placeholder's name, as `status --json` says it.
    pub fn name(self) -> &'static str {
        match self {
            Period::Minute => "minute",
            Period::Hour => "hour",
            Period::Day => "date",
            Period::Week => "week",
            Period::Month => "month",
            Period::Year => "year",
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
            Period::Minute => time
                .with()
                .second(0)
                .subsec_nanosecond(0)
                .build()
                .unwrap_or_else(|_| time.clone()),
            Period::Hour => time
                .with()
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
            Period::Minute => jiff::Span::new().try_minutes(count),
            Period::Hour => jiff::Span::new().try_hours(count),
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
}

/// Checks an expanded key (also used for keys typed to `ledger show`).
pub fn validate(key: &str) -> Result<(), Failure> {
    if key.is_empty() {
        return Err(usage(
            "the key is empty; give a name like nightly-backup".into(),
        ));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(usage(format!(
            "the key is {} bytes, more than the {MAX_KEY_BYTES} allowed; use a shorter key",
            key.len()
        )));
    }
    if let Some(bad) = key.chars().find(|c| is_hidden(*c)) {
        let kind = if bad.is_control() {
            "control"
        } else {
            "invisible format"
        };
        return Err(usage(format!(
            "the key holds the {kind} character U+{:04X}; use printable characters",
            u32::from(bad)
        )));
    }
    Ok(())
}

/// Whether `c` acts on the text around it rather than being seen: control
/// characters (C0, DEL, C1), Unicode's format characters (category Cf:
/// bidirectional overrides and isolates, zero-width characters, the byte
/// order mark, ...) and the line and paragraph separators. A right-to-left
/// override makes a key read as another, an escape sequence retitles or
/// clears the reader's terminal.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            u32::from(c),
            0xAD | 0x600..=0x605
                | 0x61C
                | 0x6DD
                | 0x70F
                | 0x890..=0x891
                | 0x8E2
                | 0x180E
                | 0x200B..=0x200F
                | 0x2028..=0x202E
                | 0x2060..=0x2064
                | 0x2066..=0x206F
                | 0xFEFF
                | 0xFFF9..=0xFFFB
                | 0x110BD
                | 0x110CD
                | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3
                | 0x1D173..=0x1D17A
                | 0xE0001
                | 0xE0020..=0xE007F
        )
}

/// The fingerprint of a command: SHA-256 over a versioned, length-prefixed
/// encoding of the `--shell` flag and the argv bytes.
///
/// It is persisted (implicitly, through the stored argv), so it must never
/// change between releases: a test pins one value.
pub fn fingerprint(command: &[OsString], shell: bool) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(b"idem-fingerprint-v1\0");
    hash.update([u8::from(shell)]);
    for arg in command {
        let bytes = arg.as_bytes();
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    }
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> jiff::Zoned {
        text.parse().expect("a valid zoned time")
    }

    fn expand(template: &str) -> Result<String, Failure> {
        let now = at("2026-01-01T23:05:09+01:00[Europe/Paris]");
        Template::parse(template)?.expand(&now, "web-1")
    }

    #[test]
    fn expands_every_placeholder() {
        assert_eq!(expand("b-{date}").unwrap(), "b-2026-01-01");
        assert_eq!(expand("{hour}").unwrap(), "2026-01-01T23");
        assert_eq!(expand("{minute}").unwrap(), "2026-01-01T23:05");
        // 2026-01-01 is a Thursday, so it belongs to ISO week 1 of 2026.
        assert_eq!(expand("{week}").unwrap(), "2026-W01");
        assert_eq!(expand("{month}/{year}").unwrap(), "2026-01/2026");
        assert_eq!(expand("{host}:x").unwrap(), "web-1:x");
    }

    #[test]
    fn iso_week_crosses_years() {
        let now = at("2027-01-01T00:00:00+00:00[UTC]");
        let key = Template::parse("{week}")
            .unwrap()
            .expand(&now, "h")
            .unwrap();
        assert_eq!(key, "2026-W53");
    }

    #[test]
    fn periods_start_and_shift() {
        let now = at("2026-03-04T23:05:09+01:00[Europe/Paris]");
        let period = |text: &str| Template::parse(text).unwrap().period();
        assert_eq!(period("b-{date}-{hour}"), Some(Period::Hour));
        assert_eq!(period("b-{month}"), Some(Period::Month));
        assert_eq!(period("b-{host}"), None);
        let text = |time: jiff::Zoned| time.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string();
        assert_eq!(text(Period::Day.start(&now)), "2026-03-04T00:00:00+01:00");
        assert_eq!(text(Period::Week.start(&now)), "2026-03-02T00:00:00+01:00");
        assert_eq!(text(Period::Month.start(&now)), "2026-03-01T00:00:00+01:00");
        assert_eq!(text(Period::Hour.start(&now)), "2026-03-04T23:00:00+01:00");
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
    fn braces_escape() {
        assert_eq!(expand("a{{b}}c").unwrap(), "a{b}c");
        assert_eq!(expand("{{date}}").unwrap(), "{date}");
    }

    #[test]
    fn rejects_bad_templates() {
        for bad in ["{nope}", "a{date", "a}b", "", "x\ty", "{}"] {
            let error = expand(bad).unwrap_err();
            assert_eq!(error.code, crate::exit::USAGE, "{bad:?}");
            assert!(
                error.message.starts_with("invalid --key"),
                "{}",
                error.message
            );
        }
        for hidden in [
            "a\u{202e}b",
            "a\u{2066}b",
            "a\u{200b}b",
            "\u{feff}a",
            "a\u{2028}b",
        ] {
            let error = expand(hidden).unwrap_err();
            assert!(error.message.contains("U+"), "{}", error.message);
            assert!(!error.message.contains(hidden), "{}", error.message);
        }
        assert!(expand("café-日本-🦀").is_ok());
        assert!(expand(&"k".repeat(512)).is_ok());
        assert!(expand(&"k".repeat(513)).is_err());
    }

    #[test]
    fn fingerprint_is_pinned() {
        let command: Vec<OsString> = vec!["echo".into(), "hello world".into()];
        let hex: String = fingerprint(&command, false)
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        assert_eq!(
            hex,
            "0bb5dcb0802effdee7b47a6f817df27c34c905e3580c433fb72968eec23b8a44"
        );
        assert_ne!(fingerprint(&command, false), fingerprint(&command, true));
        let joined: Vec<OsString> = vec!["echo hello".into(), "world".into()];
        assert_ne!(fingerprint(&command, false), fingerprint(&joined, false));
    }
}
