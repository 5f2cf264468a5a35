//! What idem says is true: a reading command told of a ledger that is not
//! there, an output cut to its tail marked as such, and a status table that
//! fits the terminal it is drawn on.

use crate::util::Env;

// ---- a ledger that is not there is told, not read as empty ---------------

#[test]
fn a_missing_ledger_is_told_by_every_reading_command() {
    let env = Env::new();
    let missing = env.path("typo/ledger.db");
    let told = format!(
        "idem: no ledger at {}: nothing has run with it yet; check --db or IDEM_DB\n",
        missing.display()
    );
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["ledger", "list"],
        &["ledger", "list", "--json"],
        &["ledger", "show", "k"],
        &["ledger", "metrics"],
    ] {
        let ran = env.cmd(args).db(&missing).expect_code(1).stderr_is(&told);
        assert_eq!(ran.stdout(), "", "{args:?} prints no data");
    }
    assert!(!missing.exists(), "reading creates nothing");
    // `run` still makes the ledger it is given; then the same reads answer.
    env.cmd(["run", "--key", "k", "--", "true"])
        .db(&missing)
        .succeeds();
    env.cmd(["status"]).db(&missing).succeeds();
    env.cmd(["ledger", "list"]).db(&missing).succeeds();
    env.cmd(["ledger", "metrics"]).db(&missing).succeeds();
}

#[test]
fn a_job_glob_that_matches_nothing_is_told() {
    let env = Env::new();
    env.cmd(["run", "--key", "backup", "--", "true"]).succeeds();
    for args in [
        &["status", "--job", "nosuch*"][..],
        &["status", "--json", "--job", "nosuch*"],
    ] {
        env.cmd(args)
            .expect_code(1)
            .stderr_starts_with("idem: no job matches nosuch*")
            .stderr_one_line()
            .stdout_is("");
    }
    env.cmd(["status", "--job", "back*"])
        .succeeds()
        .stdout_has("backup");
}
