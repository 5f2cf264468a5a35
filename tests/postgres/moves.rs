//! A ledger moved by `export` and `import`: from SQLite, losslessly, and
//! with its fences going on growing.

use std::os::unix::ffi::OsStrExt;

use idem::ledger::PostgresLedger;

use super::Pg;
use crate::util::Env;

/// `idem ledger export` of `env`'s ledger (the SQLite one unless `db`).
#[track_caller]
fn export_of(env: &Env, db: Option<&str>) -> Vec<u8> {
    let mut export = env.cmd(["ledger", "export"]);
    if let Some(db) = db {
        export = export.db(db);
    }
    export.succeeds().into_output().stdout
}

/// Fills `local`'s SQLite ledger with non-UTF-8 argv and output, a retried
/// failure, a success whose command runs `count`, and a forgotten key.
fn a_sqlite_ledger(local: &Env, count: &str) {
    local
        .cmd(["run", "--key", "bin", "--", "printf"])
        .arg(std::ffi::OsStr::from_bytes(b"\xff\xfe-out\n"))
        .succeeds();
    let flaky = "echo try >&2; exit 3";
    local
        .cmd([
            "run",
            "--key",
            "flaky",
            "--retries",
            "1",
            "--backoff",
            "1ms",
            "--shell",
            "--",
            flaky,
        ])
        .expect_code(3);
    local
        .cmd(["run", "--key", "done", "--shell", "--", count])
        .succeeds();
    local
        .cmd(["run", "--key", "dropped", "--", "true"])
        .succeeds();
    local.cmd(["ledger", "forget", "dropped"]).succeeds();
}

#[test]
fn postgres_import_moves_a_sqlite_ledger() {
    let Some(pg) = Pg::new("postgres_import_moves_a_sqlite_ledger") else {
        return;
    };
    // The SQLite ledger is the one of the same Env.
    let local = &pg.env;
    let count = pg.count_cmd("count");
    a_sqlite_ledger(local, &count);
    let stream = export_of(local, None);
    let file = local.path("export.jsonl");
    std::fs::write(&file, &stream).unwrap();

    for (round, expected) in [
        (
            0,
            "imported 4 runs (0 updated, 0 already here); 3 became their keys' deciding runs\n",
        ),
        (
            1,
            "imported 0 runs (0 updated, 4 already here); 0 became their keys' deciding runs\n",
        ),
    ] {
        pg.cmd(["ledger", "import", file.to_str().unwrap()])
            .succeeds()
            .stdout_is(expected);
        assert_eq!(
            export_of(local, Some(&pg.url())),
            stream,
            "the move is lossless (round {round})"
        );
    }
    assert_eq!(pg.list_json(), local.list_json());
    let show = pg
        .cmd(["ledger", "show", "bin", "--json"])
        .succeeds()
        .json();
    assert_eq!(show, local.show_json("bin"));

    // The shared ledger decides as the local one did.
    pg.cmd(["run", "--key", "done", "--shell", "--", &count])
        .succeeds();
    assert_eq!(pg.count("count"), 1);
    pg.cmd(["run", "--key", "dropped", "--shell", "--", &count])
        .succeeds();
    assert_eq!(pg.count("count"), 2);
}

/// The `IDEM_FENCE` of each run that noted it, in order.
fn fences_seen(env: &Env) -> Vec<i64> {
    std::fs::read_to_string(env.path("fences"))
        .unwrap_or_default()
        .lines()
        .map(|line| line.parse().expect("a fence"))
        .collect()
}

#[test]
fn postgres_fences_go_on_growing_in_a_ledger_moved_by_export_and_import() {
    let Some(pg) = Pg::new("postgres_fences_go_on_growing_in_a_ledger_moved_by_export_and_import")
    else {
        return;
    };
    let note = format!(
        "echo \"$IDEM_FENCE\" >> '{}'",
        pg.env.path("fences").display()
    );
    let claim = |url: &str| {
        pg.env
            .cmd(["run", "--key", "k", "--force", "--shell", "--", &note])
            .db(url)
            .succeeds();
    };
    for _ in 0..3 {
        claim(&pg.url());
    }
    let mut old = PostgresLedger::open(&pg.url(), "old").unwrap();
    let highest = old.highest_fence().unwrap();
    assert_eq!(fences_seen(&pg.env).last(), Some(&highest));

    pg.server.sql("postgres", "CREATE DATABASE moved");
    let moved = pg.server.url_of("moved");
    let file = pg.env.path("export.jsonl");
    std::fs::write(&file, export_of(&pg.env, Some(&pg.url()))).unwrap();
    pg.env
        .cmd(["ledger", "import", file.to_str().unwrap()])
        .db(&moved)
        .succeeds();
    // What import does with the highest fence an export carries.
    let mut new = PostgresLedger::open(&moved, "moved").unwrap();
    new.raise_fence(highest).unwrap();
    new.raise_fence(1).unwrap();
    assert_eq!(
        new.highest_fence().unwrap(),
        highest,
        "a raise never lowers"
    );
    claim(&moved);
    let after = *fences_seen(&pg.env).last().unwrap();
    assert!(
        after > highest,
        "fence {after} after the move, {highest} before"
    );
}
