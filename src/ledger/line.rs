//! The line of `ledger export` and `ledger import`: one run with its
//! attempts as a JSON object, its fields in the order the types below
//! declare them.
//!
//! argv and output tails are bytes. A field holds them as a string when they
//! are valid UTF-8; otherwise the string is a lossy rendering for people and
//! a sibling `<field>_base64` holds the bytes, and that one wins on import.
//!
//! Import reads a line as it comes, never whole: the run is handed on once
//! its fields are read, then each attempt as it is read (`attempts_detail`
//! comes last, as export writes it), and a string longer than any tail idem
//! keeps is cut to its end while it is read (see [`Cutter`]). So memory
//! holds one attempt, whatever the line holds.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{BufRead, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use anyhow::{anyhow, bail, Result};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use jiff::Timestamp;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Attempt, ExportedRun, ImportSink, Run, Status};
use crate::render::json::{AttemptJson, RunJson};

/// The longest line `import` reads: room for a run of several attempts
/// with the largest `--capture` of output, while a line of any length in
/// the input costs no more memory than this.
pub const MAX_LINE: usize = 16 << 20;

/// The most output of one stream a run keeps: the largest `--capture`, and
/// the longest tail `import` takes.
pub const MAX_CAPTURE: u64 = 1 << 20;

/// [`MAX_CAPTURE`] as a length.
const MAX_TAIL: usize = MAX_CAPTURE as usize;

// ---- export ------------------------------------------------------------

/// One line of `ledger export`: the run's `list --json` fields (`head`:
/// whether it is its key's head in this ledger), then its attempts (as in
/// `show --json`).
#[derive(Serialize)]
struct RunLine<'a> {
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

// ---- import ------------------------------------------------------------

/// A run's fields as a line holds them (`attempts_detail` apart).
#[derive(Deserialize)]
struct RunIn {
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
}

/// An attempt as a line holds it.
#[derive(Deserialize)]
struct AttemptIn {
    attempt: Option<u32>,
    started_at: Option<String>,
    finished_at: Option<String>,
    exit_code: Option<i32>,
    signal: Option<i32>,
    timed_out: Option<bool>,
    output_cut: Option<bool>,
    #[serde(default, deserialize_with = "text_tail")]
    stdout_tail: Option<Vec<u8>>,
    #[serde(default, deserialize_with = "text_tail")]
    stderr_tail: Option<Vec<u8>>,
    #[serde(default, deserialize_with = "base64_tail")]
    stdout_tail_base64: Option<Vec<u8>>,
    #[serde(default, deserialize_with = "base64_tail")]
    stderr_tail_base64: Option<Vec<u8>>,
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
    /// The run, checked as a run of this ledger must be; `head` too.
    fn run(self) -> Result<(Run, bool)> {
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
        };
        Ok((run, head))
    }
}

impl AttemptIn {
    fn attempt(self, index: usize) -> Result<Attempt> {
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
        })
    }
}

/// What went wrong with a line: the words, or the sink's own failure
/// (the ledger's), which passes through untouched.
enum Refused {
    Line(anyhow::Error),
    Sink(anyhow::Error),
}

/// Reads one line's object, handing the run and then each attempt to the
/// sink.
struct LineSeed<'a> {
    sink: &'a mut dyn ImportSink,
    refused: &'a mut Option<Refused>,
}

fn refuse<E: serde::de::Error>(refused: &mut Option<Refused>, why: Refused) -> E {
    *refused = Some(why);
    E::custom("refused")
}

impl<'de> DeserializeSeed<'de> for LineSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LineSeed<'_> {
    type Value = ();

    fn expecting(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut fields = serde_json::Map::new();
        let mut started = false;
        while let Some(name) = map.next_key::<String>()? {
            if started {
                let why = anyhow!("{name} comes after attempts_detail, which export writes last");
                return Err(refuse(self.refused, Refused::Line(why)));
            }
            if name != "attempts_detail" {
                fields.insert(name, map.next_value()?);
                continue;
            }
            self.start(std::mem::take(&mut fields))?;
            started = true;
            map.next_value_seed(AttemptsSeed {
                sink: &mut *self.sink,
                refused: &mut *self.refused,
            })?;
        }
        if !started {
            self.start(fields)?;
        }
        Ok(())
    }
}

