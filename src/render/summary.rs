//! The summaries of `ledger forget` and `ledger prune`: idem's own lines
//! on stdout, which `-q` silences.

use jiff::Timestamp;

use super::{count, printable};
use crate::ledger::{ForgottenKey, PruneReport};

/// What `forget` did (or, on a dry run, would do) to one key it knows.
pub fn forgotten(key: &ForgottenKey, purge: bool, dry_run: bool) -> String {
    let verb = match (dry_run, purge) {
        (true, true) => "would purge",
        (true, false) => "would forget",
        (false, true) => "purged",
        (false, false) => "forgot",
    };
    let runs = count(key.runs, "run");
    let was = match (key.head, key.abandoned) {
        (_, true) => "was running, its owner gone: marked abandoned".to_owned(),
        (Some(status), false) => format!("was {}", status.as_str()),
        (None, false) => "was forgotten already".to_owned(),
    };
    let next = if purge {
        format!("{was}; {runs} removed; it runs next time")
    } else {
        format!("{was}; it runs next time ({runs} kept)")
    };
    format!("{verb} {}: {next}", printable(&key.key))
}

/// What `prune` dropped (or would drop) of the runs that finished before
/// `before`.
pub fn pruned(report: &PruneReport, before: Timestamp, dry_run: bool) -> String {
    let keys = match report.keys {
        0 => String::new(),
        n => format!(", {}", count(n, "forgotten key")),
    };
    format!(
        "{} {} ({}, {} of output{keys}) that finished before {}; every key's deciding run stays",
        if dry_run { "would prune" } else { "pruned" },
        count(report.runs, "run"),
        count(report.attempts, "attempt"),
        super::human_bytes(report.output_bytes),
        super::local(before, &crate::host::zone()),
    )
}
