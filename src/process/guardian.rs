//! The guardian: one small process per attempt that holds the run together.
//!
//! idem forks it; it forks the command's process at once, which waits at a
//! gate before its exec until idem has recorded the attempt and lets it in
//! (so the fork is made while idem writes the ledger, not after). It is a
//! child subreaper, so every process the command starts stays its
//! descendant however it detaches (a new group, a new session, a double
//! fork), and it exits only when all of them are gone: that exit is the
//! end of the attempt. It carries the run's kernel lock (see
//! `ledger::runlock`) until then, so the key stays `running` while anything
//! of the run lives, even after idem's death.
//!
//! It outlives idem on purpose. When idem dies (its end of the control
//! socket closes) or stops renewing a shared ledger's lease (the deadline
//! idem last gave passes: idem is frozen or cut off), it stops the whole run
//! itself, SIGTERM then SIGKILL, rather than let it go on unowned.
//!
//! Everything here after `fork` runs in a copy of a multithreaded process,
//! so it makes only async-signal-safe system calls: no allocation, no
//! locks, no panics (no indexing that could fail, no formatting).

use std::io;
use std::os::fd::RawFd;

use nix::libc::{self, c_int, pid_t};

use super::prepare::{Fds, Prepared};
use super::signals::{ignored_at_start, CAUGHT};
use super::watch::watch;
use super::wire::{
    errno, monotonic_ms, put, read_full, receive, send, FROM_GUARDIAN, GO, NOT_EXECUTED, RUNNING,
};

/// Forks the guardian; returns its pid in idem.
///
/// # Safety
/// `prepared` and `fds` stay valid until the child has exec'd or exited,
/// and the descriptors in `fds` are open: the child (a copy of a process
/// that may run other threads) only reads them and makes async-signal-safe
/// calls, and never returns.
pub unsafe fn start(prepared: &Prepared, fds: &Fds) -> io::Result<pid_t> {
    // SAFETY: fork has no memory preconditions; what the child runs is
    // async-signal-safe and ends in `_exit` or exec (see `guardian`).
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        // SAFETY: in the child just forked, with `prepared` and `fds`
        // valid (this function's contract).
        0 => unsafe { guardian(prepared, fds) },
        pid => Ok(pid),
    }
}

/// The guardian's life. Never returns.
///
/// # Safety
/// Only in the child of [`start`]'s fork, with its arguments.
unsafe fn guardian(prepared: &Prepared, fds: &Fds) -> ! {
    // SAFETY: in the guardian just forked, with `fds` open (our contract).
    let (door, hold, foreground) = unsafe { settle(fds) };
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let terminal = foreground.map(|(tty, _)| tty);
    // The command's process is forked now, while idem records the
    // attempt and syncs the ledger, and waits at a gate of its own:
    // leave lets it exec at once.
    // SAFETY: the guardian's own descriptors, just settled.
    let ahead = unsafe { fork_ahead(prepared, door, hold, me, terminal) };
    // The gate: tell idem our pid, wait for leave to start the command
    // (given once the ledger knows it). End of file: idem is gone or
    // could not record the attempt; nothing runs.
    let mut frame = [0u8; FROM_GUARDIAN];
    put(&mut frame, RUNNING, me, 0);
    // SAFETY: `door` is the guardian's open end of the control socket.
    let Some((GO, deadline, grace)) = (unsafe { send(door, &frame) })
        .then(|| unsafe { receive(door) })
        .flatten()
    else {
        turn_away(ahead);
    };
    if deadline != 0 && monotonic_ms() >= deadline {
        // The lease ran out before the command could start.
        turn_away(ahead);
    }
    // SAFETY: `terminal` is the guardian's open copy, if any.
    let command = ahead.and_then(|ahead| unsafe { let_in(ahead, terminal) });
    // Our copies of the output pipes and stdin must not keep the
    // command's readers waiting.
    // SAFETY: the guardian's own stdio, not used again.
    unsafe {
        libc::close(0);
        libc::close(1);
        libc::close(2);
    }
    match command {
        Ok(pid) => put(&mut frame, RUNNING, pid, 0),
        Err(errno) => put(&mut frame, NOT_EXECUTED, errno, 0),
    }
    let pid = command.unwrap_or(0);
    // SAFETY: `door` is the guardian's open socket end; SIGCHLD is blocked
    // (see `settle`) and `foreground`'s terminal is its open copy.
    unsafe {
        send(door, &frame);
        watch(door, pid, deadline, grace, foreground)
    }
}

