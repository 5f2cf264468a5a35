//! The database itself: a fresh one migrated by many at once, values
//! changed by hand, `doctor`'s checks, and the server's clock.

use std::process::{Child, Stdio};
use std::time::Duration;

use super::Pg;
use crate::util::{assert_code, eventually, text};

#[test]
fn postgres_fresh_database_migrated_by_many_at_once() {
    let Some(pg) = Pg::new("postgres_fresh_database_migrated_by_many_at_once") else {
        return;
    };
    for round in 0..5 {
        let db = format!("fresh{round}");
        pg.server.sql("postgres", &format!("CREATE DATABASE {db}"));
        let url = pg.server.url_of(&db);
        let children: Vec<Child> = (0..2)
            .map(|index| {
                pg.idem(["run", "--key", &format!("k{index}"), "--", "true"])
                    .env("IDEM_DB", &url)
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            assert_code(&child.wait_with_output().unwrap(), 0);
        }
    }
}

#[test]
fn postgres_a_count_below_zero_is_an_error_naming_the_ledger() {
    let Some(pg) = Pg::new("postgres_a_count_below_zero_is_an_error_naming_the_ledger") else {
        return;
    };
    pg.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    // idem never writes one; a ledger changed by hand may hold one all the
    // same, and it must not be read as some other count.
    pg.server.sql("idem", "UPDATE idem.runs SET attempts = -3");
    for args in [
        &["ledger", "list"][..],
        &["ledger", "show", "k"],
        &["ledger", "export"],
        &["run", "--key", "k", "--", "true"],
    ] {
        pg.env
            .cmd(args.iter().copied())
            .db(pg.url())
            .expect_code(125)
            .stderr_has("ledger postgresql://")
            .stderr_has("a stored value cannot be read (the number -3 is out of range)")
            .stderr_one_line();
    }
    pg.server.sql(
        "idem",
        "UPDATE idem.runs SET attempts = 1; UPDATE idem.jobs SET failures = -1",
    );
    pg.cmd(["status"])
        .expect_code(125)
        .stderr_has("a stored value cannot be read (the number -1 is out of range)")
        .stderr_one_line();
}

/// `idem doctor --json` of the ledger at `url`: its exit code and report.
fn doctor(pg: &Pg, url: &str) -> (Option<i32>, serde_json::Value) {
    let output = pg
        .idem(["doctor", "--json"])
        .env("IDEM_DB", url)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("doctor --json prints JSON: {}", text(&output.stderr)));
    (output.status.code(), report)
}

/// The status of `report`'s check `name`.
fn status(report: &serde_json::Value, name: &str) -> serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["check"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))["status"]
        .clone()
}

/// Runs `key` under a lease of 2s until its first attempt is recorded,
/// then kills idem and its command together: the key stays running.
fn kill_an_owner_with_its_command(pg: &Pg, key: &str) {
    let mut owner = {
        use std::os::unix::process::CommandExt;
        // A shared ledger judges an owner by its lease alone.
        pg.idem(["run", "--key", key, "--lease", "2s", "--", "sleep", "600"])
            .process_group(0)
            .spawn()
            .unwrap()
    };
    eventually(
        "the attempt to be recorded",
        Duration::from_secs(60),
        || {
            let latest = &pg.list_json()[0];
            latest["key"] == key && latest["attempts"] == 1
        },
    );
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(owner.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    owner.wait().unwrap();
}

#[test]
fn postgres_doctor_checks_a_shared_ledger_and_changes_nothing() {
    let Some(pg) = Pg::new("postgres_doctor_checks_a_shared_ledger_and_changes_nothing") else {
        return;
    };
    let doctor = |url: &str| doctor(&pg, url);

    // A database idem never used: a warning, and doctor creates nothing.
    for _ in 0..2 {
        let (code, report) = doctor(&pg.url());
        assert_eq!(code, Some(0), "{report}");
        assert_eq!(status(&report, "connection"), "ok");
        assert_eq!(status(&report, "schema"), "warn");
        assert_eq!(report["schema_version"], 0, "doctor created the schema");
    }

    // In use, with a key whose owner and command were killed together.
    assert_code(&pg.run(["run", "--key", "done", "--", "true"]), 0);
    let (code, report) = doctor(&pg.url());
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["healthy"], true);
    for name in ["connection", "schema", "rights", "running keys"] {
        assert_eq!(status(&report, name), "ok", "{name}: {report}");
    }
    kill_an_owner_with_its_command(&pg, "stuck");
    // Its command is stopped by its guardian, and its lease runs out.
    let report = eventually(
        "doctor to find the key stuck",
        Duration::from_secs(30),
        || {
            let (code, report) = doctor(&pg.url());
            (code == Some(1)).then_some(report)
        },
    );
    assert_eq!(status(&report, "running keys"), "problem", "{report}");
    assert_eq!(report["stuck_keys"], serde_json::json!(["stuck"]));
    assert_eq!(
        pg.list_json()[0]["status"],
        "running",
        "doctor changed nothing"
    );

    // A role that may read but not write is told what to grant.
    pg.server.sql(
        "idem",
        "CREATE ROLE reader LOGIN;
         GRANT USAGE ON SCHEMA idem TO reader;
         GRANT SELECT ON ALL TABLES IN SCHEMA idem TO reader;",
    );
    let reader = pg.url().replacen("postgres@", "reader@", 1);
    let (code, report) = doctor(&reader);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(status(&report, "rights"), "problem", "{report}");
    assert_eq!(report["role"], "reader");
    assert!(report
        .to_string()
        .contains("GRANT USAGE ON SCHEMA idem TO reader"));

    // A server that is not there.
    let (code, report) = doctor("postgres://127.0.0.1:1/idem?connect_timeout=5");
    assert_eq!(code, Some(1));
    assert_eq!(status(&report, "connection"), "problem", "{report}");
}

#[test]
fn postgres_since_and_prune_cutoffs_come_from_the_databases_clock() {
    let Some(pg) = Pg::new("postgres_since_and_prune_cutoffs_come_from_the_databases_clock") else {
        return;
    };
    if !crate::util::have_faketime() {
        return;
    }
    assert_code(&pg.run(["run", "--key", "k", "--", "true"]), 0);
    assert_code(&pg.run(["run", "--key", "k", "--force", "--", "true"]), 0);
    // This host's clock runs two hours ahead of the database's.
    let run = |args: &[&str]| {
        let mut template = pg.idem(["ledger"]);
        template.args(args);
        crate::util::wrapped(&template, &["faketime", "-f", "+2h"])
            .output()
            .unwrap()
    };
    let listed = run(&["list", "--json", "--since", "1h"]);
    assert_code(&listed, 0);
    let runs: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(runs.as_array().map(Vec::len), Some(2), "{runs}");
    let pruned = run(&["prune", "--older-than", "1h"]);
    assert_code(&pruned, 0);
    assert_eq!(pg.list_json().as_array().map(Vec::len), Some(2));
}
