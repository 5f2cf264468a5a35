//! A ledger locked by another process: waited for a while, then given
//! up on with 125.

use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::util::{wait_for_file, Env};

/// Starts `holder` (which must create the file `held` once it holds the
/// lock) and waits until it does.
fn hold_lock(env: &Env, script: &str) -> Child {
    let held = env.path("held");
    let _ = fs::remove_file(&held);
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(env.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&held, Duration::from_secs(30), &mut child);
    child
}

#[test]
fn a_ledger_locked_for_a_while_is_waited_for() {
    let env = Env::new();
    env.cmd(["run", "--key", "first", "--", "true"]).succeeds();
    let db = env.db().display().to_string();
    let count = env.count_cmd("count");
    let holders = [
        format!("flock '{db}' sh -c 'touch held; sleep 2'"),
        format!(
            "(echo 'BEGIN IMMEDIATE;'; echo \"UPDATE runs SET pid = pid;\"; echo '.shell touch held'; sleep 2; echo 'COMMIT;') | sqlite3 '{db}'"
        ),
    ];
    for (index, holder) in holders.iter().enumerate() {
        let mut child = hold_lock(&env, holder);
        let key = format!("k{index}");
        env.cmd(["run", "--key", &key, "--shell", "--", &count])
            .succeeds();
        assert_eq!(env.count("count"), index + 1);
        assert!(child.wait().unwrap().success());
    }
}

fn locked_too_long(holder: impl Fn(&str) -> String) {
    let env = Env::new();
    env.cmd(["run", "--key", "first", "--", "true"]).succeeds();
    let count = env.count_cmd("count");
    let mut child = hold_lock(&env, &holder(&env.db().display().to_string()));
    env.cmd(["run", "--key", "k", "--shell", "--", &count])
        .expect_code(125)
        .stderr_has("stayed locked by another process for 10s")
        .stderr_one_line();
    assert_eq!(env.count("count"), 0);
    child.wait().unwrap();
}

#[test]
fn a_ledger_flocked_too_long_fails_with_125() {
    locked_too_long(|db| format!("flock '{db}' sh -c 'touch held; sleep 12'"));
}

#[test]
fn a_ledger_in_a_long_sqlite_transaction_fails_with_125() {
    locked_too_long(|db| {
        format!(
            "(echo 'BEGIN IMMEDIATE;'; echo 'UPDATE runs SET pid = pid;'; echo '.shell touch held'; sleep 12; echo 'COMMIT;') | sqlite3 '{db}'"
        )
    });
}
