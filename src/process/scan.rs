//! A run's processes: those in its cgroups, where it had some (see
//! `cgroup`), and those found by what each inherits: `IDEM_RUN_ID=<id>` in
//! its environment. Where the kernel holds no run together (no PID
//! namespace, no cgroup of the run's own), a process that closed the
//! run's lock and left the guardian's tree is still found so, as long as
//! `/proc/<pid>/environ` is readable (the user's own processes, or all of
//! them for root) and it kept the environment it was started with (one
//! that executed with a cleared environment, `env -i`, is not found).

use std::fs;
use std::sync::Mutex;

use memchr::memmem::Finder;

/// The pids of the processes of run `run_id`: in its cgroups, and started
/// with `IDEM_RUN_ID=<run_id>` as far as `/proc` lets this user read them.
pub fn processes_of_run(run_id: &str) -> Vec<i32> {
    let mut pids = super::cgroup::processes_of_run(run_id);
    for pid in started_with(run_id) {
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    pids
}

/// The pids of the processes started with `IDEM_RUN_ID=<run_id>`, as far
/// as `/proc` lets this user read them.
fn started_with(run_id: &str) -> Vec<i32> {
    // A whole entry: at the start, or after the NUL ending the one before.
    let entry = format!("\0IDEM_RUN_ID={run_id}\0");
    let finder = Finder::new(entry.as_bytes());
    let first = &entry.as_bytes()[1..];
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| environ.starts_with(first) || finder.find(&environ).is_some())
        })
        .collect()
}

/// The run `pid` was started by: its `IDEM_RUN_ID`, as far as `/proc`
/// lets this user read it.
pub fn run_of(pid: i32) -> Option<String> {
    let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ
        .split(|byte| *byte == 0)
        .find_map(|pair| pair.strip_prefix(b"IDEM_RUN_ID="))
        .map(|id| String::from_utf8_lossy(id).into_owned())
}

/// Runs found with no process left, in this idem: none of theirs can
/// start one again, so a run judged twice (before its claim and in it)
/// reads `/proc` once.
static GONE: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Whether any process of run `run_id` still lives (see
/// [`processes_of_run`]).
pub fn run_lives(run_id: &str) -> bool {
    let gone = |gone: &Vec<String>| gone.iter().any(|id| id == run_id);
    if GONE.lock().is_ok_and(|list| gone(&list)) {
        return false;
    }
    // A run that had cgroups is judged by them alone: the kernel knows
    // each of its processes there, whatever its environment.
    let lives = match super::cgroup::run_lives(run_id) {
        Some(lives) => lives,
        None => !started_with(run_id).is_empty(),
    };
    if !lives {
        if let Ok(mut list) = GONE.lock() {
            list.push(run_id.to_owned());
        }
    }
    lives
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_found_by_its_run_id_while_it_lives() {
        let run_id = format!(
            "scan-{}-{}",
            std::process::id(),
            crate::process::monotonic_ms()
        );
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("IDEM_RUN_ID", &run_id)
            .spawn()
            .expect("sleep starts");
        let pid = child.id() as i32;
        let mut found = Vec::new();
        // The variable is in /proc once the exec is done.
        for _ in 0..100 {
            found = processes_of_run(&run_id);
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(found, vec![pid]);
        assert!(!run_lives(&format!("{run_id}0")));
        child.kill().expect("sleep is killed");
        child.wait().expect("sleep is reaped");
        assert!(!run_lives(&run_id));
    }
}
