//! The wrapper is invisible: under `--contain auto` the command's `$$`,
//! its parent and a pidfile it writes mean what they mean on the host,
//! whatever containment the host gives (a cgroup of the attempt's own as
//! root with cgroup2; the guardian alone as root with cgroup2 hidden, and
//! as `nobody`). And a run in a cgroup keeps its key, after idem and its
//! guardian were SIGKILLed, for as long as a worker that left it all
//! behind lives, on either ledger.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::containment::{children_of, python_leaving};
use crate::containment_scan::{nobody_folder, nobody_on};
use crate::util::{
    assert_code, eventually, guarded, lives, on_every_backend, processes_of, require, text,
    wait_for_count, wrapped, Backend, Env,
};

on_every_backend!(a_worker_left_in_a_cgroup_keeps_the_key_until_it_is_gone);

/// `idem` with the test's environment, its arguments to come.
fn idem(env: &Env) -> Command {
    env.idem(std::iter::empty::<&str>())
}

/// The cgroup2 mount point this process sees, from its mountinfo.
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mounts.lines().find_map(|line| {
        let (fields, rest) = line.split_once(" - ")?;
        if rest.split(' ').next()? != "cgroup2" {
            return None;
        }
        Some(PathBuf::from(fields.split(' ').nth(4)?))
    })
}

/// A command that tells what it sees of itself in `folder` (its `$$`, its
/// name by `ps -p $$`, its parent, its process group, its cgroup), then
/// waits; SIGTERM to its `$$` ends it with exit 7, its sleep too.
fn telling(folder: &Path) -> String {
    let file = |name: &str| folder.join(name).display().to_string();
    format!(
        "trap 'kill $! 2>/dev/null; exit 7' TERM; \
         ps -p $$ -o comm= > '{comm}'; echo $PPID > '{ppid}'; \
         ps -o pgid= -p $$ | tr -d ' ' > '{pgid}'; grep '^0::' /proc/self/cgroup > '{cgroup}'; \
         sleep 600 & echo $$ > '{pidfile}.new'; mv '{pidfile}.new' '{pidfile}'; wait",
        comm = file("comm"),
        ppid = file("ppid"),
        pgid = file("pgid"),
        cgroup = file("cgroup"),
        pidfile = file("job.pid"),
    )
}

/// Runs `idem` (made by `command`, `-v run --key k --shell -- SCRIPT`
/// appended) until the command wrote its pidfile in `folder`, stops it as
/// logrotate's postrotate would (`kill $(cat job.pid)`, from outside the
/// run), and checks that the pid was the command's own: it ends with its
/// trap's exit 7. Returns what idem said and the command's `/proc/self/cgroup`.
fn stopped_by_its_pidfile(mut command: Command, folder: &Path) -> (String, String) {
    let log = folder.join("idem.log");
    let mut idem = command
        .args(["-v", "run", "--key", "k", "--retries", "0", "--shell", "--"])
        .arg(telling(folder))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pidfile = folder.join("job.pid");
    crate::util::wait_for_file(&pidfile, Duration::from_secs(30), &mut idem);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let read = |name: &str| {
        std::fs::read_to_string(folder.join(name))
            .unwrap()
            .trim()
            .to_owned()
    };
    // What `ps` and /proc say of that pid on the host is what the command
    // said of itself.
    assert_eq!(read("comm"), "sh", "ps -p $$ named another process");
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap()
            .trim(),
        "sh"
    );
    assert_eq!(read("pgid"), pid.to_string(), "its own process group");
    let ppid: i32 = read("ppid").parse().unwrap();
    assert_ne!(ppid, 1, "$PPID is 1");
    assert!(lives(ppid), "$PPID {ppid} names no process here");
    let stopped = Command::new("sh")
        .arg("-c")
        .arg(format!("kill $(cat '{}')", pidfile.display()))
        .status()
        .unwrap();
    assert!(stopped.success());
    let ended = idem.wait().unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(ended.code(), Some(7), "{said}");
    (said, read("cgroup"))
}

#[test]
fn as_root_with_cgroup2_the_command_is_in_a_cgroup_of_its_own_with_the_host_s_pids() {
    let env = Env::new();
    if !require(
        nix::unistd::geteuid().is_root() && cgroup2_mount().is_some(),
        "root and a cgroup2 mount",
    ) {
        return;
    }
    let (said, cgroup) = stopped_by_its_pidfile(idem(&env), &env.path(""));
    assert!(said.contains("containment: cgroup"), "{said}");
    let run_id = env.show_json("k")["run_id"].as_str().unwrap().to_owned();
    assert!(
        cgroup.ends_with(&format!("/idem/{run_id}-1")),
        "the command ran in {cgroup}"
    );
    let shown = env.cmd(["ledger", "show", "k"]).run().stdout();
    assert!(shown.contains("containment: cgroup"), "{shown}");
    // The attempt's cgroup is removed once it is empty.
    let dir = cgroup2_mount().unwrap().join(format!("idem/{run_id}-1"));
    assert!(!dir.exists(), "{} is left", dir.display());
}

