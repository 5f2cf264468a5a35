//! The parsers of durations, exit-code lists, byte sizes, key templates
//! and whole command lines: for any text, what they document, never a
//! panic.

use std::str::FromStr;

use clap::error::ErrorKind;
use clap::Parser;
use idem::cli::{ByteSize, Cli, CodeSet, MAX_CAPTURE};
use idem::key::{self, Template};
use proptest::prelude::*;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    let mut argv = vec!["idem"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv)
}

/// The codes a list such as `1,3,10-20` names, read as its help says
/// (comma-separated codes and low-high ranges of 0 to 255, blanks around
/// a number allowed); `None` for text that is no such list.
fn codes_named(text: &str) -> Option<[bool; 256]> {
    let mut named = [false; 256];
    for item in text.split(',') {
        let code = |number: &str| number.trim().parse::<u8>().ok();
        let (low, high) = match item.split_once('-') {
            Some((low, high)) => (code(low)?, code(high)?),
            None => (code(item)?, code(item)?),
        };
        if low > high {
            return None;
        }
        for code in low..=high {
            named[usize::from(code)] = true;
        }
    }
    Some(named)
}

/// Text that looks like what people type, plus anything at all.
fn texty() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9a-zA-Z ,.+-]{0,24}",
        "([0-9]{1,22}(ns|us|ms|s|m|h|d|w|M|y|sec|min|hour|day|week|month|year)[ ]?){0,6}",
        "([0-9]{1,4}(-[0-9]{1,4})?,?){0,6}",
        "[0-9]{0,22}(|b|k|kb|kib|m|mb|mib|g|KiB|MiB|GiB)",
        "([a-z{}]|\\{(date|hour|minute|week|month|year|host|x)\\}|\\{\\{|\\}\\}){0,12}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn durations_never_panic(text in texty()) {
        for flag in ["--backoff", "--timeout", "--ttl", "--wait", "--lease", "--kill-after", "--max-backoff"] {
            match parse(&["run", "--key", "k", flag, &text, "--", "true"]) {
                Ok(_) => {
                    let duration = humantime::parse_duration(&text);
                    prop_assert!(duration.is_ok_and(|d| d <= idem::cli::MAX_DURATION), "{text:?}");
                }
                Err(error) => {
                    let message = error.to_string();
                    prop_assert!(message.contains(flag) || message.contains("unexpected argument"), "{message}");
                }
            }
        }
    }

    #[test]
    fn code_lists_name_their_codes_or_say_how_to_write_them(text in texty()) {
        match (CodeSet::from_str(&text), codes_named(&text)) {
            (Ok(codes), Some(named)) => {
                for range in &codes.0 {
                    prop_assert!(range.start() <= range.end());
                }
                for code in 0..=255u8 {
                    prop_assert_eq!(codes.contains(code), named[usize::from(code)], "{:?}: code {}", text, code);
                }
            }
            (Err(error), None) => {
                prop_assert!(!error.contains('\n'));
                prop_assert!(error.contains("1,3,10-20") || error.contains("low-high"), "{error}");
            }
            (parsed, named) => {
                prop_assert!(false, "{text:?} parsed as {parsed:?}, but names {:?}", named.map(|named| named.iter().filter(|in_it| **in_it).count()));
            }
        }
        // On the command line: taken as that list, or a usage error (exit
        // 2) that names the flag.
        match parse(&["run", "--key", "k", "--retry-on", &text, "--", "true"]) {
            Ok(_) => prop_assert!(codes_named(&text).is_some(), "{text:?}"),
            Err(error) => {
                prop_assert_eq!(error.exit_code(), 2, "{}", error);
                let message = error.to_string();
                prop_assert!(message.contains("--retry-on") || message.contains("unexpected argument"), "{message}");
            }
        }
    }

    #[test]
    fn code_lists_round_trip(ranges in proptest::collection::vec((0u8..=255, 0u8..=255), 1..8)) {
        let text: Vec<String> = ranges
            .iter()
            .map(|(a, b)| {
                let (low, high) = (a.min(b), a.max(b));
                if low == high { low.to_string() } else { format!("{low}-{high}") }
            })
            .collect();
        let codes = CodeSet::from_str(&text.join(",")).unwrap();
        for code in 0..=255u8 {
            let inside = ranges.iter().any(|(a, b)| (*a.min(b)..=*a.max(b)).contains(&code));
            prop_assert_eq!(codes.contains(code), inside);
        }
    }

    #[test]
    fn byte_sizes_never_panic(text in texty()) {
        match ByteSize::from_str(&text) {
            Ok(size) => prop_assert!(size.0 <= MAX_CAPTURE),
            Err(error) => prop_assert!(!error.contains('\n')),
        }
    }

    #[test]
    fn byte_sizes_mean_what_they_say(count in 0u64..=1024, unit in 0usize..4) {
        let (suffix, multiplier) = [("", 1), ("b", 1), ("KiB", 1 << 10), ("k", 1 << 10)][unit];
        let parsed = ByteSize::from_str(&format!("{count}{suffix}")).unwrap();
        prop_assert_eq!(parsed.0, count * multiplier);
    }

    #[test]
    fn key_templates_never_panic(text in texty()) {
        let now: jiff::Zoned = "2026-12-31T23:59:59+14:00[Pacific/Kiritimati]".parse().unwrap();
        match Template::parse(&text) {
            Ok(template) => match template.expand(&now, "host-1") {
                Ok(key) => prop_assert!(key::validate(&key).is_ok()),
                Err(error) => prop_assert!(error.message.starts_with("invalid --key")),
            },
            Err(error) => {
                prop_assert_eq!(error.code, idem::exit::USAGE);
                prop_assert!(error.message.starts_with("invalid --key"));
                prop_assert!(!error.message.contains('\n'));
            }
        }
    }

    #[test]
    fn plain_keys_are_kept_as_they_are(text in "[a-zA-Z0-9 _./:@-]{1,200}") {
        let now = jiff::Timestamp::UNIX_EPOCH.to_zoned(jiff::tz::TimeZone::UTC);
        let key = Template::parse(&text).unwrap().expand(&now, "h").unwrap();
        prop_assert_eq!(key, text);
    }

    #[test]
    fn any_command_line_parses_or_is_a_usage_error(args in proptest::collection::vec(texty(), 0..8)) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut run = vec!["run"];
        run.extend_from_slice(&args);
        for argv in [&args, &run] {
            if let Err(error) = parse(argv) {
                // Help and version are printed and exit 0; anything else
                // is a usage error, exit 2, with something to say.
                let shown = matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
                prop_assert_eq!(error.exit_code(), if shown { 0 } else { 2 }, "{:?}: {}", argv, error);
                prop_assert!(!error.to_string().trim().is_empty(), "{argv:?}");
            }
        }
    }
}
