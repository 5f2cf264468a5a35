//! Faults and bad input, each provoked for real: a full disk, a read-only
//! file system, a locked ledger, bad arguments, bytes that are not text,
//! floods of output, power loss, permissions; and `idem doctor`.
//!
//! Mounting needs root; where it fails the test says so and does not run,
//! and under CI (`CI` set) it fails.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::util::{assert_code, integrity_check, require, text, Env};

/// A tmpfs mounted for one test, unmounted when dropped.
struct Mount {
    dir: PathBuf,
}

impl Mount {
    /// Mounts a tmpfs of `size` at `dir`, or says why not and returns None.
    fn tmpfs(dir: &Path, size: &str) -> Option<Mount> {
        fs::create_dir_all(dir).unwrap();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755")])
            .arg("tmpfs")
            .arg(dir)
            .output();
        match output {
            Ok(output) if output.status.success() => Some(Mount {
                dir: dir.to_owned(),
            }),
            Ok(output) => {
                let why = format!(
                    "a tmpfs mount (root; mount said: {})",
                    text(&output.stderr).trim()
                );
                require(false, &why);
                None
            }
            Err(error) => {
                require(false, &format!("mount ({error})"));
                None
            }
        }
    }

    fn remount(&self, options: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(status.success(), "remount {options} failed");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Writes zeros into `file` until the file system is full.
fn fill(file: &Path) {
    let mut out = fs::File::create(file).unwrap();
    let chunk = vec![0u8; 16 << 10];
    while out.write_all(&chunk).is_ok() {}
    let _ = out.flush();
    let _ = out.sync_all();
}

fn run_with_db(env: &Env, db: &Path, args: &[&str]) -> Output {
    env.idem(args).env("IDEM_DB", db).output().unwrap()
}

fn list_keys(env: &Env, db: &Path) -> serde_json::Value {
    let output = run_with_db(env, db, &["ledger", "list", "--json"]);
    assert_code(&output, 0);
    serde_json::from_slice(&output.stdout).unwrap()
}

fn status_of(runs: &serde_json::Value, key: &str) -> Option<String> {
    runs.as_array()
        .unwrap()
        .iter()
        .find(|run| run["key"] == key)
        .map(|run| run["status"].as_str().unwrap().to_owned())
}

// ---------------------------------------------------------------- disk full

#[test]
fn a_full_disk_runs_nothing_and_loses_nothing() {
    let env = Env::new();
    let Some(mount) = Mount::tmpfs(&env.path("small"), "1m") else {
        return;
    };
    let db = mount.dir.join("ledger.db");
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "before", "--", "true"]),
        0,
    );
    assert_code(
        &run_with_db(
            &env,
            &db,
            &["run", "--key", "failed", "--retries", "0", "--", "false"],
        ),
        1,
    );
    let filler = mount.dir.join("filler");
    fill(&filler);
    let count = env.count_cmd("count");
    let output = run_with_db(&env, &db, &["run", "--key", "k", "--shell", "--", &count]);
    assert_code(&output, 125);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("the disk is full"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(env.count("count"), 0, "the command ran without a claim");
    // doctor says so too, without writing.
    let doctor = run_with_db(&env, &db, &["doctor"]);
    assert_code(&doctor, 1);
    assert!(
        text(&doctor.stdout).contains("the disk is full"),
        "{}",
        text(&doctor.stdout)
    );

    fs::remove_file(&filler).unwrap();
    assert_eq!(integrity_check(&db), "ok");
    let runs = list_keys(&env, &db);
    assert_eq!(status_of(&runs, "before").as_deref(), Some("succeeded"));
    assert_eq!(status_of(&runs, "failed").as_deref(), Some("failed"));
    assert_eq!(status_of(&runs, "k"), None);
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "k", "--shell", "--", &count]),
        0,
    );
    assert_eq!(env.count("count"), 1);
}

/// A ledger on a 2MiB tmpfs with one success in it, filled but for room
/// for a claim, not for megabytes of captured output; and the filler.
fn nearly_full(env: &Env) -> Option<(Mount, PathBuf, PathBuf)> {
    let mount = Mount::tmpfs(&env.path("small"), "2m")?;
    let db = mount.dir.join("ledger.db");
    assert_code(
        &run_with_db(env, &db, &["run", "--key", "before", "--", "true"]),
        0,
    );
    let filler = mount.dir.join("filler");
    fill(&filler);
    fs::File::options()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(
            fs::metadata(&filler)
                .unwrap()
                .len()
                .saturating_sub(160 << 10),
        )
        .unwrap();
    Some((mount, db, filler))
}

#[test]
fn a_disk_that_fills_during_a_run_is_said_loudly() {
    let env = Env::new();
    let Some((_mount, db, filler)) = nearly_full(&env) else {
        return;
    };
    let script = "head -c 3000000 /dev/urandom | od -x; head -c 3000000 /dev/urandom | od -x >&2";
    let output = env
        .idem([
            "run",
            "--key",
            "big",
            "--retries",
            "0",
            "--capture",
            "1MiB",
            "--shell",
            "--",
            script,
        ])
        .env("IDEM_DB", &db)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert_code(&output, 125);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("the disk is full"), "{stderr}");
    fs::remove_file(&filler).unwrap();
    assert_eq!(integrity_check(&db), "ok");
    let runs = list_keys(&env, &db);
    assert_eq!(status_of(&runs, "before").as_deref(), Some("succeeded"));
    // Whatever was recorded, the next run makes progress by itself.
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "big", "--", "true"]),
        0,
    );
}

#[test]
fn a_disk_that_fills_while_a_retry_is_recorded_says_what_ran_and_shows_it() {
    let env = Env::new();
    let Some((_mount, db, filler)) = nearly_full(&env) else {
        return;
    };
    let script = "head -c 3000000 /dev/urandom | od -x; echo held-and-shown; exit 1";
    let output = run_with_db(
        &env,
        &db,
        &[
            "run",
            "--key",
            "retried",
            "--retries",
            "1",
            "--backoff",
            "10ms",
            "--quiet-success",
            "--capture",
            "1MiB",
            "--shell",
            "--",
            script,
        ],
    );
    assert_code(&output, 125);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("attempt 1/2 exited 1, but idem could not record it"),
        "{stderr}"
    );
    assert!(stderr.contains("the disk is full"), "{stderr}");
    assert!(
        text(&output.stdout).contains("held-and-shown"),
        "the held output was dropped"
    );
    fs::remove_file(&filler).unwrap();
    assert_eq!(integrity_check(&db), "ok");
}