/// The guardian's own setup: its signals blocked, its group, its stdio,
/// and of idem's descriptors only those it needs, moved out of the way.
///
/// # Safety
/// Only in the guardian just forked, with the descriptors of `fds` open:
/// it closes every other descriptor, so nothing else may own one.
unsafe fn settle(fds: &Fds) -> (RawFd, Option<RawFd>, Option<(RawFd, pid_t)>) {
    // Signals sent to the run must not end the guardian: block them
    // all (the command unblocks them before exec). SIGCHLD is read
    // through a signalfd.
    // SAFETY: sigfillset fills a sigset_t we own (all zeroes is a valid
    // start); sigprocmask reads it; setpgid takes integers.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        libc::setpgid(0, 0);
    }
    // SAFETY: dup2 onto the stdio numbers of a process that has no other
    // thread: no Rust object of this copy owns 0, 1 or 2 any more.
    unsafe {
        if libc::dup2(fds.stdout, 1) < 0 || libc::dup2(fds.stderr, 2) < 0 {
            libc::_exit(125);
        }
        if let Some(stdin) = fds.stdin {
            if libc::dup2(stdin, 0) < 0 {
                libc::_exit(125);
            }
        }
    }
    // Nothing of idem's stays open here but the door, the lock and the
    // stdio: a copy of idem's ledger lock would keep it held were idem
    // to die while holding it.
    // SAFETY: the descriptors of `fds` are open (our contract), and no
    // other code of this process uses any descriptor: it has one thread.
    unsafe {
        let door = keep_fd(fds.door, 100);
        let hold = fds.hold.map(|hold| keep_fd(hold, 101));
        let foreground = fds
            .foreground
            .map(|(terminal, group)| (keep_fd(terminal, 102), group));
        close_from(
            3,
            [Some(door), hold, foreground.map(|(terminal, _)| terminal)],
        );
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        (door, hold, foreground)
    }
}

/// Moves `fd` to at least `floor`, so the range below it can be closed.
///
/// # Safety
/// `fd` is open; the copy made is the caller's to own.
unsafe fn keep_fd(fd: RawFd, floor: RawFd) -> RawFd {
    // SAFETY: F_DUPFD makes a new descriptor and touches no memory; _exit
    // ends the guardian without running anything of the parent's.
    unsafe {
        let moved = libc::fcntl(fd, libc::F_DUPFD, floor);
        if moved < 0 {
            libc::_exit(125);
        }
        moved
    }
}

/// Closes every descriptor from `low` up except those in `keep`.
///
/// # Safety
/// Nothing else in this process owns a descriptor from `low` up but those
/// in `keep`: only in a child just forked, before anything opens one.
unsafe fn close_from(low: RawFd, keep: [Option<RawFd>; 3]) {
    let mut keep = keep.map(|fd| fd.unwrap_or(-1));
    keep.sort_unstable();
    let mut from = low as libc::c_uint;
    for fd in keep.into_iter().filter(|fd| *fd >= low) {
        let fd = fd as libc::c_uint;
        if fd > from {
            // SAFETY: the range holds none of `keep` (our contract covers
            // the rest).
            unsafe { close_range(from, fd - 1) };
        }
        from = fd + 1;
    }
    // SAFETY: as above; the last one kept is below the range.
    unsafe { close_range(from, libc::c_uint::MAX) };
}

/// Closes the descriptors from `first` to `last`.
///
/// # Safety
/// Nothing in this process owns or uses a descriptor of that range.
unsafe fn close_range(first: libc::c_uint, last: libc::c_uint) {
    // SAFETY: close_range takes integers and closes what our contract
    // gives up.
    if unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) } == 0 {
        return;
    }
    // Kernels before 5.9: close one by one up to the descriptor limit.
    // SAFETY: rlimit is plain integers, for which all zeroes is valid;
    // getrlimit writes into the one we own.
    let top = unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(65536) as libc::c_uint
        } else {
            4096
        }
    };
    let mut fd = first;
    while fd <= last && fd < top {
        // SAFETY: in the range our contract gives up.
        unsafe { libc::close(fd as c_int) };
        fd += 1;
    }
}