impl LineSeed<'_> {
    /// Hands the run its `fields` make to the sink.
    fn start<E: serde::de::Error>(
        &mut self,
        fields: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), E> {
        let run = RunIn::deserialize(serde_json::Value::Object(fields))
            .map_err(anyhow::Error::from)
            .and_then(RunIn::run);
        let (run, head) = run.map_err(|why| refuse(self.refused, Refused::Line(why)))?;
        self.sink
            .run(&run, head)
            .map_err(|why| refuse(self.refused, Refused::Sink(why)))
    }
}

/// Reads `attempts_detail`, handing each attempt to the sink as it is read.
struct AttemptsSeed<'a> {
    sink: &'a mut dyn ImportSink,
    refused: &'a mut Option<Refused>,
}

impl<'de> DeserializeSeed<'de> for AttemptsSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AttemptsSeed<'_> {
    type Value = ();

    fn expecting(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.write_str("attempts_detail as an array of attempts")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut numbers = HashSet::new();
        let mut index = 0;
        while let Some(attempt) = seq.next_element::<AttemptIn>()? {
            let attempt = attempt
                .attempt(index)
                .map_err(|why| refuse(self.refused, Refused::Line(why)))?;
            if !numbers.insert(attempt.number) {
                let why = anyhow!("attempts_detail numbers an attempt twice");
                return Err(refuse(self.refused, Refused::Line(why)));
            }
            self.sink
                .attempt(&attempt)
                .map_err(|why| refuse(self.refused, Refused::Sink(why)))?;
            index += 1;
        }
        Ok(())
    }
}

/// The lines of an import stream, read one at a time.
pub struct Lines<'a> {
    input: &'a mut dyn BufRead,
    /// The stream's name for messages.
    name: String,
    /// The number of the line read last.
    pub number: u64,
}

/// A line that cannot be imported, by its number.
#[derive(Debug)]
pub struct BadLine {
    pub number: u64,
    pub error: anyhow::Error,
}

impl std::fmt::Display for BadLine {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(out, "line {}: {:#}", self.number, self.error)
    }
}

impl std::error::Error for BadLine {}

impl<'a> Lines<'a> {
    pub fn new(input: &'a mut dyn BufRead, name: &str) -> Lines<'a> {
        Lines {
            input,
            name: name.to_owned(),
            number: 0,
        }
    }

    fn unreadable(&self, error: std::io::Error) -> anyhow::Error {
        anyhow!(crate::exit::io_words(&error)).context(format!("could not read {}", self.name))
    }

    /// Hands the next run to `sink` (blank lines are passed over); `false`
    /// at the end of the input. A line that cannot be imported is a
    /// [`BadLine`]; a failure to read, or the sink's, is returned as it is.
    pub fn next(&mut self, sink: &mut dyn ImportSink) -> Result<bool> {
        loop {
            match blank_line(self.input).map_err(|error| self.unreadable(error))? {
                Some(true) => self.number += 1,
                Some(false) => break,
                None => return Ok(false),
            }
        }
        self.number += 1;
        let mut refused = None;
        let mut line = std::io::BufReader::with_capacity(64 << 10, Cutter::new(&mut *self.input));
        let mut deserializer = serde_json::Deserializer::from_reader(&mut line);
        let parsed = LineSeed {
            sink,
            refused: &mut refused,
        }
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end());
        let error = match (parsed, refused) {
            (Ok(()), _) => return Ok(true),
            (Err(_), Some(Refused::Sink(error))) => return Err(error),
            (Err(_), Some(Refused::Line(error))) => error,
            (Err(error), None) => anyhow::Error::from(error).context("not JSON"),
        };
        // What the whole line is says more than where parsing stopped.
        let mut cutter = line.into_inner();
        if let Some(failed) = cutter.failed.take() {
            return Err(self.unreadable(failed));
        }
        let error = match cutter.drain() {
            Ok(()) => error,
            Err(Ok(why)) => anyhow!(why),
            Err(Err(failed)) => return Err(self.unreadable(failed)),
        };
        Err(BadLine {
            number: self.number,
            error,
        }
        .into())
    }
}

