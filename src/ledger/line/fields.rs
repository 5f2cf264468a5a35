//! What a line's fields mean on import: a run and its attempts as a line
//! holds them, checked as a run of this ledger must be, output tails cut
//! to the end a run would have kept.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use anyhow::{anyhow, bail, Result};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use jiff::Timestamp;
use serde::de::Visitor;
use serde::Deserialize;
use uuid::Uuid;

use super::MAX_TAIL;
use crate::ledger::{Attempt, Run, Status};
use crate::process::Containment;

/// A run's fields as a line holds them (`attempts_detail` apart).
#[derive(Deserialize)]
pub(super) struct RunIn {
    key: String,
    run_id: String,
    status: String,
    job: Option<String>,
    head: Option<bool>,
    exit_code: Option<i32>,
    signal: Option<i32>,
    attempts: Option<u32>,
    started_at: Option<String>,
    finished_at: Option<String>,
    host: String,
    pid: Option<u32>,
    command: Option<Vec<String>>,
    command_base64: Option<Vec<String>>,
    shell: Option<bool>,
    recovered: Option<bool>,
    /// A success marked by hand (`ledger mark`): by whom, and why.
    #[serde(default)]
    note: Option<String>,
    /// Lines of an idem before fences moved with a ledger carry none.
    #[serde(default)]
    ledger_fence: Option<i64>,
}

/// An attempt as a line holds it.
#[derive(Deserialize)]
pub(super) struct AttemptIn {
    attempt: Option<u32>,
    started_at: Option<String>,
    finished_at: Option<String>,
    exit_code: Option<i32>,
    signal: Option<i32>,
    timed_out: Option<bool>,
    output_cut: Option<bool>,
    /// Lines of an idem before it recorded containment carry none.
    containment: Option<String>,
    /// Lines of an idem before it recorded causes and usage carry none.
    cause: Option<String>,
    peak_memory_bytes: Option<i64>,
    cpu_ms: Option<i64>,
    #[serde(default, deserialize_with = "text_tail")]
    stdout_tail: Option<Vec<u8>>,
    #[serde(default, deserialize_with = "text_tail")]
    stderr_tail: Option<Vec<u8>>,
    #[serde(default, deserialize_with = "base64_tail")]
    stdout_tail_base64: Option<Vec<u8>>,
    #[serde(default, deserialize_with = "base64_tail")]
    stderr_tail_base64: Option<Vec<u8>>,
}

impl AttemptIn {
    /// The fields read of an attempt: the rest are passed over unread.
    pub(super) const FIELDS: [&str; 15] = [
        "attempt",
        "started_at",
        "finished_at",
        "exit_code",
        "signal",
        "timed_out",
        "output_cut",
        "containment",
        "cause",
        "peak_memory_bytes",
        "cpu_ms",
        "stdout_tail",
        "stderr_tail",
        "stdout_tail_base64",
        "stderr_tail_base64",
    ];
}

fn text_tail<'de, D: serde::Deserializer<'de>>(from: D) -> Result<Option<Vec<u8>>, D::Error> {
    from.deserialize_any(TailVisitor { base64: false })
}

fn base64_tail<'de, D: serde::Deserializer<'de>>(from: D) -> Result<Option<Vec<u8>>, D::Error> {
    from.deserialize_any(TailVisitor { base64: true })
}

/// Reads an output tail (its text, or its bytes base64-encoded), keeping
/// only its end, as a run would have kept it, straight from the reader's
/// buffer.
struct TailVisitor {
    base64: bool,
}

impl<'de> Visitor<'de> for TailVisitor {
    type Value = Option<Vec<u8>>;

