//! `ledger export`'s side of the line: a run and its attempts written as
//! [`crate::render::json`]'s types, with the bytes that are not text
//! base64-encoded beside them.

use std::os::unix::ffi::OsStrExt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::Serialize;

use crate::ledger::{Attempt, ExportedRun};
use crate::render::json::{AttemptJson, RunJson};

/// One line of `ledger export`: the ledger's highest fence, the run's
/// `list --json` fields (`head`: whether it is its key's head in this
/// ledger), then its attempts (as in `show --json`).
#[derive(Serialize)]
struct RunLine<'a> {
    /// The highest fence the ledger had handed out, first in the line: an
    /// idem that knows it not passes it over, while after
    /// `attempts_detail` its import would refuse the line.
    ledger_fence: i64,
    #[serde(flatten)]
    run: RunJson<'a>,
    /// When an argument is not UTF-8, every argument base64-encoded: the
    /// bytes `command` renders lossily.
    #[serde(skip_serializing_if = "Option::is_none")]
    command_base64: Option<Vec<String>>,
    /// The run's attempts, last in the line so that import can take the
    /// run before them.
    attempts_detail: Vec<AttemptLine<'a>>,
}

/// An attempt within a [`RunLine`].
#[derive(Serialize)]
struct AttemptLine<'a> {
    #[serde(flatten)]
    attempt: AttemptJson<'a>,
    /// When stdout is not UTF-8, its bytes base64-encoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    stdout_tail_base64: Option<String>,
    /// When stderr is not UTF-8, its bytes base64-encoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    stderr_tail_base64: Option<String>,
}

/// `bytes` base64-encoded when they are not UTF-8.
fn base64_unless_text(bytes: &[u8]) -> Option<String> {
    std::str::from_utf8(bytes)
        .is_err()
        .then(|| BASE64.encode(bytes))
}

/// The line of `exported`, with its newline.
pub fn export_line(exported: &ExportedRun) -> serde_json::Result<Vec<u8>> {
    let run = &exported.run;
    let binary = run
        .command
        .iter()
        .any(|arg| std::str::from_utf8(arg.as_bytes()).is_err());
    let line = RunLine {
        ledger_fence: exported.ledger_fence,
        run: RunJson {
            head: exported.head,
            ..RunJson::from(run)
        },
        command_base64: binary.then(|| {
            run.command
                .iter()
                .map(|arg| BASE64.encode(arg.as_bytes()))
                .collect()
        }),
        attempts_detail: exported.attempts.iter().map(attempt_line).collect(),
    };
    let mut bytes = serde_json::to_vec(&line)?;
    bytes.push(b'\n');
    Ok(bytes)
}

fn attempt_line(attempt: &Attempt) -> AttemptLine<'_> {
    AttemptLine {
        attempt: AttemptJson::from(attempt),
        stdout_tail_base64: base64_unless_text(&attempt.stdout_tail),
        stderr_tail_base64: base64_unless_text(&attempt.stderr_tail),
    }
}
