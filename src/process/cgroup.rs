//! A cgroup of the attempt's own, where cgroup v2 is writable: the
//! command's process enters it before its exec, so every process it
//! starts is in it however it detaches, with the host's pids. The run
//! lives while the cgroup is populated (`cgroup.events`), `cgroup.kill`
//! ends all of it at once, and the cgroup is removed once empty.
//!
//! Attempt N of run R gets `<base>/<R>-<N>`, where the base is `idem` at
//! the top of the cgroup2 mount for root, and `idem` in the highest cgroup
//! above idem's own that the user owns (a subtree systemd's
//! `user@.service` delegates) for anyone else: the same for every idem of
//! that user on the host, so a later one judging a run whose idem and
//! guardian were killed finds the run's cgroups by its id alone.
//!
//! cgroup2 is found in `/proc/self/mountinfo` wherever it is mounted
//! (`/sys/fs/cgroup` on a unified host, `/sys/fs/cgroup/unified` on a
//! hybrid one) and taken only if the kernel says the path is cgroup2 now
//! (`statfs`): a mount hidden under another (a tmpfs in a private mount
//! namespace) is not used.

use std::ffi::{CString, OsString};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::libc;

/// The folder every run cgroup of this user is made in.
const FOLDER: &str = "idem";

/// The cgroup2 mount point, if this process sees one.
fn mount() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    // Later lines are later mounts: the last cgroup2 one is the one seen.
    let found = text.lines().rev().find_map(cgroup2_line)?;
    is_cgroup2(&found).then_some(found)
}

/// The mount point of a mountinfo line whose filesystem is cgroup2.
fn cgroup2_line(line: &str) -> Option<PathBuf> {
    let (fields, rest) = line.split_once(" - ")?;
    if rest.split(' ').next()? != "cgroup2" {
        return None;
    }
    Some(PathBuf::from(unescape(fields.split(' ').nth(4)?)))
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> OsString {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let octal = bytes.get(at + 1..at + 4).and_then(|digits| {
            let text = std::str::from_utf8(digits).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[at], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                at += 4;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    OsString::from_vec(out)
}

/// Whether `path` is the root of a cgroup2 filesystem now: not hidden
/// under another mount since.
fn is_cgroup2(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
}

/// idem's own cgroup in the v2 hierarchy, under the mount point.
fn own(mount: &Path) -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|line| line.strip_prefix("0::"))?;
    Some(mount.join(path.trim_start_matches('/')))
}

/// Where this user's run cgroups are, made or not: `None` where idem has
/// no cgroup2 it may write.
fn base_path() -> Option<PathBuf> {
    static BASE: OnceLock<Option<PathBuf>> = OnceLock::new();
    BASE.get_or_init(|| {
        let mount = mount()?;
        if nix::unistd::geteuid().is_root() {
            return Some(mount.join(FOLDER));
        }
        // The highest cgroup above idem's own that this user owns.
        let uid = nix::unistd::geteuid().as_raw();
        let own = own(&mount)?;
        let owned = own
            .ancestors()
            .take_while(|dir| {
                dir.starts_with(&mount)
                    && *dir != mount
                    && fs::metadata(dir).is_ok_and(|meta| meta.uid() == uid)
            })
            .last()?
            .to_path_buf();
        Some(owned.join(FOLDER))
    })
    .clone()
}

/// The folder for this user's run cgroups, made if need be; `None` where
/// it cannot be (no cgroup2, a read-only one, nothing delegated).
pub fn base() -> Option<PathBuf> {
    let base = base_path()?;
    match fs::create_dir(&base) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    nix::unistd::access(&base.join("cgroup.procs"), nix::unistd::AccessFlags::W_OK)
        .is_ok()
        .then_some(base)
}

/// An attempt's cgroup, made before the guardian's fork: the command's
/// process writes itself into its `cgroup.procs` before its exec; the
/// guardian writes `1` into its `cgroup.kill` to end the run (kernels
/// before 5.14 have none: the guardian's tree walk alone ends it then).
/// Removed when dropped (the attempt is over then), unless something of it
/// still lives.
pub struct RunCgroup {
    dir: PathBuf,
    procs: CString,
    kill: CString,
}

impl RunCgroup {
    /// Makes the cgroup `name` (`<run id>-<attempt>`).
    pub fn make(name: &str) -> io::Result<RunCgroup> {
        let base = base().ok_or_else(|| {
            io::Error::new(io::ErrorKind::PermissionDenied, "no writable cgroup v2")
        })?;
        let dir = base.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
        let path = |name: &str| {
            CString::new(dir.join(name).into_os_string().into_vec()).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a cgroup path holds a NUL byte",
                )
            })
        };
        let (procs, kill) = (path("cgroup.procs")?, path("cgroup.kill")?);
        Ok(RunCgroup { dir, procs, kill })
    }

    /// What the attempt used, by the cgroup's own figures where it keeps
    /// them (its CPU time in `cpu.stat`; its peak memory and OOM kills
    /// where the memory controller counts for it), else `waited`'s.
    pub fn usage(&self, waited: super::Usage) -> super::Usage {
        let read = |name: &str| fs::read_to_string(self.dir.join(name)).ok();
        let field = |text: &str, name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.trim().parse::<u64>().ok())
        };
        let cpu_ms = read("cpu.stat")
            .and_then(|stat| field(&stat, "usage_usec "))
            .map(|usec| usec / 1000);
        let peak = read("memory.peak").and_then(|peak| peak.trim().parse().ok());
        let oom = read("memory.events")
            .and_then(|events| field(&events, "oom_kill "))
            .is_some_and(|kills| kills > 0);
        super::Usage {
            peak_memory: peak.or(waited.peak_memory),
            cpu_ms: cpu_ms.or(waited.cpu_ms),
            oom_killed: oom || waited.oom_killed,
        }
    }

    /// The paths the guardian is given: `cgroup.procs` and `cgroup.kill`,
    /// valid while this lives.
    pub fn paths(&self) -> (*const libc::c_char, *const libc::c_char) {
        (self.procs.as_ptr(), self.kill.as_ptr())
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        remove(&self.dir);
    }
}

