//! `run --replace`: the run that holds the key is stopped, and the
//! replacing run claims only once none of it lives; two replacing runs
//! that arrive together never run at once.

use std::process::Stdio;
use std::time::Duration;

use crate::util::{eventually, on_every_backend, Backend, Env};

on_every_backend!(two_replacing_runs_never_run_at_once);

/// A command that counts itself in `count` while it holds `lock` for a
/// moment, and writes `overlap` to `overlaps` when another run's command
/// holds it (`flock -n` refused, exit 99): one killed while it held the
/// lock writes nothing.
fn guarded(env: &Env, seconds: f64) -> String {
    format!(
        "flock -n -E 99 '{lock}' sh -c 'echo x >> {count}; sleep {seconds}'; if [ $? -eq 99 ]; then echo overlap >> '{overlaps}'; fi",
        lock = env.path("lock").display(),
        count = env.path("count").display(),
        overlaps = env.path("overlaps").display(),
    )
}

#[test]
fn replace_stops_the_holder_and_runs() {
    let env = Env::new();
    let script = format!("touch '{}'; sleep 300", env.path("started").display());
    let mut holder = env
        .idem([
            "run",
            "--key",
            "k",
            "--retries",
            "2",
            "--shell",
            "--",
            &script,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    crate::util::wait_for_file(&env.path("started"), Duration::from_secs(30), &mut holder);
    let holder_run = env.show_json("k")["run_id"].as_str().unwrap().to_owned();
    env.cmd(["run", "--key", "k", "--replace", "--", "true"])
        .succeeds();
    assert!(crate::util::processes_of(&holder_run).is_empty());
    assert_eq!(holder.wait().unwrap().code(), Some(143));
    let runs = env.list_json();
    assert_eq!(runs[0]["status"], "succeeded", "{runs}");
    assert_eq!(runs[1]["status"], "failed", "{runs}");
    assert_eq!(runs[1]["attempts"], 1, "{runs}");
    // The twin in the environment.
    env.cmd(["run", "--key", "k", "--force", "--", "true"])
        .env("IDEM_REPLACE", "1")
        .succeeds();
}

fn two_replacing_runs_never_run_at_once(backend: &Backend) {
    let flock = std::process::Command::new("flock")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !crate::util::require(flock, "flock") {
        return;
    }
    let env = backend.env();
    // On a shared ledger a stop is heard from the first heartbeat on (a
    // second in): a command that short would end before any stop.
    let seconds = if backend.is_postgres() { 2.5 } else { 0.5 };
    let script = guarded(&env, seconds);
    let trials = crate::util::trials(20);
    for trial in 0..trials {
        let key = format!("r{trial}");
        // Every other trial, a run already holds the key when both arrive.
        let holder = (trial % 2 == 0).then(|| {
            let before = env.count("count");
            let mut holder = env
                .idem([
                    "run", "--key", &key, "--lease", "3s", "--shell", "--", &script,
                ])
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            crate::util::wait_for_count(&env, before + 1, &mut holder);
            holder
        });
        let racers: Vec<_> = (0..2)
            .map(|_| {
                env.idem([
                    "run",
                    "--key",
                    &key,
                    "--lease",
                    "3s",
                    "--replace",
                    "--shell",
                    "--",
                    &script,
                ])
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
            })
            .collect();
        for mut racer in racers.into_iter().chain(holder) {
            let ended = eventually("the runs to end", Duration::from_secs(60), || {
                racer.try_wait().unwrap()
            });
            assert!(matches!(ended.code(), Some(0 | 143)), "{ended}");
        }
        assert_eq!(env.show_json(&key)["status"], "succeeded");
    }
    let overlaps = env.count("overlaps");
    eprintln!(
        "--replace racing --replace on {}: {trials} trials, {} runs counted, most at once: {}",
        if backend.is_postgres() {
            "postgres"
        } else {
            "sqlite"
        },
        env.count("count"),
        if overlaps == 0 { 1 } else { 2 }
    );
    assert_eq!(overlaps, 0, "two runs of one key ran at once");
}
