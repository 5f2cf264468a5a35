//! The run's process tree as the guardian sees it: every descendant,
//! found through `/proc` however it detached, counted or signalled. Runs
//! after fork: async-signal-safe calls only, no allocation.
//!
//! `/proc` names pids as the namespace it was mounted in sees them (the
//! host's, unless remounted), which inside a run's PID namespace are not
//! the pids the guardian's kill(2) takes: each pid found is turned into
//! the guardian's own through the last field of its `NSpid` line.
//!
//! idem walks it too, from the guardian's pid, when the guardian cannot act
//! (stopped): see [`signal_past`].

use nix::libc::{self, c_int, pid_t};

/// The guardian as `/proc` knows it: where the walk starts.
#[derive(Clone, Copy)]
pub struct Root {
    /// Its pid in `/proc`'s namespace.
    pub host: pid_t,
    /// Its pids differ from `/proc`'s (a PID namespace of its own): a pid
    /// found is turned into its own before it is signalled.
    pub inside: bool,
}

impl Root {
    /// The calling process: `/proc/self` read for its pid there.
    pub fn own() -> Root {
        // SAFETY: getpid has no preconditions and cannot fail.
        let pid = unsafe { libc::getpid() };
        let mut link = [0u8; 16];
        // SAFETY: the path is a NUL-terminated literal; readlink writes at
        // most `link.len()` bytes into the array we own.
        let read =
            unsafe { libc::readlink(c"/proc/self".as_ptr(), link.as_mut_ptr().cast(), link.len()) };
        let host = match last_number(link.get(..read.max(0) as usize).unwrap_or(&[])) {
            host if host > 0 => host,
            _ => pid,
        };
        Root {
            host,
            inside: host != pid,
        }
    }
}

/// Sends `signal` to the command's group and to every descendant of the
/// guardian, wherever it moved (a SIGCONT after it with `cont`).
pub fn signal_run(root: Root, command: pid_t, signal: c_int, cont: bool, seen: &mut Seen) {
    if command > 0 {
        kill(-command, signal);
        if cont {
            kill(-command, libc::SIGCONT);
        }
    }
    seen.len = 0;
    walk_and(root, signal, cont, &mut [], Some(seen));
}

/// Sends SIGTERM to the descendants that [`signal_run`] missed (their
/// parent was dying as it walked), never twice to one process: a command
/// that traps SIGTERM to clean up gets it once, as from `timeout(1)`.
pub fn signal_the_missed(root: Root, seen: &mut Seen) {
    walk_and(root, libc::SIGTERM, true, &mut [], Some(seen));
}

/// idem's own reach into a run whose guardian cannot act: `signal` (and
/// a SIGCONT after it, with `cont`) to the command's group (`command`, as
/// idem names it) and to every descendant of `guardian`; with SIGKILL,
/// the guardian too, so that the attempt ends (the init of a PID
/// namespace takes every process in it along). For idem, whose pids are
/// `/proc`'s.
pub fn signal_past(guardian: pid_t, command: pid_t, signal: c_int, cont: bool) {
    if command > 0 {
        kill(-command, signal);
        if cont {
            kill(-command, libc::SIGCONT);
        }
    }
    let root = Root {
        host: guardian,
        inside: false,
    };
    walk_and(root, signal, cont, &mut [], None);
    if signal == libc::SIGKILL {
        kill(guardian, libc::SIGKILL);
    }
}

/// Whether `pid` is stopped (SIGSTOP, or by a tracer), by `/proc`.
pub fn stopped(pid: pid_t) -> bool {
    let mut buffer = [0u8; 512];
    let read = read_proc(pid, b"/stat", &mut buffer);
    let stat = buffer.get(..read).unwrap_or(&[]);
    // The state follows the name, which ends at the last ')'.
    let state = stat
        .iter()
        .rposition(|byte| *byte == b')')
        .and_then(|at| stat.get(at + 2));
    matches!(state, Some(b'T' | b't'))
}

