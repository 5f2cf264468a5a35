//! `ledger mark KEY --succeeded`: a success that did not run, which the key
//! itself and its downstream jobs honour, told apart from a real run.

use crate::util::{on_every_backend, Backend};

use super::{job, ran};

on_every_backend!(
    a_marked_upstream_lets_its_downstream_run,
    a_running_key_is_not_marked
);

fn a_marked_upstream_lets_its_downstream_run(backend: &Backend) {
    let env = backend.env();
    job(&env, "report", &["extract"], 0, &[]).succeeds();
    assert_eq!(ran(&env, "report"), 0, "blocked first");
    env.cmd([
        "ledger",
        "mark",
        "extract",
        "--succeeded",
        "--reason",
        "loaded by hand after the outage",
    ])
    .succeeds()
    .stdout_has("marked extract succeeded");
    job(&env, "report", &["extract"], 0, &[]).succeeds();
    assert_eq!(ran(&env, "report"), 1, "the downstream ran");
    // The marked key itself is skipped, whatever its command.
    job(&env, "extract", &[], 0, &[]).succeeds();
    assert_eq!(ran(&env, "extract"), 0, "a marked key is skipped");

    env.cmd(["ledger", "list"])
        .succeeds()
        .stdout_has("succeeded (marked)");
    env.cmd(["ledger", "show", "extract"])
        .succeeds()
        .stdout_has("marked succeeded")
        .stdout_has("loaded by hand after the outage");
    let shown = env.show_json("extract");
    assert_eq!(shown["marked"], true, "{shown:#}");
    assert!(shown["note"]
        .as_str()
        .is_some_and(|note| note.contains("@") && note.contains("loaded by hand")));
    assert_eq!(env.show_json("report")["marked"], false);

    // Export and import keep it a mark.
    let export = env.cmd(["ledger", "export"]).succeeds().stdout();
    let moved = crate::util::Env::new();
    moved.cmd(["ledger", "import"]).stdin(export).succeeds();
    let shown = moved.show_json("extract");
    assert_eq!(shown["marked"], true, "{shown:#}");
    assert!(shown["note"].as_str().unwrap().contains("loaded by hand"));
    job(&moved, "extract", &[], 0, &[]).succeeds();
    assert_eq!(ran(&moved, "extract"), 0, "still skipped after a move");
}

fn a_running_key_is_not_marked(backend: &Backend) {
    let env = backend.env();
    let started = env.path("started");
    let release = env.path("release");
    let script = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
        started.display(),
        release.display()
    );
    let mut owner = env
        .cmd(["run", "--key", "extract", "--shell", "--", &script])
        .command()
        .spawn()
        .unwrap();
    crate::util::wait_for_file(&started, std::time::Duration::from_secs(30), &mut owner);
    env.cmd([
        "ledger",
        "mark",
        "extract",
        "--succeeded",
        "--reason",
        "by hand",
    ])
    .expect_code(75)
    .stderr_has("is running");
    std::fs::write(&release, "").unwrap();
    assert!(owner.wait().unwrap().success());
    assert_eq!(env.show_json("extract")["marked"], false);
}