#[test]
fn an_attempt_that_cannot_be_recorded_never_runs() {
    // The claim commits, then writing the attempt's start fails (here a
    // trigger refuses it): the command, held between fork and exec, must
    // not run, and the run is failed rather than left to look abandoned.
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "first", "--", "true"]), 0);
    sqlite(
        &env.db(),
        "CREATE TRIGGER refuse BEFORE INSERT ON attempts
         BEGIN SELECT RAISE(ABORT, 'attempts refused'); END;",
    );
    let count = format!(
        "{}; echo ${{IDEM_RECOVERED:-0}} >> '{}'",
        env.count_cmd("count"),
        env.path("recovered").display()
    );
    let output = env.run(["run", "--key", "k", "--shell", "--", &count]);
    assert_code(&output, 125);
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("the command did not run"), "{stderr}");
    assert!(stderr.contains("attempts refused"), "{stderr}");
    assert_eq!(env.count("count"), 0, "the command ran");
    let shown = env.show_json("k");
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["exit_code"], 125);
    // Once the ledger takes writes again, the key runs, plainly: it is known
    // that nothing ran, so it is not a recovery.
    sqlite(&env.db(), "DROP TRIGGER refuse;");
    assert_code(&env.run(["run", "--key", "k", "--shell", "--", &count]), 0);
    assert_eq!(env.count("count"), 1);
    assert_eq!(fs::read_to_string(env.path("recovered")).unwrap(), "0\n");

    // A retry whose start is refused: the output held by --quiet-success
    // of the attempt that did run is shown, as after any failure.
    sqlite(
        &env.db(),
        "CREATE TRIGGER refuse_retry BEFORE INSERT ON attempts WHEN NEW.n = 2
         BEGIN SELECT RAISE(ABORT, 'attempts refused'); END;",
    );
    let flaky = format!("{}; echo first words; exit 3", env.count_cmd("count"));
    let output = env.run([
        "run",
        "--key",
        "q",
        "--retries",
        "1",
        "--backoff",
        "0s",
        "--quiet-success",
        "--shell",
        "--",
        &flaky,
    ]);
    assert_code(&output, 125);
    assert_eq!(env.count("count"), 2, "one attempt ran, the retry did not");
    assert_eq!(text(&output.stdout), "first words\n");
    assert!(text(&output.stderr).contains("the command did not run"));
    assert_eq!(env.show_json("q")["exit_code"], 125);
}

// ------------------------------------------------------------ read-only

#[test]
fn a_read_only_ledger_runs_nothing_but_can_be_read() {
    let env = Env::new();
    let Some(mount) = Mount::tmpfs(&env.path("ro"), "4m") else {
        return;
    };
    // Characters a file: URI must escape, and bytes that are not UTF-8.
    let db = mount
        .dir
        .join(OsString::from_vec(b"we?ird #%20 \xff".to_vec()))
        .join("ledger.db");
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "done", "--", "echo", "hi"]),
        0,
    );
    mount.remount("ro");
    let count = env.count_cmd("count");
    let output = run_with_db(&env, &db, &["run", "--key", "new", "--shell", "--", &count]);
    assert_code(&output, 125);
    assert!(
        text(&output.stderr).contains("read-only"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(env.count("count"), 0);
    // Reading works, and a succeeded key is still skipped (a skip writes nothing).
    let runs = list_keys(&env, &db);
    assert_eq!(status_of(&runs, "done").as_deref(), Some("succeeded"));
    let show = run_with_db(&env, &db, &["ledger", "show", "done", "--json"]);
    assert_code(&show, 0);
    let shown: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["attempts_detail"][0]["stdout_tail"], "hi\n");
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "done", "--", "echo", "hi"]),
        0,
    );
    let doctor = run_with_db(&env, &db, &["doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    assert!(report["schema_version"].as_u64().unwrap() >= 1, "{report}");
}

#[test]
fn a_read_only_ledger_with_a_leftover_log_can_be_read() {
    let env = Env::new();
    let Some(mount) = Mount::tmpfs(&env.path("ro"), "4m") else {
        return;
    };
    let db = mount.dir.join("ledger.db");
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "done", "--", "true"]),
        0,
    );
    // A writer that dies with its log and index still on disk.
    crash_writer(&db, "UPDATE runs SET pid = pid;");
    assert!(db.with_extension("db-wal").exists());
    mount.remount("ro");
    let runs = list_keys(&env, &db);
    assert_eq!(status_of(&runs, "done").as_deref(), Some("succeeded"));
}

/// A ledger of one's own that refuses writes (mode 0444, in a folder of
/// root's): the same as a read-only file system. Runs idem as `nobody`
/// through setpriv. (A ledger of another user is refused outright: see
/// the hardening tests.)
#[test]
fn a_ledger_that_refuses_writes_is_read_only() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "done", "--", "true"]), 0);
    fs::set_permissions(env.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // The ledger and the WAL files kept beside it, handed to nobody.
    for suffix in ["", "-wal", "-shm"] {
        let file = env.path(&format!("ledger.db{suffix}"));
        if file.exists() {
            std::os::unix::fs::chown(&file, Some(65534), Some(65534)).unwrap();
            fs::set_permissions(file, fs::Permissions::from_mode(0o444)).unwrap();
        }
    }
    let binary = env.path("idem");
    fs::copy(env!("CARGO_BIN_EXE_idem"), &binary).unwrap();
    let before = fs::read(env.db()).unwrap();
    let files_before = listing(env.dir.path());
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&binary)
            .args(args)
            .env("IDEM_DB", env.db())
            .env("HOME", env.dir.path())
            .current_dir(env.dir.path())
            .stdin(Stdio::null())
            .output()
    };
    match as_nobody(&["ledger", "path"]) {
        Ok(output) if output.status.success() => {}
        other => {
            require(
                false,
                &format!("running idem as nobody through setpriv ({other:?})"),
            );
            return;
        }
    }
    let output = as_nobody(&["run", "--key", "new", "--", "true"]).unwrap();
    assert_code(&output, 125);
    assert!(
        text(&output.stderr).contains("read-only"),
        "{}",
        text(&output.stderr)
    );
    assert_code(
        &as_nobody(&["run", "--key", "done", "--", "true"]).unwrap(),
        0,
    );
    let list = as_nobody(&["ledger", "list", "--json"]).unwrap();
    assert_code(&list, 0);
    let runs: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(status_of(&runs, "done").as_deref(), Some("succeeded"));
    assert_code(&as_nobody(&["ledger", "show", "done"]).unwrap(), 0);
    assert_eq!(fs::read(env.db()).unwrap(), before);
    assert_eq!(listing(env.dir.path()), files_before);
}

