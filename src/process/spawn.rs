//! Starting an attempt's first process: the pipes or pseudo-terminal for
//! its output, the fork of its guardian, and what idem says when the
//! command could not be executed.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;

use anyhow::{Context, Result};
use jiff::Timestamp;
use nix::libc;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use super::cgroup::RunCgroup;
use super::prepare::{Fds, Prepared};
use super::steps::Failed;
use super::wire::{self, read_report};
use super::{guardian, AttemptEnd, Containment, Spec, Usage};
use crate::exit;

/// An attempt's first process, forked, and idem's ends of its pipes.
pub struct Forked {
    /// The guardian's pid.
    pub pid: i32,
    /// What holds the attempt's processes together.
    pub contained: Containment,
    /// idem's end of the socket to the guardian.
    pub gate: UnixStream,
    pub out: OwnedFd,
    /// None when stderr is merged into stdout.
    pub err: Option<OwnedFd>,
    /// Where the spool feeds the command's stdin.
    pub stdin: Option<OwnedFd>,
    /// The attempt's cgroup, removed when this is dropped (after the
    /// guardian's reap: the attempt is over then).
    pub cgroup: Option<RunCgroup>,
}

/// Forks the attempt's guardian with its ends of the pipes and `hold`;
/// idem keeps only its own ends.
pub fn fork(spec: &Spec<'_>, prepared: &Prepared, hold: Option<OwnedFd>) -> Result<Forked> {
    let Pipes {
        out: (out_read, out_write),
        err: (err_read, err_write),
        stdin: (stdin_read, stdin_write),
    } = Pipes::open(spec)?;
    let (gate, door) =
        UnixStream::pair().context("could not create a socket pair to start the command")?;
    let cgroup = match spec.contain {
        Containment::Cgroup => Some(RunCgroup::make(&spec.cgroup_name).map_err(|error| {
            anyhow::anyhow!(
                "could not make the attempt's cgroup: {}; nothing ran (--contain guardian runs without one)",
                exit::io_words(&error)
            )
        })?),
        _ => None,
    };
    let fds = Fds {
        door: door.as_raw_fd(),
        stdin: stdin_read.as_ref().map(AsRawFd::as_raw_fd),
        stdout: out_write.as_raw_fd(),
        stderr: err_write.as_ref().unwrap_or(&out_write).as_raw_fd(),
        hold: hold.as_ref().map(AsRawFd::as_raw_fd),
        foreground: spec
            .terminal
            .then(|| (libc::STDIN_FILENO, nix::unistd::getpgrp().as_raw())),
        floor: super::prepare::kept_fds_floor(),
        cgroup: cgroup.as_ref().map(RunCgroup::paths),
    };
    let namespace = spec.contain == Containment::PidNamespace && !spec.terminal;
    // SAFETY: `prepared` and `fds` outlive the fork; the child runs only
    // the guardian's async-signal-safe code.
    let (pid, contained) = unsafe { guardian::start(prepared, &fds, namespace) }
        .context("could not start the command (fork failed)")?;
    let contained = match cgroup {
        Some(_) => Containment::Cgroup,
        None => contained,
    };
    // The attempt's processes hold the lock now; idem has its own.
    drop((out_write, err_write, door, hold, stdin_read));
    Ok(Forked {
        pid,
        contained,
        gate,
        out: out_read,
        err: err_read,
        stdin: stdin_write,
        cgroup,
    })
}

/// What the guardian tells of the command it let in.
pub enum LetIn {
    /// It runs as this pid. 0: no answer came (the guardian was killed as
    /// the command started, or found the lease run out); what it ran, if
    /// anything, is waited for.
    Running(i32),
    /// It could not be executed: the errno.
    NotExecuted(i32),
    /// A step of its setup failed, said in words; nothing ran.
    SetupFailed(String),
}

/// Whether the command let in could be executed, as its guardian tells.
pub fn executed(gate: &mut UnixStream) -> LetIn {
    match read_report(gate) {
        Some(report) if report.kind == wire::NOT_EXECUTED => LetIn::NotExecuted(report.a),
        Some(report) if report.kind == wire::SETUP_FAILED => {
            LetIn::SetupFailed(Failed::words(report.a, report.b))
        }
        Some(report) if report.kind == wire::RUNNING => LetIn::Running(report.a),
        _ => LetIn::Running(0),
    }
}

/// An attempt whose command could not be executed: 126 or 127, said.
pub fn not_started(spec: &Spec<'_>, started_at: Timestamp, error: &io::Error) -> AttemptEnd {
    let (code, reason) = spawn_failure(spec, error);
    AttemptEnd::not_started(started_at, code, reason)
}

/// The command's ends and idem's: stdout (a pseudo-terminal at a terminal),
/// stderr unless merged into stdout, stdin when fed from the spool.
struct Pipes {
    out: (OwnedFd, OwnedFd),
    err: (Option<OwnedFd>, Option<OwnedFd>),
    stdin: (Option<OwnedFd>, Option<OwnedFd>),
}

