//! `ledger import`'s side of the line: a stream read a line at a time,
//! each line's object read as it comes, its run handed to the sink before
//! its attempts, one at a time.

use std::collections::HashSet;
use std::io::BufRead;

use anyhow::{anyhow, Result};
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::cutter::Cutter;
use super::fields::{AttemptIn, RunIn};
use crate::ledger::ImportSink;

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
