//! Hardening, each case tried as a careless operator and as a hostile local
//! user would: links and foreign files at the ledger's path, histories far
//! larger than what is printed, control characters in what was recorded,
//! clocks that lie, and idem's own lines under concurrency.
//!
//! Several cases need root (to hand a file to another user, to make a
//! device node, to run idem as `nobody`). Without it they fail, naming what
//! is missing.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::{assert_code, listing, max_rss_kib, require, sqlite, text, Env};

/// A user id no account on a test machine has: files are handed to it.
const STRANGER: u32 = 4242;

fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), None).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn with_db(env: &Env, db: &Path, args: &[&str]) -> Output {
    env.idem(args).env("IDEM_DB", db).output().unwrap()
}

/// Asserts that idem refused with exit 125 in one line holding each of
/// `words`, and returns that line.
#[track_caller]
fn refused(output: &Output, words: &[&str]) -> String {
    assert_code(output, 125);
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    for word in words {
        assert!(stderr.contains(word), "{word:?} missing from: {stderr}");
    }
    stderr
}

/// Runs `command` to its end, killing it after `limit` (a hang fails).
fn within(mut command: Command, limit: Duration) -> Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let started = Instant::now();
    let (done, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match waited.recv_timeout(limit) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("idem hung for {:?}", started.elapsed());
        }
    }
}

// ------------------------------------------------ the ledger's path and files

#[test]
fn a_symbolic_link_at_the_ledger_path_is_never_followed() {
    let env = Env::new();
    // A dangling link, as another user would plant in a shared folder.
    let planted = env.path("planted.db");
    let victim = env.path("victim");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    let before = listing(env.dir.path());
    for args in [
        &["run", "--key", "k", "--", "true"][..],
        &["ledger", "list"],
        &["ledger", "show", "k"],
    ] {
        let output = with_db(&env, &planted, args);
        refused(&output, &["planted.db", "symbolic link", "--db"]);
    }
    assert!(!victim.exists(), "the link's target was created");
    assert_eq!(listing(env.dir.path()), before);

    // A link to a real ledger: refused too, and the ledger is untouched.
    let real = env.path("real.db");
    assert_code(
        &with_db(&env, &real, &["run", "--key", "k", "--", "true"]),
        0,
    );
    let link = env.path("link.db");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let bytes = fs::read(&real).unwrap();
    let before = listing(env.dir.path());
    let output = with_db(&env, &link, &["run", "--key", "other", "--", "true"]);
    refused(&output, &["link.db", "symbolic link"]);
    assert_eq!(fs::read(&real).unwrap(), bytes);
    assert_eq!(listing(env.dir.path()), before);
}

#[test]
fn a_linked_wal_or_shm_file_is_refused() {
    let env = Env::new();
    let db = env.db();
    assert_code(&env.run(["run", "--key", "k", "--", "true"]), 0);
    // Fold the log into the file, so that removing it loses nothing.
    sqlite(&db, "PRAGMA wal_checkpoint(TRUNCATE);");
    for suffix in ["-wal", "-shm"] {
        for side in ["-wal", "-shm"] {
            let _ = fs::remove_file(env.path(&format!("ledger.db{side}")));
        }
        let victim = env.path(&format!("victim{suffix}"));
        fs::write(&victim, b"precious").unwrap();
        let side = env.path(&format!("ledger.db{suffix}"));
        std::os::unix::fs::symlink(&victim, &side).unwrap();
        let output = env.run(["run", "--key", "k2", "--", "true"]);
        refused(&output, &[&format!("ledger.db{suffix}"), "symbolic link"]);
        // doctor names it as the problem it is for run.
        let doctor = env.run(["doctor", "--json"]);
        assert_code(&doctor, 1);
        let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
        let check = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|check| check["check"] == "side files")
            .unwrap_or_else(|| panic!("no side files check in {report}"));
        assert_eq!(check["status"], "problem", "{report}");
        assert!(
            check["message"].as_str().unwrap().contains("symbolic link"),
            "{report}"
        );
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        fs::remove_file(&side).unwrap();
    }
    // Without the links the ledger works again and kept its run.
    assert_code(&env.run(["run", "--key", "k", "--", "true"]), 0);
    assert_eq!(env.show_json("k")["status"], "succeeded");
    assert_eq!(env.show_json("k")["history"], serde_json::json!([]));
}