#[test]
fn as_root_with_cgroup2_hidden_the_guardian_holds_the_run_with_the_host_s_pids() {
    let env = Env::new();
    let Some(mount) = cgroup2_mount() else {
        require(false, "a cgroup2 mount");
        return;
    };
    // A private mount namespace where a tmpfs hides cgroup2.
    let hide = format!("mount -t tmpfs none '{}' && exec \"$@\"", mount.display());
    let command = wrapped(&idem(&env), &["unshare", "-m", "sh", "-c", &hide, "sh"]);
    let (said, _) = stopped_by_its_pidfile(command, &env.path(""));
    assert!(said.contains("containment: guardian only"), "{said}");
    let refused = wrapped(
        &env.idem(["run", "--key", "c", "--contain", "cgroup", "--", "true"]),
        &["unshare", "-m", "sh", "-c", &hide, "sh"],
    )
    .output()
    .unwrap();
    assert_code(&refused, 2);
    assert_eq!(
        text(&refused.stderr),
        "idem: --contain cgroup: this host gives idem no writable cgroup v2 (none mounted, read-only, or no subtree delegated to this user); use --contain auto\n"
    );
    // Refused before anything was claimed.
    assert_code(&env.run(["ledger", "show", "c"]), 1);
}

#[test]
fn as_nobody_the_guardian_holds_the_run_with_the_host_s_pids() {
    let env = Env::new();
    let Some(folder) = nobody_folder(&env) else {
        return;
    };
    let ledger = folder.join("ledger.db");
    let command = nobody_on(&env, ledger.as_os_str(), &folder, &[]);
    let (said, _) = stopped_by_its_pidfile(command, &folder);
    assert!(said.contains("containment: guardian only"), "{said}");
}

/// A PID namespace is used where it is chosen, and then the command's
/// pids are the namespace's: the reason it is not the default.
#[test]
fn a_pid_namespace_is_used_only_where_it_is_chosen() {
    let env = Env::new();
    let script = "echo $$ $PPID";
    let auto = env
        .cmd(["run", "--key", "a", "--shell", "--", script])
        .succeeds()
        .stdout();
    assert_ne!(auto, "2 1\n");
    let chosen = env
        .cmd([
            "run",
            "--key",
            "p",
            "--contain",
            "pid-namespace",
            "--shell",
            "--",
            script,
        ])
        .succeeds()
        .stdout();
    assert_eq!(chosen, "2 1\n");
    assert_eq!(
        env.show_json("p")["attempts_detail"][0]["containment"],
        "pid-namespace"
    );
}

/// `pkill -9 idem` under a run in a cgroup whose worker double-forked,
/// left for a session of its own and closed every descriptor (so holds no
/// lock and renews no lease): the key stays held (75) while the worker
/// lives, on a shared ledger past the lease too, and is free, its empty
/// cgroup removed, once the worker is gone. One execution at a time.
fn a_worker_left_in_a_cgroup_keeps_the_key_until_it_is_gone(backend: &Backend) {
    if !require(
        nix::unistd::geteuid().is_root() && cgroup2_mount().is_some(),
        "root and a cgroup2 mount",
    ) {
        return;
    }
    let env = backend.env();
    let lease: &[&str] = if backend.is_postgres() {
        &["--lease", "2s"]
    } else {
        &[]
    };
    let mut argv = vec!["run", "--key", "k", "--retries", "0"];
    argv.extend_from_slice(lease);
    argv.push("--");
    // Deaf to the SIGTERM the guardian may still send as idem dies before
    // it: killed together, neither stops the run, as `pkill -9 idem` finds.
    let worker = format!("trap '' TERM HUP INT; {}", guarded(&env, 600));
    let command = python_leaving(&worker, "time.sleep(600)");
    argv.extend(command.iter().map(String::as_str));
    let mut first = env.idem(&argv).stderr(Stdio::null()).spawn().unwrap();
    wait_for_count(&env, 1, &mut first);
    let guardian = eventually("the guardian", Duration::from_secs(10), || {
        children_of(first.id()).first().copied()
    });
    let run_id = env.show_json("k")["run_id"].as_str().unwrap().to_owned();
    kill(Pid::from_raw(first.id() as i32), Signal::SIGKILL).unwrap();
    kill(Pid::from_raw(guardian), Signal::SIGKILL).unwrap();
    first.wait().unwrap();
    eventually("the guardian to be gone", Duration::from_secs(10), || {
        !lives(guardian)
    });
    let left = processes_of(&run_id);
    assert!(!left.is_empty(), "the worker died with its guardian");
    if backend.is_postgres() {
        // Past the lease: only the cgroup holds the run now.
        std::thread::sleep(Duration::from_secs(3));
    }
    let check = guarded(&env, 0);
    let mut next = vec!["run", "--key", "k"];
    next.extend_from_slice(lease);
    next.extend(["--shell", "--", &check]);
    let held = env.run(&next);
    assert_code(&held, 75);
    assert_eq!(env.count("count"), 1);

    for pid in processes_of(&run_id) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    eventually("the worker to be gone", Duration::from_secs(10), || {
        processes_of(&run_id).is_empty()
    });
    let free = env.run(&next);
    assert_code(&free, 0);
    assert_eq!(env.count("count"), 2, "{}", text(&free.stderr));
    assert_eq!(
        env.count("overlaps"),
        0,
        "the next run ran beside the worker"
    );
    let dir = cgroup2_mount().unwrap().join(format!("idem/{run_id}-1"));
    assert!(!dir.exists(), "{} is left", dir.display());
}
