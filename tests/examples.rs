//! The examples in `examples/`: each is killed, its whole process tree at
//! once, at random instants many times, then run to completion; every
//! external effect it makes must then appear exactly once in
//! `STATE/effects`. The seed is printed; `IDEM_EXAMPLES_SEED` replays one.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::util::{eventually, text};

/// Kills per example, each at a random instant of a fresh run.
const KILLS: usize = 24;
/// A kill lands within this long of the start: a run starts in about 50ms,
/// then does one job in about 300ms, 200 of them asleep in its dangerous
/// window...
const KILL_WITHIN_MS: u64 = 320;
/// ...plus this long for each piece of work already done, which it skips.
/// So most kills land in the first job left, many in its window, and few
/// runs get as far as recording it.
const SKIP_MS: u64 = 25;

#[test]
fn welcome_email_sends_each_email_once() {
    check(
        "welcome-email.sh",
        &["ada", "grace", "alan", "edsger", "barbara", "donald"]
            .map(|user| format!("mailer: welcome e-mail to {user}@example.com")),
    );
}

#[test]
fn charge_payment_charges_each_order_once() {
    check(
        "charge-payment.sh",
        &[
            (1001, 1250),
            (1002, 4999),
            (1003, 300),
            (1004, 1250),
            (1005, 12000),
            (1006, 75),
        ]
        .map(|(order, cents)| format!("gateway: charged {cents} cents for order-{order}")),
    );
}

#[test]
fn create_invoice_creates_each_invoice_once() {
    let mut effects = Vec::new();
    for month in ["2026-01", "2026-02"] {
        for order in [2001, 2002, 2003] {
            effects.push(format!("billing: invoice for order-{order}, {month}"));
        }
    }
    check("create-invoice.sh", &effects);
}

#[test]
fn provision_account_creates_each_account_once() {
    check(
        "provision-account.sh",
        &["kim", "lee", "max", "noor", "olu", "pat"]
            .map(|name| format!("accounts: account for {name}@example.com")),
    );
}