/// Passes over blank space at the start of a line: `Some(true)` when the
/// line is blank (its newline read), `Some(false)` when it holds more,
/// `None` at the end of the input.
fn blank_line(input: &mut dyn BufRead) -> std::io::Result<Option<bool>> {
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if chunk.is_empty() {
            return Ok(None);
        }
        let spaces = chunk
            .iter()
            .take_while(|byte| matches!(byte, b' ' | b'\t' | b'\r'))
            .count();
        let newline = chunk.get(spaces) == Some(&b'\n');
        let whole = spaces == chunk.len();
        input.consume(spaces + usize::from(newline));
        if newline {
            return Ok(Some(true));
        }
        if !whole {
            return Ok(Some(false));
        }
    }
}

// ---- the cutter --------------------------------------------------------

/// A JSON string longer than this (as written) is cut while it is read...
const LONG: usize = 64 << 10;

/// ...to its last this many bytes (from a character on): more than the
/// largest tail, even base64-encoded.
const KEEP: usize = MAX_TAIL / 3 * 4 + 8;

/// Why a line is refused as a whole.
const TOO_LONG: &str = "it is longer than the 16 MiB idem reads in one line";
const NOT_UTF8: &str =
    "it is not UTF-8 (bytes that are not text travel base64-encoded in an export)";

/// Reads one line of `input` (up to its newline, which it consumes),
/// refusing a line over [`MAX_LINE`] or one that is not UTF-8, and cutting
/// every string longer than [`LONG`] to its last [`KEEP`] bytes, so that
/// the JSON reader never holds more. What is cut is the start of a string,
/// which for an output tail is what a run would have dropped anyway.
struct Cutter<'a> {
    input: &'a mut dyn BufRead,
    /// Only judging the rest of a line, not passing it on.
    judging: bool,
    /// The input could not be read.
    failed: Option<std::io::Error>,
    read: usize,
    utf8: Utf8,
    done: bool,
    refused: Option<&'static str>,
    string: StringState,
    /// Bytes ready to hand on.
    out: std::collections::VecDeque<u8>,
}

/// Where the cutter is within the JSON text.
enum StringState {
    Outside,
    /// Within a string, its bytes so far held back (`escaped`: after a
    /// backslash).
    Short {
        held: Vec<u8>,
        escaped: bool,
    },
    /// Within a long string: its decoded end so far.
    Long {
        kept: std::collections::VecDeque<u8>,
        decoder: Unescape,
        dropped: usize,
    },
    /// A long string read to its end: what is kept of it, being handed on.
    Cut {
        kept: std::collections::VecDeque<u8>,
    },
}

impl<'a> Cutter<'a> {
    fn new(input: &'a mut dyn BufRead) -> Cutter<'a> {
        Cutter {
            input,
            judging: false,
            failed: None,
            read: 0,
            utf8: Utf8::default(),
            done: false,
            refused: None,
            string: StringState::Outside,
            out: Default::default(),
        }
    }

    /// Reads the rest of the line, judging it whole: `Err(Ok(why))` when
    /// it is too long or not UTF-8, `Err(Err(_))` when it cannot be read.
    fn drain(mut self) -> Result<(), Result<&'static str, std::io::Error>> {
        self.judging = true;
        self.out.clear();
        while !self.done && self.refused.is_none() {
            if let Err(error) = self.step() {
                if self.refused.is_none() {
                    return Err(Err(error));
                }
            }
        }
        match self.refused {
            // A refusal leaves the rest of the line unread.
            Some(why) => {
                skip_line(self.input).map_err(Err)?;
                Err(Ok(why))
            }
            None => Ok(()),
        }
    }