#[test]
fn a_ledger_file_of_another_user_is_refused_and_left_alone() {
    if !require(root(), "root (to hand a file to another user)") {
        return;
    }
    let env = Env::new();
    // An empty file another user made where the ledger would go.
    let db = env.db();
    fs::write(&db, b"").unwrap();
    chmod(&db, 0o644);
    chown(&db, STRANGER);
    let before = listing(env.dir.path());
    let output = env.run(["run", "--key", "k", "--", "true"]);
    refused(&output, &["ledger.db", &format!("uid {STRANGER}")]);
    let meta = fs::metadata(&db).unwrap();
    assert_eq!(meta.len(), 0, "the file was made a ledger");
    assert_eq!(meta.mode() & 0o7777, 0o644);
    assert_eq!(meta.uid(), STRANGER);
    assert_eq!(listing(env.dir.path()), before);
}

#[test]
fn a_ledger_file_others_can_write_is_refused() {
    let env = Env::new();
    let db = env.db();
    assert_code(&env.run(["run", "--key", "k", "--", "true"]), 0);
    for mode in [0o666, 0o620] {
        chmod(&db, mode);
        let bytes = fs::read(&db).unwrap();
        let before = listing(env.dir.path());
        let output = env.run(["run", "--key", "new", "--", "true"]);
        refused(&output, &["ledger.db", &format!("{mode:04o}"), "chmod 600"]);
        assert_eq!(fs::read(&db).unwrap(), bytes);
        assert_eq!(fs::metadata(&db).unwrap().mode() & 0o7777, mode);
        assert_eq!(listing(env.dir.path()), before);
    }
    // Readable by others is the owner's choice (doctor warns about it).
    chmod(&db, 0o644);
    assert_code(&env.run(["run", "--key", "new", "--", "true"]), 0);
}

#[test]
fn a_folder_others_can_write_or_another_user_owns_is_refused() {
    let env = Env::new();
    let folder = env.path("shared");
    fs::create_dir(&folder).unwrap();
    let db = folder.join("ledger.db");
    chmod(&folder, 0o777);
    let output = with_db(&env, &db, &["run", "--key", "k", "--", "true"]);
    refused(&output, &["shared", "0777", "chmod 700"]);
    assert!(listing(&folder).is_empty(), "{:?}", listing(&folder));
    chmod(&folder, 0o775);
    refused(
        &with_db(&env, &db, &["run", "--key", "k", "--", "true"]),
        &["shared", "0775"],
    );
    assert!(listing(&folder).is_empty());
    // A sticky folder like /tmp: others cannot replace what is ours.
    chmod(&folder, 0o1777);
    assert_code(&with_db(&env, &db, &["run", "--key", "k", "--", "true"]), 0);
    assert_eq!(fs::metadata(&db).unwrap().mode() & 0o777, 0o600);

    if !require(root(), "root (to hand a folder to another user)") {
        return;
    }
    let theirs = env.path("theirs");
    fs::create_dir(&theirs).unwrap();
    chmod(&theirs, 0o755);
    chown(&theirs, STRANGER);
    let output = with_db(
        &env,
        &theirs.join("ledger.db"),
        &["run", "--key", "k", "--", "true"],
    );
    refused(&output, &["theirs", &format!("uid {STRANGER}")]);
    assert!(listing(&theirs).is_empty());
}

