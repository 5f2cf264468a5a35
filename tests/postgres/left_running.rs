//! On a shared ledger a run lives by its lease. Where the guardian alone
//! held the run (an unprivileged user: no PID namespace), a worker that
//! closed its inherited descriptors survives `kill -9` of idem and its
//! guardian; once the lease has passed, the next run on the same host
//! finds it by the `IDEM_RUN_ID` it carries and runs nothing beside it.
//! Where the run had a PID namespace (root), the worker died with its
//! guardian, and another host runs the key once the lease has passed.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::Pg;
use crate::containment::{children_of, python_leaving};
use crate::util::{
    assert_code, eventually, host_prefix, lives, processes_of, text, wait_for_count, wrapped,
};

/// The lease of every run here: short, so that it passes within a test.
const LEASE: &str = "3s";

/// `flock -n` on `folder`'s `lock` around counting an execution in its
/// `count` and sleeping `seconds`; an execution beside another is counted
/// in `overlaps` (see `util::guarded`, whose files must be `nobody`'s here).
fn guarded_in(folder: &Path, seconds: u32) -> String {
    format!(
        "flock -n '{lock}' sh -c 'echo x >> {count}; sleep {seconds}' || echo overlap >> '{overlaps}'",
        lock = folder.join("lock").display(),
        count = folder.join("count").display(),
        overlaps = folder.join("overlaps").display(),
    )
}

fn count(folder: &Path, name: &str) -> usize {
    std::fs::read_to_string(folder.join(name)).map_or(0, |text| text.lines().count())
}

/// A folder of `nobody`'s own, with the binary copied where `nobody` can
/// run it and the server's socket open to it; `None`: the test failed,
/// naming why.
fn nobody_folder(pg: &Pg) -> Option<PathBuf> {
    let socket = pg.server.socket_dir();
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o755)).unwrap();
    crate::containment_scan::nobody_folder(&pg.env)
}

/// Idem as `nobody` on the test's PostgreSQL ledger.
fn nobody(pg: &Pg, folder: &Path, args: &[&str]) -> Command {
    crate::containment_scan::nobody_on(&pg.env, pg.url().as_ref(), folder, args)
}

/// Waits (bounded) until the lease of `key`'s head has passed, on the
/// server's clock.
fn wait_for_the_lease(pg: &Pg, key: &str) {
    let mut client = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
    eventually("the lease to pass", Duration::from_secs(30), || {
        client
            .query_one(
                "SELECT coalesce(lease_until < clock_timestamp(), false) FROM idem.keys WHERE key = $1",
                &[&key],
            )
            .unwrap()
            .get::<_, bool>(0)
    });
}

/// As `pkill -9 idem` does: `idem` and its guardian SIGKILLed together;
/// returns once both are gone.
fn kill_idem_and_its_guardian(mut idem: Child) {
    let guardian = eventually("the guardian", Duration::from_secs(10), || {
        children_of(idem.id()).first().copied()
    });
    kill(Pid::from_raw(idem.id() as i32), Signal::SIGKILL).unwrap();
    kill(Pid::from_raw(guardian), Signal::SIGKILL).unwrap();
    idem.wait().unwrap();
    eventually("the guardian to be gone", Duration::from_secs(10), || {
        !lives(guardian)
    });
}

/// The worker's process group, killed when the test ends however it ends.
struct Worker(i32);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(-self.0), Signal::SIGKILL);
    }
}

/// A run of `k` as `nobody` whose worker closed its descriptors and left
/// its session, then `pkill -9 idem`: the worker, still alive.
fn worker_left_by_a_killed_run(pg: &Pg, folder: &Path) -> Worker {
    let pid_file = folder.join("worker.pid");
    // Deaf to the SIGTERM a guardian may still send as idem dies: killed
    // together, neither stops the run, as `pkill -9 idem` finds it.
    let worker = format!(
        "trap '' TERM HUP INT; echo $$ > '{}'; {}",
        pid_file.display(),
        guarded_in(folder, 600)
    );
    let log = pg.env.path("first.log");
    let mut argv = vec!["-v", "run", "--key", "k", "--retries", "0"];
    argv.extend(["--lease", LEASE, "--"]);
    let command = python_leaving(&worker, "");
    argv.extend(command.iter().map(String::as_str));
    let mut first = nobody(pg, folder, &argv)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let worker = Worker(eventually("the worker", Duration::from_secs(30), || {
        if let Ok(Some(status)) = first.try_wait() {
            panic!("the first run ended early: {status}");
        }
        let pid = std::fs::read_to_string(&pid_file).ok()?;
        (count(folder, "count") == 1).then(|| pid.trim().parse::<i32>().ok())?
    }));
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("containment: guardian only"), "{said}");
    kill_idem_and_its_guardian(first);
    assert!(lives(worker.0), "the worker died with its guardian");
    worker
}