    fn expecting(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.write_str("a string")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Option<Vec<u8>>, E> {
        Ok(None)
    }

    /// An owned string (what the reader hands over) keeps its end in the
    /// string's own allocation: a tail of a megabyte is not copied again.
    fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Option<Vec<u8>>, E> {
        if self.base64 {
            return self.visit_str(&text);
        }
        let mut bytes = text.into_bytes();
        bytes.drain(..bytes.len().saturating_sub(MAX_TAIL));
        // A large block shrinks where it lies (the allocator remaps it).
        bytes.shrink_to_fit();
        Ok(Some(bytes))
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Option<Vec<u8>>, E> {
        if !self.base64 {
            let bytes = text.as_bytes();
            return Ok(Some(bytes[bytes.len().saturating_sub(MAX_TAIL)..].to_vec()));
        }
        decode_end(text)
            .map(Some)
            .map_err(|error| E::custom(format!("a tail's base64 is not base64: {error}")))
    }
}

/// The last [`MAX_TAIL`] bytes `text` encodes; the rest is checked and
/// dropped a group at a time.
fn decode_end(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    let need = MAX_TAIL.div_ceil(3) * 4;
    let start = text.len().saturating_sub(need);
    let start = start - start % 4;
    let mut scratch = [0; 3 << 10];
    for chunk in text.as_bytes()[..start].chunks(4 << 10) {
        BASE64
            .decode_slice(chunk, &mut scratch)
            .map_err(|error| match error {
                base64::DecodeSliceError::DecodeError(error) => error,
                base64::DecodeSliceError::OutputSliceTooSmall => {
                    base64::DecodeError::InvalidLength(chunk.len())
                }
            })?;
    }
    let mut bytes = BASE64.decode(&text.as_bytes()[start..])?;
    if bytes.len() > MAX_TAIL {
        bytes.drain(..bytes.len() - MAX_TAIL);
    }
    Ok(bytes)
}

fn time(name: &str, text: Option<String>) -> Result<Option<Timestamp>> {
    text.map(|text| {
        text.parse::<Timestamp>()
            .map_err(|_| anyhow!("{name} '{text}' is not an RFC 3339 time"))
    })
    .transpose()
}

impl RunIn {
    /// The highest fence of the line's ledger, when the line carries it.
    pub(super) fn ledger_fence(&self) -> Result<Option<i64>> {
        match self.ledger_fence {
            Some(fence) if fence < 0 => bail!("ledger_fence {fence} is below 0"),
            fence => Ok(fence),
        }
    }

    /// The run, checked as a run of this ledger must be; `head` too.
    pub(super) fn run(self) -> Result<(Run, bool)> {
        crate::key::validate(&self.key)
            .map_err(|error| anyhow!("key {:?}: {}", self.key, error.message))?;
        let run_id = Uuid::parse_str(&self.run_id)
            .map_err(|_| anyhow!("run_id '{}' is not a UUID", self.run_id))?;
        let status = Status::parse(&self.status).ok_or_else(|| {
            anyhow!(
                "status '{}' is none of running, succeeded, failed, abandoned",
                self.status
            )
        })?;
        let command = match (self.command_base64, self.command) {
            (Some(args), _) => args
                .iter()
                .map(|arg| BASE64.decode(arg).map(OsString::from_vec))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| anyhow!("command_base64 holds something other than base64"))?,
            (None, Some(args)) => args.into_iter().map(OsString::from).collect(),
            (None, None) => bail!("the field command is missing"),
        };
        if command.is_empty() || command.iter().any(|arg| arg.as_bytes().contains(&0)) {
            bail!("command must be a non-empty argv without NUL bytes");
        }
        let started_at =
            time("started_at", self.started_at)?.ok_or_else(|| anyhow!("started_at is null"))?;
        let finished_at = time("finished_at", self.finished_at)?;
        if status == Status::Succeeded && finished_at.is_none() {
            // A TTL counts from the finish: without it the success is fresh forever.
            bail!("a succeeded run needs its finished_at");
        }
        // Lines of an idem before jobs carry none: each key was its own job.
        let job = match self.job {
            None => self.key.clone(),
            Some(job) if !job.is_empty() => job,
            Some(_) => bail!("job is not a non-empty string"),
        };
        let head = self.head.unwrap_or(false);
        let run = Run {
            key: self.key,
            job,
            head,
            run_id,
            status,
            exit_code: self.exit_code,
            signal: self.signal,
            attempts: self.attempts.unwrap_or(0),
            started_at,
            finished_at,
            host: self.host,
            pid: self.pid.unwrap_or(0),
            command,
            shell: self.shell.unwrap_or(false),
            recovered: self.recovered.unwrap_or(false),
            note: self.note,
        };
        Ok((run, head))
    }
}

impl AttemptIn {
    pub(super) fn attempt(self, index: usize) -> Result<Attempt> {
        let containment = self
            .containment
            .map(|name| {
                Containment::parse(&name).ok_or_else(|| {
                    anyhow!("containment '{name}' is none of cgroup, pid-namespace, guardian")
                })
            })
            .transpose()?;
        Ok(Attempt {
            number: self.attempt.unwrap_or(index as u32 + 1),
            started_at: time("started_at", self.started_at)?,
            finished_at: time("finished_at", self.finished_at)?,
            exit_code: self.exit_code,
            signal: self.signal,
            timed_out: self.timed_out.unwrap_or(false),
            // The bytes win over their lossy text.
            stdout_tail: self
                .stdout_tail_base64
                .or(self.stdout_tail)
                .unwrap_or_default(),
            stderr_tail: self
                .stderr_tail_base64
                .or(self.stderr_tail)
                .unwrap_or_default(),
            cut: self.output_cut.unwrap_or(false),
            containment,
            cause: self.cause,
            peak_memory: self.peak_memory_bytes,
            cpu_ms: self.cpu_ms,
        }
        .told_cause())
    }
}