/// Runs `sql` in a sqlite3 process and kills it before it closes the
/// ledger, leaving its -wal and -shm behind.
fn crash_writer(db: &Path, sql: &str) {
    let mut child = Command::new("sqlite3")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{sql}\nSELECT 'done';").unwrap();
    stdin.flush().unwrap();
    wait_for_line(&mut child);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Reads the child's stdout until its first line.
fn wait_for_line(child: &mut Child) {
    use std::io::Read;
    let stdout = child.stdout.as_mut().unwrap();
    let mut byte = [0u8; 1];
    while stdout.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {}
}

// ------------------------------------------------------- foreign ledgers

#[test]
fn newer_foreign_and_garbage_ledgers_are_refused_by_name() {
    let env = Env::new();
    let newer = env.path("newer.db");
    assert_code(
        &run_with_db(&env, &newer, &["run", "--key", "k", "--", "true"]),
        0,
    );
    sqlite(&newer, "PRAGMA user_version = 99;");
    let foreign = env.path("foreign.db");
    sqlite(&foreign, "CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    let garbage = env.path("garbage.db");
    fs::write(
        &garbage,
        b"not a database at all, just some text\n".repeat(200),
    )
    .unwrap();
    let cases = [
        (&newer, "newer idem"),
        (&foreign, "not an idem ledger"),
        (&garbage, "not a SQLite database"),
    ];
    for (db, says) in cases {
        let before = fs::read(db).unwrap();
        let count = env.count_cmd("count");
        for args in [
            &["run", "--key", "k2", "--shell", "--", &count][..],
            &["ledger", "list"][..],
        ] {
            let output = run_with_db(&env, db, args);
            assert_code(&output, 125);
            let stderr = text(&output.stderr);
            assert!(stderr.contains(says), "{}: {stderr}", db.display());
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
        }
        let doctor = run_with_db(&env, db, &["doctor"]);
        assert_code(&doctor, 1);
        assert_eq!(fs::read(db).unwrap(), before, "{} changed", db.display());
        assert_eq!(env.count("count"), 0);
    }
}

#[test]
fn unusable_ledger_paths_are_named() {
    let env = Env::new();
    fs::write(env.path("a-file"), "x").unwrap();
    let count = env.count_cmd("count");
    let cases = [
        (
            env.dir.path().to_owned(),
            "is not a regular file (it is a folder)",
        ),
        (env.path("a-file/ledger.db"), "a-file"),
    ];
    for (db, says) in cases {
        let output = run_with_db(&env, &db, &["run", "--key", "k", "--shell", "--", &count]);
        assert_code(&output, 125);
        let stderr = text(&output.stderr);
        assert!(stderr.contains(says), "{stderr}");
        assert!(stderr.contains("set --db or IDEM_DB"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    assert_eq!(env.count("count"), 0);
}

fn sqlite(db: &Path, sql: &str) {
    let output = Command::new("sqlite3").arg(db).arg(sql).output().unwrap();
    assert!(output.status.success(), "sqlite3: {}", text(&output.stderr));
}

// ------------------------------------------------------------- locking

/// Starts `holder` (which must create the file `held` once it holds the
/// lock) and waits until it does.
fn hold_lock(env: &Env, script: &str) -> Child {
    let held = env.path("held");
    let _ = fs::remove_file(&held);
    let child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(env.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    while !held.exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

#[test]
fn a_ledger_locked_for_a_while_is_waited_for() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "first", "--", "true"]), 0);
    let db = env.db().display().to_string();
    let count = env.count_cmd("count");
    let holders = [
        format!("flock '{db}' sh -c 'touch held; sleep 2'"),
        format!(
            "(echo 'BEGIN IMMEDIATE;'; echo \"UPDATE runs SET pid = pid;\"; echo '.shell touch held'; sleep 2; echo 'COMMIT;') | sqlite3 '{db}'"
        ),
    ];
    for (index, holder) in holders.iter().enumerate() {
        let mut child = hold_lock(&env, holder);
        let key = format!("k{index}");
        let output = env.run(["run", "--key", &key, "--shell", "--", &count]);
        assert_code(&output, 0);
        assert_eq!(env.count("count"), index + 1);
        assert!(child.wait().unwrap().success());
    }
}

fn locked_too_long(holder: impl Fn(&str) -> String) {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "first", "--", "true"]), 0);
    let count = env.count_cmd("count");
    let mut child = hold_lock(&env, &holder(&env.db().display().to_string()));
    let output = env.run(["run", "--key", "k", "--shell", "--", &count]);
    assert_code(&output, 125);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("stayed locked by another process for 10s"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(env.count("count"), 0);
    child.wait().unwrap();
}

#[test]
fn a_ledger_flocked_too_long_fails_with_125() {
    locked_too_long(|db| format!("flock '{db}' sh -c 'touch held; sleep 12'"));
}

#[test]
fn a_ledger_in_a_long_sqlite_transaction_fails_with_125() {
    locked_too_long(|db| {
        format!(
            "(echo 'BEGIN IMMEDIATE;'; echo 'UPDATE runs SET pid = pid;'; echo '.shell touch held'; sleep 12; echo 'COMMIT;') | sqlite3 '{db}'"
        )
    });
}

// ---------------------------------------------------------- bad input

/// Every bad argument: exit 2, one line, naming the flag (or the thing),
/// never a panic, and no ledger created.
#[test]
fn bad_arguments_are_one_line_naming_the_flag() {
    let env = Env::new();
    let long_key = "k".repeat(513);
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--key", "k", "--retries", "-1", "--", "true"],
            "--retries",
        ),
        (
            &["run", "--key", "k", "--retries", "x", "--", "true"],
            "--retries",
        ),
        (
            &[
                "run",
                "--key",
                "k",
                "--retries",
                "99999999999",
                "--",
                "true",
            ],
            "--retries",
        ),
        (
            &["run", "--key", "k", "--retries", "", "--", "true"],
            "--retries",
        ),
        (
            &["run", "--key", "k", "--backoff", "-1s", "--", "true"],
            "--backoff",
        ),
        (
            &["run", "--key", "k", "--backoff=-1s", "--", "true"],
            "--backoff",
        ),
        (
            &["run", "--key", "k", "--backoff", "5", "--", "true"],
            "--backoff",
        ),
        (
            &["run", "--key", "k", "--backoff", "soon", "--", "true"],
            "--backoff",
        ),
        (
            &["run", "--key", "k", "--max-backoff", "", "--", "true"],
            "--max-backoff",
        ),
        (
            &["run", "--key", "k", "--timeout", "0", "--", "true"],
            "--timeout",
        ),
        (
            &[
                "run",
                "--key",
                "k",
                "--timeout",
                "500000000000y",
                "--",
                "true",
            ],
            "--timeout",
        ),
        (
            &["run", "--key", "k", "--timeout", "--", "true"],
            "--timeout",
        ),
        (
            &["run", "--key", "k", "--wait", "101y", "--", "true"],
            "--wait",
        ),
        (
            &["run", "--key", "k", "--wait", "1e9", "--", "true"],
            "--wait",
        ),
        (
            &["run", "--key", "k", "--ttl", "forever", "--", "true"],
            "--ttl",
        ),
        (
            &["run", "--key", "k", "--kill-after", "1x", "--", "true"],
            "--kill-after",
        ),
        (
            &["run", "--key", "k", "--lease", "0", "--", "true"],
            "--lease",
        ),
        (
            &["run", "--key", "k", "--lease", "300ms", "--", "true"],
            "--lease",
        ),
        (
            &["run", "--key", "k", "--retry-on", "1,x", "--", "true"],
            "--retry-on",
        ),
        (
            &["run", "--key", "k", "--retry-on", "300", "--", "true"],
            "--retry-on",
        ),
        (
            &["run", "--key", "k", "--retry-on", "5-1", "--", "true"],
            "--retry-on",
        ),
        (
            &["run", "--key", "k", "--retry-on", "-1", "--", "true"],
            "--retry-on",
        ),
        (
            &["run", "--key", "k", "--retry-on", "", "--", "true"],
            "--retry-on",
        ),
        (
            &["run", "--key", "k", "--no-retry-on", "1,,2", "--", "true"],
            "--no-retry-on",
        ),
        (
            &[
                "run",
                "--key",
                "k",
                "--skipped-exit-code",
                "256",
                "--",
                "true",
            ],
            "--skipped-exit-code",
        ),
        (
            &[
                "run",
                "--key",
                "k",
                "--conflict-exit-code",
                "-3",
                "--",
                "true",
            ],
            "--conflict-exit-code",
        ),
        (
            &["run", "--key", "k", "--capture", "5GiB", "--", "true"],
            "--capture",
        ),
        (
            &["run", "--key", "k", "--capture", "-1", "--", "true"],
            "--capture",
        ),
        (
            &["run", "--key", "k", "--capture", "64 KiB", "--", "true"],
            "--capture",
        ),
        (
            &["run", "--key", "k", "--on-abandoned", "maybe", "--", "true"],
            "--on-abandoned",
        ),
        (&["run", "--key", "k"], "<COMMAND>"),
        (&["run", "--key", "k", "--"], "<COMMAND>"),
        (&["run", "--key", "k", "--", ""], "command after --"),
        (&["run", "--", "true"], "--key"),
        (&["run", "--key", "", "--", "true"], "--key"),
        (&["run", "--key", "{nope}", "--", "true"], "--key"),
        (&["run", "--key", "{}", "--", "true"], "--key"),
        (&["run", "--key", "a{date", "--", "true"], "--key"),
        (&["run", "--key", "a}b", "--", "true"], "--key"),
        (&["run", "--key", "a\tb", "--", "true"], "--key"),
        (&["run", "--key", "a\u{7f}b", "--", "true"], "--key"),
        (&["run", "--key", "line\nbreak", "--", "true"], "--key"),
        (&["run", "--key", &long_key, "--", "true"], "--key"),
        (&["run", "--nope", "--key", "k", "--", "true"], "--nope"),
        (&["ledger", "list", "--limit", "-5"], "--limit"),
        (&["ledger", "list", "--limit", "many"], "--limit"),
        (&["ledger", "list", "--since", "yesterday"], "--since"),
        (&["ledger", "list", "--status", "weird"], "--status"),
        (&["--db", "", "ledger", "list"], "--db"),
        (&["doctor", "--bogus"], "--bogus"),
        (&["nosuch"], "nosuch"),
    ];
    let mut all_stderr = String::new();
    for (args, names) in cases {
        let output = env.run(*args);
        assert_code(&output, 2);
        let stderr = text(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("idem: "), "{args:?}: {stderr}");
        assert!(
            stderr.contains(names),
            "{args:?} does not name {names}: {stderr}"
        );
        all_stderr.push_str(&stderr);
    }
    // Arguments that are not UTF-8 where text is expected.
    let not_utf8 = |before: &[u8], after: &[u8]| {
        let mut bytes = before.to_vec();
        bytes.push(0xff);
        bytes.extend_from_slice(after);
        OsString::from_vec(bytes)
    };
    let cases: Vec<(Vec<OsString>, &str)> = vec![
        (
            vec![
                "run".into(),
                "--key".into(),
                not_utf8(b"k", b""),
                "--".into(),
                "true".into(),
            ],
            "--key",
        ),
        (
            vec![
                "run".into(),
                not_utf8(b"--key=k", b""),
                "--".into(),
                "true".into(),
            ],
            "--key",
        ),
        (
            vec![
                "run".into(),
                "--key".into(),
                "k".into(),
                "--timeout".into(),
                not_utf8(b"1", b"s"),
                "--".into(),
                "true".into(),
            ],
            "--timeout",
        ),
        (
            vec!["ledger".into(), "show".into(), not_utf8(b"k", b"")],
            "argument 'k",
        ),
        (
            vec![
                "--db".into(),
                not_utf8(b"postgres://", b""),
                "ledger".into(),
                "list".into(),
            ],
            "--db",
        ),
    ];
    for (args, names) in cases {
        let output = env.run(&args);
        assert_code(&output, 2);
        let stderr = text(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains(names),
            "{args:?} does not name {names}: {stderr}"
        );
        all_stderr.push_str(&stderr);
    }
    assert!(!all_stderr.contains("panicked"), "{all_stderr}");
    assert!(!all_stderr.contains("RUST_BACKTRACE"), "{all_stderr}");
    assert!(!env.db().exists(), "bad input created a ledger");
}

