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

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

use nix::libc::{self, c_char, c_int, pid_t};

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
        pids: (0..count).map(|index| number(index + 2)).collect(),
    }
}

/// The command, made ready before the fork: the child may not allocate.
pub struct Prepared {
    /// Paths to try in order (a PATH search done ahead, as execvp would).
    candidates: Vec<CString>,
    _argv: Vec<CString>,
    argv: Vec<*const c_char>,
    _envp: Vec<CString>,
    envp: Vec<*const c_char>,
}

impl Prepared {
    pub fn new(
        argv: &[OsString],
        env: &[(&str, OsString)],
        env_remove: &[&str],
    ) -> io::Result<Prepared> {
        let c = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "an argument holds a NUL byte")
            })
        };
        let program = argv
            .first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command"))?;
        let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(name, _)| {
                !env_remove.iter().any(|gone| OsStr::new(gone) == name)
                    && !env.iter().any(|(set, _)| OsStr::new(set) == name)
            })
            .collect();
        vars.extend(env.iter().map(|(name, value)| (name.into(), value.clone())));
        let path = vars
            .iter()
            .find(|(name, _)| name == "PATH")
            .map(|(_, value)| value.clone());
        let candidates = search(program, path.as_deref())
            .iter()
            .map(|candidate| c(candidate))
            .collect::<io::Result<Vec<_>>>()?;
        let owned_argv = argv
            .iter()
            .map(|arg| c(arg.as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let owned_envp = vars
            .iter()
            .map(|(name, value)| {
                let mut pair = name.as_bytes().to_vec();
                pair.push(b'=');
                pair.extend_from_slice(value.as_bytes());
                c(&pair)
            })
            .collect::<io::Result<Vec<_>>>()?;
        let pointers = |strings: &[CString]| {
            let mut pointers: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
            pointers.push(std::ptr::null());
            pointers
        };
        Ok(Prepared {
            candidates,
            argv: pointers(&owned_argv),
            _argv: owned_argv,
            envp: pointers(&owned_envp),
            _envp: owned_envp,
        })
    }
}

/// Where execvp would look for `program`.
fn search(program: &OsStr, path: Option<&OsStr>) -> Vec<Vec<u8>> {
    let name = program.as_bytes();
    if name.contains(&b'/') {
        return vec![name.to_vec()];
    }
    let path = path.map_or(&b"/usr/local/bin:/usr/bin:/bin"[..], |path| path.as_bytes());
    path.split(|byte| *byte == b':')
        .map(|dir| {
            let dir = if dir.is_empty() { &b"."[..] } else { dir };
            let mut candidate = dir.to_vec();
            candidate.push(b'/');
            candidate.extend_from_slice(name);
            candidate
        })
        .collect()
}

