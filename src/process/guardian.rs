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
/// The caller must not hold a lock another thread needs... nothing of the
/// parent is touched in the child but through async-signal-safe calls, and
/// `prepared` and `fds` stay valid until the child has exec'd or exited.
pub unsafe fn start(prepared: &Prepared, fds: &Fds) -> io::Result<pid_t> {
    // SAFETY: the child only calls `guardian`, which is async-signal-safe.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => unsafe { guardian(prepared, fds) },
        pid => Ok(pid),
    }
}

/// The guardian's life. Never returns.
unsafe fn guardian(prepared: &Prepared, fds: &Fds) -> ! {
    unsafe {
        let (door, hold, foreground) = settle(fds);
        let me = libc::getpid();
        let terminal = foreground.map(|(tty, _)| tty);
        // The command's process is forked now, while idem records the
        // attempt and syncs the ledger, and waits at a gate of its own:
        // leave lets it exec at once.
        let ahead = fork_ahead(prepared, door, hold, me, terminal);
        // The gate: tell idem our pid, wait for leave to start the command
        // (given once the ledger knows it). End of file: idem is gone or
        // could not record the attempt; nothing runs.
        let mut frame = [0u8; FROM_GUARDIAN];
        put(&mut frame, RUNNING, me, 0);
        if !send(door, &frame) {
            turn_away(ahead);
        }
        let Some((GO, deadline, grace)) = receive(door) else {
            turn_away(ahead);
        };
        if deadline != 0 && monotonic_ms() >= deadline {
            // The lease ran out before the command could start.
            turn_away(ahead);
        }
        let command = ahead.and_then(|ahead| let_in(ahead, terminal));
        // Our copies of the output pipes and stdin must not keep the
        // command's readers waiting.
        libc::close(0);
        libc::close(1);
        libc::close(2);
        let (pid, errno) = match command {
            Ok(pid) => (pid, 0),
            Err(errno) => (0, errno),
        };
        if errno != 0 {
            put(&mut frame, NOT_EXECUTED, errno, 0);
        } else {
            put(&mut frame, RUNNING, pid, 0);
        }
        send(door, &frame);
        watch(door, pid, deadline, grace, foreground)
    }
}

/// The guardian's own setup: its signals blocked, its group, its stdio,
/// and of idem's descriptors only those it needs, moved out of the way.
unsafe fn settle(fds: &Fds) -> (RawFd, Option<RawFd>, Option<(RawFd, pid_t)>) {
    unsafe {
        // Signals sent to the run must not end the guardian: block them
        // all (the command unblocks them before exec). SIGCHLD is read
        // through a signalfd.
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        libc::setpgid(0, 0);
        if libc::dup2(fds.stdout, 1) < 0 || libc::dup2(fds.stderr, 2) < 0 {
            libc::_exit(125);
        }
        if let Some(stdin) = fds.stdin {
            if libc::dup2(stdin, 0) < 0 {
                libc::_exit(125);
            }
        }
        // Nothing of idem's stays open here but the door, the lock and the
        // stdio: a copy of idem's ledger lock would keep it held were idem
        // to die while holding it.
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
unsafe fn keep_fd(fd: RawFd, floor: RawFd) -> RawFd {
    unsafe {
        let moved = libc::fcntl(fd, libc::F_DUPFD, floor);
        if moved < 0 {
            libc::_exit(125);
        }
        moved
    }
}

/// Closes every descriptor from `low` up except those in `keep`.
unsafe fn close_from(low: RawFd, keep: [Option<RawFd>; 3]) {
    let mut keep = keep.map(|fd| fd.unwrap_or(-1));
    keep.sort_unstable();
    let mut from = low as libc::c_uint;
    for fd in keep.into_iter().filter(|fd| *fd >= low) {
        let fd = fd as libc::c_uint;
        if fd > from {
            unsafe { close_range(from, fd - 1) };
        }
        from = fd + 1;
    }
    unsafe { close_range(from, libc::c_uint::MAX) };
}

unsafe fn close_range(first: libc::c_uint, last: libc::c_uint) {
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, last, 0) == 0 {
            return;
        }
        // Kernels before 5.9: close one by one up to the descriptor limit.
        let mut limit: libc::rlimit = std::mem::zeroed();
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(65536) as libc::c_uint
        } else {
            4096
        };
        let mut fd = first;
        while fd <= last && fd < top {
            libc::close(fd as c_int);
            fd += 1;
        }
    }
}

