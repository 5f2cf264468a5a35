//! The values flags take: durations, signals, switches, exit codes, byte
//! counts, each with its parser and the error that says how to write it.

use std::ops::RangeInclusive;
use std::str::FromStr;

/// The longest duration any flag takes: deadlines computed from it must fit
/// the clock (a far larger one would overflow it).
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);

/// A signal, by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalNumber(pub i32);

/// Parses a signal: `TERM`, `SIGTERM`, `term` or `15`.
pub fn signal(text: &str) -> Result<SignalNumber, String> {
    const HINT: &str = "write a signal like TERM, INT, HUP, KILL or its number";
    let upper = text.trim().to_ascii_uppercase();
    let named = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    let found = match text.trim().parse::<i32>() {
        Ok(number) => nix::sys::signal::Signal::try_from(number).ok(),
        Err(_) => named.parse::<nix::sys::signal::Signal>().ok(),
    };
    found
        .map(|signal| SignalNumber(signal as i32))
        .ok_or_else(|| format!("{text} is not a signal; {HINT}"))
}

/// Parses a human duration (`500ms`, `30s`, `1h30m`) of at most 100 years.
pub fn duration(text: &str) -> Result<humantime::Duration, String> {
    const HINT: &str = "write a duration like 500ms, 30s, 5m or 1h30m";
    if text.trim_start().starts_with('-') {
        return Err(format!("a duration cannot be negative; {HINT}"));
    }
    let parsed: humantime::Duration = text.parse().map_err(|error| format!("{error}; {HINT}"))?;
    if *parsed > MAX_DURATION {
        return Err(format!("{text} is longer than the 100 years idem accepts"));
    }
    Ok(parsed)
}

/// Parses a count (`--retries`, `--catch-up`, `--limit`): a whole number,
/// 0 or more, said in words a person reads rather than as a type's range.
pub fn count(text: &str) -> Result<u32, String> {
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err("a count cannot be negative; write 0 or more, like 3".to_owned());
    }
    if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text} is not a whole number; write one like 3"));
    }
    trimmed
        .parse()
        .map_err(|_| format!("{text} is more than idem counts to ({})", u32::MAX))
}

/// `--nice N`: a nice value from -20 (first) to 19 (last).
pub fn nice(text: &str) -> Result<i32, String> {
    match text.trim().parse::<i32>() {
        Ok(value) if (-20..=19).contains(&value) => Ok(value),
        _ => Err(format!(
            "{text} is not a nice value; give -20 (first) to 19 (last), like 10"
        )),
    }
}

/// `--ionice CLASS[:LEVEL]`, as ionice(1) names them: the class (1
/// realtime, 2 best-effort, 3 idle) and the level within it (0 first to 7
/// last; 4 where none is given; idle has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoNice {
    pub class: i32,
    pub level: i32,
}

pub fn ionice(text: &str) -> Result<IoNice, String> {
    const HINT: &str = "write idle, best-effort[:0-7] or realtime[:0-7], like best-effort:7";
    let (class, level) = match text.trim().split_once(':') {
        Some((class, level)) => (class, Some(level)),
        None => (text.trim(), None),
    };
    let class = match class.to_ascii_lowercase().as_str() {
        "realtime" | "1" => 1,
        "best-effort" | "2" => 2,
        "idle" | "3" => 3,
        _ => return Err(format!("{text} is not an I/O class; {HINT}")),
    };
    let level = match (class, level) {
        (3, Some(_)) => return Err(format!("{text}: the idle class has no level; {HINT}")),
        (3, None) => 0,
        (_, None) => 4,
        (_, Some(level)) => match level.parse::<i32>() {
            Ok(level) if (0..=7).contains(&level) => level,
            _ => {
                return Err(format!(
                    "{text}: the level is 0 (first) to 7 (last); {HINT}"
                ))
            }
        },
    };
    Ok(IoNice { class, level })
}

/// Parses the value of a switch's environment twin (`IDEM_QUIET_SUCCESS=1`);
/// on the command line the switch takes no value.
pub fn switch(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("write 1 or 0, true or false, yes or no, on or off".to_owned()),
    }
}

/// A set of exit codes: `1,3,10-20`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeSet(pub Vec<RangeInclusive<u8>>);

impl CodeSet {
    pub fn contains(&self, code: u8) -> bool {
        self.0.iter().any(|range| range.contains(&code))
    }
}

impl FromStr for CodeSet {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut ranges = Vec::new();
        for part in text.split(',') {
            let code = |number: &str| {
                number.trim().parse::<u8>().map_err(|_| {
                    format!(
                        "'{part}' is not an exit code from 0 to 255; write codes like 1,3,10-20"
                    )
                })
            };
            let range = match part.split_once('-') {
                Some((low, high)) => {
                    let (low, high) = (code(low)?, code(high)?);
                    if low > high {
                        return Err(format!("range '{part}' runs backwards; write it low-high"));
                    }
                    low..=high
                }
                None => {
                    let single = code(part)?;
                    single..=single
                }
            };
            ranges.push(range);
        }
        Ok(CodeSet(ranges))
    }
}

/// A byte count: `0`, `4096`, `64KiB`, `1MiB`, `64k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// The largest `--capture`: it bounds idem's memory (two streams, twice each).
pub const MAX_CAPTURE: u64 = 1 << 20;

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let unit = &text[digits.len()..];
        let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            _ => {
                return Err(format!(
                    "unknown unit '{unit}'; use a byte count like 65536, 64KiB or 1MiB"
                ))
            }
        };
        let count: u64 = digits.parse().map_err(|_| {
            format!("'{text}' is not a byte count; use a byte count like 65536, 64KiB or 1MiB")
        })?;
        let bytes = count.saturating_mul(multiplier);
        if bytes > MAX_CAPTURE {
            return Err(format!(
                "{text} is more than the 1MiB idem keeps per stream"
            ));
        }
        Ok(ByteSize(bytes))
    }
}
