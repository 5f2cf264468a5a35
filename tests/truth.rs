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

// ---- an output cut to its tail says so -----------------------------------

#[test]
fn show_marks_an_output_cut_to_its_tail() {
    let env = Env::new();
    let run = |key: &str, capture: &str, script: &str| {
        env.cmd(["run", "--key", key, "--capture", capture, "--shell", "--"])
            .arg(script)
            .succeeds();
    };
    run("long", "16", "seq 1 100; echo oops >&2");
    let shown = env.cmd(["ledger", "show", "long"]).succeeds().stdout();
    let lines: Vec<&str> = shown.lines().collect();
    let attempt = lines
        .iter()
        .position(|line| line.starts_with("  attempt 1: exit 0"))
        .unwrap_or_else(|| panic!("no attempt line in\n{shown}"));
    assert_eq!(
        lines[attempt + 1],
        "    [… earlier output cut: only the last 16 B of each stream kept (--capture)]",
        "{shown}"
    );
    assert_eq!(lines[attempt + 2], "    stdout:", "{shown}");
    assert!(shown.contains("      100\n"), "{shown}");
    let json = env.show_json("long");
    assert_eq!(json["attempts_detail"][0]["output_cut"], true, "{json}");

    // Output kept whole is shown without a word; none kept says why.
    run("short", "16", "echo hi");
    env.cmd(["ledger", "show", "short"])
        .succeeds()
        .stdout_has("      hi\n")
        .stdout_lacks("cut")
        .stdout_lacks("not kept");
    assert_eq!(
        env.show_json("short")["attempts_detail"][0]["output_cut"],
        false
    );
    run("secret", "0", "echo hunter2");
    env.cmd(["ledger", "show", "secret"])
        .succeeds()
        .stdout_has("    [output not kept: --capture 0]\n")
        .stdout_lacks("stdout:");
}
