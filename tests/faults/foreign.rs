//! Ledgers of a newer idem, of another program or of no program, and
//! paths that cannot be a ledger: each refused by name.

use std::fs;

use super::{run_with_db, sqlite};
use crate::util::{assert_code, text, Env};

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

#[test]
fn a_url_of_another_scheme_is_a_usage_error_not_a_file() {
    let env = Env::new();
    for db in ["postgress://u:secretpw@h/db", "mysql://u:secretpw@h/db"] {
        for args in [
            &["run", "--key", "k", "--", "true"][..],
            &["status"],
            &["ledger", "list"],
        ] {
            let ran = env
                .cmd(args)
                .env("IDEM_DB", db)
                .expect_code(2)
                .stderr_one_line()
                .stderr_has("postgres://")
                .stderr_lacks("secretpw");
            assert!(ran.stderr().contains("does not know"), "{}", ran.stderr());
        }
        let scheme = db.split(':').next().unwrap();
        assert!(
            !env.path(&format!("{scheme}:")).exists(),
            "{db} left a folder behind"
        );
    }
}

/// A PostgreSQL URL whose `://` lost a character is refused as one, by a
/// run and by a reader, showing nothing after its scheme: taken as a
/// path, it made a SQLite ledger of this host's own and ran the command.
#[test]
fn a_postgres_url_missing_part_of_its_colon_slash_slash_is_a_usage_error() {
    let env = Env::new();
    let count = env.count_cmd("count");
    for db in [
        "postgresql//idem:secretpw@127.0.0.1/idem",
        "postgres:/idem:secretpw@127.0.0.1/idem",
    ] {
        for args in [
            &["run", "--key", "k", "--shell", "--", &count][..],
            &["status"],
            &["ledger", "list"],
        ] {
            env.cmd(args)
                .env("IDEM_DB", db)
                .expect_code(2)
                .stderr_one_line()
                .stderr_has("is not a URL")
                .stderr_has("://")
                .stderr_lacks("secretpw")
                .stderr_lacks("127.0.0.1");
        }
        let scheme = &db[..db.find(['/', ':']).unwrap()];
        assert!(!env.path(scheme).exists(), "{db} left a folder behind");
        assert!(
            !env.path(&format!("{scheme}:")).exists(),
            "{db} left a folder behind"
        );
    }
    assert_eq!(env.count("count"), 0);
}

/// A `--db` whose folder is not there is refused with the mkdir to run,
/// making nothing: idem makes the default location's folder alone, since
/// a mistyped folder would otherwise become a ledger of its own.
#[test]
fn an_explicit_ledger_in_a_missing_folder_is_refused_with_the_mkdir_to_run() {
    let env = Env::new();
    let count = env.count_cmd("count");
    let db = env.path("no such/ledger.db");
    let run = || {
        env.cmd(["run", "--key", "k", "--shell", "--", &count])
            .db(&db)
    };
    let folder = env.path("no such").display().to_string();
    run()
        .expect_code(125)
        .stderr_one_line()
        .stderr_has(&format!("ledger folder {folder} does not exist"))
        .stderr_has(&format!("(mkdir -p '{folder}')"));
    assert!(!env.path("no such").exists());
    assert_eq!(env.count("count"), 0);
    fs::create_dir(env.path("no such")).unwrap();
    run().succeeds();
    assert_eq!(env.count("count"), 1);
}
