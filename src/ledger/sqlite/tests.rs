//! The SQLite ledger's own unit tests: migrations from older schemas, the
//! statements a run's writes prepare, and the schema read of one moment.

use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::OpenFlags;

use super::super::inspect::Schema;
use super::super::schema::{APPLICATION_ID, LATEST, MIGRATIONS};
use super::super::NewRun;
use super::open::{schema_state, versions};
use super::*;

/// A ledger file as an idem of schema 7 left it, holding `rows`.
fn schema_7_ledger(path: &Path, rows: &str) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON;")
        .unwrap();
    for migration in &MIGRATIONS[..7] {
        conn.execute_batch(migration).unwrap();
    }
    conn.pragma_update(None, "user_version", 7).unwrap();
    conn.pragma_update(None, "application_id", APPLICATION_ID)
        .unwrap();
    conn.execute_batch(rows).unwrap();
}

/// Migration 8 makes the runs table anew: a ledger of schema 7 keeps
/// every run with its status, and the attempts and hooks that refer to
/// the runs (which the old table's drop would have cascaded to).
#[test]
fn a_ledger_of_schema_7_keeps_its_runs_and_their_statuses() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("ledger.db");
    let statuses = ["running", "succeeded", "failed", "abandoned"];
    let rows: String = (1..)
        .zip(statuses)
        .map(|(id, status)| {
            format!(
                "INSERT INTO keys (id, key, head) VALUES ({id}, '{status}', {id});
                 INSERT INTO runs (id, run_id, key_id, status, started_at, host, pid,
                     command, shell)
                 VALUES ({id}, randomblob(16), {id}, '{status}', {id}000, 'h', 1,
                     CAST('true' AS BLOB), 0);
                 INSERT INTO attempts (run, n, started_at) VALUES ({id}, 1, {id}000);
                 INSERT INTO hooks (run, event, at) VALUES ({id}, 'failure', {id}000);"
            )
        })
        .collect();
    schema_7_ledger(&path, &rows);
    let mut ledger = SqliteLedger::open(&path).unwrap();
    for (code, status) in (0..).zip(statuses) {
        let head = ledger.head(status).unwrap().unwrap();
        assert_eq!(head.run.status.as_str(), status);
        let stored: i64 = ledger
            .conn
            .query_row(
                "SELECT r.status FROM runs r JOIN keys k ON k.id = r.key_id WHERE k.key = ?1",
                [status],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(stored, code, "{status}");
    }
    let count = |sql: &str| -> i64 { ledger.conn.query_row(sql, [], |row| row.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM attempts"), 4);
    assert_eq!(count("SELECT count(*) FROM hooks"), 4);
    assert_eq!(count("SELECT count(*) FROM pragma_foreign_key_check"), 0);
    assert_eq!(count("PRAGMA user_version"), LATEST);
}

/// A ledger of schema 7 is not migrated while an older idem's run of
/// it lives: that run would record its outcome by the status's name,
/// which schema 8 no longer matches. Once it ends, the ledger moves.
#[test]
fn a_ledger_of_schema_7_waits_for_an_older_idems_live_run() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("ledger.db");
    schema_7_ledger(
        &path,
        "INSERT INTO keys (id, key, head, owner_lock) VALUES (1, 'backup', 1, 1);
         INSERT INTO runs (id, run_id, key_id, status, started_at, host, pid, command,
             shell)
         VALUES (1, randomblob(16), 1, 'running', 1000, 'h', 1, CAST('true' AS BLOB), 0);",
    );
    // The older idem's run: its key's byte held, as its processes hold it.
    let locks = RunLocks::new(&path);
    let hold = locks.take(1).unwrap().expect("the byte is free");
    let refused = SqliteLedger::open(&path)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        refused.contains("in use by an older idem's run of backup"),
        "{refused}"
    );
    let version: i64 = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, 7, "migrated under a live run");
    drop(hold);
    let mut ledger = SqliteLedger::open(&path).unwrap();
    assert_eq!(
        ledger.head("backup").unwrap().unwrap().run.status,
        Status::Running
    );
}