    /// Takes the next chunk of the line and passes its bytes through.
    fn step(&mut self) -> std::io::Result<()> {
        let chunk = loop {
            match self.input.fill_buf() {
                Ok(chunk) => break chunk,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            }
        };
        if chunk.is_empty() {
            self.done = true;
            return self.utf8.end().map_err(|()| self.refuse(NOT_UTF8));
        }
        let end = chunk.iter().position(|byte| *byte == b'\n');
        let part = chunk[..end.unwrap_or(chunk.len())].to_vec();
        if self.read + part.len() > MAX_LINE {
            return Err(self.refuse(TOO_LONG));
        }
        // Up to the end of a cut string at most: it is handed on first.
        let mut used = 0;
        for byte in part.iter().copied() {
            used += 1;
            if self.utf8.push(byte).is_err() {
                return Err(self.refuse(NOT_UTF8));
            }
            if !self.judging
                && self
                    .lex(byte)
                    .map_err(|()| self.refuse("it holds a string that is not JSON"))?
            {
                break;
            }
        }
        self.read += used;
        let whole = used == part.len() && end.is_some();
        self.input.consume(used + usize::from(whole));
        if whole {
            self.done = true;
            self.utf8.end().map_err(|()| self.refuse(NOT_UTF8))?;
        }
        Ok(())
    }

    /// Hands on more of a cut string, escaped as JSON, closing it after
    /// its last byte.
    fn emit_some(&mut self) {
        let StringState::Cut { kept } = &mut self.string else {
            return;
        };
        while self.out.len() < 8 << 10 {
            match kept.pop_front() {
                Some(b'"') => self.out.extend(b"\\\""),
                Some(b'\\') => self.out.extend(b"\\\\"),
                Some(byte @ 0..0x20) => self.out.extend(format!("\\u{byte:04x}").bytes()),
                Some(byte) => self.out.push_back(byte),
                None => {
                    self.out.push_back(b'"');
                    self.string = StringState::Outside;
                    return;
                }
            }
        }
    }

    fn refuse(&mut self, why: &'static str) -> std::io::Error {
        self.refused.get_or_insert(why);
        std::io::Error::other(why)
    }

    /// One byte of JSON text, within or outside a string; `true` when it
    /// ends a cut string, which is to be handed on before what follows.
    fn lex(&mut self, byte: u8) -> Result<bool, ()> {
        match &mut self.string {
            StringState::Outside => {
                if byte == b'"' {
                    self.string = StringState::Short {
                        held: Vec::new(),
                        escaped: false,
                    };
                } else {
                    self.out.push_back(byte);
                }
            }
            StringState::Short { held, escaped } => {
                if byte == b'"' && !*escaped {
                    self.out.push_back(b'"');
                    self.out.extend(held.iter());
                    self.out.push_back(b'"');
                    self.string = StringState::Outside;
                    return Ok(false);
                }
                *escaped = byte == b'\\' && !*escaped;
                held.push(byte);
                if held.len() > LONG {
                    let mut decoder = Unescape::default();
                    let mut kept = std::collections::VecDeque::with_capacity(KEEP + 4);
                    let mut dropped = 0;
                    for byte in std::mem::take(held) {
                        decoder.push(byte, &mut kept, &mut dropped)?;
                    }
                    self.string = StringState::Long {
                        kept,
                        decoder,
                        dropped,
                    };
                }
            }
            StringState::Long {
                kept,
                decoder,
                dropped,
            } => {
                if byte == b'"' && decoder.at_rest() {
                    let mut kept = std::mem::take(kept);
                    let mut dropped = *dropped;
                    // From a character on, and from a whole base64 group
                    // when that is what the string holds.
                    while !dropped.is_multiple_of(4)
                        || kept.front().is_some_and(|byte| byte & 0xc0 == 0x80)
                    {
                        kept.pop_front();
                        dropped += 1;
                    }
                    self.out.push_back(b'"');
                    self.string = StringState::Cut { kept };
                    return Ok(true);
                }
                decoder.push(byte, kept, dropped)?;
            }
            StringState::Cut { .. } => return Err(()),
        }
        Ok(false)
    }
}

