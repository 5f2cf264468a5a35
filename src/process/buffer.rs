//! Buffers set aside before a thread starts: a refusal (ulimit -v) is an
//! error the attempt can end on, never an abort after the command was let
//! in.

use std::io;

/// `len` zeroed bytes, or an error where memory is refused, never an
/// abort.
pub fn zeroed(len: usize) -> io::Result<Vec<u8>> {
    let mut buffer = Vec::new();
    buffer.try_reserve_exact(len).map_err(out_of_memory)?;
    buffer.resize(len, 0);
    Ok(buffer)
}

/// A refused reservation, as the error the attempt ends on.
pub fn out_of_memory(_: std::collections::TryReserveError) -> io::Error {
    io::Error::from(io::ErrorKind::OutOfMemory)
}