impl Pipes {
    fn open(spec: &Spec<'_>) -> Result<Pipes> {
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(io::Error::from)
                .context("could not create a pipe for the command")
        };
        let out = if spec.terminal {
            pseudo_terminal().context("could not open a pseudo-terminal for the command")?
        } else {
            pipe()?
        };
        let split = |(read, write): (OwnedFd, OwnedFd)| (Some(read), Some(write));
        let err = if spec.merged {
            (None, None)
        } else {
            split(pipe()?)
        };
        let stdin = match spec.stdin {
            Some(_) => split(pipe()?),
            None => (None, None),
        };
        Ok(Pipes { out, err, stdin })
    }
}

/// A pseudo-terminal for the command's output, sized and set as the real
/// one, except that output is not post-processed (no `\n` to `\r\n`): the
/// real terminal does that for what idem copies to it.
fn pseudo_terminal() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::termios::{tcgetattr, OutputFlags};
    // SAFETY: winsize is plain integers, for which all zeroes is valid.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize into the struct we own.
    let sized = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &raw mut size) } == 0;
    let mut modes = tcgetattr(std::io::stdin()).map_err(io::Error::from)?;
    modes.output_flags.remove(OutputFlags::OPOST);
    let size = nix::pty::Winsize {
        ws_row: size.ws_row,
        ws_col: size.ws_col,
        ws_xpixel: size.ws_xpixel,
        ws_ypixel: size.ws_ypixel,
    };
    let pty = nix::pty::openpty(sized.then_some(&size), &modes).map_err(io::Error::from)?;
    for fd in [&pty.master, &pty.slave] {
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .map_err(io::Error::from)?;
    }
    Ok((pty.master, pty.slave))
}

/// Makes idem's group the terminal's foreground again, as a shell does
/// after a job (the guardian does it first; this covers a killed one).
pub fn take_the_terminal_back() {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    // From the background, tcsetpgrp raises SIGTTOU unless it is blocked.
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), None);
    let _ = nix::unistd::tcsetpgrp(std::io::stdin(), nix::unistd::getpgrp());
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&ttou), None);
}

pub fn reap(pid: i32) -> WaitStatus {
    loop {
        match waitpid(Pid::from_raw(pid), None) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(status) => return status,
            Err(_) => return WaitStatus::Exited(Pid::from_raw(pid), exit::IDEM_FAILED.into()),
        }
    }
}

/// [`reap`], with what the guardian and every process it reaped (the
/// whole attempt, however it detached) used: their CPU time and the
/// largest peak memory among them, by wait4(2).
pub fn reap_with_usage(pid: i32) -> (WaitStatus, Usage) {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain integers, for which all zeroes is valid;
        // wait4 writes into the status and rusage we own.
        let (reaped, used) = unsafe {
            let mut used: libc::rusage = std::mem::zeroed();
            (libc::wait4(pid, &mut status, 0, &mut used), used)
        };
        if reaped == pid {
            let status = WaitStatus::from_raw(Pid::from_raw(pid), status).unwrap_or(
                WaitStatus::Exited(Pid::from_raw(pid), exit::IDEM_FAILED.into()),
            );
            return (status, Usage::of(&used));
        }
        if reaped < 0 && nix::errno::Errno::last() == nix::errno::Errno::EINTR {
            continue;
        }
        return (reap(pid), Usage::default());
    }
}

/// The argv to execute and the variables to set.
pub fn command_line(spec: &Spec<'_>) -> (Vec<OsString>, Vec<(&'static str, OsString)>) {
    let argv = if spec.shell {
        let script = spec
            .argv
            .iter()
            .map(|word| word.as_os_str())
            .collect::<Vec<_>>()
            .join(std::ffi::OsStr::new(" "));
        vec!["/bin/sh".into(), "-c".into(), script]
    } else {
        spec.argv.to_vec()
    };
    (argv, spec.env.clone())
}

fn spawn_failure(spec: &Spec<'_>, error: &io::Error) -> (u8, String) {
    let program = if spec.shell {
        "/bin/sh".into()
    } else {
        String::from_utf8_lossy(spec.argv[0].as_bytes()).into_owned()
    };
    match error.kind() {
        io::ErrorKind::NotFound => {
            let hint = exit::hint::shell_hint(&spec.argv[0])
                .filter(|_| !spec.shell)
                .unwrap_or("check the name and PATH");
            (
                exit::NOT_FOUND_COMMAND,
                format!("command not found: {program} ({hint})"),
            )
        }
        io::ErrorKind::PermissionDenied => (
            exit::CANNOT_EXECUTE,
            format!("cannot execute {program}: permission denied (chmod +x it?)"),
        ),
        _ => (
            exit::CANNOT_EXECUTE,
            format!("cannot execute {program}: {}", exit::io_words(error)),
        ),
    }
}
