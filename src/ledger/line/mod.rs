//! The line of `ledger export` and `ledger import`: one run with its
//! attempts as a JSON object, its fields in the order the types of
//! [`export`] declare them.
//!
//! argv and output tails are bytes. A field holds them as a string when they
//! are valid UTF-8; otherwise the string is a lossy rendering for people and
//! a sibling `<field>_base64` holds the bytes, and that one wins on import.
//!
//! Import reads a line as it comes, never whole: the run is handed on once
//! its fields are read, then each attempt as it is read (`attempts_detail`
//! comes last, as export writes it), and a string longer than any tail idem
//! keeps is cut to its end while it is read (see [`reader`]). So memory
//! holds one attempt, whatever the line holds.

mod export;
mod fields;
mod import;
mod reader;

pub use export::export_line;
pub use import::{BadLine, Lines};

/// The longest line `import` reads: room for a run of several attempts
/// with the largest `--capture` of output, while a line of any length in
/// the input costs no more memory than this.
pub const MAX_LINE: usize = 16 << 20;

/// The most output of one stream a run keeps: the largest `--capture`, and
/// the longest tail `import` takes.
pub const MAX_CAPTURE: u64 = 1 << 20;

/// [`MAX_CAPTURE`] as a length.
const MAX_TAIL: usize = MAX_CAPTURE as usize;

#[cfg(test)]
mod tests;
