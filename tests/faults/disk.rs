//! A full disk, and a ledger that refuses a write: nothing runs without
//! its claim, nothing recorded is lost, and the error says so.

use std::fs;
use std::path::PathBuf;
use std::process::Stdio;

use super::{fill, list_keys, sqlite, status_of, Mount};
use crate::util::{assert_code, integrity_check, text, Env};

#[test]
fn a_full_disk_runs_nothing_and_loses_nothing() {
    let env = Env::new();
    let Some(mount) = Mount::tmpfs(&env.path("small"), "1m") else {
        return;
    };
    let db = mount.dir.join("ledger.db");
    env.cmd(["run", "--key", "before", "--", "true"])
        .db(&db)
        .succeeds();
    env.cmd(["run", "--key", "failed", "--retries", "0", "--", "false"])
        .db(&db)
        .expect_code(1);
    let filler = mount.dir.join("filler");
    fill(&filler);
    let count = env.count_cmd("count");
    env.cmd(["run", "--key", "k", "--shell", "--", &count])
        .db(&db)
        .expect_code(125)
        .stderr_has("the disk is full")
        .stderr_one_line();
    assert_eq!(env.count("count"), 0, "the command ran without a claim");
    // doctor says so too, without writing.
    env.cmd(["doctor"])
        .db(&db)
        .expect_code(1)
        .stdout_has("the disk is full");

    fs::remove_file(&filler).unwrap();
    assert_eq!(integrity_check(&db), "ok");
    let runs = list_keys(&env, &db);
    assert_eq!(status_of(&runs, "before").as_deref(), Some("succeeded"));
    assert_eq!(status_of(&runs, "failed").as_deref(), Some("failed"));
    assert_eq!(status_of(&runs, "k"), None);
    env.cmd(["run", "--key", "k", "--shell", "--", &count])
        .db(&db)
        .succeeds();
    assert_eq!(env.count("count"), 1);
}

/// A ledger on a 2MiB tmpfs with one success in it, filled but for room
/// for a claim, not for megabytes of captured output; and the filler.
fn nearly_full(env: &Env) -> Option<(Mount, PathBuf, PathBuf)> {
    let mount = Mount::tmpfs(&env.path("small"), "2m")?;
    let db = mount.dir.join("ledger.db");
    env.cmd(["run", "--key", "before", "--", "true"])
        .db(&db)
        .succeeds();
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
    env.cmd(["run", "--key", "big", "--", "true"])
        .db(&db)
        .succeeds();
}

#[test]
fn a_disk_that_fills_while_a_retry_is_recorded_says_what_ran_and_shows_it() {
    let env = Env::new();
    let Some((_mount, db, filler)) = nearly_full(&env) else {
        return;
    };
    let script = "head -c 3000000 /dev/urandom | od -x; echo held-and-shown; exit 1";
    env.cmd([
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
    ])
    .db(&db)
    .expect_code(125)
    .stderr_has("attempt 1/2 exited 1, but idem could not record it")
    .stderr_has("the disk is full")
    // The held output is shown, not dropped.
    .stdout_has("held-and-shown");
    fs::remove_file(&filler).unwrap();
    assert_eq!(integrity_check(&db), "ok");
}

#[test]
fn an_attempt_that_cannot_be_recorded_never_runs() {
    // The claim commits, then writing the attempt's start fails (here a
    // trigger refuses it): the command, held between fork and exec, must
    // not run, and the run is failed rather than left to look abandoned.
    let env = Env::new();
    env.cmd(["run", "--key", "first", "--", "true"]).succeeds();
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
    env.cmd(["run", "--key", "k", "--shell", "--", &count])
        .expect_code(125)
        .stderr_one_line()
        .stderr_has("the command did not run")
        .stderr_has("attempts refused");
    assert_eq!(env.count("count"), 0, "the command ran");
    let shown = env.show_json("k");
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["exit_code"], 125);
    // Once the ledger takes writes again, the key runs, plainly: it is known
    // that nothing ran, so it is not a recovery.
    sqlite(&env.db(), "DROP TRIGGER refuse;");
    env.cmd(["run", "--key", "k", "--shell", "--", &count])
        .succeeds();
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
    env.cmd([
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
    ])
    .expect_code(125)
    .stdout_is("first words\n")
    .stderr_has("the command did not run");
    assert_eq!(env.count("count"), 2, "one attempt ran, the retry did not");
    assert_eq!(env.show_json("q")["exit_code"], 125);
}

/// At most once, whatever the disk does: with the ledger's disk nearly
/// full (a prune having emptied its write-ahead log), `ledger deliver`
/// records each event as being sent before it sends it, so that one it
/// cannot record is never sent again, and its error says whether the
/// event went out. Thirteen steps of free room, 0 to 48 KiB, each with
/// the events of two runs owed to a monitor of its own, delivered twice.
#[test]
fn a_full_disk_never_makes_ledger_deliver_send_an_event_twice() {
    use crate::delivery::monitor::{Mode, Monitor};
    let env = Env::new();
    let Some(mount) = Mount::tmpfs(&env.path("small"), "2m") else {
        return;
    };
    let db = mount.dir.join("ledger.db");
    let filler = mount.dir.join("filler");
    let mut monitors = Vec::new();
    let (mut refused, mut went_out) = (0, 0);
    for free in (0..=48).step_by(4) {
        let _ = fs::remove_file(&filler);
        let monitor = Monitor::start(Mode::Refuse);
        let url = monitor.url();
        for n in 0..2 {
            let key = format!("k{free}-{n}");
            env.cmd([
                "run",
                "-k",
                &key,
                "--retries",
                "0",
                "--ping",
                &url,
                "--",
                "true",
            ])
            .db(&db)
            .succeeds();
        }
        monitor.set(Mode::Ok);
        monitors.push(monitor);
        env.cmd(["ledger", "prune", "--older-than", "1d"])
            .db(&db)
            .succeeds();
        fill(&filler);
        let full = fs::metadata(&filler).unwrap().len();
        fs::File::options()
            .write(true)
            .open(&filler)
            .unwrap()
            .set_len(full.saturating_sub(free << 10))
            .unwrap();
        for _ in 0..2 {
            let output = env
                .idem(["ledger", "deliver"])
                .env("IDEM_DB", &db)
                .output()
                .unwrap();
            let said = text(&output.stderr);
            match output.status.code() {
                Some(0 | 1) => {}
                Some(125) => {
                    refused += 1;
                    went_out +=
                        usize::from(said.contains("went out, but idem could not record it"));
                    assert!(said.contains("disk is full"), "{said}");
                    assert_eq!(said.lines().count(), 1, "{said}");
                }
                other => panic!("ledger deliver exited {other:?}: {said}"),
            }
        }
        for monitor in &monitors {
            let sent = monitor.delivered();
            let mut each: Vec<(String, String)> = sent
                .iter()
                .map(|ping| (ping.rid.clone(), ping.suffix.clone()))
                .collect();
            each.sort();
            each.dedup();
            assert_eq!(
                each.len(),
                sent.len(),
                "{free} KiB free: an event sent twice"
            );
        }
    }
    eprintln!(
        "a full disk: ledger deliver refused {refused} of 26 times, {went_out} after an event went out"
    );
    assert!(
        refused > 0,
        "the disk never filled: the test proves nothing"
    );
    fs::remove_file(&filler).unwrap();
    assert_eq!(integrity_check(&db), "ok");
}