/// Durations up to the bound are taken, and do not overflow any deadline.
#[test]
fn long_durations_are_taken() {
    let env = Env::new();
    let output = env.run([
        "run",
        "--key",
        "k",
        "--retries",
        "1",
        "--timeout",
        "99y",
        "--wait",
        "99y",
        "--ttl",
        "99y",
        "--kill-after",
        "99y",
        "--lease",
        "99y",
        "--backoff",
        "1ms",
        "--max-backoff",
        "99y",
        "--",
        "true",
    ]);
    assert_code(&output, 0);
}

// ------------------------------------------------------ bytes are data

/// A child that writes each argument, NUL-terminated, to `argv.out`.
fn argv_writer(env: &Env) -> Vec<OsString> {
    let out = env.path("argv.out");
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "for a in \"$@\"; do printf '%s\\0' \"$a\"; done > '{}'",
            out.display()
        )
        .into(),
        "sh".into(),
    ]
}

#[test]
fn keys_and_arguments_reach_the_child_and_the_ledger_byte_for_byte() {
    let env = Env::new();
    let key = "it's \"quoted\" '); DROP TABLE keys; -- ünïcödé ✓ 日本 {{x}}";
    let stored_key = "it's \"quoted\" '); DROP TABLE keys; -- ünïcödé ✓ 日本 {x}";
    let args: Vec<OsString> = vec![
        "it's".into(),
        "\"double\"".into(),
        "'; DROP TABLE runs; --".into(),
        "Robert'); DELETE FROM keys WHERE ('1'='1".into(),
        "ünïcödé ✓ 日本 🦀".into(),
        OsString::from_vec(vec![0xff, 0xfe, b'x', 0x80]),
        "".into(),
        "$(touch pwned) `touch pwned` *".into(),
        "two\nlines\ttab".into(),
        "%s %n %x".into(),
    ];
    let mut argv: Vec<OsString> = vec!["run".into(), "--key".into(), key.into(), "--".into()];
    argv.extend(argv_writer(&env));
    argv.extend(args.iter().cloned());
    let output = env.run(&argv);
    assert_code(&output, 0);
    let written = fs::read(env.path("argv.out")).unwrap();
    let expected: Vec<u8> = args
        .iter()
        .flat_map(|arg| arg.as_bytes().iter().copied().chain([0]))
        .collect();
    assert_eq!(written, expected, "the child got other bytes");
    assert!(!env.path("pwned").exists(), "an argument reached a shell");

    // Stored byte for byte: the command column holds argv NUL-separated.
    let mut command = argv_writer(&env);
    command.extend(args.iter().cloned());
    let stored = Command::new("sqlite3")
        .arg(env.db())
        .arg("SELECT hex(command) FROM runs")
        .output()
        .unwrap();
    let hex: String = command
        .iter()
        .map(|arg| arg.as_bytes().to_vec())
        .collect::<Vec<_>>()
        .join(&0u8)
        .iter()
        .map(|byte| format!("{byte:02X}"))
        .collect();
    assert_eq!(text(&stored.stdout).trim(), hex);

    // Shown without corruption (lossy only where bytes are not UTF-8).
    let runs = env.list_json();
    assert_eq!(runs[0]["key"], stored_key);
    let shown = env.show_json(stored_key);
    let words = shown["command"].as_array().unwrap();
    assert_eq!(words[4], "it's");
    assert_eq!(words[6], "'; DROP TABLE runs; --");
    assert_eq!(words[8], "ünïcödé ✓ 日本 🦀");
    assert_eq!(words[9], "\u{fffd}\u{fffd}x\u{fffd}");
    assert_eq!(words[12], "two\nlines\ttab");
    let table = env.run(["ledger", "show", stored_key]);
    assert_code(&table, 0);
    assert!(text(&table.stdout).contains("日本"));

    // The same bytes are the same command: skipped, not a mismatch.
    fs::remove_file(env.path("argv.out")).unwrap();
    assert_code(&env.run(&argv), 0);
    assert!(!env.path("argv.out").exists(), "it ran twice");
    // A glob full of quotes finds the key and breaks nothing.
    let found = env.run([
        "ledger",
        "list",
        "--json",
        "--key",
        "it's \"quoted\" '); DROP*",
    ]);
    assert_code(&found, 0);
    let found: serde_json::Value = serde_json::from_slice(&found.stdout).unwrap();
    assert_eq!(found.as_array().unwrap().len(), 1);
    assert_eq!(integrity_check(&env.db()), "ok");
}