#[test]
fn postgres_a_worker_left_on_this_host_keeps_its_key_after_the_lease() {
    let Some(pg) = Pg::new("postgres_worker_left_on_this_host") else {
        return;
    };
    let Some(folder) = nobody_folder(&pg) else {
        return;
    };
    let worker = worker_left_by_a_killed_run(&pg, &folder);
    wait_for_the_lease(&pg, "k");

    let check = guarded_in(&folder, 0);
    let run = [
        "run", "--key", "k", "--lease", LEASE, "--shell", "--", &check,
    ];
    let next = nobody(&pg, &folder, &run).output().unwrap();
    let waited = nobody(
        &pg,
        &folder,
        &[&run[..1], &["--wait", "1s"], &run[1..]].concat(),
    )
    .output()
    .unwrap();
    let doctor = nobody(&pg, &folder, &["doctor", "--json"])
        .output()
        .unwrap();
    let forget = nobody(&pg, &folder, &["ledger", "forget", "k"])
        .output()
        .unwrap();
    let named = format!("pid {} (sh)", worker.0);
    for (what, output) in [("run", &next), ("--wait", &waited), ("forget", &forget)] {
        assert_eq!(
            output.status.code(),
            Some(75),
            "{what}: {}",
            text(&output.stderr)
        );
        let said = text(&output.stderr);
        assert!(said.contains(&named), "{what}: {said}");
    }
    let found: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    assert_eq!(found["stuck_keys"], serde_json::json!([]), "{found}");
    assert_eq!(found["running_keys"], 1, "{found}");
    assert_eq!(
        (count(&folder, "count"), count(&folder, "overlaps")),
        (1, 0)
    );

    // `idem stop` on this host ends what the run left; then the key runs.
    let stop = nobody(&pg, &folder, &["stop", "k", "--kill-after", "1s"])
        .output()
        .unwrap();
    assert_code(&stop, 0);
    assert!(
        !lives(worker.0),
        "stop left the worker: {}",
        text(&stop.stderr)
    );
    let after = nobody(&pg, &folder, &run).output().unwrap();
    assert_code(&after, 0);
    assert_eq!(
        (count(&folder, "count"), count(&folder, "overlaps")),
        (2, 0)
    );
}

#[test]
fn postgres_another_host_runs_once_the_lease_passed_and_the_worker_died() {
    let Some(pg) = Pg::new("postgres_another_host_after_the_worker") else {
        return;
    };
    let command = python_leaving(&super::guarded(&pg, 600), "time.sleep(600)");
    // A PID namespace, chosen: the kernel ends its worker with its guardian
    // (a cgroup's worker lives on; see the cgroup tests).
    let mut argv = vec![
        "-v",
        "run",
        "--key",
        "k",
        "--contain",
        "pid-namespace",
        "--retries",
        "0",
        "--lease",
        LEASE,
        "--",
    ];
    argv.extend(command.iter().map(String::as_str));
    let log = pg.env.path("first.log");
    let Some(host_a) = host_prefix("host-a") else {
        return;
    };
    let mut first = wrapped(&pg.env.cmd(&argv).db(pg.url()).command(), &host_a)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for_count(&pg.env, 1, &mut first);
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("containment: pid namespace"), "{said}");
    let run_id = pg.list_json()[0]["run_id"].as_str().unwrap().to_owned();
    kill_idem_and_its_guardian(first);
    eventually(
        "the worker to die with its namespace",
        Duration::from_secs(10),
        || processes_of(&run_id).is_empty(),
    );
    wait_for_the_lease(&pg, "k");

    let check = super::guarded(&pg, 0);
    let next = pg
        .on_host(
            "host-b",
            [
                "run", "--key", "k", "--lease", LEASE, "--shell", "--", &check,
            ],
        )
        .unwrap()
        .output()
        .unwrap();
    assert_code(&next, 0);
    assert_eq!(pg.count("count"), 2, "{}", text(&next.stderr));
    assert_eq!(pg.count("overlaps"), 0, "host-b ran beside the worker");
}