#[test]
fn a_fifo_a_device_or_a_folder_is_not_a_regular_file() {
    let env = Env::new();
    let fifo = env.path("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let folder = env.path("folder");
    fs::create_dir(&folder).unwrap();
    let mut paths = vec![fifo, folder];
    if require(root(), "root (to make a character device)") {
        // What /dev/null is, in a folder of the test's own.
        let null = env.path("null");
        nix::sys::stat::mknod(
            &null,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        paths.push(null);
    }
    let before = listing(env.dir.path());
    for path in &paths {
        for args in [
            &["run", "--key", "k", "--", "true"][..],
            &["ledger", "list"],
        ] {
            let mut command = env.idem(args);
            command.env("IDEM_DB", path);
            let output = within(command, Duration::from_secs(20));
            refused(
                &output,
                &[&path.display().to_string(), "not a regular file"],
            );
        }
    }
    assert_eq!(listing(env.dir.path()), before, "something was left beside");
}

/// Runs idem as `nobody` (uid 65534) from a copy of the binary it can reach.
fn as_nobody(env: &Env, db: &Path, args: &[&str]) -> Option<Output> {
    if !require(root(), "root (to run idem as nobody)") {
        return None;
    }
    chmod(env.dir.path(), 0o755);
    let binary = env.path("idem");
    if !binary.exists() {
        // Copied by cp(1), not fs::copy: a command another test forks in
        // the moment this process holds the copy open for writing inherits
        // that descriptor, and exec of the copy then fails "text file busy".
        let copied = Command::new("cp")
            .arg(env!("CARGO_BIN_EXE_idem"))
            .arg(&binary)
            .status()
            .unwrap();
        assert!(copied.success(), "cp of the idem binary failed");
    }
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&binary)
        .args(args)
        .env("IDEM_DB", db)
        .env("HOME", env.dir.path())
        .env("TZ", "UTC")
        .current_dir("/")
        .stdin(Stdio::null())
        .output();
    match output {
        Ok(output) => Some(output),
        Err(error) => {
            require(false, &format!("setpriv ({error})"));
            None
        }
    }
}

#[test]
fn a_folder_that_cannot_be_searched_says_so() {
    let env = Env::new();
    let folder = env.path("closed");
    fs::create_dir(&folder).unwrap();
    let Some(_) = as_nobody(&env, &env.path("probe.db"), &["ledger", "path"]) else {
        return;
    };
    chown(&folder, 65534);
    chmod(&folder, 0o600);
    let db = folder.join("ledger.db");
    let output = as_nobody(&env, &db, &["run", "--key", "k", "--", "true"]).unwrap();
    let line = refused(&output, &["closed", "cannot be searched"]);
    assert!(!line.contains("could not create"), "{line}");
}

#[test]
fn doctor_says_a_ledger_that_cannot_be_written_is_a_problem() {
    let env = Env::new();
    let folder = env.path("mine");
    fs::create_dir(&folder).unwrap();
    let db = folder.join("ledger.db");
    assert_code(&with_db(&env, &db, &["run", "--key", "k", "--", "true"]), 0);
    let Some(healthy) = as_nobody(&env, &db, &["doctor"]) else {
        return;
    };
    // Root made it; nobody is not its owner.
    assert_code(&healthy, 1);
    for entry in fs::read_dir(&folder).unwrap() {
        chown(&entry.unwrap().path(), 65534);
    }
    chown(&folder, 65534);
    let output = as_nobody(&env, &db, &["doctor", "--json"]).unwrap();
    assert_code(&output, 0);
    chmod(&db, 0o400);
    let output = as_nobody(&env, &db, &["doctor", "--json"]).unwrap();
    assert_code(&output, 1);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let problem = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["status"] == "problem")
        .unwrap_or_else(|| panic!("no problem in {report}"));
    let words = format!("{} {}", problem["message"], problem["fix"]);
    assert!(words.contains("cannot write"), "{words}");
    assert!(words.contains("chmod"), "{words}");
    // And run indeed cannot record a new key there.
    let output = as_nobody(&env, &db, &["run", "--key", "new", "--", "true"]).unwrap();
    assert_code(&output, 125);
}