impl Read for Cutter<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.out.is_empty() {
            if matches!(self.string, StringState::Cut { .. }) {
                self.emit_some();
                continue;
            }
            if self.done {
                break;
            }
            if let Err(error) = self.step() {
                if self.refused.is_none() {
                    self.failed = Some(std::io::Error::new(error.kind(), error.to_string()));
                }
                return Err(error);
            }
        }
        let n = buf.len().min(self.out.len());
        for (slot, byte) in buf.iter_mut().zip(self.out.drain(..n)) {
            *slot = byte;
        }
        Ok(n)
    }
}

/// Reads and drops the rest of a line.
fn skip_line(input: &mut dyn BufRead) -> std::io::Result<()> {
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(());
        }
        let end = chunk.iter().position(|byte| *byte == b'\n');
        let used = end.map_or(chunk.len(), |end| end + 1);
        input.consume(used);
        if end.is_some() {
            return Ok(());
        }
    }
}

/// UTF-8 checked a byte at a time (the ranges of RFC 3629).
#[derive(Default)]
struct Utf8 {
    /// Continuation bytes still due, and the range the next one must fall in.
    due: u8,
    low: u8,
    high: u8,
}

impl Utf8 {
    fn push(&mut self, byte: u8) -> Result<(), ()> {
        if self.due > 0 {
            if byte < self.low || byte > self.high {
                return Err(());
            }
            self.due -= 1;
            (self.low, self.high) = (0x80, 0xbf);
            return Ok(());
        }
        (self.due, self.low, self.high) = match byte {
            0x00..=0x7f => return Ok(()),
            0xc2..=0xdf => (1, 0x80, 0xbf),
            0xe0 => (2, 0xa0, 0xbf),
            0xed => (2, 0x80, 0x9f),
            0xe1..=0xef => (2, 0x80, 0xbf),
            0xf0 => (3, 0x90, 0xbf),
            0xf1..=0xf3 => (3, 0x80, 0xbf),
            0xf4 => (3, 0x80, 0x8f),
            _ => return Err(()),
        };
        Ok(())
    }

    /// The line ended: no character may be left open.
    fn end(&self) -> Result<(), ()> {
        if self.due == 0 {
            Ok(())
        } else {
            Err(())
        }
    }
}

/// Decodes a JSON string's escapes as its bytes come, keeping the last
/// [`KEEP`] decoded bytes.
#[derive(Default)]
struct Unescape {
    backslash: bool,
    /// Within `\uXXXX`: the hex digits read, and their value.
    hex: Option<(u8, u32)>,
    /// A high surrogate waiting for its low half.
    high: Option<u32>,
}

impl Unescape {
    /// Whether a quote here ends the string.
    fn at_rest(&self) -> bool {
        !self.backslash && self.hex.is_none() && self.high.is_none()
    }

