//! The bounded reader under import's JSON reader: one line, checked as
//! UTF-8 and for its length, with every long string cut to its end as it
//! is read.

use std::io::{BufRead, Read};

use super::{MAX_LINE, MAX_TAIL};

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
pub(super) struct Cutter<'a> {
    input: &'a mut dyn BufRead,
    /// Only judging the rest of a line, not passing it on.
    judging: bool,
    /// The input could not be read.
    pub(super) failed: Option<std::io::Error>,
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
    pub(super) fn new(input: &'a mut dyn BufRead) -> Cutter<'a> {
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
    pub(super) fn drain(mut self) -> Result<(), Result<&'static str, std::io::Error>> {
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