#[test]
fn doctor_says_never_to_delete_the_wal_and_shm_files() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "k", "--", "true"]), 0);
    assert!(env.path("ledger.db-wal").exists());
    let output = env.run(["doctor"]);
    assert_code(&output, 0);
    let stdout = text(&output.stdout);
    assert!(stdout.contains("never delete"), "{stdout}");
    assert!(stdout.contains("ledger.db-wal"), "{stdout}");
    let output = env.run(["doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let leftovers = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["check"] == "leftover files")
        .unwrap();
    assert!(
        !leftovers["message"].as_str().unwrap().contains("-wal"),
        "the -wal file is listed as a leftover: {leftovers}"
    );
}

// ------------------------------------------------------------ bounded memory

/// Peak memory in KiB of idem `args`.
fn peak_kib(env: &Env, args: &[&str]) -> (Output, u64) {
    max_rss_kib(env.idem(args), Stdio::piped())
}

const MIB: usize = 1 << 20;
const BIG: &str = "yes 0123456789abcdef | head -c 1048576";

/// A key with `runs` runs, each with 1 MiB of output kept: one made by
/// idem, the others copied from it in SQL (far faster than running them).
fn big_history(env: &Env, runs: u32) {
    let output = env.run([
        "run",
        "--key",
        "big",
        "--capture",
        "1MiB",
        "--shell",
        "--",
        BIG,
    ]);
    assert_code(&output, 0);
    assert_eq!(output.stdout.len(), MIB);
    sqlite(
        &env.db(),
        &format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {})
             INSERT INTO runs (run_id, key_id, status, exit_code, signal, attempts, started_at,
                 finished_at, host, pid, command, shell, recovered)
             SELECT randomblob(16), key_id, status, exit_code, signal, attempts,
                 started_at - i * 60000, finished_at - i * 60000, host, pid, command, shell,
                 recovered
             FROM runs, n WHERE runs.id = 1;
             INSERT INTO attempts (run, n, started_at, finished_at, exit_code, signal,
                 timed_out, stdout_tail, stderr_tail)
             SELECT r.id, 1, r.started_at, r.finished_at, 0, NULL, 0,
                 (SELECT stdout_tail FROM attempts WHERE run = 1), NULL
             FROM runs r WHERE r.id > 1;",
            runs - 1
        ),
    );
    assert_eq!(
        sqlite(&env.db(), "SELECT count(*) FROM attempts"),
        runs.to_string()
    );
}

#[test]
fn show_and_replay_stay_small_whatever_the_history() {
    let env = Env::new();
    big_history(&env, 200);
    let limit_kib = 16 * 1024;

    let (output, peak) = peak_kib(&env, &["ledger", "show", "big"]);
    assert_code(&output, 0);
    assert!(peak < limit_kib, "ledger show took {peak} KiB");
    let shown = text(&output.stdout);
    assert_eq!(shown.matches("\nrun ").count(), 10, "the latest 10 runs");
    assert!(shown.contains("--limit"), "says that more runs exist");

    let (output, peak) = peak_kib(&env, &["ledger", "show", "big", "--json"]);
    assert_code(&output, 0);
    assert!(peak < limit_kib, "ledger show --json took {peak} KiB");

    let (output, peak) = peak_kib(
        &env,
        &["run", "--key", "big", "--replay", "--shell", "--", BIG],
    );
    assert_code(&output, 0);
    assert!(peak < limit_kib, "run --replay took {peak} KiB");
}

