//! idem's signal dispositions, shared by idem and the processes it forks:
//! which signals idem takes as events, and which it was started with
//! ignored (its command keeps those ignored, as under a shell).

use std::sync::atomic::{AtomicU64, Ordering};

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
