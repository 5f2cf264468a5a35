//! `--nice` and `--ionice`: the command runs at the nice value and I/O
//! priority asked, as the kernel tells of its pid (`/proc/PID/stat`,
//! ioprio_get(2)) under any containment; what this user may not take is
//! refused before anything is claimed.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::containment_scan::{nobody_folder, nobody_on};
use crate::util::{assert_code, text, wait_for_file, Env};

/// The nice value of `pid`: field 19 of its stat, after its name.
fn nice_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit(')').next().unwrap();
    // Fields from the third on: state is 3, nice is 19.
    after.split_whitespace().nth(16).unwrap().parse().unwrap()
}

/// The nice value the processes this test starts inherit (the suite may
/// itself run under nice(1)), as one of them finds it.
fn own_nice() -> i32 {
    let output = std::process::Command::new("sh")
        .args(["-c", "cut -d' ' -f19 /proc/self/stat"])
        .output()
        .unwrap();
    text(&output.stdout).trim().parse().unwrap()
}

/// ioprio_get(2) of `pid`: its class and level.
fn ioprio_of(pid: i32) -> (i64, i64) {
    // SAFETY: ioprio_get takes integers (IOPRIO_WHO_PROCESS is 1).
    let ioprio = unsafe { nix::libc::syscall(nix::libc::SYS_ioprio_get, 1, pid) };
    assert!(ioprio >= 0, "ioprio_get failed");
    (ioprio >> 13, ioprio & 0x1fff)
}

/// The command's pid, as it wrote it, while it waits; what `check` finds
/// of it; then it is stopped.
fn seen_running<T>(env: &Env, flags: &[&str], check: impl FnOnce(i32) -> T) -> T {
    let pidfile = env.path("pid");
    let script = format!(
        "echo $$ > '{0}.new'; mv '{0}.new' '{0}'; exec sleep 600",
        pidfile.display()
    );
    let mut args = vec!["run", "--key", "k", "--retries", "0"];
    args.extend_from_slice(flags);
    args.extend(["--shell", "--", &script]);
    let mut idem = env.idem(&args).stderr(Stdio::null()).spawn().unwrap();
    wait_for_file(&pidfile, Duration::from_secs(30), &mut idem);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let seen = check(pid);
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    idem.wait().unwrap();
    seen
}

#[test]
fn the_command_runs_at_the_nice_value_and_io_priority_asked() {
    let own = own_nice();
    // Root may go either way; a value other than the inherited one.
    let nice = if own == 19 { -3 } else { 19 };
    for contain in ["auto", "guardian"] {
        let env = Env::new();
        let asked = nice.to_string();
        let flags = [
            "--contain",
            contain,
            "--nice",
            &asked,
            "--ionice",
            "best-effort:6",
        ];
        let seen = seen_running(&env, &flags, |pid| (nice_of(pid), ioprio_of(pid)));
        assert_eq!(seen, (nice, (2, 6)), "{contain}");
        let env = Env::new();
        let flags = ["--contain", contain, "--ionice", "idle"];
        let seen = seen_running(&env, &flags, |pid| (nice_of(pid), ioprio_of(pid)));
        assert_eq!(seen, (own, (3, 0)), "{contain}");
    }
}

#[test]
fn as_nobody_a_nice_value_below_idem_s_and_the_realtime_class_are_refused() {
    let env = Env::new();
    let Some(folder) = nobody_folder(&env) else {
        return;
    };
    let ledger = folder.join("ledger.db");
    let refused = |args: &[&str]| {
        let mut all = vec!["run", "--key", "k"];
        all.extend_from_slice(args);
        all.extend(["--", "touch", "ran"]);
        nobody_on(&env, ledger.as_os_str(), &folder, &all)
            .current_dir(&folder)
            .output()
            .unwrap()
    };
    let own = own_nice();
    if own > -20 {
        let below = (own - 1).to_string();
        let nice = refused(&["--nice", &below]);
        assert_code(&nice, 2);
        assert_eq!(
            text(&nice.stderr),
            format!("idem: --nice {below}: only root may run a command before idem's own nice value {own}; give {own} or more\n")
        );
    }
    let realtime = refused(&["--ionice", "realtime:3"]);
    assert_code(&realtime, 2);
    assert_eq!(
        text(&realtime.stderr),
        "idem: --ionice realtime:3: only root may give the realtime I/O class; give best-effort:0 or idle\n"
    );
    assert!(!folder.join("ran").exists(), "the command ran");
    assert!(!ledger.exists(), "a refused run touched the ledger");
}
