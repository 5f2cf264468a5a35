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
//!
//! Each step of its setup, and of the command's process up to its exec,
//! is checked (see `steps`): one that fails is told to idem as the step
//! and its errno, and nothing of the command runs. A guardian that could
//! not become a subreaper, say, would not hold every process of the run.

use std::io;
use std::os::fd::RawFd;

use nix::libc::{self, c_int, pid_t};

use super::command;
use super::contain::{fork_guardian, fork_raw, Containment};
use super::prepare::{Fds, Prepared};
use super::steps::{Failed, Step};
use super::tree::{host_pid, Root};
use super::watch::watch;
use super::wire::{
    monotonic_ms, put, read_full, receive, send, FROM_GUARDIAN, GO, NOT_EXECUTED, RUNNING,
    SETUP_FAILED,
};
use crate::exit;

/// Forks the guardian, in a PID namespace of its own when `contained` and
/// the host allows it (see `contain`); returns its pid in idem, and what
/// holds the run.
///
/// # Safety
/// `prepared` and `fds` stay valid until the child has exec'd or exited,
/// and the descriptors in `fds` are open: the child (a copy of a process
/// that may run other threads) only reads them and makes async-signal-safe
/// calls, and never returns.
pub unsafe fn start(
    prepared: &Prepared,
    fds: &Fds,
    contained: bool,
) -> io::Result<(pid_t, Containment)> {
    // SAFETY: fork has no memory preconditions; what the child runs is
    // async-signal-safe, forks with `fork_raw` only, and ends in `_exit`
    // or exec (see `guardian`).
    match unsafe { fork_guardian(contained) }? {
        // SAFETY: in the child just forked, with `prepared` and `fds`
        // valid (this function's contract).
        (0, _) => unsafe { guardian(prepared, fds) },
        forked => Ok(forked),
    }
}

/// At a terminal: the terminal, and idem's process group.
type Foreground = (RawFd, pid_t);

/// What the guardian holds once settled: its own descriptors.
struct Settled {
    /// Its end of the control socket.
    door: RawFd,
    /// The run's kernel lock, if the ledger has one.
    hold: Option<RawFd>,
    foreground: Option<Foreground>,
    /// A signalfd that reads SIGCHLD.
    children: RawFd,
}

/// The guardian's life. Never returns. A step that fails before the
/// command may run is told to idem (`SETUP_FAILED`), and nothing runs.
///
/// # Safety
/// Only in the child of [`start`]'s fork, with its arguments.
unsafe fn guardian(prepared: &Prepared, fds: &Fds) -> ! {
    // Where the control socket is: it moves as the guardian settles.
    let mut door = fds.door;
    // SAFETY: in the guardian just forked, with `fds` open (our contract).
    let settled = match unsafe { settle(fds, &mut door) } {
        Ok(settled) => settled,
        Err(failed) => give_up(door, failed, None),
    };
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let root = Root::own();
    // The command's process is forked now, while idem records the
    // attempt and syncs the ledger, and waits at a gate of its own:
    // leave lets it exec at once.
    // SAFETY: the guardian's own descriptors, just settled.
    let ahead = match unsafe { fork_ahead(prepared, fds, &settled, me) } {
        Ok(ahead) => ahead,
        Err(failed) => give_up(door, failed, None),
    };
    // The gate: tell idem our pid, wait for leave to start the command
    // (given once the ledger knows it). End of file: idem is gone or
    // could not record the attempt; nothing runs.
    let mut frame = [0u8; FROM_GUARDIAN];
    put(&mut frame, RUNNING, me, 0);
    // SAFETY: `door` is the guardian's open end of the control socket.
    let Some((GO, deadline, grace)) = (unsafe { send(door, &frame) })
        // SAFETY: as above.
        .then(|| unsafe { receive(door) })
        .flatten()
    else {
        turn_away(Some(ahead));
    };
    if deadline != 0 && monotonic_ms() >= deadline {
        // The lease ran out before the command could start.
        turn_away(Some(ahead));
    }
    let terminal = settled.foreground.map(|(tty, _)| tty);
    // SAFETY: `terminal` is the guardian's open copy, if any.
    let command = unsafe { let_in(ahead, terminal) };
    let cgroup_kill = fds.cgroup.map_or(std::ptr::null(), |(_, kill)| kill);
    // SAFETY: the guardian's own descriptors, settled above; the path
    // lives as long as `fds` (our contract).
    unsafe { watch_over(settled, root, command, (deadline, grace), cgroup_kill) }
}

