//! Which containment each attempt had (a cgroup of its own, a PID
//! namespace, or the guardian alone), as `ledger show` tells it and as
//! export and import carry it.

use serde_json::Value;

use crate::containment_scan::nobody_folder;
use crate::serve::{get, Server};
use crate::util::{as_nobody, assert_code, on_every_backend, text, Backend, Env};

use super::{export, import};

on_every_backend!(
    show_says_each_attempts_containment,
    export_and_import_keep_each_attempts_containment,
    an_older_line_without_containment_imports_as_not_recorded,
);

/// What this host gives a run (as `doctor` finds it): its name in JSON,
/// and the words `idem -v run` says.
fn this_hosts() -> (&'static str, &'static str) {
    let doctor = Env::new().cmd(["doctor", "--json"]).run().json();
    match doctor["containment"].as_str() {
        Some("cgroup") => ("cgroup", "cgroup"),
        Some("guardian") => ("guardian", "guardian only"),
        _ => panic!("doctor says nothing of what holds a run: {doctor}"),
    }
}

/// The `containment` of each attempt of `shown` (`show --json`), null
/// told apart from missing.
fn containments(shown: &Value) -> Vec<Option<Value>> {
    shown["attempts_detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|attempt| attempt.get("containment").cloned())
        .collect()
}

/// A failure retried once: two attempts, each recorded.
fn retried(env: &Env, key: &str) {
    env.cmd(["run", "--key", key, "--retries", "1", "--backoff", "1ms"])
        .args(["--", "false"])
        .expect_code(1);
}

fn show_says_each_attempts_containment(backend: &Backend) {
    let (name, words) = this_hosts();
    let env = backend.env();
    retried(&env, "k");
    let held = Some(Value::from(name));
    assert_eq!(containments(&env.show_json("k")), [held.clone(), held]);
    let shown = env.cmd(["ledger", "show", "k"]).succeeds().stdout();
    for number in [1, 2] {
        let line = format!("  attempt {number}: exit 1; containment: {words}\n");
        assert!(shown.contains(&line), "no {line:?} in\n{shown}");
    }
    // The job's page says it of each attempt too.
    let server = Server::start(&env, &[]);
    let page = get(&format!("{}/job/k", server.url), None).body;
    let said = format!("Containment: {words}");
    assert_eq!(page.matches(&said).count(), 2, "{page}");
}

/// As root the host may give a PID namespace; `nobody` gets none, and its
/// attempts say so.
#[test]
fn an_unprivileged_run_says_the_guardian_alone_held_it() {
    let env = Env::new();
    let Some(folder) = nobody_folder(&env) else {
        return;
    };
    let db = folder.join("ledger.db");
    let run = as_nobody(&env, &db, &["run", "--key", "k", "--", "true"]).unwrap();
    assert_code(&run, 0);
    let json = as_nobody(&env, &db, &["ledger", "show", "k", "--json"]).unwrap();
    assert_code(&json, 0);
    let shown: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(containments(&shown), [Some(Value::from("guardian"))]);
    let said = as_nobody(&env, &db, &["ledger", "show", "k"]).unwrap();
    let said = text(&said.stdout);
    assert!(
        said.contains("  attempt 1: exit 0; containment: guardian only\n"),
        "{said}"
    );
}

fn export_and_import_keep_each_attempts_containment(backend: &Backend) {
    let (name, _) = this_hosts();
    let source = backend.env();
    retried(&source, "k");
    let stream = export(&source);
    let line: Value = serde_json::from_slice(&stream).unwrap();
    let held = Some(Value::from(name));
    assert_eq!(containments(&line), [held.clone(), held.clone()], "{line}");

    let target = backend.env();
    import(&target, &stream).succeeds();
    assert_eq!(containments(&target.show_json("k")), [held.clone(), held]);
    assert_eq!(export(&target), stream);
}

/// A line of an idem that did not record containment: its attempts are
/// imported as not recorded, null in JSON, and exported so again.
fn an_older_line_without_containment_imports_as_not_recorded(backend: &Backend) {
    let source = backend.env();
    retried(&source, "k");
    let mut line: Value = serde_json::from_slice(&export(&source)).unwrap();
    for attempt in line["attempts_detail"].as_array_mut().unwrap() {
        assert!(attempt
            .as_object_mut()
            .unwrap()
            .remove("containment")
            .is_some());
    }
    let older = format!("{line}\n");

    let target = backend.env();
    import(&target, older.as_bytes()).succeeds();
    let nulls = [Some(Value::Null), Some(Value::Null)];
    assert_eq!(containments(&target.show_json("k")), nulls);
    target
        .cmd(["ledger", "show", "k"])
        .succeeds()
        .stdout_has("  attempt 1: exit 1; containment: not recorded\n")
        .stdout_has("  attempt 2: exit 1; containment: not recorded\n");
    let again: Value = serde_json::from_slice(&export(&target)).unwrap();
    assert_eq!(containments(&again), nulls, "{again}");
}
