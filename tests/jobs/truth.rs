//! What `idem status` tells of a job in the cases it used to get wrong: an
//! empty ledger, a job paused before its first run.

use crate::util::Env;

#[test]
fn status_on_an_empty_ledger_says_so() {
    let env = Env::new();
    // A ledger that exists and holds no job: a pause taken back.
    env.cmd(["pause", "nightly"]).succeeds();
    env.cmd(["resume", "nightly"]).succeeds();
    env.cmd(["status"])
        .succeeds()
        .stdout_is("no jobs yet: nothing has run under this ledger\n");
    env.cmd(["status", "--json"]).succeeds().stdout_is("[]\n");
}

#[test]
fn a_job_paused_before_its_first_run_is_in_status() {
    let env = Env::new();
    env.cmd(["pause", "nightly", "--reason", "disk swap"])
        .succeeds();
    let status = env.cmd(["status", "--json"]).succeeds().json();
    let jobs = status.as_array().expect("an array");
    assert_eq!(jobs.len(), 1, "{status:#}");
    assert_eq!(jobs[0]["job"], "nightly");
    assert_eq!(jobs[0]["state"], "paused");
    assert_eq!(jobs[0]["paused"]["reason"], "disk swap");
    assert_eq!(jobs[0]["last_run"], serde_json::Value::Null);
    env.cmd(["status"])
        .succeeds()
        .stdout_has("nightly  paused")
        .stdout_has("nightly paused by ")
        .stdout_has(": disk swap");
}