/// The pid in `/proc` of the child whose own pid (the guardian's) is
/// `pid`; `pid` itself when the two agree, 0 when it is not found.
pub fn host_pid(root: Root, pid: pid_t) -> pid_t {
    if !root.inside {
        return pid;
    }
    let mut buffer = [0u8; 4096];
    let read = read_proc(root.host, b"/children", &mut buffer);
    let mut found = 0;
    each_number(buffer.get(..read).unwrap_or(&[]), |child| {
        if own_pid(child) == pid {
            found = child;
        }
    });
    found
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

/// Counts the descendants of `root`, keeping the first pids (`/proc`'s),
/// and sends each `signal` unless it is 0.
pub fn walk(root: Root, signal: c_int, first: &mut [pid_t]) -> i32 {
    walk_and(root, signal, false, first, None)
}

/// kill(2), whose failure (the process is gone already) changes nothing.
fn kill(pid: pid_t, signal: c_int) {
    // SAFETY: kill takes two integers and touches no memory of ours.
    unsafe { libc::kill(pid, signal) };
}

/// kill(2) of a pid found in `/proc`, under the name `root` knows it by.
fn kill_found(root: Root, pid: pid_t, signal: c_int) {
    let pid = if root.inside { own_pid(pid) } else { pid };
    if pid > 0 {
        kill(pid, signal);
    }
}

/// The pid of `/proc`'s process `pid` in its own namespace (the last
/// field of its `NSpid` line), or 0 when it is gone.
fn own_pid(pid: pid_t) -> pid_t {
    let mut buffer = [0u8; 2048];
    let read = read_proc(pid, b"/status", &mut buffer);
    let status = buffer.get(..read).unwrap_or(&[]);
    let Some(at) = status.windows(6).position(|line| line == b"NSpid:") else {
        return 0;
    };
    let line = status.get(at + 6..).unwrap_or(&[]);
    let end = line
        .iter()
        .position(|byte| *byte == b'\n')
        .unwrap_or(line.len());
    last_number(line.get(..end).unwrap_or(&[]))
}

/// Calls `each` with every decimal number in `bytes`, in order.
fn each_number(bytes: &[u8], mut each: impl FnMut(pid_t)) {
    let mut number: i64 = -1;
    for &byte in bytes.iter().chain(b" ") {
        if byte.is_ascii_digit() {
            number = (number.max(0) * 10 + i64::from(byte - b'0')).min(i64::from(i32::MAX));
            continue;
        }
        if number > 0 {
            each(number as pid_t);
        }
        number = -1;
    }
}

/// The last decimal number in `bytes`, or 0.
fn last_number(bytes: &[u8]) -> pid_t {
    let mut last = 0;
    each_number(bytes, |number| last = number);
    last
}

/// Visits every descendant of `root` (through `/proc`; without it, only
/// the command's group is reached), signalling each when `signal` is not
/// 0; returns how many there are, keeping the first pids in `first`.
fn walk_and(
    root: Root,
    signal: c_int,
    cont: bool,
    first: &mut [pid_t],
    mut seen: Option<&mut Seen>,
) -> i32 {
    let me = root.host;
    let mut todo = [0 as pid_t; 1024];
    let mut pending = 1usize;
    todo[0] = me;
    let mut count = 0i32;
    while pending > 0 {
        pending -= 1;
        let parent = todo.get(pending).copied().unwrap_or(0);
        let mut buffer = [0u8; 4096];
        let read = read_proc(parent, b"/children", &mut buffer);
        each_number(buffer.get(..read).unwrap_or(&[]), |child| {
            if child == me {
                return;
            }
            let again = seen.as_ref().is_some_and(|seen| seen.has(child));
            if let Some(seen) = seen.as_mut().filter(|_| !again) {
                seen.add(child);
            }
            if signal != 0 && !again {
                kill_found(root, child, signal);
                if cont {
                    kill_found(root, child, libc::SIGCONT);
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
        });
    }
    count
}

/// Reads `/proc/PID/task/PID` and `tail` (`/children`, `/status`) into
/// `buffer`; 0 bytes when absent.
fn read_proc(pid: pid_t, tail: &[u8], buffer: &mut [u8]) -> usize {
    let mut path = [0u8; 64];
    let mut at = 0;
    for part in [
        &b"/proc/"[..],
        &decimal(pid).0[..],
        b"/task/",
        &decimal(pid).0[..],
        tail,
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

    #[test]
    fn a_process_s_own_pid_is_the_last_of_its_ns_pids() {
        assert_eq!(last_number(b"\t40213\t7"), 7);
        assert_eq!(last_number(b""), 0);
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        assert_eq!(own_pid(me), me);
        let root = Root::own();
        assert_eq!((root.host, root.inside), (me, false));
    }
}