#[test]
fn binary_output_keeps_json_valid() {
    let env = Env::new();
    let output = env.run([
        "run",
        "--key",
        "bin",
        "--shell",
        "--",
        "head -c 20000 /dev/urandom; printf '\\0\\377\\033[31m\"\\\\' >&2",
    ]);
    assert_code(&output, 0);
    assert_eq!(
        output.stdout.len(),
        20000,
        "stdout passed through byte for byte"
    );
    let shown = env.show_json("bin");
    let tail = shown["attempts_detail"][0]["stderr_tail"].as_str().unwrap();
    assert_eq!(tail, "\0\u{fffd}\u{1b}[31m\"\\");
    let _ = env.list_json();
    // --replay gives back the raw bytes.
    let replay = env.run([
        "run",
        "--key",
        "bin",
        "--replay",
        "--shell",
        "--",
        "head -c 20000 /dev/urandom; printf '\\0\\377\\033[31m\"\\\\' >&2",
    ]);
    assert_code(&replay, 0);
    assert_eq!(replay.stderr, b"\0\xff\x1b[31m\"\\");
}

// --------------------------------------------------------- output floods

/// Maximum resident set size in KiB of `command`, measured by GNU time.
fn max_rss_kib(command: Command) -> Option<(Output, u64)> {
    if !Path::new("/usr/bin/time").exists() {
        require(false, "/usr/bin/time (apt-get install time)");
        return None;
    }
    let program = command.get_program().to_owned();
    let args: Vec<OsString> = command.get_args().map(OsStr::to_owned).collect();
    let mut timed = Command::new("/usr/bin/time");
    timed.arg("-v").arg(program).args(args);
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => timed.env(name, value),
            None => timed.env_remove(name),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        timed.current_dir(dir);
    }
    let output = timed
        .stdout(Stdio::null())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    let rss = stderr
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no RSS in: {stderr}"));
    Some((output, rss))
}

#[test]
fn a_flood_of_output_keeps_memory_and_the_ledger_small() {
    let env = Env::new();
    // 256 MiB on stdout and 256 MiB on stderr at once.
    let script = "head -c 268435456 /dev/zero & head -c 268435456 /dev/zero >&2; wait";
    let command = env.idem([
        "run",
        "--key",
        "flood",
        "--retries",
        "0",
        "--shell",
        "--",
        script,
    ]);
    let Some((output, rss)) = max_rss_kib(command) else {
        return;
    };
    let status_line = text(&output.stderr);
    assert!(
        status_line.contains("Exit status: 0"),
        "{}",
        status_line.lines().last().unwrap_or("")
    );
    println!("flood: 512 MiB through idem, max RSS {rss} KiB");
    assert!(rss <= 16 * 1024, "idem used {rss} KiB for a flood");
    let shown = env.show_json("flood");
    assert_eq!(
        shown["attempts_detail"][0]["stdout_tail"]
            .as_str()
            .unwrap()
            .len(),
        64 << 10
    );
    let ledger_bytes: u64 = ["", "-wal"]
        .iter()
        .filter_map(|suffix| fs::metadata(format!("{}{suffix}", env.db().display())).ok())
        .map(|meta| meta.len())
        .sum();
    assert!(
        ledger_bytes < 1 << 20,
        "the ledger holds {ledger_bytes} bytes"
    );

    // The largest capture (1MiB a stream) still bounds memory.
    let command = env.idem([
        "run",
        "--key",
        "flood-1m",
        "--retries",
        "0",
        "--capture",
        "1MiB",
        "--shell",
        "--",
        script,
    ]);
    let (_, rss) = max_rss_kib(command).unwrap();
    println!("flood with --capture 1MiB: max RSS {rss} KiB");
    // A debug build carries more than a release one (benches/ measures that).
    assert!(rss <= 24 * 1024, "idem used {rss} KiB with --capture 1MiB");
}

// ----------------------------------------------------------- power loss

