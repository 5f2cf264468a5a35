//! The world moving under a SQLite ledger: its lock file deleted or
//! replaced while a run holds it, one ledger reached as two files (a hard
//! link, a file mounted alone), a link in a folder above it. Never a second
//! run beside a live one, and `idem doctor` fails whenever `run` would.
//!
//! Some cases need root (to hand a file to another user, to mount) and
//! `unshare`; where either is missing the test fails, naming it.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use super::run_with_db;
use crate::util::{assert_code, eventually, guarded, text, wait_for_count, wrapped, Env};

/// A user id no account on a test machine has: files are handed to it.
const STRANGER: u32 = 4242;

fn lock_file(db: &Path) -> PathBuf {
    let mut path = db.as_os_str().to_owned();
    path.push("-lock");
    PathBuf::from(path)
}

#[track_caller]
fn need_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "root is needed (to hand files to another user and to mount) and missing here"
    );
}

/// Asserts a refusal: exit 125, one line, holding each of `words`.
#[track_caller]
fn refused(output: &Output, words: &[&str]) {
    assert_code(output, 125);
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    for word in words {
        assert!(stderr.contains(word), "{word:?} missing from: {stderr}");
    }
}

/// `idem doctor --json` on `db`: its exit code and the check `name`.
fn doctor_check(env: &Env, db: &Path, name: &str) -> (i32, serde_json::Value) {
    let output = run_with_db(env, db, &["doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("no JSON: {}", text(&output.stdout)));
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["check"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))
        .clone();
    (output.status.code().unwrap(), check)
}

/// While a run of `k` holds the lock file, a cleaner deletes it, or a copy
/// replaces it (as `rsync` does, by a rename): the next run of `k` finds
/// the key busy, and runs nothing.
#[test]
fn a_lock_file_deleted_or_replaced_under_a_live_run_keeps_its_key_busy() {
    for way in ["deleted", "replaced"] {
        let env = Env::new();
        let command = guarded(&env, 3);
        let args = ["run", "--key", "k", "--shell", "--", &command];
        let mut first = env
            .idem(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_count(&env, 1, &mut first);
        let lock = lock_file(&env.db());
        if way == "deleted" {
            fs::remove_file(&lock).unwrap();
        } else {
            let copy = env.path("copy");
            fs::copy(&lock, &copy).unwrap();
            fs::rename(&copy, &lock).unwrap();
        }
        let second = env.run(args);
        let stderr = text(&second.stderr);
        assert_eq!(second.status.code(), Some(75), "{way}: {stderr}");
        assert!(stderr.contains("k is running elsewhere"), "{way}: {stderr}");
        assert!(first.wait().unwrap().success(), "{way}");
        assert_eq!(env.count("count"), 1, "{way}: ran twice");
        assert_eq!(env.count("overlaps"), 0, "{way}: overlapped");
        // Once the first run is over, its key is free, and succeeded.
        assert_code(&env.run(args), 0);
        assert_eq!(env.count("count"), 1, "{way}: ran again");
    }
}

/// Runs of two keys sharing a named lock never overlap, even when the
/// lock file is deleted while the first holds the lock.
#[test]
fn a_named_lock_outlives_its_lock_file() {
    let env = Env::new();
    let command = guarded(&env, 3);
    let run = |key: &str| {
        env.idem([
            "run", "--key", key, "--lock", "db", "--shell", "--", &command,
        ])
    };
    let mut first = run("backup").stderr(Stdio::null()).spawn().unwrap();
    wait_for_count(&env, 1, &mut first);
    fs::remove_file(lock_file(&env.db())).unwrap();
    let second = run("vacuum").output().unwrap();
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(75), "{stderr}");
    assert!(
        stderr.contains("lock db is held by another run"),
        "{stderr}"
    );
    assert!(first.wait().unwrap().success());
    assert_eq!(env.count("overlaps"), 0, "overlapped");
    // Once the first run is over, the lock is free.
    assert_code(&run("vacuum").output().unwrap(), 0);
    assert_eq!(env.count("count"), 2);
}

/// A run that died, then its lock file deleted: nothing can tell any more
/// whether the run lives, so its key stays busy (doctor names it) until
/// the host reboots, or a person frees it.
#[test]
fn a_dead_run_whose_lock_file_was_deleted_waits_for_a_reboot_or_a_person() {
    let env = Env::new();
    let command = guarded(&env, 30);
    let args = ["run", "--key", "k", "--shell", "--", &command];
    let mut first = env.idem(args).stderr(Stdio::null()).spawn().unwrap();
    wait_for_count(&env, 1, &mut first);
    first.kill().unwrap();
    first.wait().unwrap();
    let stuck = || {
        let output = env.run(["doctor", "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        report["stuck_keys"] == serde_json::json!(["k"])
    };
    eventually("the run to be gone", Duration::from_secs(30), stuck);
    fs::remove_file(lock_file(&env.db())).unwrap();
    let quick = guarded(&env, 0);
    let args = ["run", "--key", "k", "--shell", "--", &quick];
    assert_eq!(env.run(args).status.code(), Some(75));
    for name in ["running keys", "lock file"] {
        let (code, check) = doctor_check(&env, &env.db(), name);
        assert_eq!((code, &check["status"]), (1, &"problem".into()), "{check}");
        let message = check["message"].as_str().unwrap();
        assert!(message.contains(": k"), "{check}");
    }
    // Each line says what idem knows: the file moved, not an older idem.
    let moved = "its lock file was moved or deleted while it ran";
    let (_, check) = doctor_check(&env, &env.db(), "running keys");
    assert!(
        check["message"].as_str().unwrap().contains(moved),
        "{check}"
    );
    let forget = env.run(["ledger", "forget", "k"]);
    assert_eq!(forget.status.code(), Some(75));
    assert!(
        text(&forget.stderr).contains(moved),
        "{}",
        text(&forget.stderr)
    );
    // A claim that took no lock at all: an idem too old to take one.
    crate::util::sqlite(&env.db(), "UPDATE keys SET owner_lock = NULL;");
    let old = "claimed by an idem too old to take the run's lock";
    let (_, check) = doctor_check(&env, &env.db(), "running keys");
    assert!(check["message"].as_str().unwrap().contains(old), "{check}");
    let forget = env.run(["ledger", "forget", "k"]);
    assert!(
        text(&forget.stderr).contains(old),
        "{}",
        text(&forget.stderr)
    );
    // As after a reboot: the claim's boot is not this one.
    crate::util::sqlite(&env.db(), "UPDATE keys SET owner_boot = 'another boot';");
    assert_code(&env.run(args), 0);
    assert_eq!(env.count("count"), 2);
}

/// A lock file another user planted in a shared sticky folder, or one that
/// others can write, is refused as the -wal and -shm files are: whoever
/// can lock its bytes could keep keys busy or let runs overlap.
#[test]
fn a_lock_file_of_another_user_or_open_to_others_is_refused() {
    need_root();
    let env = Env::new();
    let shared = env.path("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    let db = shared.join("ledger.db");
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "k", "--", "true"]),
        0,
    );
    // Between two runs, another user's file takes the lock file's place.
    let lock = lock_file(&db);
    fs::remove_file(&lock).unwrap();
    fs::write(&lock, b"").unwrap();
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::lchown(&lock, Some(STRANGER), None).unwrap();
    let output = run_with_db(&env, &db, &["run", "--key", "new", "--", "true"]);
    refused(&output, &["ledger.db-lock", &format!("uid {STRANGER}")]);
    let (code, check) = doctor_check(&env, &db, "lock file");
    assert_eq!((code, &check["status"]), (1, &"problem".into()), "{check}");
    std::os::unix::fs::lchown(&lock, Some(0), None).unwrap();
    let output = run_with_db(&env, &db, &["run", "--key", "new", "--", "true"]);
    refused(&output, &["ledger.db-lock", "0666"]);
    let (code, check) = doctor_check(&env, &db, "lock file");
    assert_eq!((code, &check["status"]), (1, &"problem".into()), "{check}");
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o600)).unwrap();
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "k", "--", "true"]),
        0,
    );
}