/// The statements alive on `ledger`'s connection (its cache's).
fn statements(ledger: &SqliteLedger) -> usize {
    let mut count = 0;
    // SAFETY: walks the connection's own list, on its only thread.
    unsafe {
        let db = ledger.conn.handle();
        let mut statement = rusqlite::ffi::sqlite3_next_stmt(db, std::ptr::null_mut());
        while !statement.is_null() {
            count += 1;
            statement = rusqlite::ffi::sqlite3_next_stmt(db, statement);
        }
    }
    count
}

/// What a claim and an outcome prepare is all in [`Ahead`]: prepared
/// first, they add no statement, so none is prepared under the
/// writers' lock when it was waited for. A first run (a new key and
/// job), then a run of a known key.
#[test]
fn a_runs_writes_prepare_nothing_beyond_what_they_prepare_ahead() {
    let folder = tempfile::tempdir().unwrap();
    let mut ledger = SqliteLedger::open(&folder.path().join("ledger.db")).unwrap();
    let prepared = |ledger: &mut SqliteLedger, ahead: &[&str]| {
        for sql in ahead {
            ledger.conn.prepare_cached(sql).unwrap();
        }
        statements(ledger)
    };
    for new in [true, false] {
        assert_eq!(ledger.head("backup").unwrap().is_none(), new);
        let before = prepared(&mut ledger, &Ahead::claim(new));
        let claim = ledger
            .claim("backup", &mut |_, _| Plan {
                abandon_head: false,
                claim: Some(NewRun {
                    run_id: Uuid::now_v7(),
                    command: vec!["true".into()],
                    shell: false,
                    host: "h".into(),
                    pid: std::process::id(),
                    recovered: false,
                    lease: Duration::from_secs(60),
                    job: super::super::JobInfo {
                        name: "backup".into(),
                        template: "backup".into(),
                        zone: None,
                    },
                    owed: Vec::new(),
                }),
            })
            .unwrap()
            .expect("claimed");
        assert_eq!(statements(&ledger), before, "the claim prepared more");
        ledger
            .attempt_started(&claim, 1, 1, crate::process::Containment::GuardianOnly)
            .unwrap();
        let before = prepared(&mut ledger, &Ahead::outcome());
        let attempt = Attempt {
            number: 1,
            started_at: Some(Timestamp::now()),
            finished_at: Some(Timestamp::now()),
            exit_code: Some(0),
            ..Attempt::default()
        };
        let outcome = Outcome {
            status: Status::Succeeded,
            exit_code: 0,
            signal: None,
            stopped: false,
        };
        ledger.finish(&claim, Some(&attempt), &outcome).unwrap();
        assert_eq!(statements(&ledger), before, "the outcome prepared more");
    }
}

/// A reader that looks while another connection creates the schema
/// sees it either not yet there or whole: never a foreign database.
#[test]
fn versions_are_of_one_moment_while_the_schema_is_created() {
    let folder = tempfile::tempdir().unwrap();
    let mut foreign = 0;
    for round in 0..40 {
        let made = folder.path().join(format!("{round}"));
        std::fs::create_dir(&made).unwrap();
        let path = made.join("ledger.db");
        let created = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let mut seen = 0;
                while !created.load(Ordering::Relaxed) {
                    let Ok(conn) =
                        Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE)
                    else {
                        continue;
                    };
                    while !created.load(Ordering::Relaxed) {
                        if let Ok(found) = versions(&conn) {
                            seen +=
                                usize::from(matches!(schema_state(found), Schema::Foreign { .. }));
                        }
                    }
                }
                seen
            });
            // The reader stops whether or not the open succeeded.
            let opened = SqliteLedger::open(&path);
            created.store(true, Ordering::Relaxed);
            foreign += reader.join().unwrap();
            opened.unwrap();
        });
    }
    assert_eq!(
        foreign, 0,
        "reads that took idem's new ledger for another's"
    );
}