/// Freezes a run at a random instant, copies the ledger files as a power
/// cut would leave them (no process writes while they are copied), and
/// checks every copy: it opens, passes integrity_check, holds every
/// success reported before the instant, and lets the next run go on.
#[test]
fn a_ledger_cut_at_any_instant_is_consistent() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let env = Env::new();
    let copies = env.path("copies");
    fs::create_dir(&copies).unwrap();
    let mut reported: Vec<String> = Vec::new();
    let mut snapshots = Vec::new();
    for index in 0..40 {
        let key = format!("k{index}");
        let mut child = env
            .idem(["run", "--key", &key, "--retries", "0", "--", "true"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(fastrand::u64(0..25_000)));
        let pid = Pid::from_raw(child.id() as i32);
        let _ = kill(pid, Signal::SIGSTOP);
        let copy = copies.join(index.to_string());
        fs::create_dir(&copy).unwrap();
        for suffix in ["", "-wal"] {
            let from = PathBuf::from(format!("{}{suffix}", env.db().display()));
            let _ = fs::copy(&from, copy.join(format!("ledger.db{suffix}")));
        }
        let _ = kill(pid, Signal::SIGCONT);
        let status = child.wait().unwrap();
        snapshots.push((copy.join("ledger.db"), key.clone(), reported.clone()));
        if status.success() {
            reported.push(key);
        }
    }
    assert_eq!(reported.len(), 40, "every run succeeded");
    for (db, key, before) in snapshots {
        if !db.exists() {
            assert!(
                before.is_empty(),
                "{}: no ledger after a success",
                db.display()
            );
            continue;
        }
        assert_eq!(integrity_check(&db), "ok", "{}", db.display());
        if fs::metadata(&db).unwrap().len() == 0 {
            assert!(before.is_empty());
            continue;
        }
        let runs = list_keys(&env, &db);
        for done in &before {
            assert_eq!(
                status_of(&runs, done).as_deref(),
                Some("succeeded"),
                "{}: lost the success of {done}",
                db.display()
            );
        }
        let state = status_of(&runs, &key);
        assert!(
            matches!(state.as_deref(), None | Some("running") | Some("succeeded")),
            "{key}: {state:?}"
        );
        // The next run decides by itself: skip, or take over the dead run.
        assert_code(
            &run_with_db(
                &env,
                &db,
                &["run", "--key", &key, "--retries", "0", "--", "true"],
            ),
            0,
        );
    }
}

/// The other half of the power-loss argument: the claim is synced to disk
/// before the command starts, and the outcome before idem exits. Watched
/// with strace, when it is installed.
#[test]
fn the_claim_and_the_outcome_are_synced_in_order() {
    let env = Env::new();
    let Some(trace) = strace_run(&env, "fsync,fdatasync,execve,exit_group") else {
        return;
    };
    let lines = strace_lines(&trace);
    let exec_at = exec_of_true(&lines, &trace);
    let child = lines[exec_at].0;
    let child_exit = exec_at
        + lines[exec_at..]
            .iter()
            .position(|(pid, call)| *pid == child && call.starts_with("exit_group"))
            .unwrap();
    let idem_exit = lines
        .iter()
        .rposition(|(pid, call)| *pid != child && call.starts_with("exit_group"))
        .unwrap();
    let wal_synced = |range: std::ops::Range<usize>| {
        lines[range].iter().any(|(pid, call)| {
            *pid != child
                && (call.starts_with("fsync(") || call.starts_with("fdatasync("))
                && call.contains("ledger.db-wal>")
        })
    };
    assert!(
        wal_synced(0..exec_at),
        "the claim was not synced before the command ran:\n{trace}"
    );
    assert!(
        wal_synced(child_exit..idem_exit),
        "the outcome was not synced before idem exited:\n{trace}"
    );
}

#[test]
fn the_command_runs_only_once_its_group_is_recorded() {
    // The attempt's process group is written (without a sync) after the
    // claim's sync; the command must not exec before that write, or an
    // idem killed in between would leave a command nobody can find.
    let env = Env::new();
    let Some(trace) = strace_run(&env, "fsync,fdatasync,pwrite64,write,execve") else {
        return;
    };
    let lines = strace_lines(&trace);
    let exec_at = exec_of_true(&lines, &trace);
    let claim_synced = lines[..exec_at]
        .iter()
        .rposition(|(_, call)| {
            (call.starts_with("fsync(") || call.starts_with("fdatasync("))
                && call.contains("ledger.db-wal>")
        })
        .unwrap_or_else(|| panic!("the claim was not synced before the command ran:\n{trace}"));
    assert!(
        lines[claim_synced..exec_at].iter().any(|(_, call)| {
            (call.starts_with("pwrite64(") || call.starts_with("write("))
                && call.contains("ledger.db-wal>")
        }),
        "the command ran before its process group was written:\n{trace}"
    );
}

/// Runs `idem run --key k -- /bin/true` on a ledger that exists, under
/// `strace -f` for `calls`; None (and a note) where strace cannot trace.
fn strace_run(env: &Env, calls: &str) -> Option<String> {
    assert_code(&env.run(["run", "--key", "first", "--", "true"]), 0);
    let trace = env.path("trace");
    let mut command = Command::new("strace");
    command
        .args(["-f", "-y", "-qq", "-e", &format!("trace={calls}"), "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_idem"))
        .args(["run", "--key", "k", "--", "/bin/true"])
        .env("IDEM_DB", env.db())
        .env("HOME", env.dir.path())
        .stdin(Stdio::null());
    match command.output() {
        Ok(output) if output.status.success() => Some(fs::read_to_string(trace).unwrap()),
        other => {
            require(false, &format!("tracing idem with strace ({other:?})"));
            None
        }
    }
}

/// A trace's lines as (pid, call).
fn strace_lines(trace: &str) -> Vec<(&str, &str)> {
    trace
        .lines()
        .filter_map(|line| line.split_once(' '))
        // strace pads the pid column: "123  call(...)".
        .map(|(pid, call)| (pid, call.trim_start()))
        .collect()
}

fn exec_of_true(lines: &[(&str, &str)], trace: &str) -> usize {
    lines
        .iter()
        .position(|(_, call)| call.starts_with("execve(\"/bin/true\""))
        .unwrap_or_else(|| panic!("no exec of the command in:\n{trace}"))
}

// -------------------------------------------------------------- security

#[test]
fn the_ledger_is_private_under_a_permissive_umask() {
    let env = Env::new();
    let db = env.path("deep/er/ledger.db");
    let modes = env.path("modes");
    let script = format!(
        "stat -c '%a' '{db}' '{db}-wal' '{db}-shm' > '{modes}'",
        db = db.display(),
        modes = modes.display()
    );
    let output = Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_idem"))
        .args(["run", "--key", "k", "--shell", "--", &script])
        .env("IDEM_DB", &db)
        .env("HOME", env.dir.path())
        .output()
        .unwrap();
    assert_code(&output, 0);
    let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(db.parent().unwrap()), 0o700);
    assert_eq!(mode(&env.path("deep")), 0o700);
    // The log and index SQLite made while the command ran were private too.
    assert_eq!(fs::read_to_string(&modes).unwrap(), "600\n600\n600\n");
}

