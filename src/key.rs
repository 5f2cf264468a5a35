//! Keys: templates like `report-{date}`, their validation and expansion, and
//! the fingerprint that tells whether a key is asked to run a different
//! command.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use sha2::{Digest, Sha256};

use crate::exit::Failure;
pub use crate::period::Period;
use crate::period::{aligned, HOUR_STEPS, MINUTE_STEPS};

/// The longest expanded key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;

const PLACEHOLDERS: &str =
    "{date} {hour} {minute} {week} {month} {year} {host}, {minute/N} or {hour/N}";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placeholder {
    Date,
    /// `{hour}` is `Hour(1)`, `{hour/6}` `Hour(6)`.
    Hour(u8),
    /// `{minute}` is `Minute(1)`, `{minute/5}` `Minute(5)`.
    Minute(u8),
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

/// The placeholder named between braces: `date`, `minute/5`, ...
fn placeholder(name: &str) -> Result<Placeholder, Failure> {
    let (base, step) = match name.split_once('/') {
        Some((base, step)) => (base, Some(step)),
        None => (name, None),
    };
    let stepped = |steps: &[u8], within: &str, whole: &str| -> Result<u8, Failure> {
        let Some(step) = step else { return Ok(1) };
        let listed: Vec<String> = steps[1..].iter().map(u8::to_string).collect();
        match step.parse::<u8>() {
            Ok(step) if steps.contains(&step) => Ok(step),
            _ => Err(usage(format!(
                "{{{name}}}: a step of {base}s must divide {within} ({}), or use {{{whole}}}",
                listed.join(" ")
            ))),
        }
    };
    Ok(match base {
        "minute" => Placeholder::Minute(stepped(&MINUTE_STEPS, "an hour", "hour")?),
        "hour" => Placeholder::Hour(stepped(&HOUR_STEPS, "a day", "date")?),
        _ if step.is_some() => {
            return Err(usage(format!(
                "{{{name}}}: only {{minute/N}} and {{hour/N}} take a step"
            )))
        }
        "date" => Placeholder::Date,
        "week" => Placeholder::Week,
        "month" => Placeholder::Month,
        "year" => Placeholder::Year,
        "host" => Placeholder::Host,
        other => {
            return Err(usage(format!(
            "unknown placeholder {{{other}}}; use one of {PLACEHOLDERS}, or {{{{ }}}} for braces"
        )))
        }
    })
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
            let field = placeholder(&tail[1..end])?;
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
                Piece::Field(Placeholder::Minute(step)) => Some(Period::Minutes(*step)),
                Piece::Field(Placeholder::Hour(step)) => Some(Period::Hours(*step)),
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
                        // A stepped field names its period's start on the
                        // wall clock: `{minute/5}` at 10:07 is 10:05.
                        Placeholder::Hour(step) => format!(
                            "{}T{:02}",
                            now.strftime("%Y-%m-%d"),
                            aligned(now.hour(), *step)
                        ),
                        Placeholder::Minute(step) => format!(
                            "{}:{:02}",
                            now.strftime("%Y-%m-%dT%H"),
                            aligned(now.minute(), *step)
                        ),
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
    fn periods_of_templates() {
        let period = |text: &str| Template::parse(text).unwrap().period();
        assert_eq!(period("b-{date}-{hour}"), Some(Period::Hours(1)));
        assert_eq!(period("b-{month}"), Some(Period::Month));
        assert_eq!(period("b-{host}"), None);
        assert_eq!(period("b-{minute/5}"), Some(Period::Minutes(5)));
        assert_eq!(period("b-{hour/6}-{date}"), Some(Period::Hours(6)));
        assert_eq!(period("b-{hour}-{minute/30}"), Some(Period::Minutes(30)));
    }

    #[test]
    fn steps_name_their_period_start() {
        let at_time = |time: &str, template: &str| {
            Template::parse(template)
                .unwrap()
                .expand(&at(time), "h")
                .unwrap()
        };
        let time = "2026-01-01T10:07:59+01:00[Europe/Paris]";
        assert_eq!(at_time(time, "{minute/5}"), "2026-01-01T10:05");
        assert_eq!(at_time(time, "{minute/15}"), "2026-01-01T10:00");
        assert_eq!(at_time(time, "{minute/1}"), at_time(time, "{minute}"));
        assert_eq!(at_time(time, "{hour/6}"), "2026-01-01T06");
        assert_eq!(at_time(time, "{hour/1}"), "2026-01-01T10");
        let late = "2026-01-01T23:59:00+01:00[Europe/Paris]";
        assert_eq!(
            at_time(late, "{hour/8}-{minute/20}"),
            "2026-01-01T16-2026-01-01T23:40"
        );
    }

    #[test]
    fn rejects_bad_steps() {
        for (bad, says) in [
            ("{minute/7}", "{minute/7}: a step of minutes must divide an hour (2 3 4 5 6 10 12 15 20 30), or use {hour}"),
            ("{minute/0}", "must divide an hour"),
            ("{minute/60}", "must divide an hour"),
            ("{minute/x}", "must divide an hour"),
            ("{hour/5}", "{hour/5}: a step of hours must divide a day (2 3 4 6 8 12), or use {date}"),
            ("{hour/}", "must divide a day"),
            ("{date/2}", "{date/2}: only {minute/N} and {hour/N} take a step"),
        ] {
            let error = expand(bad).unwrap_err();
            assert_eq!(error.code, crate::exit::USAGE, "{bad:?}");
            assert!(error.message.starts_with("invalid --key: "), "{}", error.message);
            assert!(error.message.contains(says), "{bad}: {}", error.message);
        }
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