/// Kills `script` KILLS times, runs it to completion, and checks that the
/// effects are `expected`, each once; then a further run changes nothing.
fn check(script: &str, expected: &[String]) {
    for tool in ["sqlite3", "flock"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        assert!(
            found,
            "the examples need {tool} on PATH (.ci/run installs it)"
        );
    }
    let seed = std::env::var("IDEM_EXAMPLES_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("{script}: seed {seed} (IDEM_EXAMPLES_SEED={seed} replays it)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().expect("a tempdir");
    let state = dir.path().join("state");

    let mut landed = 0;
    for _ in 0..KILLS {
        let done = runs(&state, dir.path(), "succeeded") as u64;
        let within = KILL_WITHIN_MS + SKIP_MS * done;
        let mut child = start(script, &state, dir.path());
        std::thread::sleep(Duration::from_millis(rng.u64(0..within)));
        let ended = child.try_wait().expect("the example can be waited for");
        kill_session(&mut child);
        match ended {
            None => landed += 1,
            // It finished before the kill: nothing is left to interrupt.
            Some(status) if status.success() => break,
            Some(_) => {}
        }
    }

    let output = complete(script, &state, dir.path());
    let effects = read_effects(&state);
    assert_exactly(&effects, expected, script, seed);

    let again = complete(script, &state, dir.path());
    assert_eq!(
        read_effects(&state),
        effects,
        "{script} (seed {seed}): a run after completion made effects\n{}",
        text(&again.stdout)
    );
    let abandoned = runs(&state, dir.path(), "abandoned");
    println!(
        "{script}: {landed} kills landed in a live run, {abandoned} of them in a job \
         (abandoned runs); the run to completion said:\n{}",
        text(&output.stdout)
    );
}

/// Starts the example in a session of its own, so that everything it
/// starts, including idem's command in its own process group, can be
/// found and killed together.
fn start(script: &str, state: &Path, home: &Path) -> Child {
    let mut command = Command::new(examples().join(script));
    command
        .arg(state)
        .env("PATH", path_with_idem())
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("IDEM_DB")
        .env_remove("IDEM_RECOVERED")
        .env_remove("IDEM_KEY")
        .env_remove("IDEM_PROGRESS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe and touches no memory of the
    // parent; it is all this closure does between fork and exec.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    command.spawn().expect("the example starts")
}

/// Runs the example to its end. A run whose key is still held by processes
/// of a killed run exits 75 once its --wait runs out; it is tried again.
fn complete(script: &str, state: &Path, home: &Path) -> std::process::Output {
    for _ in 0..20 {
        let output = start(script, state, home)
            .wait_with_output()
            .expect("the example runs");
        match output.status.code() {
            Some(0) => return output,
            Some(75) => std::thread::sleep(Duration::from_millis(200)),
            _ => panic!(
                "{script} exited {:?}\nstdout: {}\nstderr: {}",
                output.status,
                text(&output.stdout),
                text(&output.stderr)
            ),
        }
    }
    panic!("{script} kept exiting 75: a key stayed running");
}

/// SIGKILLs every live process of the session `child` leads, until none is
/// left, then reaps `child`. A session outlives its leader and its id is
/// not reused while any member lives, so nothing is missed or mistaken.
///
/// The leader, the example's shell loop, goes a moment after the rest, so
/// that it reaps the idem it started: an orphaned idem would stay a zombie
/// until init reaps it, and until then its run could look alive to the
/// next run, which would wait for it.
fn kill_session(child: &mut Child) {
    let session = child.id();
    kill_members(session, |pid| pid != session);
    let _ = kill(Pid::from_raw(session as i32), Signal::SIGKILL);
    child.wait().expect("the example is reaped");
    kill_members(session, |_| true);
}

fn kill_members(session: u32, which: impl Fn(u32) -> bool) {
    let what = format!("the processes of session {session} to be gone");
    eventually(&what, Duration::from_secs(30), || {
        let members: Vec<u32> = session_members(session)
            .into_iter()
            .filter(|pid| which(*pid))
            .collect();
        for pid in &members {
            let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGKILL);
        }
        members.is_empty()
    });
}

/// The processes of session `session` that are not zombies.
fn session_members(session: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(at) = stat.rfind(')') else {
                return false;
            };
            // Fields 3 (state) and 6 (session) of /proc/PID/stat.
            let fields: Vec<&str> = stat[at + 1..].split_whitespace().collect();
            fields.first() != Some(&"Z") && fields.get(3) == Some(&session.to_string().as_str())
        })
        .collect()
}

/// How many runs of the example's ledger have `status`. An abandoned run
/// was killed while its job ran, and found dead by a later run.
fn runs(state: &Path, home: &Path, status: &str) -> usize {
    if !state.join("ledger.db").exists() {
        return 0;
    }
    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["ledger", "list", "--json", "--limit", "100000"])
        .env("IDEM_DB", state.join("ledger.db"))
        .env("HOME", home)
        .output()
        .expect("idem ledger list runs");
    let runs: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("ledger list --json prints JSON");
    runs.as_array()
        .expect("an array of runs")
        .iter()
        .filter(|run| run["status"] == status)
        .count()
}

fn read_effects(state: &Path) -> Vec<String> {
    std::fs::read_to_string(state.join("effects"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[track_caller]
fn assert_exactly(effects: &[String], expected: &[String], script: &str, seed: u64) {
    let mut counts = BTreeMap::<&str, usize>::new();
    for effect in effects {
        *counts.entry(effect).or_default() += 1;
    }
    let repeated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "{script} (seed {seed}): effects repeated: {repeated:?}"
    );
    let mut sorted = effects.to_vec();
    sorted.sort();
    let mut wanted = expected.to_vec();
    wanted.sort();
    assert_eq!(sorted, wanted, "{script} (seed {seed}): the effects");
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// PATH with the built idem first, as the examples call `idem` from PATH.
fn path_with_idem() -> std::ffi::OsString {
    let idem = Path::new(env!("CARGO_BIN_EXE_idem"));
    let mut dirs = vec![idem.parent().expect("idem is in a folder").to_path_buf()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).expect("PATH joins")
}
