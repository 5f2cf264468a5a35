//! The exit-code contract of `idem`, in one place (see the README's table).
//!
//! Library code never exits: it returns a code, or an error that carries one
//! ([`Failure`]), and `main` turns that into the process status
//! ([`outcome`]); a command line clap refuses becomes its one line and
//! code in [`usage`].

pub mod hint;
pub mod usage;

#[cfg(test)]
mod contract;

use std::fmt;

/// The command succeeded, or the key had already succeeded (skipped).
pub const SUCCESS: u8 = 0;
/// `ledger show` of an unknown key; `doctor` found a problem.
pub const NOT_FOUND: u8 = 1;
/// Bad flag, duration, key or template.
pub const USAGE: u8 = 2;
/// The key succeeded with a different command; nothing ran.
pub const FINGERPRINT_MISMATCH: u8 = 65;
/// The last run was abandoned and `--on-abandoned fail` was given.
pub const ABANDONED: u8 = 69;
/// The key is running elsewhere.
pub const CONFLICT: u8 = 75;
/// The final attempt timed out.
pub const TIMED_OUT: u8 = 124;
/// idem itself failed: the ledger is unreadable, unwritable, corrupt, full or newer.
pub const IDEM_FAILED: u8 = 125;
/// The command could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND_COMMAND: u8 = 127;
/// Base of `128 + N` for a command killed by signal N.
pub const SIGNAL_BASE: u8 = 128;

/// The exit status a shell would report for a command killed by `signal`.
pub fn for_signal(signal: i32) -> u8 {
    SIGNAL_BASE.saturating_add(u8::try_from(signal).unwrap_or(127))
}

/// An error that knows the exit code it stands for.
///
/// Anything else that reaches `main` is an internal failure of idem (125).
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
    /// The cause may pass by itself (a ledger locked by another process, a
    /// database restarting): worth trying again for a while.
    pub transient: bool,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            transient: false,
        }
    }

    pub fn transient(self) -> Self {
        Failure {
            transient: true,
            ..self
        }
    }

    /// Whether `error` says its cause may pass by itself.
    pub fn is_transient(error: &anyhow::Error) -> bool {
        error
            .chain()
            .filter_map(|cause| cause.downcast_ref::<Failure>())
            .any(|failure| failure.transient)
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(USAGE, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// The exit code for an error that reached `main`: the code of the first
/// [`Failure`] in its chain, else 125 (idem itself failed).
pub fn code_for(error: &anyhow::Error) -> u8 {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<Failure>())
        .map_or(IDEM_FAILED, |failure| failure.code)
}

/// The exit code of a command's outcome; an error is said in one line
/// first.
pub fn outcome(result: anyhow::Result<u8>) -> u8 {
    match result {
        Ok(code) => code,
        // A closed pipe (`idem ledger list | head`) is the reader's choice.
        Err(error) if is_broken_pipe(&error) => SUCCESS,
        Err(error) => {
            crate::console::say(crate::console::Event::Error, &format!("{error:#}"));
            code_for(&error)
        }
    }
}

/// An I/O error in lowercase words, without Rust's "(os error N)".
pub fn io_words(error: &std::io::Error) -> String {
    words(&error.to_string())
}

/// An error's text for a line of idem's: lowercase first, without Rust's
/// "(os error N)" wherever it stands.
pub fn words(text: &str) -> String {
    let text = match text.find(" (os error") {
        Some(at) => {
            let rest = &text[at..];
            let end = rest.find(')').map_or(rest.len(), |end| end + 1);
            format!("{}{}", &text[..at], &rest[end..])
        }
        None => text.to_owned(),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// One of idem's own lines, `idem: TEXT` and its newline, whole.
pub fn line(text: &str) -> String {
    format!("idem: {text}\n")
}

/// Writes [`line`] to stderr in one `write(2)` (stderr is unbuffered), so
/// that the lines of many runs sharing one stderr never interleave
/// mid-line, as the pieces of a formatted write would.
pub fn say(text: &str) {
    crate::console::say(crate::console::Event::Message, text);
}

/// [`line`], after a newline when the command's output on the same
/// terminal or file stopped mid-line: idem's own lines start a line.
pub fn owed_line(text: &str) -> String {
    match crate::process::line_owed() {
        true => format!("\n{}", line(text)),
        false => line(text),
    }
}

/// Whether `error` comes from writing to a reader that went away.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