#[test]
fn show_prints_its_latest_runs_up_to_a_limit() {
    let env = Env::new();
    for n in 0..4 {
        let command = format!("echo output-{n}");
        let args = ["run", "--key", "k", "--force", "--shell", "--", &command];
        assert_code(&env.run(args), 0);
    }
    let output = env.run(["ledger", "show", "k", "--limit", "2"]);
    assert_code(&output, 0);
    let shown = text(&output.stdout);
    assert_eq!(shown.matches("\nrun ").count(), 2, "{shown}");
    assert!(
        shown.contains("output-3") && shown.contains("output-2"),
        "{shown}"
    );
    assert!(!shown.contains("output-1"), "{shown}");
    assert!(shown.contains("2 earlier runs"), "{shown}");
    let json = env.run(["ledger", "show", "k", "--json", "--limit", "2"]);
    let object: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(object["history"].as_array().unwrap().len(), 1);
    assert_eq!(
        object["attempts_detail"][0]["stdout_tail"], "output-3\n",
        "{object}"
    );
    // Without --limit, all four fit in the default of 10.
    let all = text(&env.run(["ledger", "show", "k"]).stdout);
    assert_eq!(all.matches("\nrun ").count(), 4, "{all}");
    assert!(!all.contains("earlier runs"), "{all}");
}

/// A line of `ledger export` with a stdout tail of `tail` bytes of `byte`.
fn export_line(run_id: &str, key: &str, tail: usize, finished: bool) -> String {
    let finished_at = if finished {
        "\"2026-01-01T00:00:01Z\""
    } else {
        "null"
    };
    format!(
        "{{\"key\":\"{key}\",\"run_id\":\"{run_id}\",\"status\":\"succeeded\",\"exit_code\":0,\
         \"attempts\":1,\"started_at\":\"2026-01-01T00:00:00Z\",\"finished_at\":{finished_at},\
         \"host\":\"h\",\"pid\":1,\"command\":[\"true\"],\"shell\":false,\"head\":true,\
         \"attempts_detail\":[{{\"attempt\":1,\"exit_code\":0,\
         \"started_at\":\"2026-01-01T00:00:00Z\",\"finished_at\":\"2026-01-01T00:00:01Z\",\
         \"stdout_tail\":\"{}\",\"stderr_tail\":\"\"}}]}}\n",
        "x".repeat(tail).replacen('x', "s", 1)
    )
}

fn import_file(env: &Env, lines: &[Vec<u8>]) -> PathBuf {
    let path = env.path("import.jsonl");
    fs::write(&path, lines.concat()).unwrap();
    path
}

#[test]
fn import_caps_a_line_and_the_tails_it_keeps() {
    let env = Env::new();
    // A tail three times the largest --capture: kept, but only its end.
    let long = export_line(
        "018f0000-0000-7000-8000-000000000001",
        "long",
        3 * MIB,
        true,
    );
    let file = import_file(&env, &[long.into_bytes()]);
    let output = env.run([OsStr::new("ledger"), "import".as_ref(), file.as_os_str()]);
    assert_code(&output, 0);
    assert_eq!(
        sqlite(&env.db(), "SELECT length(stdout_tail) FROM attempts"),
        MIB.to_string()
    );
    assert_eq!(
        sqlite(
            &env.db(),
            "SELECT hex(substr(stdout_tail, 1, 1)) FROM attempts"
        ),
        "78",
        "the end of the tail is kept, not its start"
    );

    // A line far past the cap: refused by number, in bounded memory.
    let ok = export_line("018f0000-0000-7000-8000-000000000002", "ok", 10, true);
    let huge = export_line(
        "018f0000-0000-7000-8000-000000000003",
        "huge",
        150 * MIB,
        true,
    );
    let file = import_file(&env, &[ok.into_bytes(), huge.into_bytes()]);
    let (output, peak) = peak_kib(&env, &["ledger", "import", &file.display().to_string()]);
    assert_code(&output, 2);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("longer than"), "{stderr}");
    assert!(peak < 64 * 1024, "import of a 150 MiB line took {peak} KiB");
    let keys = sqlite(&env.db(), "SELECT group_concat(key) FROM keys");
    assert!(keys.contains("ok") && !keys.contains("huge"), "{keys}");
}

