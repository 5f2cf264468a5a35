//! Readers of another user's ledger: `status`, `ledger list|show|metrics`
//! and `doctor` read any ledger the user may read, read-only, whoever owns
//! it, while `run` keeps refusing a ledger that is not its user's own. Run
//! as root, reading as `nobody`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::util::{as_nobody, assert_code, listing, sqlite, text, Env};

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// A ledger of root's in a 0755 folder, with a success (`a`) and a
/// failure (`b`), its files made readable by all (its lock file stays
/// root's alone).
fn roots_ledger(env: &Env) -> std::path::PathBuf {
    let folder = env.path("srv");
    fs::create_dir(&folder).unwrap();
    chmod(&folder, 0o755);
    let db = folder.join("ledger.db");
    env.cmd(["run", "--key", "a", "--", "true"])
        .db(&db)
        .succeeds();
    env.cmd(["run", "--key", "b", "--retries", "0", "--", "false"])
        .db(&db)
        .expect_code(1);
    for suffix in ["", "-wal", "-shm"] {
        chmod(&folder.join(format!("ledger.db{suffix}")), 0o644);
    }
    db
}

#[test]
fn readers_read_a_ledger_that_another_user_owns_and_run_still_refuses_it() {
    let env = Env::new();
    let db = roots_ledger(&env);
    let folder = db.parent().unwrap();
    let before = listing(folder);

    let Some(status) = as_nobody(&env, &db, &["status"]) else {
        return;
    };
    // `b` failed: status asks a person to look, and says so by its code.
    assert_code(&status, 1);
    let shown = text(&status.stdout);
    assert!(
        shown.contains("failing") && shown.contains(" ok "),
        "{shown}"
    );

    let list = as_nobody(&env, &db, &["ledger", "list", "--json"]).unwrap();
    assert_code(&list, 0);
    let runs: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");

    let show = as_nobody(&env, &db, &["ledger", "show", "a"]).unwrap();
    assert_code(&show, 0);
    assert!(
        text(&show.stdout).contains("succeeded"),
        "{}",
        text(&show.stdout)
    );

    let metrics = as_nobody(&env, &db, &["ledger", "metrics"]).unwrap();
    assert_code(&metrics, 0);
    let metrics = text(&metrics.stdout);
    assert!(metrics.contains("job=\"a\""), "{metrics}");

    // Doctor reads it too (its problems are what `run` refuses).
    let doctor = as_nobody(&env, &db, &["doctor"]).unwrap();
    let report = text(&doctor.stdout);
    assert!(report.contains("integrity: ok"), "{report}");
    assert!(report.contains("(current)"), "{report}");

    assert_eq!(listing(folder), before, "a reader made or changed no file");

    let run = as_nobody(&env, &db, &["run", "--key", "c", "--", "true"]).unwrap();
    assert_code(&run, 125);
    assert!(
        text(&run.stderr).contains("belongs to root"),
        "{}",
        text(&run.stderr)
    );
}

#[test]
fn a_reader_that_cannot_search_the_folder_is_told_to_ask_its_owner() {
    let env = Env::new();
    let db = roots_ledger(&env);
    chmod(db.parent().unwrap(), 0o700);
    for args in [
        &["status"][..],
        &["ledger", "list"],
        &["run", "--key", "c", "--", "true"],
    ] {
        let Some(output) = as_nobody(&env, &db, args) else {
            return;
        };
        assert_code(&output, 125);
        let said = text(&output.stderr);
        assert!(
            said.contains("you cannot search folder"),
            "{args:?}: {said}"
        );
        assert!(said.contains("ask its owner"), "{args:?}: {said}");
        assert!(!said.contains("chmod"), "{args:?}: {said}");
    }
}

#[test]
fn a_reader_names_who_can_migrate_an_older_ledger() {
    let env = Env::new();
    let db = roots_ledger(&env);
    sqlite(&db, "PRAGMA user_version = 7;");
    // sqlite3 may fold the log in and remove it as it closes.
    for suffix in ["", "-wal", "-shm"] {
        let file = db.with_file_name(format!("ledger.db{suffix}"));
        if file.exists() {
            chmod(&file, 0o644);
        }
    }
    let Some(output) = as_nobody(&env, &db, &["ledger", "list"]) else {
        return;
    };
    assert_code(&output, 125);
    let said = text(&output.stderr);
    assert!(said.contains("schema 7"), "{said}");
    assert!(
        said.contains("`idem run` as its owner, root (uid 0)"),
        "{said}"
    );
}
