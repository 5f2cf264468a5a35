//! idem's signal dispositions, shared by idem and the processes it forks:
//! which signals idem takes as events, which it was started with ignored
//! (its command keeps those ignored, as under a shell), and when a signal
//! received during an attempt is a second one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::libc;
use signal_hook::consts::{SIGCONT, SIGHUP, SIGINT, SIGTERM};

/// The signals idem takes as events (the rest keep their default action),
/// but for those it was started with ignored (see [`ignored_at_start`]).
pub const CAUGHT: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGCONT];

/// Bit N: signal N was ignored when idem installed its handlers (SIGPIPE:
/// when idem started), and so was left ignored. Set before the first fork.
static IGNORED: AtomicU64 = AtomicU64::new(0);

/// Whether idem was started with `signal` ignored, and left it so: `nohup`
/// ignores SIGHUP, and a shell without job control SIGINT for a command
/// it starts with `&`. Like a shell, idem keeps them ignored (its command
/// too), so that a wrapped command hears what it would without idem.
/// Async-signal-safe: a forked child asks it.
pub fn ignored_at_start(signal: i32) -> bool {
    IGNORED.load(Ordering::Relaxed) & (1 << signal) != 0
}

/// Ignores SIGPIPE, so that a write to a closed pipe fails (EPIPE) and
/// idem says so or stops quietly instead of being killed, and notes
/// whether idem was started with it ignored: its command then gets it
/// ignored too, as from a shell after `trap '' PIPE`, and otherwise the
/// default. Called first thing, before any thread.
pub fn ignore_sigpipe() {
    // SAFETY: signal(2) on SIGPIPE; nothing else runs yet.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) } == libc::SIG_IGN {
        IGNORED.fetch_or(1 << libc::SIGPIPE, Ordering::Relaxed);
    }
}

/// Whether `signal` is ignored now.
fn ignored_now(signal: i32) -> bool {
    // SAFETY: sigaction only reads the disposition into a zeroed struct.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Notes `signal` as ignored at start if it is ignored now; whether it was.
pub fn keep_if_ignored(signal: i32) -> bool {
    if !ignored_now(signal) {
        return false;
    }
    IGNORED.fetch_or(1 << signal, Ordering::Relaxed);
    true
}

/// A copy of the signal idem passed on that comes this soon after it is
/// that same signal, not a second one: `timeout -s INT` sends it to idem
/// and then to idem's whole process group, microseconds apart, and a
/// command cleaning up after the first must not be SIGKILLed for the copy.
/// Short, so that a person's second Ctrl-C or kill (300 ms later in the
/// wrapper's test) still kills.
const ONE_SIGNAL: Duration = Duration::from_millis(100);

/// What a signal idem receives during an attempt is.
#[derive(Debug, PartialEq, Eq)]
pub enum Heard {
    /// The first: passed on.
    First,
    /// A copy of the first, within [`ONE_SIGNAL`]: nothing more is done.
    Again,
    /// Another signal, or the same one later: the command is killed.
    Second,
}

/// What `signal`, received at `now`, is, given the one passed on first (and
/// when).
pub fn heard(first: Option<(i32, Instant)>, signal: i32, now: Instant) -> Heard {
    match first {
        None => Heard::First,
        Some((first, at)) if first == signal && now.saturating_duration_since(at) < ONE_SIGNAL => {
            Heard::Again
        }
        Some(_) => Heard::Second,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_of_the_first_signal_within_a_second_is_that_signal() {
        let at = Instant::now();
        let soon = at + Duration::from_millis(20);
        let late = at + Duration::from_millis(300);
        assert_eq!(heard(None, libc::SIGINT, at), Heard::First);
        let first = Some((libc::SIGINT, at));
        assert_eq!(heard(first, libc::SIGINT, soon), Heard::Again);
        assert_eq!(heard(first, libc::SIGTERM, soon), Heard::Second);
        assert_eq!(heard(first, libc::SIGINT, late), Heard::Second);
    }
}