/// A second name for the ledger file has no side files of its own: a run
/// through each name would lock and log apart.
#[test]
fn a_ledger_with_a_second_hard_link_is_refused() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "k", "--", "true"]), 0);
    let other = env.path("other");
    fs::create_dir(&other).unwrap();
    let second = other.join("ledger.db");
    fs::hard_link(env.db(), &second).unwrap();
    for db in [env.db(), second.clone()] {
        let output = run_with_db(&env, &db, &["run", "--key", "new", "--", "true"]);
        refused(&output, &["ledger.db", "2 hard links"]);
        let (code, check) = doctor_check(&env, &db, "file");
        assert_eq!((code, &check["status"]), (1, &"problem".into()), "{check}");
    }
    assert!(!lock_file(&second).exists(), "the second name was used");
    fs::remove_file(&second).unwrap();
    assert_code(&env.run(["run", "--key", "new", "--", "true"]), 0);
}

/// The ledger file bind-mounted alone (`docker run -v
/// /srv/idem/ledger.db:/ledger.db`): its side files would be made beside
/// the mount, apart from the host's. Tried in a mount namespace of its own.
#[test]
fn a_ledger_file_mounted_alone_is_refused() {
    need_root();
    let found = Command::new("unshare").arg("--version").output();
    assert!(
        found.is_ok_and(|output| output.status.success()),
        "unshare (util-linux) is needed and missing here"
    );
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "k", "--", "true"]), 0);
    let inside = env.path("container");
    fs::create_dir(&inside).unwrap();
    let mounted = inside.join("ledger.db");
    fs::write(&mounted, b"").unwrap();
    fs::set_permissions(&mounted, fs::Permissions::from_mode(0o600)).unwrap();
    let source = env.db().display().to_string();
    let target = mounted.display().to_string();
    let prefix = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount --bind \"$1\" \"$2\" && shift 2 && exec \"$@\"",
        "sh",
        &source,
        &target,
    ];
    let mut run = env.idem(["run", "--key", "new", "--", "true"]);
    run.env("IDEM_DB", &mounted);
    let output = wrapped(&run, &prefix).output().unwrap();
    refused(&output, &["ledger.db", "mount the folder, not the file"]);
    let mut doctor = env.idem(["doctor", "--json"]);
    doctor.env("IDEM_DB", &mounted);
    let output = wrapped(&doctor, &prefix).output().unwrap();
    assert_code(&output, 1);
    assert!(
        text(&output.stdout).contains("mount the folder, not the file"),
        "{}",
        text(&output.stdout)
    );
    assert!(
        !lock_file(&mounted).exists(),
        "a side file beside the mount"
    );
    assert_eq!(fs::metadata(&mounted).unwrap().len(), 0);
}

