//! The command's process between its fork and its exec: its group, its
//! terminal, its tie to the guardian, its signals, then the exec. Each step
//! is checked; one that fails is written to the exec report pipe as the
//! step and its errno, and nothing runs. Runs after fork: async-signal-safe
//! calls only, no allocation.

use std::os::fd::RawFd;

use nix::libc::{self, pid_t};

use super::prepare::Prepared;
use super::signals::{ignored_at_start, CAUGHT};
use super::steps::{Failed, Step};
use super::wire::errno;
use crate::exit;

/// In the command's process: its group, its terminal, its signals, then
/// exec; on failure the step and errno go to `report` (close-on-exec, so
/// success closes it).
///
/// # Safety
/// Only in the command's process just forked by the guardian: `hold`,
/// `terminal` and `report` are its own open descriptors and `prepared` is
/// valid (its pointers NUL-terminated). It never returns.
pub unsafe fn execute(
    prepared: &Prepared,
    hold: Option<RawFd>,
    guardian: pid_t,
    terminal: Option<RawFd>,
    cgroup: Option<*const libc::c_char>,
    report: RawFd,
) -> ! {
    // SAFETY: our contract's descriptors, open.
    let set = unsafe { enter(cgroup).and_then(|()| set_up(hold, guardian, terminal)) };
    if let Err(failed) = set.and_then(|()| prioritize(prepared.priority)) {
        // SAFETY: `report` is open (our contract).
        unsafe { tell(report, failed) };
    }
    // SAFETY: `prepared` is valid (our contract): its paths are C strings
    // and its argv and envp arrays end in a null pointer.
    let errno = unsafe { exec(prepared) };
    // SAFETY: `report` is open (our contract).
    unsafe {
        tell(
            report,
            Failed {
                step: Step::Exec,
                errno,
            },
        )
    }
}

/// The command's nice value and I/O priority (`--nice`, `--ionice`).
fn prioritize(priority: super::Priority) -> Result<(), Failed> {
    if let Some(nice) = priority.nice {
        // SAFETY: setpriority takes integers.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
            return Err(Failed::now(Step::Nice));
        }
    }
    if let Some(ioprio) = priority.ionice {
        // IOPRIO_WHO_PROCESS (1), this process (0).
        // SAFETY: ioprio_set takes integers.
        if unsafe { libc::syscall(libc::SYS_ioprio_set, 1, 0, ioprio) } != 0 {
            return Err(Failed::now(Step::IoNice));
        }
    }
    Ok(())
}

/// Writes this process into the attempt's cgroup (its `cgroup.procs`),
/// first, so that nothing it starts is outside it.
///
/// # Safety
/// `cgroup` is a NUL-terminated path, if any.
unsafe fn enter(cgroup: Option<*const libc::c_char>) -> Result<(), Failed> {
    let Some(procs) = cgroup else {
        return Ok(());
    };
    // SAFETY: open reads the NUL-terminated path (our contract); write
    // reads one byte of a live array ("0" names the writer itself); the
    // descriptor just opened is closed once.
    unsafe {
        let fd = libc::open(procs, libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(Failed::now(Step::EnterCgroup));
        }
        let wrote = libc::write(fd, b"0".as_ptr().cast(), 1);
        let failed = Failed::now(Step::EnterCgroup);
        libc::close(fd);
        if wrote != 1 {
            return Err(failed);
        }
    }
    Ok(())
}

/// Everything before the exec, each step checked.
///
/// # Safety
/// `hold` and `terminal` are this process's own open descriptors.
unsafe fn set_up(
    hold: Option<RawFd>,
    guardian: pid_t,
    terminal: Option<RawFd>,
) -> Result<(), Failed> {
    // SAFETY: setpgid, tcsetpgrp, getpid, prctl, getppid and fcntl take
    // integers; `terminal` and `hold` are open (our contract), and
    // `terminal` is not used after it is closed.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(Failed::now(Step::CommandGroup));
        }
        if let Some(terminal) = terminal {
            // In the terminal's foreground, as a shell puts a job: it reads
            // the terminal and gets its Ctrl-C. (Signals are still blocked,
            // so SIGTTOU does not stop this.)
            if libc::tcsetpgrp(terminal, libc::getpid()) != 0 {
                return Err(Failed::now(Step::Foreground));
            }
            libc::close(terminal);
        }
        // Should the guardian be killed, the command is told to stop.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
            return Err(Failed::now(Step::DeathSignal));
        }
        if libc::getppid() != guardian {
            return Err(Failed {
                step: Step::GuardianGone,
                errno: 0,
            });
        }
        if let Some(hold) = hold {
            // The command keeps the lock too (as under flock(1)): were the
            // guardian killed, what the command left running still holds
            // the key.
            if libc::fcntl(hold, libc::F_SETFD, 0) != 0 {
                return Err(Failed::now(Step::KeepLock));
            }
        }
    }
    set_up_signals()
}

/// The command's signals as idem was started with them: idem's handlers
/// reset, then every signal let in.
fn set_up_signals() -> Result<(), Failed> {
    let restore = |signal| {
        // SAFETY: signal(2) sets a disposition and touches no memory.
        if unsafe { libc::signal(signal, libc::SIG_DFL) } == libc::SIG_ERR {
            return Err(Failed::now(Step::SignalDefaults));
        }
        Ok(())
    };
    if !ignored_at_start(libc::SIGPIPE) {
        restore(libc::SIGPIPE)?;
    }
    // idem's handlers are still installed here (exec would reset them,
    // but only after the signals are let in): one running in this
    // window would write to a descriptor number that may be `report`.
    for signal in CAUGHT {
        if !ignored_at_start(signal) {
            restore(signal)?;
        }
    }
    // SAFETY: sigemptyset fills a sigset_t we own (all zeroes is a valid
    // start), which sigprocmask reads.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
            return Err(Failed::now(Step::UnblockSignals));
        }
    }
    Ok(())
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

/// Writes the step that failed to `report` and ends the process: 127
/// when the exec failed (as a shell's), idem's own 125 otherwise.
///
/// # Safety
/// `report` is the write end of the exec report, open.
unsafe fn tell(report: RawFd, failed: Failed) -> ! {
    let (step, errno) = failed.to_numbers();
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&step.to_le_bytes());
    bytes[4..].copy_from_slice(&errno.to_le_bytes());
    let code = if failed.step == Step::Exec {
        exit::NOT_FOUND_COMMAND.into()
    } else {
        exit::IDEM_FAILED.into()
    };
    // SAFETY: write reads the eight bytes of a live array (a pipe takes
    // them at once); `report` is open (our contract); _exit runs nothing
    // of the parent's.
    unsafe {
        libc::write(report, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(code)
    }
}

/// The step and errno that [`tell`] wrote.
pub fn decode(bytes: [u8; 8]) -> Failed {
    let mut step = [0u8; 4];
    let mut errno = [0u8; 4];
    step.copy_from_slice(&bytes[..4]);
    errno.copy_from_slice(&bytes[4..]);
    Failed::from_numbers(i32::from_le_bytes(step), i32::from_le_bytes(errno))
}