/// Tells idem how letting the command in went, then watches the run to
/// its end.
///
/// # Safety
/// Only in the guardian, with `settled` its own open descriptors and
/// SIGCHLD blocked (see [`settle`]).
unsafe fn watch_over(
    settled: Settled,
    root: Root,
    command: Result<pid_t, Failed>,
    (deadline, grace): (i64, i64),
    cgroup_kill: *const libc::c_char,
) -> ! {
    let mut frame = [0u8; FROM_GUARDIAN];
    // Our copies of the output pipes and stdin must not keep the
    // command's readers waiting.
    // SAFETY: the guardian's own stdio, not used again.
    unsafe {
        libc::close(0);
        libc::close(1);
        libc::close(2);
    }
    match command {
        // idem names it as `/proc` does.
        Ok(pid) => put(&mut frame, RUNNING, host_pid(root, pid), 0),
        Err(Failed {
            step: Step::Exec,
            errno,
        }) => put(&mut frame, NOT_EXECUTED, errno, 0),
        Err(failed) => {
            let (step, errno) = failed.to_numbers();
            put(&mut frame, SETUP_FAILED, step, errno);
        }
    }
    let Settled {
        door,
        foreground,
        children,
        ..
    } = settled;
    // SAFETY: `door` and `children` are the guardian's own open
    // descriptors, SIGCHLD is blocked (see `settle`) and `foreground`'s
    // terminal is its open copy.
    unsafe {
        send(door, &frame);
        watch(
            door,
            root,
            command.unwrap_or(0),
            (deadline, grace),
            foreground,
            children,
            cgroup_kill,
        )
    }
}

/// Tells idem which step failed (on `door`, where the control socket is
/// then) and ends the guardian; the command's process, if forked, is
/// turned away first.
fn give_up(door: RawFd, failed: Failed, ahead: Option<Ahead>) -> ! {
    let mut frame = [0u8; FROM_GUARDIAN];
    let (step, errno) = failed.to_numbers();
    put(&mut frame, SETUP_FAILED, step, errno);
    // SAFETY: `door` is where the guardian's end of the control socket
    // is, open (the caller follows it as it moves).
    unsafe { send(door, &frame) };
    turn_away(ahead)
}

/// Ends the guardian, or the command's process before its exec, with
/// idem's own failure code: nothing of the command ran.
fn exit_unrun() -> ! {
    // SAFETY: _exit ends this process without running anything of the
    // parent's (no atexit handlers, no flush).
    unsafe { libc::_exit(exit::IDEM_FAILED.into()) }
}

