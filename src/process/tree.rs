//! The run's process tree as the guardian sees it: every descendant,
//! found through `/proc` however it detached, counted or signalled. Runs
//! after fork: async-signal-safe calls only, no allocation.

use nix::libc::{self, c_int, pid_t};

/// Sends `signal` to the command's group and to every descendant of the
/// guardian, wherever it moved (a SIGCONT after it with `cont`).
pub fn signal_run(command: pid_t, signal: c_int, cont: bool, seen: &mut Seen) {
    if command > 0 {
        kill(-command, signal);
        if cont {
            kill(-command, libc::SIGCONT);
        }
    }
    seen.len = 0;
    walk_and(signal, cont, &mut [], Some(seen));
}

/// Sends SIGTERM to the descendants that [`signal_run`] missed (their
/// parent was dying as it walked), never twice to one process: a command
/// that traps SIGTERM to clean up gets it once, as from `timeout(1)`.
pub fn signal_the_missed(seen: &mut Seen) {
    walk_and(libc::SIGTERM, true, &mut [], Some(seen));
}

/// The pids a stop has signalled already.
pub struct Seen {
    pub pids: [pid_t; 1024],
    pub len: usize,
}

impl Seen {
    fn has(&self, pid: pid_t) -> bool {
        self.pids
            .get(..self.len)
            .is_some_and(|pids| pids.contains(&pid))
    }

    fn add(&mut self, pid: pid_t) {
        if let Some(slot) = self.pids.get_mut(self.len) {
            *slot = pid;
            self.len += 1;
        }
    }
}

/// Counts the descendants of the guardian, keeping the first pids.
pub fn walk(signal: c_int, first: &mut [pid_t]) -> i32 {
    walk_and(signal, false, first, None)
}

/// kill(2), whose failure (the process is gone already) changes nothing.
fn kill(pid: pid_t, signal: c_int) {
    // SAFETY: kill takes two integers and touches no memory of ours.
    unsafe { libc::kill(pid, signal) };
}

/// Visits every descendant of the guardian (through `/proc`; without it,
/// only the command's group is reached), signalling each when `signal` is
/// not 0; returns how many there are, keeping the first pids in `first`.
fn walk_and(signal: c_int, cont: bool, first: &mut [pid_t], mut seen: Option<&mut Seen>) -> i32 {
    // SAFETY: getpid has no preconditions and cannot fail.
    let me = unsafe { libc::getpid() };
    let mut todo = [0 as pid_t; 1024];
    let mut pending = 1usize;
    todo[0] = me;
    let mut count = 0i32;
    while pending > 0 {
        pending -= 1;
        let parent = todo.get(pending).copied().unwrap_or(0);
        let mut buffer = [0u8; 4096];
        let read = read_children(parent, &mut buffer);
        let mut number: i64 = -1;
        for &byte in buffer.get(..read).unwrap_or(&[]).iter().chain(b" ") {
            if byte.is_ascii_digit() {
                number = number.max(0) * 10 + i64::from(byte - b'0');
                continue;
            }
            if number > 0 && number as pid_t != me {
                let child = number as pid_t;
                let again = seen.as_ref().is_some_and(|seen| seen.has(child));
                if let Some(seen) = seen.as_mut().filter(|_| !again) {
                    seen.add(child);
                }
                if signal != 0 && !again {
                    kill(child, signal);
                    if cont {
                        kill(child, libc::SIGCONT);
                    }
                }
                if let Some(slot) = first.get_mut(count as usize) {
                    *slot = child;
                }
                count += 1;
                if let Some(slot) = todo.get_mut(pending) {
                    *slot = child;
                    pending += 1;
                }
            }
            number = -1;
        }
    }
    count
}

/// Reads `/proc/PID/task/PID/children` into `buffer`; 0 bytes when absent.
fn read_children(pid: pid_t, buffer: &mut [u8]) -> usize {
    let mut path = [0u8; 64];
    let mut at = 0;
    for part in [
        &b"/proc/"[..],
        &decimal(pid).0[..],
        b"/task/",
        &decimal(pid).0[..],
        b"/children",
    ] {
        for &byte in part.iter().filter(|byte| **byte != 0) {
            if let Some(slot) = path.get_mut(at) {
                *slot = byte;
                at += 1;
            }
        }
    }
    // SAFETY: `path` holds at most 43 bytes of its 64, so a NUL ends it.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return 0;
    }
    let mut total = 0usize;
    while total < buffer.len() {
        // SAFETY: `fd` was opened just above; read writes at most
        // `buffer.len() - total` bytes, from `total` on, inside `buffer`.
        let read = unsafe {
            libc::read(
                fd,
                buffer.as_mut_ptr().add(total).cast(),
                buffer.len() - total,
            )
        };
        if read <= 0 {
            break;
        }
        total += read as usize;
    }
    // SAFETY: `fd` was opened above and nothing else holds it.
    unsafe { libc::close(fd) };
    total
}

/// The decimal digits of `n`, NUL-padded.
fn decimal(n: pid_t) -> ([u8; 12], usize) {
    let mut digits = [0u8; 12];
    let mut reversed = [0u8; 12];
    let mut n = n.max(0) as u32;
    let mut len = 0;
    loop {
        if let Some(slot) = reversed.get_mut(len) {
            *slot = b'0' + (n % 10) as u8;
        }
        len += 1;
        n /= 10;
        if n == 0 || len >= 11 {
            break;
        }
    }
    for index in 0..len {
        if let (Some(to), Some(from)) = (digits.get_mut(index), reversed.get(len - 1 - index)) {
            *to = *from;
        }
    }
    (digits, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_are_written_in_decimal() {
        assert_eq!(decimal(40213).0[..5], *b"40213");
        assert_eq!(decimal(0).1, 1);
    }
}
