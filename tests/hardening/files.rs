//! The ledger's path and files: links, foreign owners, modes, and what
//! is not a regular file.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use crate::util::{as_nobody, assert_code, listing, require, sqlite, Env};

use super::{chmod, chown, refused, refused_output, root, with_db, within, STRANGER};

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
        refused(
            with_db(&env, &planted, args),
            &["planted.db", "symbolic link", "--db"],
        );
    }
    assert!(!victim.exists(), "the link's target was created");
    assert_eq!(listing(env.dir.path()), before);

    // A link to a real ledger: refused too, and the ledger is untouched.
    let real = env.path("real.db");
    env.cmd(["run", "--key", "k", "--", "true"])
        .db(&real)
        .succeeds();
    let link = env.path("link.db");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let bytes = fs::read(&real).unwrap();
    let before = listing(env.dir.path());
    refused(
        with_db(&env, &link, &["run", "--key", "other", "--", "true"]),
        &["link.db", "symbolic link"],
    );
    assert_eq!(fs::read(&real).unwrap(), bytes);
    assert_eq!(listing(env.dir.path()), before);
}

#[test]
fn a_linked_wal_or_shm_file_is_refused() {
    let env = Env::new();
    let db = env.db();
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
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
        refused(
            env.cmd(["run", "--key", "k2", "--", "true"]),
            &[&format!("ledger.db{suffix}"), "symbolic link"],
        );
        // doctor names it as the problem it is for run.
        let doctor = env.cmd(["doctor", "--json"]).expect_code(1);
        let report: serde_json::Value = doctor.json();
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
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
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
    refused(
        env.cmd(["run", "--key", "k", "--", "true"]),
        &["ledger.db", &format!("uid {STRANGER}")],
    );
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
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    for mode in [0o666, 0o620] {
        chmod(&db, mode);
        let bytes = fs::read(&db).unwrap();
        let before = listing(env.dir.path());
        refused(
            env.cmd(["run", "--key", "new", "--", "true"]),
            &["ledger.db", &format!("{mode:04o}"), "chmod 600"],
        );
        assert_eq!(fs::read(&db).unwrap(), bytes);
        assert_eq!(fs::metadata(&db).unwrap().mode() & 0o7777, mode);
        assert_eq!(listing(env.dir.path()), before);
    }
    // Readable by others is the owner's choice (doctor warns about it).
    chmod(&db, 0o644);
    env.cmd(["run", "--key", "new", "--", "true"]).succeeds();
}

#[test]
fn a_folder_others_can_write_or_another_user_owns_is_refused() {
    let env = Env::new();
    let folder = env.path("shared");
    fs::create_dir(&folder).unwrap();
    let db = folder.join("ledger.db");
    chmod(&folder, 0o777);
    refused(
        with_db(&env, &db, &["run", "--key", "k", "--", "true"]),
        &["shared", "0777", "chmod 700"],
    );
    assert!(listing(&folder).is_empty(), "{:?}", listing(&folder));
    chmod(&folder, 0o775);
    refused(
        with_db(&env, &db, &["run", "--key", "k", "--", "true"]),
        &["shared", "0775"],
    );
    assert!(listing(&folder).is_empty());
    // A sticky folder like /tmp: others cannot replace what is ours.
    chmod(&folder, 0o1777);
    env.cmd(["run", "--key", "k", "--", "true"])
        .db(&db)
        .succeeds();
    assert_eq!(fs::metadata(&db).unwrap().mode() & 0o777, 0o600);

    if !require(root(), "root (to hand a folder to another user)") {
        return;
    }
    let theirs = env.path("theirs");
    fs::create_dir(&theirs).unwrap();
    chmod(&theirs, 0o755);
    chown(&theirs, STRANGER);
    refused(
        with_db(
            &env,
            &theirs.join("ledger.db"),
            &["run", "--key", "k", "--", "true"],
        ),
        &["theirs", &format!("uid {STRANGER}")],
    );
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
            refused_output(
                &output,
                &[&path.display().to_string(), "not a regular file"],
            );
        }
    }
    assert_eq!(listing(env.dir.path()), before, "something was left beside");
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
    let line = refused_output(&output, &["closed", "cannot be searched"]);
    assert!(!line.contains("could not create"), "{line}");
}

#[test]
fn doctor_says_a_ledger_that_cannot_be_written_is_a_problem() {
    let env = Env::new();
    let folder = env.path("mine");
    fs::create_dir(&folder).unwrap();
    let db = folder.join("ledger.db");
    env.cmd(["run", "--key", "k", "--", "true"])
        .db(&db)
        .succeeds();
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
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    assert!(env.path("ledger.db-wal").exists());
    env.cmd(["doctor"])
        .succeeds()
        .stdout_has("never delete")
        .stdout_has("ledger.db-wal");
    let report = env.cmd(["doctor", "--json"]).run().json();
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
