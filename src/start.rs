//! What idem's process sets up before anything else.
//!
//! `main` is idem's own C `main` (`#![no_main]`), so Rust's runtime start
//! is skipped: it reads /proc/self/maps and makes a signal stack, a dozen
//! system calls and 41K instructions (a skip's 3%), for a message on a
//! stack overflow. What idem needs of that start is here.

use std::io::Write;

use nix::libc;

/// Call first thing in `main`.
pub fn start() {
    // SAFETY: fcntl takes integers and open a NUL-terminated literal; no
    // other thread exists yet, so no Rust object owns a descriptor that
    // the open could take the number of.
    unsafe {
        // Descriptors 0 to 2 open, as Rust's runtime makes sure: were one
        // closed, the next file idem opens would take its number, and
        // what idem prints would land in it. Each open takes the lowest
        // free number, so the one that was closed.
        for fd in 0..3 {
            if libc::fcntl(fd, libc::F_GETFD) == -1
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
                && libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) == -1
            {
                // As Rust's runtime does: nothing is safe to write to.
                libc::abort();
            }
        }
    }
    crate::process::ignore_sigpipe();
    one_malloc_arena();
}

/// glibc gives each thread that allocates a malloc arena of its own: a
/// 64 MiB reservation, trimmed, whose fresh pages fault in. idem's few
/// threads (an output pump, a wait for the writers' lock) allocate little
/// and seldom at once, so they share the main one: 20 fewer page faults of
/// a first run's 370, and 10% less of its CPU time (`perf stat`).
#[cfg(target_env = "gnu")]
fn one_malloc_arena() {
    // SAFETY: mallopt changes a malloc setting and takes integers; made
    // before any thread exists, so no allocation runs concurrently.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(not(target_env = "gnu"))]
fn one_malloc_arena() {}

/// Call last: what Rust's runtime does at the end of `main`. What stdout
/// still buffers is written.
pub fn finish() {
    let _ = std::io::stdout().flush();
}
