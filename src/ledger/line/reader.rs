//! The bounded reader under import: one line of the stream, refused past
//! [`MAX_LINE`] or when it is not UTF-8, read as JSON by struson's
//! streaming reader with every string cut to its end as it is read.

use std::io::{BufRead, Read};

use serde_json::{Map, Number, Value};
use struson::reader::{JsonReader, JsonStreamReader, ValueType};

use super::{MAX_LINE, MAX_TAIL};

/// A string is kept to its last this many bytes (from a character on):
/// more than the largest tail, even base64-encoded.
const KEEP: usize = MAX_TAIL / 3 * 4 + 8;

/// Why a line is refused as a whole.
const TOO_LONG: &str = "it is longer than the 16 MiB idem reads in one line";
const NOT_UTF8: &str =
    "it is not UTF-8 (bytes that are not text travel base64-encoded in an export)";

/// One line of `input`, up to its newline (which it consumes), refused
/// past [`MAX_LINE`] or when it is not UTF-8.
pub(super) struct OneLine<'a> {
    input: &'a mut dyn BufRead,
    read: usize,
    /// The start of a character whose end is still to come.
    partial: Vec<u8>,
    done: bool,
    refused: Option<&'static str>,
    /// The input could not be read.
    failed: Option<std::io::Error>,
}

impl<'a> OneLine<'a> {
    pub(super) fn new(input: &'a mut dyn BufRead) -> OneLine<'a> {
        OneLine {
            input,
            read: 0,
            partial: Vec::new(),
            done: false,
            refused: None,
            failed: None,
        }
    }

    /// Reads the rest of the line, judging it whole: `Err(Ok(why))` when
    /// it is too long or not UTF-8, `Err(Err(_))` when it cannot be read.
    pub(super) fn judge(mut self) -> Result<(), Result<&'static str, std::io::Error>> {
        let mut scratch = [0; 8 << 10];
        while self.refused.is_none() && self.failed.is_none() && !self.done {
            let _ = self.read(&mut scratch);
        }
        if let Some(failed) = self.failed {
            return Err(Err(failed));
        }
        match self.refused {
            // A refusal leaves the rest of the line unread.
            Some(why) if !self.done => {
                skip_line(self.input).map_err(Err)?;
                Err(Ok(why))
            }
            Some(why) => Err(Ok(why)),
            None => Ok(()),
        }
    }

    fn refuse(&mut self, why: &'static str) -> std::io::Error {
        self.refused.get_or_insert(why);
        std::io::Error::other(why)
    }

    /// Checks `bytes` as the next of the line's UTF-8 (`end`: the last).
    fn utf8(&mut self, bytes: &[u8], end: bool) -> std::io::Result<()> {
        let mut bytes = bytes;
        while !self.partial.is_empty() && !bytes.is_empty() {
            self.partial.push(bytes[0]);
            bytes = &bytes[1..];
            match std::str::from_utf8(&self.partial) {
                Ok(_) => self.partial.clear(),
                Err(error) if error.error_len().is_some() => return Err(self.refuse(NOT_UTF8)),
                Err(_) => {}
            }
        }
        if let Err(error) = std::str::from_utf8(bytes) {
            if error.error_len().is_some() {
                return Err(self.refuse(NOT_UTF8));
            }
            self.partial.extend(&bytes[error.valid_up_to()..]);
        }
        if end && !self.partial.is_empty() {
            return Err(self.refuse(NOT_UTF8));
        }
        Ok(())
    }
}

impl Read for OneLine<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        let chunk = loop {
            match self.input.fill_buf() {
                Ok(chunk) => break chunk,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    self.failed = Some(std::io::Error::new(error.kind(), error.to_string()));
                    return Err(error);
                }
            }
        };
        // No further than `buf` holds: a chunk may be all the input.
        let chunk = &chunk[..chunk.len().min(buf.len())];
        let end = chunk.iter().position(|byte| *byte == b'\n');
        let n = end.unwrap_or(chunk.len());
        buf[..n].copy_from_slice(&chunk[..n]);
        let whole = chunk.is_empty() || end.is_some();
        self.input.consume(n + usize::from(end.is_some()));
        self.read += n;
        if self.read > MAX_LINE {
            return Err(self.refuse(TOO_LONG));
        }
        self.done = whole;
        self.utf8(&buf[..n], whole)?;
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

/// The JSON reader of a line.
pub(super) type Json<'a, 'b> = JsonStreamReader<&'a mut OneLine<'b>>;

/// A failure of the JSON reader.
pub(super) type Error = Box<dyn std::error::Error + Send + Sync>;

/// The next value, each string in it cut to its last [`KEEP`] bytes as it
/// is read, so that memory holds no more of it.
pub(super) fn value(json: &mut Json) -> Result<Value, Error> {
    Ok(match json.peek()? {
        ValueType::String => Value::String(string_end(json)?),
        ValueType::Number => Value::Number(json.next_number_as_str()?.parse::<Number>()?),
        ValueType::Boolean => Value::Bool(json.next_bool()?),
        ValueType::Null => {
            json.next_null()?;
            Value::Null
        }
        ValueType::Array => {
            let mut items = Vec::new();
            json.begin_array()?;
            while json.has_next()? {
                items.push(value(json)?);
            }
            json.end_array()?;
            Value::Array(items)
        }
        ValueType::Object => {
            let mut fields = Map::new();
            json.begin_object()?;
            while json.has_next()? {
                let name = json.next_name_owned()?;
                fields.insert(name, value(json)?);
            }
            json.end_object()?;
            Value::Object(fields)
        }
    })
}

/// The next string's last [`KEEP`] bytes, from a character on, and from a
/// whole base64 group when that is what the string holds.
fn string_end(json: &mut Json) -> Result<String, Error> {
    let mut kept = std::collections::VecDeque::with_capacity(KEEP + (8 << 10));
    let mut dropped = 0;
    let mut chunk = [0; 8 << 10];
    let mut string = json.next_string_reader()?;
    loop {
        let n = string.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        kept.extend(&chunk[..n]);
        let over = kept.len().saturating_sub(KEEP);
        kept.drain(..over);
        dropped += over;
    }
    while !dropped.is_multiple_of(4) || kept.front().is_some_and(|byte| byte & 0xc0 == 0x80) {
        kept.pop_front();
        dropped += 1;
    }
    Ok(String::from_utf8(Vec::from(kept))?)
}