#[test]
fn import_refuses_a_line_that_is_not_utf8_by_its_number() {
    let env = Env::new();
    let ok = export_line("018f0000-0000-7000-8000-000000000001", "ok", 10, true);
    let mut bad = export_line("018f0000-0000-7000-8000-000000000002", "bad", 10, true).into_bytes();
    let at = bad.iter().position(|byte| *byte == b's').unwrap();
    bad[at] = 0xff;
    let file = import_file(&env, &[ok.into_bytes(), bad]);
    let output = env.run([OsStr::new("ledger"), "import".as_ref(), file.as_os_str()]);
    assert_code(&output, 2);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("UTF-8"), "{stderr}");
}

// ------------------------------------------------------------------ clocks

#[test]
fn import_refuses_a_success_without_its_finish_time() {
    let env = Env::new();
    let ok = export_line("018f0000-0000-7000-8000-000000000001", "ok", 10, true);
    let endless = export_line("018f0000-0000-7000-8000-000000000002", "endless", 10, false);
    let file = import_file(&env, &[ok.into_bytes(), endless.into_bytes()]);
    let output = env.run([OsStr::new("ledger"), "import".as_ref(), file.as_os_str()]);
    assert_code(&output, 2);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("finished_at"), "{stderr}");
}

// ------------------------------------------------------------ hostile bytes

#[test]
fn list_and_show_escape_control_characters() {
    let env = Env::new();
    let hostile = "\x1b]0;owned\x07\x1b[2J\r";
    let output = env.run([
        OsStr::new("run"),
        "--key".as_ref(),
        "k".as_ref(),
        "--".as_ref(),
        "printf".as_ref(),
        OsString::from(format!("{hostile}%s\u{202e}\n")).as_os_str(),
        "tail".as_ref(),
    ]);
    assert_code(&output, 0);
    // A key recorded by some other means, with a right-to-left override.
    sqlite(
        &env.db(),
        "UPDATE keys SET key = 'a' || char(0x202e) || char(7) || 'b' WHERE key = 'k'",
    );
    let list = env.run(["ledger", "list"]);
    assert_code(&list, 0);
    let show = env.run([
        OsStr::new("ledger"),
        "show".as_ref(),
        OsStr::from_bytes("a\u{202e}\x07b".as_bytes()),
    ]);
    assert_code(&show, 0);
    for (name, output) in [("list", &list), ("show", &show)] {
        let stdout = text(&output.stdout);
        for bad in ['\x1b', '\x07', '\r', '\u{202e}'] {
            assert!(
                !stdout.contains(bad),
                "{name} prints {bad:?} raw: {stdout:?}"
            );
        }
        assert!(stdout.contains("\\x1b"), "{name}: {stdout}");
        assert!(stdout.contains("\\u{202e}"), "{name}: {stdout}");
    }
    // JSON keeps the exact text.
    let json = env.run([OsStr::new("ledger"), "list".as_ref(), "--json".as_ref()]);
    let runs: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(runs[0]["key"], "a\u{202e}\x07b");
}

#[test]
fn keys_with_format_characters_are_refused() {
    let env = Env::new();
    for key in [
        "pay\u{202e}gnp",
        "a\u{2066}b",
        "zero\u{200b}width",
        "a\u{feff}",
    ] {
        let output = env.run(["run", "--key", key, "--", "true"]);
        assert_code(&output, 2);
        let stderr = text(&output.stderr);
        assert!(stderr.contains("invalid --key"), "{stderr}");
        assert!(
            !stderr.contains(key),
            "the message repeats the key raw: {stderr}"
        );
    }
    assert!(!env.db().exists());
}

// ------------------------------------------------------------------ clocks

#[test]
fn a_success_stamped_in_the_future_is_not_fresh() {
    let env = Env::new();
    let args = ["run", "--key", "k", "--ttl", "1h", "--", "sh", "-c"];
    let count = env.count_cmd("count");
    let run = |env: &Env| {
        let mut all: Vec<&str> = args.to_vec();
        all.push(&count);
        env.run(all)
    };
    assert_code(&run(&env), 0);
    // As if the clock had run 30 days ahead when it succeeded.
    sqlite(
        &env.db(),
        "UPDATE runs SET started_at = started_at + 30 * 86400000,
             finished_at = finished_at + 30 * 86400000",
    );
    assert_code(&run(&env), 0);
    assert_eq!(
        env.count("count"),
        2,
        "a success from the future was skipped"
    );
    assert_code(&run(&env), 0);
    assert_eq!(env.count("count"), 2, "the success made now is fresh");
}