/// The guardian's own setup: its signals blocked, its group, its stdio,
/// of idem's descriptors only those it needs (moved out of the way), the
/// subreaper's role and a signalfd for its children. `door` follows the
/// control socket as it moves, so that a failure can still be told.
///
/// # Safety
/// Only in the guardian just forked, with the descriptors of `fds` open:
/// it closes every other descriptor, so nothing else may own one.
unsafe fn settle(fds: &Fds, door: &mut RawFd) -> Result<Settled, Failed> {
    // Signals sent to the run must not end the guardian: block them
    // all (the command unblocks them before exec). SIGCHLD is read
    // through a signalfd.
    // SAFETY: sigfillset fills a sigset_t we own (all zeroes is a valid
    // start); sigprocmask reads it; setpgid takes integers.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        if libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut()) != 0 {
            return Err(Failed::now(Step::BlockSignals));
        }
        if libc::setpgid(0, 0) != 0 {
            return Err(Failed::now(Step::GuardianGroup));
        }
    }
    // SAFETY: dup2 onto the stdio numbers of a process that has one
    // thread: no Rust object of this copy uses 0, 1 or 2 any more.
    unsafe {
        if libc::dup2(fds.stdout, 1) < 0
            || libc::dup2(fds.stderr, 2) < 0
            || fds.stdin.is_some_and(|stdin| libc::dup2(stdin, 0) < 0)
        {
            return Err(Failed::now(Step::Stdio));
        }
    }
    // SAFETY: the descriptors of `fds` are open (our contract).
    let (hold, foreground) = unsafe { keep_own(fds, door)? };
    // SAFETY: prctl takes integers.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(Failed::now(Step::Subreaper));
    }
    // SAFETY: sigemptyset and sigaddset fill a sigset_t we own (all zeroes
    // is a valid start); signalfd reads it and makes a new descriptor.
    let children = unsafe {
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::signalfd(-1, &chld, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC)
    };
    if children < 0 {
        return Err(Failed::now(Step::WatchChildren));
    }
    Ok(Settled {
        door: *door,
        hold,
        foreground,
        children,
    })
}

/// Keeps the door, the lock and the terminal, moved to `fds.floor` and up
/// (100, or lower under a low open-files limit), and closes
/// every other descriptor from 3 up; `door` is moved along.
///
/// # Safety
/// The descriptors of `fds` are open, and nothing else in this process
/// owns a descriptor from 3 up: only in the guardian just forked.
unsafe fn keep_own(
    fds: &Fds,
    door: &mut RawFd,
) -> Result<(Option<RawFd>, Option<Foreground>), Failed> {
    // Nothing of idem's stays open here but the door, the lock and the
    // stdio: a copy of idem's ledger lock would keep it held were idem
    // to die while holding it.
    // SAFETY: the descriptors are open (our contract).
    unsafe {
        *door = keep_fd(*door, fds.floor)?;
        let hold = match fds.hold {
            Some(hold) => Some(keep_fd(hold, fds.floor + 1)?),
            None => None,
        };
        let foreground = match fds.foreground {
            Some((terminal, group)) => Some((keep_fd(terminal, fds.floor + 2)?, group)),
            None => None,
        };
        close_from(
            3,
            [Some(*door), hold, foreground.map(|(terminal, _)| terminal)],
        );
        Ok((hold, foreground))
    }
}