#[test]
fn no_shell_without_the_flag() {
    let env = Env::new();
    let output = env.run(["run", "--key", "a", "--", "touch pwned; echo $HOME"]);
    assert_code(&output, 127);
    let output = env.run([
        "run",
        "--key",
        "b",
        "--",
        "echo",
        "$(touch pwned)",
        ";",
        "touch",
        "pwned",
        "|",
        "&&",
    ]);
    assert_code(&output, 0);
    assert_eq!(text(&output.stdout), "$(touch pwned) ; touch pwned | &&\n");
    assert!(!env.path("pwned").exists());
    let output = env.run(["run", "--key", "c", "--shell", "--", "touch", "pwned"]);
    assert_code(&output, 0);
    assert!(env.path("pwned").exists(), "--shell runs a shell");
}

/// All the bytes of the ledger's files, to look for a secret.
fn ledger_bytes(db: &Path) -> Vec<u8> {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| fs::read(format!("{}{suffix}", db.display())).ok())
        .flatten()
        .collect()
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[test]
fn secrets_in_the_environment_are_never_recorded() {
    let env = Env::new();
    let secret = "hunter2-7f3a9c1e-env-secret";
    let run = |key: &str, extra: &[&str]| {
        let mut args = vec!["run", "--key", key];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--shell", "--", "echo \"token=$IDEM_TEST_SECRET\""]);
        env.idem(args)
            .env("IDEM_TEST_SECRET", secret)
            .output()
            .unwrap()
    };
    let quiet = run("capture-0", &["--capture", "0"]);
    assert_code(&quiet, 0);
    assert_eq!(
        text(&quiet.stdout),
        format!("token={secret}\n"),
        "output still passes through"
    );
    assert!(
        !holds(&ledger_bytes(&env.db()), secret),
        "a secret reached the ledger"
    );
    assert_eq!(
        env.show_json("capture-0")["attempts_detail"][0]["stdout_tail"],
        ""
    );
    // Without --capture 0 the output is kept, which is why the flag exists.
    assert_code(&run("captured", &[]), 0);
    assert!(holds(&ledger_bytes(&env.db()), secret));
}

// ---------------------------------------------------------------- doctor

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn doctor_json(env: &Env, db: &Path) -> (i32, serde_json::Value) {
    let output = run_with_db(env, db, &["doctor", "--json"]);
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let report = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("doctor --json printed no JSON: {}", text(&output.stdout)));
    (output.status.code().unwrap(), report)
}

fn check<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["check"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))
}

#[test]
fn doctor_finds_a_healthy_ledger_healthy_and_changes_nothing() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "a", "--", "true"]), 0);
    assert_code(
        &env.run(["run", "--key", "b", "--retries", "0", "--", "false"]),
        1,
    );
    let before = fs::read(env.db()).unwrap();
    let names = listing(env.dir.path());
    let output = env.run(["doctor"]);
    assert_code(&output, 0);
    let stdout = text(&output.stdout);
    assert!(stdout.trim_end().ends_with("healthy"), "{stdout}");
    for name in [
        "schema",
        "integrity",
        "file permissions",
        "folder permissions",
        "leftover files",
        "running keys",
        "free space",
    ] {
        assert!(stdout.contains(name), "{name} missing: {stdout}");
    }
    let (code, report) = doctor_json(&env, &env.db());
    assert_eq!(code, 0);
    assert_eq!(report["healthy"], true);
    assert!(report["schema_version"].as_u64().unwrap() >= 1);
    assert!(check(&report, "schema")["message"]
        .as_str()
        .unwrap()
        .contains("(current)"));
    assert_eq!(check(&report, "integrity")["status"], "ok");
    assert!(report["free_bytes"].as_u64().unwrap() > 0);
    assert_eq!(
        fs::read(env.db()).unwrap(),
        before,
        "doctor changed the ledger"
    );
    assert_eq!(
        listing(env.dir.path()),
        names,
        "doctor created or removed files"
    );

    // A missing ledger is reported, and not created (nor its folder).
    let missing = env.path("nowhere/ledger.db");
    let (code, report) = doctor_json(&env, &missing);
    assert_eq!(code, 1);
    assert_eq!(check(&report, "file")["status"], "problem");
    assert!(!env.path("nowhere").exists());
    // A shared ledger that cannot be reached is a problem named as such.
    let url = Path::new("postgres://127.0.0.1:1/idem?connect_timeout=5");
    let output = run_with_db(&env, url, &["doctor", "--json"]);
    assert_code(&output, 1);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(check(&report, "connection")["status"], "problem");
    let help = env.run(["doctor", "--help"]);
    assert!(text(&help.stdout).contains("changes nothing"));
}

#[test]
fn doctor_names_each_problem_and_its_fix() {
    let env = Env::new();
    let folder = env.path("shared");
    let db = folder.join("ledger.db");
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "ok", "--", "true"]),
        0,
    );
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "lost", "--", "true"]),
        0,
    );
    // A key whose owner died without an outcome (no such pid runs).
    sqlite(
        &db,
        "UPDATE runs SET status = 'running', finished_at = NULL, exit_code = NULL, pid = 999999999
             WHERE id = (SELECT head FROM keys WHERE key = 'lost');
         UPDATE keys SET owner_boot = 'gone', owner_pid_start = 1 WHERE key = 'lost';",
    );
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o777)).unwrap();
    fs::set_permissions(&db, fs::Permissions::from_mode(0o644)).unwrap();
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["healthy"], false);
    assert_eq!(report["stuck_keys"], serde_json::json!(["lost"]));
    let running = check(&report, "running keys");
    assert_eq!(running["status"], "problem");
    assert!(running["fix"].as_str().unwrap().contains("abandoned"));
    // A folder anyone can write is refused by run, so it is a problem.
    assert_eq!(check(&report, "folder permissions")["status"], "problem");
    assert!(check(&report, "folder permissions")["fix"]
        .as_str()
        .unwrap()
        .contains("chmod 700"));
    assert_eq!(check(&report, "file permissions")["status"], "warn");
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "lost", "--", "true"]),
        125,
    );
    // Private again, the next run of the key takes it over, and the ledger
    // is healthy again.
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(&db, fs::Permissions::from_mode(0o600)).unwrap();
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "lost", "--", "true"]),
        0,
    );
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 0, "{report}");

    // A newer ledger (a version far ahead of any this idem knows).
    sqlite(&db, "PRAGMA user_version = 99;");
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 1);
    assert!(check(&report, "schema")["message"]
        .as_str()
        .unwrap()
        .contains("newer idem"));
    sqlite(&db, "PRAGMA user_version = 1;");

    // A corrupt page.
    let mut bytes = fs::read(&db).unwrap();
    let page = 4096;
    assert!(bytes.len() >= 4 * page);
    for byte in &mut bytes[2 * page + 8..3 * page] {
        *byte = 0x5a;
    }
    fs::write(&db, &bytes).unwrap();
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 1, "{report}");
    assert_eq!(fs::read(&db).unwrap(), bytes);
}