// ------------------------------------------------------------------- lines

/// The buffers written, in strace's notation, by every (process, descriptor)
/// that wrote an `idem: ` line: idem's stderr, however duplicated.
fn stderr_writes(trace: &Path) -> Vec<String> {
    let calls: Vec<(String, String)> = fs::read_to_string(trace)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let (pid, call) = line.split_once(' ')?;
            let call = call.trim_start().strip_prefix("write(")?;
            let (fd, rest) = call.split_once(", ")?;
            let buffer = rest.rsplit_once(", ")?.0;
            Some((format!("{pid}/{fd}"), buffer.to_owned()))
        })
        .collect();
    let streams: Vec<&String> = calls
        .iter()
        .filter(|(_, buffer)| buffer.contains("idem: "))
        .map(|(stream, _)| stream)
        .collect();
    calls
        .iter()
        .filter(|(stream, _)| streams.contains(&stream))
        .map(|(_, buffer)| buffer.clone())
        .collect()
}

/// idem `args` on ledger `db` under strace, its writes kept in `trace`.
fn traced(env: &Env, trace: &Path, db: &Path, args: &[&str]) -> Output {
    Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=write",
            "-e",
            "signal=none",
            "-s",
            "4096",
            "-o",
        ])
        .arg(trace)
        .arg(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .env("IDEM_DB", db)
        .env("HOME", env.dir.path())
        .env("TZ", "UTC")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn each_idem_line_is_one_write() {
    if !require(Command::new("strace").arg("-V").output().is_ok(), "strace") {
        return;
    }
    let env = Env::new();
    let trace = env.path("trace");
    let retried = [
        "run",
        "--key",
        "k",
        "--retries",
        "2",
        "--backoff",
        "1ms",
        "--",
        "false",
    ];
    let output = traced(&env, &trace, &env.db(), &retried);
    assert_code(&output, 1);
    let lines = text(&output.stderr).lines().count();
    assert_eq!(lines, 3, "{}", text(&output.stderr));
    let writes = stderr_writes(&trace);
    assert_eq!(writes.len(), lines, "{writes:#?}");
    for write in &writes {
        assert!(
            write.starts_with("\"idem: ") && write.ends_with("\\n\""),
            "{write}"
        );
    }

    // An error that stops idem, printed by main.
    fs::write(env.path("not-a-folder"), b"a file").unwrap();
    let db = env.path("not-a-folder/ledger.db");
    let output = traced(&env, &trace, &db, &["ledger", "show", "k"]);
    assert_code(&output, 125);
    let writes = stderr_writes(&trace);
    assert_eq!(writes.len(), 1, "{writes:#?}");
}

#[test]
fn a_delay_under_a_second_is_told_in_milliseconds() {
    let env = Env::new();
    let output = env.run([
        "run",
        "--key",
        "k",
        "--retries",
        "1",
        "--backoff",
        "300ms",
        "--",
        "false",
    ]);
    assert_code(&output, 1);
    let stderr = text(&output.stderr);
    let said = stderr
        .split("retrying in ")
        .nth(1)
        .unwrap_or_else(|| panic!("{stderr}"));
    let number: String = said.chars().take_while(char::is_ascii_digit).collect();
    assert!(said[number.len()..].starts_with("ms"), "{stderr}");
    let ms: u64 = number.parse().unwrap();
    assert!((150..=300).contains(&ms), "{stderr}");
}

#[test]
fn a_clock_before_1970_is_a_clear_125() {
    if !crate::util::have_faketime() {
        return;
    }
    let env = Env::new();
    let template = env.idem([
        "run",
        "--key",
        "k",
        "--shell",
        "--",
        &env.count_cmd("count"),
    ]);
    let mut command = crate::util::wrapped(&template, &["faketime", "1969-12-31 00:00:00"]);
    let output = command.output().unwrap();
    assert_code(&output, 125);
    assert!(
        text(&output.stderr).contains("before 1970"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(env.count("count"), 0);
}

#[test]
fn an_unusable_tmpdir_under_quiet_success_claims_nothing() {
    let env = Env::new();
    let output = env
        .idem([
            "run",
            "--key",
            "k",
            "--quiet-success",
            "--shell",
            "--",
            &env.count_cmd("count"),
        ])
        .env("TMPDIR", env.path("missing"))
        .output()
        .unwrap();
    assert_code(&output, 125);
    assert_eq!(env.count("count"), 0);
    // Nothing was left running, so the next run is not told of a recovery.
    let recovered = format!(
        "echo \"$IDEM_RECOVERED\" >> '{}'",
        env.path("seen").display()
    );
    assert_code(
        &env.run(["run", "--key", "k", "--shell", "--", &recovered]),
        0,
    );
    assert_eq!(fs::read_to_string(env.path("seen")).unwrap(), "\n");
}

#[test]
fn a_closed_stdout_is_not_retried() {
    let env = Env::new();
    // idem's stdout is a pipe whose reader has gone.
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    let output = env
        .idem([
            "run",
            "--key",
            "k",
            "--backoff",
            "10ms",
            "--shell",
            "--",
            &format!("{}; yes | head -c 1000000", env.count_cmd("count")),
        ])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_code(&output, 141);
    assert_eq!(env.count("count"), 1, "{}", text(&output.stderr));
}

#[test]
fn a_replay_of_an_output_longer_than_was_kept_says_its_start_is_cut() {
    let env = Env::new();
    let run = |key: &str, args: &[&str]| {
        let mut all = vec!["run", "--key", key, "--replay", "--capture", "16"];
        all.extend_from_slice(args);
        env.run(all)
    };
    assert_code(&run("long", &["--", "seq", "1", "100"]), 0);
    let replayed = run("long", &["--", "seq", "1", "100"]);
    assert_code(&replayed, 0);
    assert_eq!(text(&replayed.stdout), "96\n97\n98\n99\n100\n");
    assert!(
        text(&replayed.stderr).contains("the replay lacks its start"),
        "{}",
        text(&replayed.stderr)
    );
    // What was kept whole replays without a word.
    assert_code(&run("short", &["--", "echo", "hi"]), 0);
    let whole = run("short", &["--", "echo", "hi"]);
    assert_eq!(text(&whole.stdout), "hi\n");
    assert_eq!(text(&whole.stderr), "");
    // The ledger tells it to scripts, and an export carries it.
    assert_eq!(
        env.show_json("long")["attempts_detail"][0]["output_cut"],
        true
    );
    assert_eq!(
        env.show_json("short")["attempts_detail"][0]["output_cut"],
        false
    );
    let export = env.run(["ledger", "export"]);
    assert!(text(&export.stdout).contains("\"output_cut\":true"));
}

/// A count or a number out of its range, in a ledger edited by hand, is an
/// error naming the ledger and the column: never a zero that looks like a
/// job that never failed, nor words about a time.
#[test]
fn a_negative_count_or_an_out_of_range_number_is_an_error_naming_the_ledger() {
    let env = Env::new();
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    let ledger = env.db().display().to_string();
    sqlite(&env.db(), "UPDATE jobs SET failures = -1;");
    env.cmd(["status"])
        .expect_code(125)
        .stderr_has(&ledger)
        .stderr_has("a stored value cannot be read (a negative count (-1) in column failures)")
        .stderr_one_line();
    sqlite(
        &env.db(),
        "UPDATE jobs SET failures = 0; UPDATE runs SET pid = -1;",
    );
    env.cmd(["ledger", "list"])
        .expect_code(125)
        .stderr_has(&ledger)
        .stderr_has("a stored value cannot be read (-1 is out of range in column pid)")
        .stderr_one_line();
}