    fn push(
        &mut self,
        byte: u8,
        kept: &mut std::collections::VecDeque<u8>,
        dropped: &mut usize,
    ) -> Result<(), ()> {
        let mut keep = |bytes: &[u8]| {
            for byte in bytes {
                if kept.len() == KEEP {
                    kept.pop_front();
                    *dropped += 1;
                }
                kept.push_back(*byte);
            }
        };
        if let Some((digits, value)) = self.hex {
            let digit = (byte as char).to_digit(16).ok_or(())?;
            let value = value << 4 | digit;
            if digits < 3 {
                self.hex = Some((digits + 1, value));
                return Ok(());
            }
            self.hex = None;
            let code = match (self.high.take(), value) {
                (None, 0xd800..=0xdbff) => {
                    self.high = Some(value);
                    return Ok(());
                }
                (Some(high), 0xdc00..=0xdfff) => {
                    0x10000 + ((high - 0xd800) << 10) + (value - 0xdc00)
                }
                (None, value) if !(0xdc00..=0xdfff).contains(&value) => value,
                _ => return Err(()),
            };
            let c = char::from_u32(code).ok_or(())?;
            keep(c.encode_utf8(&mut [0; 4]).as_bytes());
            return Ok(());
        }
        if self.backslash {
            self.backslash = false;
            let plain = match byte {
                b'u' => {
                    self.hex = Some((0, 0));
                    return Ok(());
                }
                b'"' | b'\\' | b'/' => byte,
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                _ => return Err(()),
            };
            if self.high.is_some() {
                return Err(());
            }
            keep(&[plain]);
            return Ok(());
        }
        if byte == b'\\' {
            self.backslash = true;
            return Ok(());
        }
        if self.high.is_some() || byte < 0x20 {
            return Err(());
        }
        keep(&[byte]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collect {
        runs: Vec<(Run, bool)>,
        attempts: Vec<Attempt>,
    }

    impl ImportSink for Collect {
        fn run(&mut self, run: &Run, head: bool) -> Result<()> {
            self.runs.push((run.clone(), head));
            Ok(())
        }

        fn attempt(&mut self, attempt: &Attempt) -> Result<()> {
            self.attempts.push(attempt.clone());
            Ok(())
        }
    }

    fn read_back(bytes: &[u8]) -> Collect {
        let mut input = bytes;
        let mut lines = Lines::new(&mut input, "a line");
        let mut sink = Collect::default();
        while lines.next(&mut sink).unwrap() {}
        sink
    }

    fn exported(stdout: Vec<u8>) -> ExportedRun {
        let run = Run {
            key: "k".into(),
            job: "k-{date}".into(),
            head: true,
            run_id: Uuid::now_v7(),
            status: Status::Succeeded,
            exit_code: Some(0),
            signal: None,
            attempts: 1,
            started_at: Timestamp::from_millisecond(1_700_000_000_123).unwrap(),
            finished_at: Some(Timestamp::from_millisecond(1_700_000_001_456).unwrap()),
            host: "h".into(),
            pid: 42,
            command: vec!["printf".into(), OsString::from_vec(vec![0xff, b'x'])],
            shell: false,
            recovered: false,
        };
        ExportedRun {
            run,
            attempts: vec![Attempt {
                number: 1,
                started_at: Some(Timestamp::from_millisecond(1_700_000_000_200).unwrap()),
                finished_at: Some(Timestamp::from_millisecond(1_700_000_001_400).unwrap()),
                exit_code: Some(0),
                signal: None,
                timed_out: false,
                stdout_tail: stdout,
                stderr_tail: b"plain".to_vec(),
                cut: true,
            }],
            head: true,
        }
    }

    #[test]
    fn bytes_round_trip_through_export() {
        let exported = exported(vec![0xfe, b'o', b'k', b'\n']);
        let line = export_line(&exported).unwrap();
        let text = String::from_utf8(line.clone()).unwrap();
        assert!(text.contains("stdout_tail_base64"), "{text}");
        assert!(!text.contains("stderr_tail_base64"), "{text}");
        let back = read_back(&line);
        assert_eq!(back.runs, vec![(exported.run.clone(), true)]);
        assert_eq!(back.attempts, exported.attempts);
    }

    #[test]
    fn a_long_tail_is_cut_to_its_end_as_it_is_read() {
        for stdout in [
            (0..3 * MAX_TAIL)
                .map(|n| b"a\n\"\x01\\"[n % 5])
                .collect::<Vec<u8>>(),
            (0..3 * MAX_TAIL).map(|n| (n % 251) as u8).collect(),
            "é€😀".repeat(MAX_TAIL).into_bytes(),
        ] {
            let exported = exported(stdout.clone());
            let back = read_back(&export_line(&exported).unwrap());
            assert_eq!(back.attempts.len(), 1);
            assert_eq!(
                back.attempts[0].stdout_tail,
                stdout[stdout.len() - MAX_TAIL..],
                "the tail's end is kept"
            );
        }
    }
}
