//! What is made ready before the guardian is forked: the command's argv,
//! environment and PATH search as C strings (the child may not allocate),
//! and the descriptors it is started with.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

use nix::libc::{c_char, pid_t};

/// The command, made ready before the fork: the child may not allocate.
pub struct Prepared {
    /// Paths to try in order (a PATH search done ahead, as execvp would).
    pub candidates: Vec<CString>,
    _argv: Vec<CString>,
    pub argv: Vec<*const c_char>,
    _envp: Vec<CString>,
    pub envp: Vec<*const c_char>,
    /// The command's priority, set before its exec.
    pub priority: super::Priority,
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
            priority: super::Priority::default(),
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
    /// The lowest number the guardian moves its own descriptors to (see
    /// [`kept_fds_floor`]).
    pub floor: RawFd,
    /// The attempt's cgroup, by the paths of its `cgroup.procs` (which the
    /// command's process enters before its exec) and `cgroup.kill` (which
    /// the guardian writes to end the run), opened only when written: no
    /// descriptor of idem's or the guardian's is spent on them.
    pub cgroup: Option<(*const c_char, *const c_char)>,
}

/// Where the guardian keeps the door, the lock and the terminal: at 100 and
/// up, out of the way of the low numbers scripts use (`exec 3>file`), or
/// as high as the open-files limit allows when it is lower (`ulimit -n 64`):
/// never below 10, the numbers a shell's redirections take.
pub fn kept_fds_floor() -> RawFd {
    const WANTED: RawFd = 100;
    const LOWEST: RawFd = 10;
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(u64::MAX, |(soft, _)| soft);
    let highest = RawFd::try_from(limit.saturating_sub(3)).unwrap_or(RawFd::MAX);
    highest.clamp(LOWEST, WANTED)
}

#[cfg(test)]
mod tests {
    use super::*;

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
