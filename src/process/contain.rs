//! The kernel's hold on a run: which containment an attempt gets on this
//! host, and the forks that make it.
//!
//! Where idem may make one (root, or CAP_SYS_ADMIN), the guardian is
//! forked as the init of a PID namespace of its own. When it dies, for
//! whatever reason (a SIGKILL of it and idem together, as `pkill -9 idem`
//! does), the kernel SIGKILLs every process left in the namespace: nothing
//! of the run outlives it, not even a worker that closed every descriptor
//! it inherited (and so the run's lock) and left for a session of its own.
//!
//! What that changes for the command: its pids are the namespace's (`$$`
//! is small, and it is not pid 1: the guardian is), while `/proc` is still
//! the host's, so `ps` and `/proc/self` show host pids. Its files, users,
//! network, mounts and `IDEM_` variables are the same.
//!
//! At a terminal the guardian is forked as before: job control (Ctrl-Z of
//! the command stopping idem's group, the terminal given back) crosses the
//! namespace's border. Where the kernel refuses a namespace (no privilege;
//! a user namespace would also change the command's users), idem falls
//! back, silently, to the guardian alone: a subreaper that holds the run's
//! lock and stops the run when idem dies.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::libc::{self, c_long, pid_t};

/// What holds an attempt's processes together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Containment {
    /// The guardian is the init of a PID namespace of the run's own.
    PidNamespace,
    /// The guardian alone: a subreaper holding the run's lock.
    GuardianOnly,
}

impl Containment {
    /// What people read: `idem -v run` and `ledger show`.
    pub fn words(self) -> &'static str {
        match self {
            Containment::PidNamespace => "pid namespace",
            Containment::GuardianOnly => "guardian only",
        }
    }

    /// The stable name scripts and ledgers keep (`show --json`, `ledger
    /// export`, PostgreSQL's column): never changed once released.
    pub fn name(self) -> &'static str {
        match self {
            Containment::PidNamespace => "pid-namespace",
            Containment::GuardianOnly => "guardian",
        }
    }

    /// The containment [`Containment::name`] gives `name`.
    pub fn parse(name: &str) -> Option<Containment> {
        Some(match name {
            "pid-namespace" => Containment::PidNamespace,
            "guardian" => Containment::GuardianOnly,
            _ => return None,
        })
    }
}

/// The kernel refused a PID namespace once: this host will not give one.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Forks the guardian, in a PID namespace of its own when `wanted` and the
/// kernel allows it; in the parent, the child's pid and its containment;
/// in the child, 0.
///
/// # Safety
/// As fork(2) in a process that may run other threads: the child makes
/// async-signal-safe calls only, and no glibc `fork` (its handlers would
/// take locks another thread of the parent may have held: see
/// [`fork_raw`]), and ends in exec or `_exit`.
pub unsafe fn fork_guardian(wanted: bool) -> io::Result<(pid_t, Containment)> {
    if wanted && !REFUSED.load(Ordering::Relaxed) {
        // SAFETY: our contract.
        match unsafe { clone(libc::CLONE_NEWPID) } {
            Ok(pid) => return Ok((pid, Containment::PidNamespace)),
            Err(error) if refused(&error) => REFUSED.store(true, Ordering::Relaxed),
            Err(error) => return Err(error),
        }
    }
    // SAFETY: our contract.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        pid => Ok((pid, Containment::GuardianOnly)),
    }
}

/// fork(2) without glibc's fork handlers: for a process that is a copy of
/// a multithreaded one (the guardian, forked by [`clone`]), whose malloc
/// locks another thread may have held at the copy, so that glibc's
/// `fork` would wait on them for ever.
///
/// # Safety
/// The child makes async-signal-safe calls only and ends in exec or
/// `_exit`; in it, glibc's cached thread id is the parent's until then.
pub unsafe fn fork_raw() -> pid_t {
    // SAFETY: our contract.
    unsafe { clone(0) }.unwrap_or(-1)
}

/// clone(2) as fork(2) (no shared memory, SIGCHLD at the child's end,
/// a null stack: the child goes on on a copy of the parent's), with
/// `flags` more.
///
/// # Safety
/// As [`fork_raw`].
unsafe fn clone(flags: libc::c_int) -> io::Result<pid_t> {
    // SAFETY: without CLONE_VM the child runs on a copy-on-write copy of
    // the parent's memory and stack, as after fork; the pointers are null.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            c_long::from(flags | libc::SIGCHLD),
            0 as c_long,
            0 as c_long,
            0 as c_long,
            0 as c_long,
        )
    };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        pid => Ok(pid as pid_t),
    }
}

/// Whether this host gives idem a PID namespace for a run: one is made
/// for a child that exits at once.
pub fn pid_namespaces() -> bool {
    // SAFETY: the child makes one async-signal-safe call, `_exit`.
    match unsafe { clone(libc::CLONE_NEWPID) } {
        Ok(0) => {
            // SAFETY: _exit ends the child without running anything of
            // the parent's.
            unsafe { libc::_exit(0) }
        }
        Ok(pid) => {
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            true
        }
        Err(_) => false,
    }
}

/// The kernel will not make a PID namespace for idem here: no privilege,
/// too many namespaces, or a kernel without them.
fn refused(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EPERM | libc::EINVAL | libc::ENOSPC | libc::EUSERS | libc::ENOSYS)
    )
}