/// `/home -> var/home`, a stowed `~/.local`: a link in a folder above the
/// ledger is the system's own layout and is followed; only the ledger's own
/// path is never a link. doctor agrees with run.
#[test]
fn a_link_in_a_folder_above_the_ledger_is_followed() {
    let env = Env::new();
    fs::create_dir_all(env.path("var/home/alice")).unwrap();
    std::os::unix::fs::symlink("var/home", env.path("home")).unwrap();
    fs::create_dir_all(env.path("var/home/alice/.local/idem")).unwrap();
    let db = env.path("home/alice/.local/idem/ledger.db");
    let command = env.count_cmd("count");
    for _ in 0..2 {
        let output = run_with_db(&env, &db, &["run", "--key", "k", "--shell", "--", &command]);
        assert_code(&output, 0);
    }
    assert_eq!(env.count("count"), 1);
    let real = env.path("var/home/alice/.local/idem/ledger.db");
    assert!(real.is_file() && lock_file(&real).is_file());
    let doctor = run_with_db(&env, &db, &["doctor"]);
    assert_code(&doctor, 0);
    // The ledger's own path still never is a link.
    let link = env.path("var/home/alice/linked.db");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let output = run_with_db(&env, &link, &["run", "--key", "k", "--", "true"]);
    refused(&output, &["symbolic link"]);
    assert_code(&run_with_db(&env, &link, &["doctor"]), 1);
}

/// doctor reports the lock file as run judges it: its owner, its mode and
/// which file it is.
#[test]
fn doctor_reports_the_lock_file() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "k", "--", "true"]), 0);
    let (code, check) = doctor_check(&env, &env.db(), "lock file");
    assert_eq!((code, &check["status"]), (0, &"ok".into()), "{check}");
    let meta = fs::metadata(lock_file(&env.db())).unwrap();
    let message = check["message"].as_str().unwrap();
    for word in [
        "0600".to_owned(),
        format!("uid {}", meta.uid()),
        format!("inode {}", meta.ino()),
    ] {
        assert!(message.contains(&word), "{word:?} missing from {message}");
    }
}
