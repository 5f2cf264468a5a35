//! `--misfire latest`: after a long stop a catch-up runs the newest period
//! only, and records the older ones skipped by policy.

use crate::util::{assert_code, have_faketime, text, Env};

use super::{at, job, log, status_json};

fn minutely(env: &Env, when: &str, extra: &[&str]) -> std::process::Output {
    let script = format!("echo \"$IDEM_KEY\" >> '{}'", env.path("log").display());
    let mut args = vec!["run", "--key", "m-{minute}", "--catch-up", "60"];
    args.extend_from_slice(extra);
    args.extend(["--shell", "--", &script]);
    at(env, when, &args)
}

#[test]
fn misfire_latest_after_fifty_missed_periods_runs_one() {
    if !have_faketime() {
        return;
    }
    let env = Env::new();
    assert_code(&minutely(&env, "2026-03-04 10:00:10", &[]), 0);
    // Fifty minutes with no call (10:01 to 10:50), then one at 10:51; the
    // policy comes from the crontab's environment, as a twin.
    let output = super::at_with(
        &env,
        None,
        "2026-03-04 10:51:10",
        &[
            "run",
            "--key",
            "m-{minute}",
            "--catch-up",
            "60",
            "--shell",
            "--",
            &format!("echo \"$IDEM_KEY\" >> '{}'", env.path("log").display()),
        ],
    )
    .env("IDEM_MISFIRE", "latest")
    .output()
    .unwrap();
    assert_code(&output, 0);
    assert_eq!(log(&env), ["m-2026-03-04T10:00", "m-2026-03-04T10:51"]);

    let runs = env.list_json();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 52, "{runs:#?}");
    let skipped: Vec<&serde_json::Value> = runs
        .iter()
        .filter(|run| run["note"] == "skipped by --misfire latest: a newer period ran instead")
        .collect();
    assert_eq!(skipped.len(), 50);
    assert!(skipped.iter().all(|run| run["attempts"] == 0));
    let list = text(
        &at(
            &env,
            "2026-03-04 10:51:30",
            &["ledger", "list", "--key", "m-2026-03-04T10:01"],
        )
        .stdout,
    );
    assert!(list.contains("skipped (misfire)"), "{list}");

    // Neither missed nor failed; the next call runs its own period only.
    let (code, status) = status_json(&env, "2026-03-04 10:51:40");
    assert_eq!(code, 0, "{status:#}");
    let minute = job(&status, "m-{minute}");
    assert_eq!(minute["missed"], 0);
    assert_eq!(minute["failures"], 0);
    assert_eq!(minute["state"], "ok");
    assert_code(
        &minutely(&env, "2026-03-04 10:52:10", &["--misfire", "latest"]),
        0,
    );
    assert_eq!(log(&env).len(), 3);

    // A policy idem does not know is refused in one line.
    let bad = minutely(&env, "2026-03-04 10:53:10", &["--misfire", "some"]);
    assert_code(&bad, 2);
    assert!(
        text(&bad.stderr).contains("invalid value 'some' for '--misfire <WHICH>'"),
        "{}",
        text(&bad.stderr)
    );
}
