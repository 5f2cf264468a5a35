//! The frames idem and the guardian exchange on their socket: their sizes
//! and kinds, their encoding, and how each side sends and receives them.
//! The guardian's side runs after fork: no allocation.

use std::io::{self, Read};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;

use nix::libc;

/// A message from idem: a kind and two numbers.
pub const TO_GUARDIAN: usize = 17;
/// A message from the guardian: a kind and ten numbers.
pub const FROM_GUARDIAN: usize = 41;

/// idem -> guardian: let the command in; `a` is the lease deadline on the
/// monotonic clock in ms (0: none), `b` the grace before SIGKILL when idem
/// dies.
pub const GO: u8 = b'G';
/// idem -> guardian: send signal `a` to every process of the run; with
/// `b == 1` a SIGCONT follows, so a stopped process gets it too.
pub const SIGNAL: u8 = b'S';
/// idem -> guardian: idem was continued (`fg` after Ctrl-Z): give the
/// command the terminal and continue it.
pub const RESUME: u8 = b'C';
/// idem -> guardian: the lease was renewed; stop the run at monotonic ms
/// `a` unless told again, SIGKILL `b` ms later.
pub const DEADLINE: u8 = b'D';

/// guardian -> idem: the command runs as pid `a`.
pub const RUNNING: u8 = b'R';
/// guardian -> idem: the command could not be executed: errno `a`.
pub const NOT_EXECUTED: u8 = b'X';
/// guardian -> idem: the command's main process ended with wait status `a`.
pub const EXITED: u8 = b'E';
/// guardian -> idem: `a` processes it left still run; the first pids follow.
pub const LEFT_RUNNING: u8 = b'L';
/// guardian -> idem: the lease deadline passed unrenewed; the run is stopped.
pub const LEASE_RAN_OUT: u8 = b'T';
/// guardian -> idem, as it exits: the run's processes it reaped used `a`
/// KiB at the peak of the largest and `b` ms of CPU.
pub const USED: u8 = b'U';
/// guardian -> idem: step `a` of the setup after the fork failed with
/// errno `b` (see `steps`); nothing of the command runs.
pub const SETUP_FAILED: u8 = b'F';

pub fn encode_to(kind: u8, a: i64, b: i64) -> [u8; TO_GUARDIAN] {
    let mut frame = [0u8; TO_GUARDIAN];
    frame[0] = kind;
    frame[1..9].copy_from_slice(&a.to_le_bytes());
    frame[9..17].copy_from_slice(&b.to_le_bytes());
    frame
}

/// A message from the guardian, decoded.
pub struct Report {
    pub kind: u8,
    pub a: i32,
    pub b: i32,
    pub pids: Vec<i32>,
}

pub fn decode_from(frame: &[u8; FROM_GUARDIAN]) -> Report {
    let number = |index: usize| {
        let at = 1 + 4 * index;
        let mut bytes = [0u8; 4];
        bytes.copy_from_slice(&frame[at..at + 4]);
        i32::from_le_bytes(bytes)
    };
    let count = number(0).clamp(0, 8) as usize;
    Report {
        kind: frame[0],
        a: number(0),
        b: number(1),
        pids: (0..count).map(|index| number(index + 2)).collect(),
    }
}

pub fn read_report(from: &mut UnixStream) -> Option<Report> {
    let mut frame = [0u8; FROM_GUARDIAN];
    from.read_exact(&mut frame).ok()?;
    Some(decode_from(&frame))
}

pub fn put(frame: &mut [u8; FROM_GUARDIAN], kind: u8, a: i32, b: i32) {
    *frame = [0u8; FROM_GUARDIAN];
    frame[0] = kind;
    frame[1..5].copy_from_slice(&a.to_le_bytes());
    frame[5..9].copy_from_slice(&b.to_le_bytes());
}

/// Sends a frame to idem; false when idem is gone.
///
/// # Safety
/// `door` is -1 or the guardian's own end of the control socket, open.
pub unsafe fn send(door: RawFd, frame: &[u8; FROM_GUARDIAN]) -> bool {
    if door < 0 {
        return false;
    }
    // SAFETY: `door` is open (the caller's contract); send reads the
    // frame's bytes, which live on this stack, and MSG_NOSIGNAL keeps a
    // closed peer from raising SIGPIPE.
    let sent = unsafe { libc::send(door, frame.as_ptr().cast(), frame.len(), libc::MSG_NOSIGNAL) };
    sent == frame.len() as isize
}

/// Reads one frame from idem; `None` at end of file or on an error.
///
/// # Safety
/// `door` is the guardian's own end of the control socket, open.
pub unsafe fn receive(door: RawFd) -> Option<(u8, i64, i64)> {
    let mut frame = [0u8; TO_GUARDIAN];
    // SAFETY: `door` is open (the caller's contract).
    if unsafe { read_full(door, &mut frame) } < TO_GUARDIAN {
        return None;
    }
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(frame.get(1..9)?);
    b.copy_from_slice(frame.get(9..17)?);
    Some((frame[0], i64::from_le_bytes(a), i64::from_le_bytes(b)))
}

/// Reads into all of `buffer` unless end of file or an error comes first
/// (an interrupted read is read again); how many bytes it got. No
/// allocation: the guardian calls it after fork.
///
/// # Safety
/// `fd` is an open descriptor of this process that nothing else reads
/// meanwhile.
pub unsafe fn read_full(fd: RawFd, buffer: &mut [u8]) -> usize {
    let mut got = 0usize;
    while got < buffer.len() {
        // SAFETY: `fd` is open (the caller's contract); read writes at most
        // `buffer.len() - got` bytes, from `got` on, inside `buffer`.
        let read =
            unsafe { libc::read(fd, buffer.as_mut_ptr().add(got).cast(), buffer.len() - got) };
        if read > 0 {
            got += read as usize;
        } else if read < 0 && errno() == libc::EINTR {
            continue;
        } else {
            break;
        }
    }
    got
}

/// The monotonic clock in ms, shared by idem and the guardian.
pub fn monotonic_ms() -> i64 {
    // SAFETY: timespec is plain integers, for which all zeroes is valid.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec * 1000 + now.tv_nsec / 1_000_000
}

pub fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut frame = [0u8; FROM_GUARDIAN];
        put(&mut frame, LEFT_RUNNING, 2, 0);
        frame[9..13].copy_from_slice(&41i32.to_le_bytes());
        frame[13..17].copy_from_slice(&42i32.to_le_bytes());
        let report = decode_from(&frame);
        assert_eq!(
            (report.kind, report.a, report.pids),
            (LEFT_RUNNING, 2, vec![41, 42])
        );
    }
}
