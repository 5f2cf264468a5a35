//! The guardian's watch over a running attempt: it reaps, reports to idem,
//! passes signals on and stops the run when idem goes or its lease runs
//! out. Runs after fork: async-signal-safe calls only, no allocation. Its
//! calls (kill, tcsetpgrp, poll) are best effort and go unchecked: the
//! command runs by then, a process already gone is no failure, and no
//! step is left whose failure could keep the run from being guarded.

use std::os::fd::RawFd;

use nix::libc::{self, c_int, pid_t};

use super::tree::{signal_run, signal_the_missed, walk, Root, Seen};
use super::wire::{
    errno, monotonic_ms, put, receive, send, DEADLINE, EXITED, FROM_GUARDIAN, LEASE_RAN_OUT,
    LEFT_RUNNING, RESUME, SIGNAL, USED,
};

/// Reaps everything, tells idem how the command ended and what it left,
/// passes signals on, stops the run when idem goes away or its deadline
/// passes; exits when no process of the run is left.
///
/// # Safety
/// Only in the guardian's process, after its fork, with SIGCHLD blocked:
/// `door` is -1 or its own open end of the control socket, `children` its
/// signalfd for SIGCHLD, the terminal in `foreground` is open, and
/// `cgroup_kill` is null or the NUL-terminated path of the attempt's
/// `cgroup.kill`, valid for the guardian's life. It never returns: the
/// guardian exits from here.
pub unsafe fn watch(
    door: RawFd,
    root: Root,
    command: pid_t,
    (deadline, grace): (i64, i64),
    foreground: Option<(RawFd, pid_t)>,
    children: RawFd,
    cgroup_kill: *const libc::c_char,
) -> ! {
    let mut watch = Watch {
        door,
        cgroup_kill,
        root,
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
        watch.wait(children, timeout);
    }
}