/// Moves `fd` to at least `floor`, so the range below it can be closed.
///
/// # Safety
/// `fd` is open; the copy made is the caller's to own.
unsafe fn keep_fd(fd: RawFd, floor: RawFd) -> Result<RawFd, Failed> {
    // SAFETY: F_DUPFD makes a new descriptor and touches no memory.
    match unsafe { libc::fcntl(fd, libc::F_DUPFD, floor) } {
        moved if moved < 0 => Err(Failed::now(Step::KeepFds)),
        moved => Ok(moved),
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
/// of its own.
///
/// # Safety
/// Only in the guardian, with `settled` its own open descriptors and
/// `prepared` and `fds`' paths valid.
unsafe fn fork_ahead(
    prepared: &Prepared,
    fds: &Fds,
    settled: &Settled,
    me: pid_t,
) -> Result<Ahead, Failed> {
    let mut report = [0 as c_int; 2];
    let mut gate = [0 as c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own; close
    // takes back the two just made.
    unsafe {
        if libc::pipe2(report.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(Failed::now(Step::ForkCommand));
        }
        if libc::pipe2(gate.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            let failed = Failed::now(Step::ForkCommand);
            libc::close(report[0]);
            libc::close(report[1]);
            return Err(failed);
        }
    }
    let ([read_end, write_end], [wait_end, leave_end]) = (report, gate);
    // SAFETY: the guardian has one thread, so the child is a whole copy
    // of it; each side closes only the pipe ends it does not use. The
    // child runs async-signal-safe code only, up to its exec.
    match unsafe { fork_raw() } {
        -1 => {
            let failed = Failed::now(Step::ForkCommand);
            for fd in [read_end, write_end, wait_end, leave_end] {
                // SAFETY: the four ends made above, not used again.
                unsafe { libc::close(fd) };
            }
            Err(failed)
        }
        // SAFETY: in the child just forked, with the ends made above and
        // our own contract's descriptors (the door is not close-on-exec:
        // the command must not keep it).
        0 => unsafe {
            libc::close(read_end);
            libc::close(leave_end);
            libc::close(settled.door);
            // Its group and the terminal come after leave (see
            // `let_in`): nothing takes the terminal before the command
            // may run.
            let mut leave = [0u8; 1];
            if read_full(wait_end, &mut leave) < 1 {
                // Turned away at the gate.
                exit_unrun();
            }
            libc::close(wait_end);
            let terminal = settled.foreground.map(|(tty, _)| tty);
            let cgroup = fds.cgroup.map(|(procs, _)| procs);
            command::execute(prepared, settled.hold, me, terminal, cgroup, write_end)
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
fn turn_away(ahead: Option<Ahead>) -> ! {
    if let Some(ahead) = ahead {
        dismiss(ahead);
    }
    exit_unrun()
}

/// Closes the command's gate (it exits, running nothing) and its report,
/// and waits for it.
fn dismiss(ahead: Ahead) {
    let mut status = 0;
    // SAFETY: `ahead`'s ends are ours alone (see `Ahead`), closed once;
    // waitpid writes into the integer we own.
    unsafe {
        libc::close(ahead.gate);
        libc::close(ahead.report);
        libc::waitpid(ahead.pid, &mut status, 0);
    }
}

/// A step of letting the command in failed: it is dismissed.
fn refuse(ahead: Ahead, failed: Failed) -> Result<pid_t, Failed> {
    dismiss(ahead);
    Err(failed)
}

/// Lets the command's process through its gate: its pid, or the step that
/// failed (`Step::Exec`: the command could not be executed).
///
/// # Safety
/// `terminal` is the guardian's own open copy of the terminal, if any.
unsafe fn let_in(ahead: Ahead, terminal: Option<RawFd>) -> Result<pid_t, Failed> {
    if let Some(terminal) = terminal {
        // Both sides, so neither waits on the other's timing. The command
        // waits at its gate, so it has not exec'd: its group can be set.
        // SAFETY: setpgid and tcsetpgrp take integers; `terminal` is open
        // (our contract).
        unsafe {
            if libc::setpgid(ahead.pid, ahead.pid) != 0 {
                return refuse(ahead, Failed::now(Step::CommandGroup));
            }
            if libc::tcsetpgrp(terminal, ahead.pid) != 0 {
                return refuse(ahead, Failed::now(Step::Foreground));
            }
        }
    }
    // SAFETY: write reads one byte of a live array; the gate is ours alone
    // (see `Ahead`), closed once.
    unsafe {
        if libc::write(ahead.gate, [1u8].as_ptr().cast(), 1) != 1 {
            return refuse(ahead, Failed::now(Step::LetIn));
        }
        libc::close(ahead.gate);
    }
    executed(ahead.pid, ahead.report)
}

/// Whether command `pid` was executed: end of file on `report` says so;
/// a step and errno say it was not (it is reaped here then, so that it is
/// not taken for the command's end). `report` is closed.
fn executed(pid: pid_t, report: RawFd) -> Result<pid_t, Failed> {
    let mut bytes = [0u8; 8];
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
    Err(command::decode(bytes))
}
