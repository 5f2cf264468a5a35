//! A read-only file system, or a ledger that refuses writes: nothing
//! runs, and everything can still be read.

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use super::{crash_writer, list_keys, listing, run_with_db, status_of, Mount};
use crate::util::{assert_code, require, text, Env};

#[test]
fn a_read_only_ledger_runs_nothing_but_can_be_read() {
    let env = Env::new();
    let Some(mount) = Mount::tmpfs(&env.path("ro"), "4m") else {
        return;
    };
    // Characters a file: URI must escape, and bytes that are not UTF-8.
    let folder = mount
        .dir
        .join(OsString::from_vec(b"we?ird #%20 \xff".to_vec()));
    fs::create_dir(&folder).unwrap();
    let db = folder.join("ledger.db");
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