/// The command's process, forked before idem lets it in: its pid, and
/// the guardian's ends of its gate and of its exec report, open and owned
/// by this value alone.
struct Ahead {
    pid: pid_t,
    gate: RawFd,
    report: RawFd,
}

/// Forks the command's process, which waits at its gate for one byte (end
/// of file: nothing runs) and then executes the command in a process group
/// of its own; the errno of a failed fork.
///
/// # Safety
/// Only in the guardian, after [`settle`]: `door`, `hold` and `terminal`
/// are its own open descriptors, and `prepared` is valid.
unsafe fn fork_ahead(
    prepared: &Prepared,
    door: RawFd,
    hold: Option<RawFd>,
    me: pid_t,
    terminal: Option<RawFd>,
) -> Result<Ahead, i32> {
    let mut report = [0 as c_int; 2];
    let mut gate = [0 as c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own; close
    // takes back the two just made.
    unsafe {
        if libc::pipe2(report.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(errno());
        }
        if libc::pipe2(gate.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            let error = errno();
            libc::close(report[0]);
            libc::close(report[1]);
            return Err(error);
        }
    }
    let ([read_end, write_end], [wait_end, leave_end]) = (report, gate);
    // SAFETY: the guardian has one thread, so the child is a whole copy
    // of it; each side closes only the pipe ends it does not use.
    match unsafe { libc::fork() } {
        -1 => {
            let error = errno();
            for fd in [read_end, write_end, wait_end, leave_end] {
                // SAFETY: the four ends made above, not used again.
                unsafe { libc::close(fd) };
            }
            Err(error)
        }
        // SAFETY: in the child just forked, with the ends made above and
        // our own contract's descriptors.
        0 => unsafe {
            libc::close(read_end);
            libc::close(leave_end);
            libc::close(door);
            // Its group and the terminal come after leave (see
            // `let_in`): nothing takes the terminal before the command
            // may run.
            let mut leave = [0u8; 1];
            if read_full(wait_end, &mut leave) < 1 {
                libc::_exit(125);
            }
            libc::close(wait_end);
            execute(prepared, hold, me, terminal, write_end)
        },
        pid => {
            // SAFETY: the child's ends, not used here.
            unsafe {
                libc::close(write_end);
                libc::close(wait_end);
            }
            Ok(Ahead {
                pid,
                gate: leave_end,
                report: read_end,
            })
        }
    }
}

/// No leave came: the command's process is told at its gate that nothing
/// runs, and waited for, so nothing of the attempt outlives the guardian.
fn turn_away(ahead: Result<Ahead, i32>) -> ! {
    if let Ok(ahead) = ahead {
        let mut status = 0;
        // SAFETY: `ahead`'s gate is ours alone (see `Ahead`), closed once;
        // waitpid writes into the integer we own.
        unsafe {
            libc::close(ahead.gate);
            libc::waitpid(ahead.pid, &mut status, 0);
        }
    }
    // SAFETY: _exit ends the guardian without running anything of the
    // parent's (no atexit handlers, no flush).
    unsafe { libc::_exit(125) }
}

/// Lets the command's process through its gate: its pid, or the errno of
/// a failed exec.
///
/// # Safety
/// `terminal` is the guardian's own open copy of the terminal, if any.
unsafe fn let_in(ahead: Ahead, terminal: Option<RawFd>) -> Result<pid_t, i32> {
    if let Some(terminal) = terminal {
        // Both sides, so neither waits on the other's timing.
        // SAFETY: setpgid and tcsetpgrp take integers; `terminal` is open
        // (our contract).
        unsafe {
            libc::setpgid(ahead.pid, ahead.pid);
            libc::tcsetpgrp(terminal, ahead.pid);
        }
    }
    // SAFETY: write reads one byte of a live array; the gate is ours alone
    // (see `Ahead`), closed once.
    unsafe {
        libc::write(ahead.gate, [1u8].as_ptr().cast(), 1);
        libc::close(ahead.gate);
    }
    executed(ahead.pid, ahead.report)
}

/// In the command's process: its group, its terminal, its signals, then
/// exec; on failure the errno goes to `report` (close-on-exec, so success
/// closes it).
///
/// # Safety
/// Only in the command's process just forked by [`fork_ahead`]: `hold`,
/// `terminal` and `report` are its own open descriptors and `prepared` is
/// valid (its pointers NUL-terminated). It never returns.
unsafe fn execute(
    prepared: &Prepared,
    hold: Option<RawFd>,
    guardian: pid_t,
    terminal: Option<RawFd>,
    report: RawFd,
) -> ! {
    // SAFETY: setpgid, tcsetpgrp, prctl, getppid and fcntl take integers;
    // `terminal` and `hold` are open (our contract), and `terminal` is not
    // used after it is closed. _exit runs nothing of the parent's.
    unsafe {
        libc::setpgid(0, 0);
        if let Some(terminal) = terminal {
            // In the terminal's foreground, as a shell puts a job: it reads
            // the terminal and gets its Ctrl-C. (Signals are still blocked,
            // so SIGTTOU does not stop this.)
            libc::tcsetpgrp(terminal, libc::getpid());
            libc::close(terminal);
        }
        // Should the guardian be killed, the command is told to stop.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
        if libc::getppid() != guardian {
            libc::_exit(125);
        }
        if let Some(hold) = hold {
            // The command keeps the lock too (as under flock(1)): were the
            // guardian killed, what the command left running still holds
            // the key.
            libc::fcntl(hold, libc::F_SETFD, 0);
        }
    }
    // SAFETY: signal(2) sets a disposition and touches no memory of ours;
    // sigemptyset fills a sigset_t we own, which sigprocmask reads.
    unsafe {
        if !ignored_at_start(libc::SIGPIPE) {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
        // idem's handlers are still installed here (exec would reset them,
        // but only after the signals are let in): one running in this
        // window would write to a descriptor number that may be `report`.
        for signal in CAUGHT {
            if !ignored_at_start(signal) {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
    // SAFETY: `prepared` is valid (our contract): its paths are C strings
    // and its argv and envp arrays end in a null pointer.
    let failure = unsafe { exec(prepared) };
    let bytes = failure.to_le_bytes();
    // SAFETY: write reads the four bytes of a live array; `report` is open
    // (our contract); _exit runs nothing of the parent's.
    unsafe {
        libc::write(report, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

/// As execvp: tries each place in turn, and tells "not executable" from
/// "not found". Returns only on failure: the errno to report.
///
/// # Safety
/// `prepared`'s strings are NUL-terminated and its argv and envp arrays end
/// in a null pointer, as [`Prepared::new`] makes them.
unsafe fn exec(prepared: &Prepared) -> i32 {
    let mut failure = libc::ENOENT;
    let mut denied = false;
    for candidate in &prepared.candidates {
        // SAFETY: our contract; execve returns only on failure.
        unsafe {
            libc::execve(
                candidate.as_ptr(),
                prepared.argv.as_ptr(),
                prepared.envp.as_ptr(),
            )
        };
        match errno() {
            libc::EACCES => denied = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ELOOP | libc::ENAMETOOLONG => {}
            other => {
                failure = other;
                break;
            }
        }
    }
    if denied && failure == libc::ENOENT {
        failure = libc::EACCES;
    }
    failure
}

/// Whether command `pid` was executed: end of file on `report` says so;
/// an errno says it was not (it is reaped here then, so that it is not
/// taken for the command's end). `report` is closed.
fn executed(pid: pid_t, report: RawFd) -> Result<pid_t, i32> {
    let mut bytes = [0u8; 4];
    // SAFETY: `report` is the read end of the exec report, ours alone
    // (see `Ahead`), closed once.
    let got = unsafe {
        let got = read_full(report, &mut bytes);
        libc::close(report);
        got
    };
    if got < bytes.len() {
        return Ok(pid);
    }
    let mut status = 0;
    // SAFETY: waitpid writes into the integer we own.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    Err(i32::from_le_bytes(bytes))
}