/// The command's process, forked before idem lets it in: its pid, and
/// the guardian's ends of its gate and of its exec report.
struct Ahead {
    pid: pid_t,
    gate: RawFd,
    report: RawFd,
}

/// Forks the command's process, which waits at its gate for one byte (end
/// of file: nothing runs) and then executes the command in a process group
/// of its own; the errno of a failed fork.
unsafe fn fork_ahead(
    prepared: &Prepared,
    door: RawFd,
    hold: Option<RawFd>,
    me: pid_t,
    terminal: Option<RawFd>,
) -> Result<Ahead, i32> {
    unsafe {
        let mut report = [0 as c_int; 2];
        let mut gate = [0 as c_int; 2];
        if libc::pipe2(report.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(errno());
        }
        if libc::pipe2(gate.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            let error = errno();
            libc::close(report[0]);
            libc::close(report[1]);
            return Err(error);
        }
        let ([read_end, write_end], [wait_end, leave_end]) = (report, gate);
        match libc::fork() {
            -1 => {
                let error = errno();
                for fd in [read_end, write_end, wait_end, leave_end] {
                    libc::close(fd);
                }
                Err(error)
            }
            0 => {
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
            }
            pid => {
                libc::close(write_end);
                libc::close(wait_end);
                Ok(Ahead {
                    pid,
                    gate: leave_end,
                    report: read_end,
                })
            }
        }
    }
}

/// No leave came: the command's process is told at its gate that nothing
/// runs, and waited for, so nothing of the attempt outlives the guardian.
unsafe fn turn_away(ahead: Result<Ahead, i32>) -> ! {
    unsafe {
        if let Ok(ahead) = ahead {
            libc::close(ahead.gate);
            let mut status = 0;
            libc::waitpid(ahead.pid, &mut status, 0);
        }
        libc::_exit(125);
    }
}

/// Lets the command's process through its gate: its pid, or the errno of
/// a failed exec.
unsafe fn let_in(ahead: Ahead, terminal: Option<RawFd>) -> Result<pid_t, i32> {
    unsafe {
        if let Some(terminal) = terminal {
            // Both sides, so neither waits on the other's timing.
            libc::setpgid(ahead.pid, ahead.pid);
            libc::tcsetpgrp(terminal, ahead.pid);
        }
        libc::write(ahead.gate, [1u8].as_ptr().cast(), 1);
        libc::close(ahead.gate);
        executed(ahead.pid, ahead.report)
    }
}

/// In the command's process: its group, its terminal, its signals, then
/// exec; on failure the errno goes to `report` (close-on-exec, so success
/// closes it).
unsafe fn execute(
    prepared: &Prepared,
    hold: Option<RawFd>,
    guardian: pid_t,
    terminal: Option<RawFd>,
    report: RawFd,
) -> ! {
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
        // As execvp: try each place in turn, and tell "not executable"
        // from "not found".
        let mut failure = libc::ENOENT;
        let mut denied = false;
        for candidate in &prepared.candidates {
            libc::execve(
                candidate.as_ptr(),
                prepared.argv.as_ptr(),
                prepared.envp.as_ptr(),
            );
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
        let bytes = failure.to_le_bytes();
        libc::write(report, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127);
    }
}

/// Whether command `pid` was executed: end of file on `report` says so;
/// an errno says it was not (it is reaped here then, so that it is not
/// taken for the command's end).
unsafe fn executed(pid: pid_t, report: RawFd) -> Result<pid_t, i32> {
    unsafe {
        let mut bytes = [0u8; 4];
        let got = read_full(report, &mut bytes);
        libc::close(report);
        if got < bytes.len() {
            return Ok(pid);
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        Err(i32::from_le_bytes(bytes))
    }
}