/// What the guardian keeps track of while the run goes on.
struct Watch {
    /// Its end of the control socket, open and its own; -1 once idem is
    /// gone (closed then).
    door: RawFd,
    /// The path of the attempt's `cgroup.kill`, or null.
    cgroup_kill: *const libc::c_char,
    /// The guardian as `/proc` knows it.
    root: Root,
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
    /// Waits for a message from idem, a process's end (`children`, a
    /// signalfd for SIGCHLD) or `timeout` ms, and takes in what came.
    fn wait(&mut self, children: RawFd, timeout: c_int) {
        let mut polled = [
            libc::pollfd {
                fd: self.door,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: children,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll writes the `revents` of the two pollfds we own; a
        // negative fd (idem gone) is skipped by the kernel.
        unsafe { libc::poll(polled.as_mut_ptr(), 2, timeout) };
        if polled[1].revents != 0 {
            let mut info = [0u8; 128];
            // SAFETY: each read writes at most `info.len()` bytes into
            // `info`; `children` is the guardian's signalfd.
            while unsafe { libc::read(children, info.as_mut_ptr().cast(), info.len()) } > 0 {}
        }
        if self.door >= 0 && polled[0].revents != 0 {
            // SAFETY: `door` is the guardian's open socket end while
            // it is not -1 (see `door`).
            self.on_message(unsafe { receive(self.door) });
        }
    }

    fn tell(&mut self, kind: u8, a: i32) {
        put(&mut self.frame, kind, a, 0);
        // SAFETY: `door` is -1 or the guardian's open socket end.
        unsafe { send(self.door, &self.frame) };
    }

    /// Tells idem what the run's processes used: theirs alone, which
    /// wait4 of the guardian would mix with the guardian's own memory.
    fn tell_used(&mut self) {
        // SAFETY: rusage is plain integers, for which all zeroes is valid;
        // getrusage writes into the one we own.
        let used = unsafe {
            let mut used: libc::rusage = std::mem::zeroed();
            if libc::getrusage(libc::RUSAGE_CHILDREN, &mut used) != 0 {
                return;
            }
            used
        };
        let ms = |time: libc::timeval| time.tv_sec * 1000 + time.tv_usec / 1000;
        let cpu = ms(used.ru_utime) + ms(used.ru_stime);
        let clamp = |value: i64| value.clamp(0, i64::from(i32::MAX)) as i32;
        put(&mut self.frame, USED, clamp(used.ru_maxrss), clamp(cpu));
        // SAFETY: `door` is -1 or the guardian's open socket end.
        unsafe { send(self.door, &self.frame) };
    }

    /// The terminal goes back to idem once the command's main process
    /// ends; what it left running is in the background then, as under a
    /// shell.
    fn give_back(&self) {
        if let Some((terminal, group)) = self.foreground {
            // SAFETY: tcsetpgrp takes integers; `terminal` is the guardian's
            // own copy of the terminal, open for its life.
            unsafe { libc::tcsetpgrp(terminal, group) };
        }
    }

    /// Reaps every process that ended; exits once none is left.
    fn reap(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status into the integer we own.
            let reaped = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::WUNTRACED) };
            if reaped > 0 && libc::WIFSTOPPED(status) {
                // Ctrl-Z at the terminal: stop idem too, so that its shell
                // sees the job stopped and takes the terminal.
                if let (true, Some((terminal, group))) = (reaped == self.command, self.foreground) {
                    // SAFETY: tcsetpgrp and kill take integers; `terminal`
                    // is the guardian's own open copy of the terminal.
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
                self.tell_used();
                // SAFETY: _exit ends the guardian without running anything
                // of the parent's (no atexit handlers, no flush).
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
        let count = walk(self.root, 0, &mut pids);
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
        // SAFETY: `door` is the guardian's open socket end (checked above).
        unsafe { send(self.door, &self.frame) };
    }

    /// SIGKILL to every process of the run: its tree, and its cgroup,
    /// where one holds it, at once (a process forking meanwhile is in it).
    fn kill(&mut self) {
        if !self.cgroup_kill.is_null() {
            // SAFETY: open reads a NUL-terminated path valid for the
            // guardian's life (see `watch`); write reads one byte of a
            // live array; the descriptor is closed once.
            unsafe {
                let fd = libc::open(self.cgroup_kill, libc::O_WRONLY | libc::O_CLOEXEC);
                if fd >= 0 {
                    libc::write(fd, b"1".as_ptr().cast(), 1);
                    libc::close(fd);
                }
            }
        }
        signal_run(
            self.root,
            self.command,
            libc::SIGKILL,
            false,
            &mut self.seen,
        );
    }

    /// Stops the run: SIGTERM to all of it, SIGKILL `grace` ms later.
    fn stop(&mut self, now: i64, grace: i64) {
        signal_run(self.root, self.command, libc::SIGTERM, true, &mut self.seen);
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
            signal_the_missed(self.root, &mut self.seen);
            self.again_at = now + 200;
        }
        if self.kill_at != 0 && now >= self.kill_at {
            self.kill();
            // Again soon: a process may have forked meanwhile.
            self.kill_at = now + 100;
        }
    }

    fn on_message(&mut self, message: Option<(u8, i64, i64)>) {
        match message {
            Some((SIGNAL, signal, _)) if signal == i64::from(libc::SIGKILL) => self.kill(),
            Some((SIGNAL, signal, cont)) => {
                signal_run(
                    self.root,
                    self.command,
                    signal as c_int,
                    cont == 1,
                    &mut self.seen,
                );
                if signal == i64::from(libc::SIGTERM) && cont == 1 {
                    self.again_at = monotonic_ms() + 200;
                }
            }
            Some((RESUME, _, _)) => {
                // After Ctrl-Z, idem was continued (`fg`): so is the
                // command, in the terminal's foreground.
                if let (true, Some((terminal, _))) = (self.suspended, self.foreground) {
                    // SAFETY: tcsetpgrp and kill take integers; `terminal`
                    // is the guardian's own open copy of the terminal.
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
                // SAFETY: the door is the guardian's own, and is not used
                // again: -1 from here on.
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