/// The descriptors the guardian is started with.
pub struct Fds {
    /// Its end of the control socket.
    pub door: RawFd,
    /// The command's stdin, when it is not idem's own (a replayed spool).
    pub stdin: Option<RawFd>,
    /// The write ends of the command's stdout and stderr.
    pub stdout: RawFd,
    pub stderr: RawFd,
    /// The run's kernel lock, inherited by the command, if the ledger has one.
    pub hold: Option<RawFd>,
    /// At a terminal: the terminal, and idem's process group. The command
    /// runs in the terminal's foreground and idem gets it back after.
    pub foreground: Option<(RawFd, pid_t)>,
}

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
        if !super::events::ignored_at_start(libc::SIGPIPE) {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
        // idem's handlers are still installed here (exec would reset them,
        // but only after the signals are let in): one running in this
        // window would write to a descriptor number that may be `report`.
        for signal in super::events::CAUGHT {
            if !super::events::ignored_at_start(signal) {
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

/// Reaps everything, tells idem how the command ended and what it left,
/// passes signals on, stops the run when idem goes away or its deadline
/// passes; exits when no process of the run is left.
unsafe fn watch(
    door: RawFd,
    command: pid_t,
    deadline: i64,
    grace: i64,
    foreground: Option<(RawFd, pid_t)>,
) -> ! {
    let mut watch = Watch {
        door,
        command,
        foreground,
        deadline,
        grace,
        lease_grace: grace,
        kill_at: 0,
        again_at: 0,
        seen: Seen {
            pids: [0; 1024],
            len: 0,
        },
        main_ended: command == 0,
        told_left: false,
        suspended: false,
        frame: [0u8; FROM_GUARDIAN],
    };
    unsafe {
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        let children = libc::signalfd(-1, &chld, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        loop {
            watch.reap();
            watch.tell_what_is_left();
            let now = monotonic_ms();
            watch.on_time(now);
            let wake = earliest(earliest(watch.deadline, watch.kill_at), watch.again_at);
            let timeout = if wake == 0 {
                -1
            } else {
                (wake - now).clamp(1, 60_000) as c_int
            };
            let mut polled = [
                libc::pollfd {
                    fd: watch.door,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: children,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            libc::poll(polled.as_mut_ptr(), 2, timeout);
            if polled[1].revents != 0 {
                let mut info = [0u8; 128];
                while libc::read(children, info.as_mut_ptr().cast(), info.len()) > 0 {}
            }
            if watch.door >= 0 && polled[0].revents != 0 {
                watch.on_message(receive(watch.door));
            }
        }
    }
}

/// What the guardian keeps track of while the run goes on.
struct Watch {
    /// Its end of the control socket; -1 once idem is gone.
    door: RawFd,
    /// The command's main process (and group); 0 if it never ran.
    command: pid_t,
    foreground: Option<(RawFd, pid_t)>,
    /// Monotonic ms to stop the run at (a shared ledger's lease), or 0.
    deadline: i64,
    /// Grace before SIGKILL when idem dies, and when the lease runs out.
    grace: i64,
    lease_grace: i64,
    /// When to SIGKILL what is left, or 0.
    kill_at: i64,
    /// While stopping the run, SIGTERM again now and then: a process
    /// whose parent was dying as the tree was walked had not yet moved
    /// under the guardian, and was missed.
    again_at: i64,
    seen: Seen,
    main_ended: bool,
    told_left: bool,
    /// Stopped by Ctrl-Z, waiting for idem to be continued.
    suspended: bool,
    frame: [u8; FROM_GUARDIAN],
}

impl Watch {
    fn tell(&mut self, kind: u8, a: i32) {
        put(&mut self.frame, kind, a, 0);
        unsafe { send(self.door, &self.frame) };
    }

    /// The terminal goes back to idem once the command's main process
    /// ends; what it left running is in the background then, as under a
    /// shell.
    fn give_back(&self) {
        if let Some((terminal, group)) = self.foreground {
            unsafe { libc::tcsetpgrp(terminal, group) };
        }
    }

    /// Reaps every process that ended; exits once none is left.
    fn reap(&mut self) {
        loop {
            let mut status = 0;
            let reaped = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::WUNTRACED) };
            if reaped > 0 && libc::WIFSTOPPED(status) {
                // Ctrl-Z at the terminal: stop idem too, so that its shell
                // sees the job stopped and takes the terminal.
                if let (true, Some((terminal, group))) = (reaped == self.command, self.foreground) {
                    unsafe {
                        libc::tcsetpgrp(terminal, group);
                        libc::kill(-group, libc::SIGTSTP);
                    }
                    self.suspended = true;
                }
            } else if reaped > 0 {
                if reaped == self.command {
                    self.main_ended = true;
                    self.give_back();
                    self.tell(EXITED, status);
                }
            } else if reaped == 0 {
                return;
            } else if errno() != libc::EINTR {
                // ECHILD: nothing of the run is left.
                self.give_back();
                unsafe { libc::_exit(0) };
            }
        }
    }

    /// Once the main process has ended, says (once) what it left running.
    fn tell_what_is_left(&mut self) {
        if !self.main_ended || self.told_left || self.door < 0 {
            return;
        }
        self.told_left = true;
        let mut pids = [0 as pid_t; 8];
        let count = unsafe { walk(0, &mut pids) };
        if count == 0 {
            return;
        }
        put(&mut self.frame, LEFT_RUNNING, count, 0);
        for (index, pid) in pids.iter().enumerate() {
            let at = 1 + 4 * (index + 2);
            if let Some(slot) = self.frame.get_mut(at..at + 4) {
                slot.copy_from_slice(&pid.to_le_bytes());
            }
        }
        unsafe { send(self.door, &self.frame) };
    }

    /// Stops the run: SIGTERM to all of it, SIGKILL `grace` ms later.
    fn stop(&mut self, now: i64, grace: i64) {
        unsafe { signal_run(self.command, libc::SIGTERM, true, &mut self.seen) };
        self.kill_at = earliest(self.kill_at, now + grace);
        self.again_at = now + 200;
    }

    fn on_time(&mut self, now: i64) {
        if self.deadline != 0 && now >= self.deadline {
            self.deadline = 0;
            self.tell(LEASE_RAN_OUT, 0);
            self.stop(now, self.lease_grace);
        }
        if self.again_at != 0 && now >= self.again_at {
            unsafe { signal_the_missed(&mut self.seen) };
            self.again_at = now + 200;
        }
        if self.kill_at != 0 && now >= self.kill_at {
            unsafe { signal_run(self.command, libc::SIGKILL, false, &mut self.seen) };
            // Again soon: a process may have forked meanwhile.
            self.kill_at = now + 100;
        }
    }

    fn on_message(&mut self, message: Option<(u8, i64, i64)>) {
        match message {
            Some((SIGNAL, signal, cont)) => {
                unsafe { signal_run(self.command, signal as c_int, cont == 1, &mut self.seen) };
                if signal == i64::from(libc::SIGTERM) && cont == 1 {
                    self.again_at = monotonic_ms() + 200;
                }
            }
            Some((RESUME, _, _)) => {
                // After Ctrl-Z, idem was continued (`fg`): so is the
                // command, in the terminal's foreground.
                if let (true, Some((terminal, _))) = (self.suspended, self.foreground) {
                    unsafe {
                        libc::tcsetpgrp(terminal, self.command);
                        libc::kill(-self.command, libc::SIGCONT);
                    }
                    self.suspended = false;
                }
            }
            Some((DEADLINE, at, after)) => {
                self.deadline = at;
                self.lease_grace = after;
            }
            Some(_) => {}
            None => {
                // idem is gone: the run must not go on unowned.
                unsafe { libc::close(self.door) };
                self.door = -1;
                self.stop(monotonic_ms(), self.grace);
            }
        }
    }
}

fn earliest(a: i64, b: i64) -> i64 {
    match (a, b) {
        (0, b) => b,
        (a, 0) => a,
        (a, b) => a.min(b),
    }
}

/// Sends `signal` to the command's group and to every descendant of the
/// guardian, wherever it moved (a SIGCONT after it with `cont`).
unsafe fn signal_run(command: pid_t, signal: c_int, cont: bool, seen: &mut Seen) {
    unsafe {
        if command > 0 {
            libc::kill(-command, signal);
            if cont {
                libc::kill(-command, libc::SIGCONT);
            }
        }
        seen.len = 0;
        walk_and(signal, cont, &mut [], Some(seen));
    }
}

/// Sends SIGTERM to the descendants that [`signal_run`] missed (their
/// parent was dying as it walked), never twice to one process: a command
/// that traps SIGTERM to clean up gets it once, as from `timeout(1)`.
unsafe fn signal_the_missed(seen: &mut Seen) {
    unsafe {
        walk_and(libc::SIGTERM, true, &mut [], Some(seen));
    }
}

/// The pids a stop has signalled already.
struct Seen {
    pids: [pid_t; 1024],
    len: usize,
}

impl Seen {
    fn has(&self, pid: pid_t) -> bool {
        self.pids
            .get(..self.len)
            .is_some_and(|pids| pids.contains(&pid))
    }

    fn add(&mut self, pid: pid_t) {
        if let Some(slot) = self.pids.get_mut(self.len) {
            *slot = pid;
            self.len += 1;
        }
    }
}

/// Counts the descendants of the guardian, keeping the first pids.
unsafe fn walk(signal: c_int, first: &mut [pid_t]) -> i32 {
    unsafe { walk_and(signal, false, first, None) }
}

/// Visits every descendant of the guardian (through `/proc`; without it,
/// only the command's group is reached), signalling each when `signal` is
/// not 0; returns how many there are, keeping the first pids in `first`.
unsafe fn walk_and(
    signal: c_int,
    cont: bool,
    first: &mut [pid_t],
    mut seen: Option<&mut Seen>,
) -> i32 {
    unsafe {
        let me = libc::getpid();
        let mut todo = [0 as pid_t; 1024];
        let mut pending = 1usize;
        todo[0] = me;
        let mut count = 0i32;
        while pending > 0 {
            pending -= 1;
            let parent = todo.get(pending).copied().unwrap_or(0);
            let mut buffer = [0u8; 4096];
            let read = read_children(parent, &mut buffer);
            let mut number: i64 = -1;
            for &byte in buffer.get(..read).unwrap_or(&[]).iter().chain(b" ") {
                if byte.is_ascii_digit() {
                    number = number.max(0) * 10 + i64::from(byte - b'0');
                    continue;
                }
                if number > 0 && number as pid_t != me {
                    let child = number as pid_t;
                    let again = seen.as_ref().is_some_and(|seen| seen.has(child));
                    if let Some(seen) = seen.as_mut().filter(|_| !again) {
                        seen.add(child);
                    }
                    if signal != 0 && !again {
                        libc::kill(child, signal);
                        if cont {
                            libc::kill(child, libc::SIGCONT);
                        }
                    }
                    if let Some(slot) = first.get_mut(count as usize) {
                        *slot = child;
                    }
                    count += 1;
                    if let Some(slot) = todo.get_mut(pending) {
                        *slot = child;
                        pending += 1;
                    }
                }
                number = -1;
            }
        }
        count
    }
}

/// Reads `/proc/PID/task/PID/children` into `buffer`; 0 bytes when absent.
unsafe fn read_children(pid: pid_t, buffer: &mut [u8]) -> usize {
    unsafe {
        let mut path = [0u8; 64];
        let mut at = 0;
        for part in [
            &b"/proc/"[..],
            &decimal(pid).0[..],
            b"/task/",
            &decimal(pid).0[..],
            b"/children",
        ] {
            for &byte in part.iter().filter(|byte| **byte != 0) {
                if let Some(slot) = path.get_mut(at) {
                    *slot = byte;
                    at += 1;
                }
            }
        }
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let mut total = 0usize;
        while total < buffer.len() {
            let read = libc::read(
                fd,
                buffer.as_mut_ptr().add(total).cast(),
                buffer.len() - total,
            );
            if read <= 0 {
                break;
            }
            total += read as usize;
        }
        libc::close(fd);
        total
    }
}

/// The decimal digits of `n`, NUL-padded.
fn decimal(n: pid_t) -> ([u8; 12], usize) {
    let mut digits = [0u8; 12];
    let mut reversed = [0u8; 12];
    let mut n = n.max(0) as u32;
    let mut len = 0;
    loop {
        if let Some(slot) = reversed.get_mut(len) {
            *slot = b'0' + (n % 10) as u8;
        }
        len += 1;
        n /= 10;
        if n == 0 || len >= 11 {
            break;
        }
    }
    for index in 0..len {
        if let (Some(to), Some(from)) = (digits.get_mut(index), reversed.get(len - 1 - index)) {
            *to = *from;
        }
    }
    (digits, len)
}

fn put(frame: &mut [u8; FROM_GUARDIAN], kind: u8, a: i32, b: i32) {
    *frame = [0u8; FROM_GUARDIAN];
    frame[0] = kind;
    frame[1..5].copy_from_slice(&a.to_le_bytes());
    frame[5..9].copy_from_slice(&b.to_le_bytes());
}

/// Sends a frame to idem; false when idem is gone.
unsafe fn send(door: RawFd, frame: &[u8; FROM_GUARDIAN]) -> bool {
    if door < 0 {
        return false;
    }
    let sent = unsafe { libc::send(door, frame.as_ptr().cast(), frame.len(), libc::MSG_NOSIGNAL) };
    sent == frame.len() as isize
}

/// Reads one frame from idem; `None` at end of file or on an error.
unsafe fn receive(door: RawFd) -> Option<(u8, i64, i64)> {
    let mut frame = [0u8; TO_GUARDIAN];
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
unsafe fn read_full(fd: RawFd, buffer: &mut [u8]) -> usize {
    let mut got = 0usize;
    while got < buffer.len() {
        // SAFETY: the rest of `buffer` is ours to write.
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
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec * 1000 + now.tv_nsec / 1_000_000
}

fn errno() -> i32 {
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
        assert_eq!(decimal(40213).0[..5], *b"40213");
        assert_eq!(decimal(0).1, 1);
    }

    #[test]
    fn the_path_is_searched_as_execvp_does() {
        let found = search(OsStr::new("ls"), Some(OsStr::new("/a::/b")));
        assert_eq!(
            found,
            vec![b"/a/ls".to_vec(), b"./ls".to_vec(), b"/b/ls".to_vec()]
        );
        assert_eq!(search(OsStr::new("./x"), None), vec![b"./x".to_vec()]);
    }
}