#[test]
fn doctor_tells_leftover_files_from_files_in_use() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "a", "--", "true"]), 0);
    let db = env.db();
    // A live reader holds the ledger open.
    let mut reader = Command::new("sqlite3")
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = reader.stdin.take().unwrap();
    writeln!(stdin, "SELECT count(*) FROM keys;").unwrap();
    stdin.flush().unwrap();
    wait_for_line(&mut reader);
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 0, "{report}");
    let leftover = check(&report, "side files");
    assert_eq!(leftover["status"], "ok", "{report}");
    assert!(leftover["message"]
        .as_str()
        .unwrap()
        .contains("in use by process"));
    drop(stdin);
    reader.wait().unwrap();

    // A writer killed with its log and index on disk: harmless, the next
    // reader folds the log in.
    crash_writer(&db, "INSERT INTO keys (key) VALUES ('from-the-log');");
    let names = listing(env.dir.path());
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 0, "{report}");
    assert_eq!(check(&report, "leftover files")["status"], "ok");
    // Only the log left: doctor reads a copy rather than create the index.
    fs::remove_file(format!("{}-shm", db.display())).unwrap();
    let names_without_shm = listing(env.dir.path());
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 0, "{report}");
    assert_eq!(check(&report, "integrity")["status"], "ok");
    assert_eq!(listing(env.dir.path()), names_without_shm);
    assert_ne!(names, names_without_shm);
    // The log is intact: whoever opens the ledger next folds it in.
    let keys = Command::new("sqlite3")
        .arg(&db)
        .arg("SELECT key FROM keys ORDER BY key")
        .output()
        .unwrap();
    assert_eq!(text(&keys.stdout), "a\nfrom-the-log\n");
}

// --------------------------------------------------------------- parsers

/// The parsers of durations, exit-code lists, byte sizes and key templates
/// never panic, and accept what they document.
mod parsers {
    use std::str::FromStr;

    use clap::Parser;
    use idem::cli::{ByteSize, Cli, CodeSet, MAX_CAPTURE};
    use idem::key::{self, Template};
    use proptest::prelude::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let mut argv = vec!["idem"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)
    }

    /// Text that looks like what people type, plus anything at all.
    fn texty() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[0-9a-zA-Z ,.+-]{0,24}",
            "([0-9]{1,22}(ns|us|ms|s|m|h|d|w|M|y|sec|min|hour|day|week|month|year)[ ]?){0,6}",
            "([0-9]{1,4}(-[0-9]{1,4})?,?){0,6}",
            "[0-9]{0,22}(|b|k|kb|kib|m|mb|mib|g|KiB|MiB|GiB)",
            "([a-z{}]|\\{(date|hour|minute|week|month|year|host|x)\\}|\\{\\{|\\}\\}){0,12}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn durations_never_panic(text in texty()) {
            for flag in ["--backoff", "--timeout", "--ttl", "--wait", "--lease", "--kill-after", "--max-backoff"] {
                match parse(&["run", "--key", "k", flag, &text, "--", "true"]) {
                    Ok(_) => {
                        let duration = humantime::parse_duration(&text);
                        prop_assert!(duration.is_ok_and(|d| d <= idem::cli::MAX_DURATION), "{text:?}");
                    }
                    Err(error) => {
                        let message = error.to_string();
                        prop_assert!(message.contains(flag) || message.contains("unexpected argument"), "{message}");
                    }
                }
            }
        }

        #[test]
        fn code_lists_never_panic(text in texty()) {
            if let Ok(codes) = CodeSet::from_str(&text) {
                for range in &codes.0 {
                    prop_assert!(range.start() <= range.end());
                }
                let _ = (0..=255u8).filter(|code| codes.contains(*code)).count();
            } else {
                let error = CodeSet::from_str(&text).unwrap_err();
                prop_assert!(!error.contains('\n'));
                prop_assert!(error.contains("1,3,10-20") || error.contains("low-high"), "{error}");
            }
        }

        #[test]
        fn code_lists_round_trip(ranges in proptest::collection::vec((0u8..=255, 0u8..=255), 1..8)) {
            let text: Vec<String> = ranges
                .iter()
                .map(|(a, b)| {
                    let (low, high) = (a.min(b), a.max(b));
                    if low == high { low.to_string() } else { format!("{low}-{high}") }
                })
                .collect();
            let codes = CodeSet::from_str(&text.join(",")).unwrap();
            for code in 0..=255u8 {
                let inside = ranges.iter().any(|(a, b)| (*a.min(b)..=*a.max(b)).contains(&code));
                prop_assert_eq!(codes.contains(code), inside);
            }
        }

        #[test]
        fn byte_sizes_never_panic(text in texty()) {
            match ByteSize::from_str(&text) {
                Ok(size) => prop_assert!(size.0 <= MAX_CAPTURE),
                Err(error) => prop_assert!(!error.contains('\n')),
            }
        }

        #[test]
        fn byte_sizes_mean_what_they_say(count in 0u64..=1024, unit in 0usize..4) {
            let (suffix, multiplier) = [("", 1), ("b", 1), ("KiB", 1 << 10), ("k", 1 << 10)][unit];
            let parsed = ByteSize::from_str(&format!("{count}{suffix}")).unwrap();
            prop_assert_eq!(parsed.0, count * multiplier);
        }

        #[test]
        fn key_templates_never_panic(text in texty()) {
            let now: jiff::Zoned = "2026-12-31T23:59:59+14:00[Pacific/Kiritimati]".parse().unwrap();
            match Template::parse(&text) {
                Ok(template) => match template.expand(&now, "host-1") {
                    Ok(key) => prop_assert!(key::validate(&key).is_ok()),
                    Err(error) => prop_assert!(error.message.starts_with("invalid --key")),
                },
                Err(error) => {
                    prop_assert_eq!(error.code, idem::exit::USAGE);
                    prop_assert!(error.message.starts_with("invalid --key"));
                    prop_assert!(!error.message.contains('\n'));
                }
            }
        }

        #[test]
        fn plain_keys_are_kept_as_they_are(text in "[a-zA-Z0-9 _./:@-]{1,200}") {
            let now = jiff::Timestamp::UNIX_EPOCH.to_zoned(jiff::tz::TimeZone::UTC);
            let key = Template::parse(&text).unwrap().expand(&now, "h").unwrap();
            prop_assert_eq!(key, text);
        }

        #[test]
        fn any_command_line_parses_or_errs(args in proptest::collection::vec(texty(), 0..8)) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let _ = parse(&args);
            let mut run = vec!["run"];
            run.extend_from_slice(&args);
            let _ = parse(&run);
        }
    }
}

#[test]
fn doctor_warns_of_a_wal_that_checkpoints_do_not_drain() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "a", "--", "true"]), 0);
    let db = env.db();
    crash_writer(
        &db,
        "CREATE TABLE pad (x); INSERT INTO pad VALUES (zeroblob(20000000));",
    );
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 0, "{report}");
    let side = check(&report, "leftover files");
    assert_eq!(side["status"], "warn", "{report}");
    assert!(
        side["message"].as_str().unwrap().contains("MiB"),
        "{report}"
    );
}
