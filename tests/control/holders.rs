//! Who holds a key: once the idem that claimed it is gone, the lines that
//! say a key is held name the run's processes that still live (pid and
//! command name), not the dead idem's pid.

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::util::{eventually, lives, processes_of, wait_for_file, Env};

/// The pids of the live processes whose environment holds `mark`.
fn marked(mark: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|byte| *byte == 0)
                    .any(|pair| pair == mark.as_bytes())
            })
        })
        .filter(|pid| lives(*pid))
        .collect()
}

/// The pids a line names as `pid N (NAME)`, with their names.
fn named(line: &str) -> Vec<(i32, String)> {
    line.split("pid ")
        .skip(1)
        .filter_map(|rest| {
            let (pid, rest) = rest.split_once(" (")?;
            let (name, _) = rest.split_once(')')?;
            Some((pid.parse().ok()?, name.to_owned()))
        })
        .collect()
}

#[track_caller]
fn names_the_sleep(line: &str, idem: u32) {
    let sleeps: Vec<i32> = named(line)
        .into_iter()
        .filter(|(_, name)| name == "sleep")
        .map(|(pid, _)| pid)
        .collect();
    assert!(!sleeps.is_empty(), "no sleep named: {line}");
    for pid in sleeps {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        assert_eq!(
            comm.trim(),
            "sleep",
            "pid {pid} is not the run's sleep: {line}"
        );
    }
    assert!(
        line.contains(&format!("(left by idem pid {idem}, gone)")),
        "{line}"
    );
}

/// A run whose idem was SIGKILLed while its command's processes live on:
/// the conflict, `doctor` and `ledger forget` name those processes, and
/// `forget --force` says what it leaves running.
#[test]
fn a_held_key_names_the_processes_that_hold_it() {
    let env = Env::new();
    let mark = format!("IDEM_TEST_MARK={}", env.dir.path().display());
    let started = env.path("started");
    // The command's processes ignore SIGTERM, so they outlive idem.
    let script = format!(
        "trap '' TERM; sleep 120 & touch '{}'; wait",
        started.display()
    );
    let mut first = env
        .idem(["run", "--key", "g", "--shell", "--", &script])
        .env("IDEM_TEST_MARK", env.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(60), &mut first);
    let idem = first.id();
    kill(Pid::from_raw(idem as i32), Signal::SIGKILL).unwrap();
    first.wait().unwrap();

    let refused = env
        .cmd(["run", "--key", "g", "--", "true"])
        .expect_code(75)
        .stderr_has("g is running elsewhere: pid ");
    names_the_sleep(&refused.stderr(), idem);

    // Its lock file deleted, nothing can judge the run: doctor and forget
    // name what holds it.
    let mut lock = env.db().into_os_string();
    lock.push("-lock");
    std::fs::remove_file(&lock).unwrap();
    let doctor = env.cmd(["doctor"]).run();
    names_the_sleep(&format!("{}{}", doctor.stdout(), doctor.stderr()), idem);
    let refused = env.cmd(["ledger", "forget", "g"]).expect_code(75);
    names_the_sleep(&refused.stderr(), idem);
    let forced = env.cmd(["ledger", "forget", "--force", "g"]).succeeds();
    let said = forced.stderr();
    assert!(
        said.contains(
            "key g: its run still has processes running, which forget does not stop: pid "
        ),
        "{said}"
    );
    assert!(
        named(&said).iter().any(|(_, name)| name == "sleep"),
        "{said}"
    );

    for pid in marked(&mark) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    eventually(
        "the run's processes to be gone",
        Duration::from_secs(30),
        || marked(&mark).is_empty(),
    );
}

/// A key whose last run is recorded over while a process of it still
/// holds the run's lock (as an idem that recorded an outcome without
/// waiting for such processes left it): the next run is refused, and the
/// line names what that run left running.
#[test]
fn a_key_held_by_what_its_ended_run_left_running_names_it() {
    let env = Env::new();
    let started = env.path("started");
    let script = format!(
        "trap '' TERM; touch '{}'; exec sleep 120",
        started.display()
    );
    let mut first = env
        .idem(["run", "--key", "g", "--shell", "--", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(60), &mut first);
    let run_id = env.list_json()[0]["run_id"].as_str().unwrap().to_owned();
    crate::util::sqlite(&env.db(), "UPDATE runs SET status = 2;");

    let refused = env
        .cmd(["run", "--key", "g", "--", "true"])
        .expect_code(75)
        .stderr_has("g is still held by processes an earlier run of it left running: pid ");
    let sleeps: Vec<i32> = named(&refused.stderr())
        .into_iter()
        .filter(|(_, name)| name == "sleep")
        .map(|(pid, _)| pid)
        .collect();
    let left = processes_of(&run_id);
    let _ = first.kill();
    let _ = first.wait();
    for pid in &left {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    assert!(
        !sleeps.is_empty() && sleeps.iter().all(|pid| left.contains(pid)),
        "{}",
        refused.stderr()
    );
}
