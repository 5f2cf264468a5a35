//! `ledger import`'s side of the line: a stream read a line at a time,
//! each line's object read as it comes, its run handed to the sink before
//! its attempts, one at a time.

use std::collections::HashSet;
use std::io::BufRead;

use anyhow::{anyhow, Result};
use serde::de::value::MapDeserializer;
use serde::Deserialize;
use struson::reader::{JsonReader, ValueType};

use super::fields::{AttemptIn, RunIn};
use super::reader::{self, OneLine};
use crate::ledger::ImportSink;

/// What went wrong with a line: the words, or the sink's own failure
/// (the ledger's), which passes through untouched.
enum Refused {
    Line(anyhow::Error),
    Sink(anyhow::Error),
}

/// The JSON reader's failure, in words (its own, which name the cause
/// it wraps).
fn not_json(error: impl std::fmt::Display) -> Refused {
    Refused::Line(anyhow!("not JSON: {error}"))
}

/// Reads one line's object, handing the run and then each attempt to the
/// sink.
fn read_line(line: &mut OneLine, sink: &mut dyn ImportSink) -> Result<(), Refused> {
    let mut json = struson::reader::JsonStreamReader::new(line);
    json.begin_object().map_err(not_json)?;
    let mut fields = serde_json::Map::new();
    let mut started = false;
    while json.has_next().map_err(not_json)? {
        let name = json.next_name_owned().map_err(not_json)?;
        if started {
            let why = anyhow!("{name} comes after attempts_detail, which export writes last");
            return Err(Refused::Line(why));
        }
        if name != "attempts_detail" {
            fields.insert(name, reader::value(&mut json).map_err(not_json)?);
            continue;
        }
        start(std::mem::take(&mut fields), sink)?;
        started = true;
        attempts(&mut json, sink)?;
    }
    if !started {
        start(fields, sink)?;
    }
    json.end_object().map_err(not_json)?;
    json.consume_trailing_whitespace().map_err(not_json)
}

/// Hands the ledger's fence and the run its `fields` make to the sink.
fn start(
    fields: serde_json::Map<String, serde_json::Value>,
    sink: &mut dyn ImportSink,
) -> Result<(), Refused> {
    let line = RunIn::deserialize(serde_json::Value::Object(fields))
        .map_err(|error| Refused::Line(error.into()))?;
    let fence = line.ledger_fence().map_err(Refused::Line)?;
    let (run, head) = line.run().map_err(Refused::Line)?;
    if let Some(fence) = fence {
        sink.ledger_fence(fence).map_err(Refused::Sink)?;
    }
    sink.run(&run, head).map_err(Refused::Sink)
}

/// Reads `attempts_detail`, handing each attempt to the sink as it is read.
fn attempts(json: &mut reader::Json, sink: &mut dyn ImportSink) -> Result<(), Refused> {
    if json.peek().map_err(not_json)? == ValueType::Null {
        return json.next_null().map_err(not_json);
    }
    json.begin_array().map_err(not_json)?;
    let mut numbers = HashSet::new();
    let mut index = 0;
    while json.has_next().map_err(not_json)? {
        let attempt = attempt(json)?.attempt(index).map_err(Refused::Line)?;
        if !numbers.insert(attempt.number) {
            let why = anyhow!("attempts_detail numbers an attempt twice");
            return Err(Refused::Line(why));
        }
        sink.attempt(&attempt).map_err(Refused::Sink)?;
        index += 1;
    }
    json.end_array().map_err(not_json)
}

/// The next attempt of `attempts_detail`; what it holds beyond the
/// fields idem knows is passed over unread.
fn attempt(json: &mut reader::Json) -> Result<AttemptIn, Refused> {
    let mut fields = Vec::new();
    json.begin_object().map_err(not_json)?;
    while json.has_next().map_err(not_json)? {
        let name = json.next_name_owned().map_err(not_json)?;
        if AttemptIn::FIELDS.contains(&name.as_str()) {
            fields.push((name, reader::value(json).map_err(not_json)?));
        } else {
            json.skip_value().map_err(not_json)?;
        }
    }
    json.end_object().map_err(not_json)?;
    let fields = MapDeserializer::<_, serde_json::Error>::new(fields.into_iter());
    AttemptIn::deserialize(fields).map_err(|error| Refused::Line(error.into()))
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
        let mut line = OneLine::new(&mut *self.input);
        let error = match read_line(&mut line, sink) {
            Ok(()) => return Ok(true),
            Err(Refused::Sink(error)) => return Err(error),
            Err(Refused::Line(error)) => error,
        };
        // What the whole line is says more than where parsing stopped.
        let error = match line.judge() {
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
