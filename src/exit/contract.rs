//! The exit codes as `--help`, the man pages and the flags' defaults tell
//! them, held against the constants of `exit.rs` (and `--capture`'s limit
//! against the ledger's). `cli` knows nothing
//! of the crate (so that completions and man pages come from it alone),
//! so its words are checked here rather than built from the constants.

use clap::CommandFactory;

use super::*;
use crate::cli::{self, Cli};

/// The codes a help table lists, in its order: the leading number of each
/// line under `Exit codes:`, with `126/127` as two and `128+N` as 128.
fn listed(table: &str) -> Vec<u8> {
    let section = table
        .split("Exit codes:\n")
        .nth(1)
        .expect("an exit-code table");
    let mut codes = Vec::new();
    for line in section.lines().take_while(|line| line.starts_with("  ")) {
        let word = line.split_whitespace().next().unwrap_or_default();
        for part in word.trim_end_matches("+N").split('/') {
            if let Ok(code) = part.parse() {
                codes.push(code);
            }
        }
    }
    codes
}

#[test]
fn the_help_tables_list_the_codes_of_exit_rs() {
    let run = [
        SUCCESS,
        USAGE,
        FINGERPRINT_MISMATCH,
        ABANDONED,
        CONFLICT,
        TIMED_OUT,
        IDEM_FAILED,
        CANNOT_EXECUTE,
        NOT_FOUND_COMMAND,
        SIGNAL_BASE,
    ];
    assert_eq!(listed(cli::EXIT_CODES_HELP), run);
    let status = [SUCCESS, NOT_FOUND, USAGE, IDEM_FAILED];
    assert_eq!(listed(cli::STATUS_EXIT_CODES_HELP), status);
    let ledger = [SUCCESS, NOT_FOUND, USAGE, CONFLICT, IDEM_FAILED];
    assert_eq!(listed(cli::LEDGER_EXIT_CODES_HELP), ledger);
    let deliver = [SUCCESS, NOT_FOUND, USAGE, IDEM_FAILED];
    assert_eq!(listed(cli::DELIVER_EXIT_CODES_HELP), deliver);
    let pause = [SUCCESS, NOT_FOUND, USAGE, IDEM_FAILED];
    assert_eq!(listed(cli::PAUSE_EXIT_CODES_HELP), pause);
}

/// The default of `idem run`'s flag `id`, as clap shows it.
fn run_default(id: &str) -> String {
    let command = Cli::command();
    let run = command.find_subcommand("run").expect("idem run");
    let arg = run
        .get_arguments()
        .find(|arg| arg.get_id() == id)
        .unwrap_or_else(|| panic!("no flag {id}"));
    let values: Vec<_> = arg.get_default_values().iter().collect();
    assert_eq!(values.len(), 1, "{id}: {values:?}");
    values[0].to_string_lossy().into_owned()
}

#[test]
fn the_flags_defaults_are_the_codes_of_exit_rs() {
    assert_eq!(run_default("conflict_exit_code"), CONFLICT.to_string());
    assert_eq!(run_default("skipped_exit_code"), SUCCESS.to_string());
    assert_eq!(run_default("paused_exit_code"), SUCCESS.to_string());
    assert_eq!(run_default("blocked_exit_code"), SUCCESS.to_string());
    assert_eq!(
        run_default("no_retry_on"),
        format!("{CANNOT_EXECUTE},{NOT_FOUND_COMMAND}")
    );
}

/// `--capture`'s limit is the longest tail import keeps: a run moved
/// between ledgers keeps the output it had.
#[test]
fn import_keeps_as_much_as_the_largest_capture() {
    assert_eq!(crate::ledger::line::MAX_CAPTURE, cli::MAX_CAPTURE);
}