/// Removes an empty run cgroup. The last process's exit may still be
/// under way in the kernel (EBUSY a moment after its reap): tried a few
/// times; one left is removed by the next idem that judges the run.
fn remove(dir: &Path) {
    for _ in 0..20 {
        match fs::remove_dir(dir) {
            Err(error) if error.raw_os_error() == Some(libc::EBUSY) && !populated(dir) => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            _ => return,
        }
    }
}

/// Whether cgroup `dir` holds a process, by its `cgroup.events`; an
/// unreadable one (removed meanwhile) holds none.
pub fn populated(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events"))
        .is_ok_and(|events| events.lines().any(|line| line.trim() == "populated 1"))
}

/// The cgroups of run `run_id` on this host that are still there.
pub fn of_run(run_id: &str) -> Vec<PathBuf> {
    let Some(base) = base_path() else {
        return Vec::new();
    };
    let Ok(entries) = fs::read_dir(&base) else {
        return Vec::new();
    };
    let prefix = format!("{run_id}-");
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            name.to_str().is_some_and(|name| {
                name.strip_prefix(&prefix)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .map(|entry| entry.path())
        .collect()
}

/// Whether run `run_id` has cgroups here, and then whether any process
/// lives in one; the empty ones are removed on the way. `None`: it has
/// none (another containment, or gone and removed).
pub fn run_lives(run_id: &str) -> Option<bool> {
    let dirs = of_run(run_id);
    if dirs.is_empty() {
        return None;
    }
    let mut lives = false;
    for dir in dirs {
        if populated(&dir) {
            lives = true;
        } else {
            remove(&dir);
        }
    }
    Some(lives)
}

/// The pids in run `run_id`'s cgroups.
pub fn processes_of_run(run_id: &str) -> Vec<i32> {
    of_run(run_id)
        .iter()
        .filter_map(|dir| fs::read_to_string(dir.join("cgroup.procs")).ok())
        .flat_map(|procs| {
            procs
                .lines()
                .filter_map(|pid| pid.trim().parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// Ends every process of run `run_id`'s cgroups at once (`cgroup.kill`),
/// or one by one where the kernel has no `cgroup.kill`; whether it had any.
pub fn kill_run(run_id: &str) -> bool {
    let dirs = of_run(run_id);
    for dir in &dirs {
        let killed = File::options()
            .write(true)
            .open(dir.join("cgroup.kill"))
            .and_then(|mut kill| kill.write_all(b"1"));
        if killed.is_err() {
            for pid in processes_of_run(run_id) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
    !dirs.is_empty()
}

/// Where this user's run cgroups go on this host, and whether idem may
/// make them there (`doctor`); `None`: no cgroup2 is mounted here, or none
/// of it is this user's.
pub fn describe() -> Option<(PathBuf, bool)> {
    let path = base_path()?;
    Some((path, base().is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mountinfo_line_names_its_cgroup2_mount_point() {
        let hybrid = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";
        assert_eq!(
            cgroup2_line(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let spaced = "41 31 0:38 / /mnt/a\\040b rw shared:9 - cgroup2 none rw";
        assert_eq!(cgroup2_line(spaced), Some(PathBuf::from("/mnt/a b")));
        let v1 = "42 31 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory";
        assert_eq!(cgroup2_line(v1), None);
    }
}
