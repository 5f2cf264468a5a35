//! Runs and attempts for people (tables) and for scripts (JSON).

use std::os::unix::ffi::OsStrExt;

use comfy_table::{presets, ContentArrangement, Table};
use jiff::Timestamp;
use serde_json::{json, Value};

use crate::ledger::{Attempt, Run};

/// A timestamp as RFC 3339 UTC with milliseconds.
pub fn rfc3339(time: Timestamp) -> String {
    format!("{time:.3}")
}

/// Argv for display: lossy where an argument is not UTF-8.
pub fn command_words(run: &Run) -> Vec<String> {
    run.command
        .iter()
        .map(|arg| String::from_utf8_lossy(arg.as_bytes()).into_owned())
        .collect()
}

pub fn duration_ms(run: &Run) -> Option<i64> {
    run.finished_at
        .map(|end| end.as_millisecond() - run.started_at.as_millisecond())
}

/// The SPEC's fields of a run.
pub fn run_json(run: &Run) -> Value {
    json!({
        "key": run.key,
        "run_id": run.run_id.to_string(),
        "status": run.status.as_str(),
        "exit_code": run.exit_code,
        "signal": run.signal,
        "attempts": run.attempts,
        "started_at": rfc3339(run.started_at),
        "finished_at": run.finished_at.map(rfc3339),
        "duration_ms": duration_ms(run),
        "host": run.host,
        "pid": run.pid,
        "command": command_words(run),
        "shell": run.shell,
        "recovered": run.recovered,
    })
}

pub fn attempt_json(attempt: &Attempt) -> Value {
    json!({
        "attempt": attempt.number,
        "exit_code": attempt.exit_code,
        "signal": attempt.signal,
        "timed_out": attempt.timed_out,
        "started_at": attempt.started_at.map(rfc3339),
        "finished_at": attempt.finished_at.map(rfc3339),
        // Output is bytes; JSON strings must be Unicode, so invalid
        // sequences become U+FFFD.
        "stdout_tail": String::from_utf8_lossy(&attempt.stdout_tail),
        "stderr_tail": String::from_utf8_lossy(&attempt.stderr_tail),
    })
}

/// A command line for a table cell, shortened to `width` characters.
pub fn short_command(run: &Run, width: usize) -> String {
    let mut text = command_words(run).join(" ");
    if run.shell {
        text = format!("sh -c '{text}'");
    }
    if text.chars().count() > width {
        text = text
            .chars()
            .take(width.saturating_sub(1))
            .collect::<String>()
            + "…";
    }
    text
}

/// A duration in milliseconds for people.
pub fn human_ms(ms: Option<i64>) -> String {
    match ms {
        None => "-".into(),
        Some(ms) if ms < 1000 => format!("{ms}ms"),
        Some(ms) if ms < 60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        Some(ms) => {
            let secs = ms / 1000;
            format!("{}m{:02}s", secs / 60, secs % 60)
        }
    }
}

/// Local time for a table.
pub fn local(time: Timestamp, zone: &jiff::tz::TimeZone) -> String {
    time.to_zoned(zone.clone())
        .strftime("%Y-%m-%d %H:%M:%S")
        .to_string()
}

pub fn runs_table(runs: &[Run]) -> Table {
    let zone = jiff::tz::TimeZone::system();
    let mut table = Table::new();
    table
        .load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header([
            "KEY", "STATUS", "EXIT", "ATTEMPTS", "STARTED", "DURATION", "HOST", "COMMAND",
        ]);
    for run in runs {
        table.add_row([
            run.key.clone(),
            run.status.as_str().to_owned(),
            run.exit_code.map_or("-".into(), |code| code.to_string()),
            run.attempts.to_string(),
            local(run.started_at, &zone),
            human_ms(duration_ms(run)),
            run.host.clone(),
            short_command(run, 40),
        ]);
    }
    table
}
