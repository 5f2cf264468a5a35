//! The kernel's hold on a run: which containment an attempt gets on this
//! host, and the forks that make it.
//!
//! `--contain auto` (the default) never changes the command's pids: where
//! cgroup v2 is writable (root, or a subtree delegated to the user), each
//! attempt gets a cgroup of its own (see `cgroup`), which the command's
//! process enters before its exec; everywhere else, the guardian alone: a
//! subreaper that holds the run's lock and stops the run when idem dies,
//! with the `IDEM_RUN_ID` look (`scan`) for a worker that closed the lock
//! and outlived both.
//!
//! `--contain pid-namespace` forks the guardian as the init of a PID
//! namespace of its own. When it dies, for whatever reason (a SIGKILL of
//! it and idem together, as `pkill -9 idem` does), the kernel SIGKILLs
//! every process left in the namespace. What that changes for the
//! command: its pids are the namespace's (`$$` is small, its parent is
//! pid 1) while `/proc` is still the host's, so `ps -p $$` and a pidfile
//! name another process: it is used only where it is chosen.
//!
//! At a terminal the guardian is forked outside any PID namespace: job
//! control (Ctrl-Z of the command stopping idem's group, the terminal
//! given back) crosses the namespace's border.

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
    /// The command's processes are in a cgroup of the attempt's own.
    Cgroup,
}

/// `--contain`: what a run asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// A cgroup where cgroup v2 is writable, else the guardian.
    Auto,
    Cgroup,
    PidNamespace,
    Guardian,
}

/// What this host gives a run for `choice`; `Err`, the one line that says
/// why it cannot, before anything is claimed.
pub fn resolve(choice: Choice) -> Result<Containment, String> {
    match choice {
        Choice::Auto if super::cgroup::base().is_some() => Ok(Containment::Cgroup),
        Choice::Auto | Choice::Guardian => Ok(Containment::GuardianOnly),
        Choice::Cgroup => match super::cgroup::base() {
            Some(_) => Ok(Containment::Cgroup),
            None => Err("--contain cgroup: this host gives idem no writable cgroup v2 (none mounted, read-only, or no subtree delegated to this user); use --contain auto".into()),
        },
        Choice::PidNamespace => match pid_namespaces() {
            true => Ok(Containment::PidNamespace),
            false => Err("--contain pid-namespace: the kernel refuses idem a PID namespace here (it takes root or CAP_SYS_ADMIN); use --contain auto".into()),
        },
    }
}

impl Containment {
    /// What people read: `idem -v run` and `ledger show`.
    pub fn words(self) -> &'static str {
        match self {
            Containment::PidNamespace => "pid namespace",
            Containment::GuardianOnly => "guardian only",
            Containment::Cgroup => "cgroup",
        }
    }

    /// The stable name scripts and ledgers keep (`show --json`, `ledger
    /// export`, PostgreSQL's column): never changed once released.
    pub fn name(self) -> &'static str {
        match self {
            Containment::PidNamespace => "pid-namespace",
            Containment::GuardianOnly => "guardian",
            Containment::Cgroup => "cgroup",
        }
    }

    /// The containment [`Containment::name`] gives `name`.
    pub fn parse(name: &str) -> Option<Containment> {
        Some(match name {
            "pid-namespace" => Containment::PidNamespace,
            "guardian" => Containment::GuardianOnly,
            "cgroup" => Containment::Cgroup,
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
