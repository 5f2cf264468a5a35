//! `--lock`: a lock shared by two jobs.

use std::process::Stdio;
use std::time::Duration;

use crate::util::{assert_code, eventually, wait_for_file, Env};

#[test]
fn a_lock_shared_by_two_jobs_never_overlaps() {
    let env = Env::new();
    let lockfile = env.path("detector");
    let overlaps = env.path("overlaps");
    let script = format!(
        "flock -n '{lock}' sleep 0.05 || echo overlap >> '{overlaps}'; echo x >> '{count}'",
        lock = lockfile.display(),
        overlaps = overlaps.display(),
        count = env.path("count").display()
    );
    let mut children = Vec::new();
    for racer in 0..12 {
        let job = if racer % 2 == 0 { "backup" } else { "vacuum" };
        let key = format!("{job}-{racer}");
        let child = env
            .idem([
                "run", "--key", &key, "--lock", "db", "--wait", "60s", "--shell", "--", &script,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("idem starts");
        children.push(child);
    }
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert_code(&output, 0);
    }
    assert_eq!(env.count("count"), 12);
    assert!(
        !overlaps.exists(),
        "two runs holding lock db overlapped: {}",
        std::fs::read_to_string(&overlaps).unwrap_or_default()
    );

    a_held_lock_conflicts(&env);
}

/// Held, without --wait: the conflict exit code, said; nothing ran.
fn a_held_lock_conflicts(env: &Env) {
    let started = env.path("started");
    let mut holder = env
        .idem([
            "run",
            "--key",
            "holder",
            "--lock",
            "db",
            "--shell",
            "--",
            &format!("touch '{}'; sleep 30", started.display()),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut holder);
    env.cmd(["run", "--key", "other", "--lock", "db", "--", "true"])
        .expect_code(75)
        .stderr_has("lock db is held");
    env.cmd([
        "run",
        "--key",
        "other",
        "--lock",
        "db",
        "--conflict-exit-code",
        "0",
        "--",
        "true",
    ])
    .succeeds();
    env.cmd([
        "run", "--key", "other", "--lock", "db", "--wait", "300ms", "--", "true",
    ])
    .expect_code(75)
    .stderr_has("--wait ran out");
    // Another lock is free; from the environment too.
    env.cmd(["run", "--key", "free", "--", "true"])
        .env("IDEM_LOCK", "disk,net")
        .succeeds();
    holder.kill().unwrap();
    let _ = holder.wait();
    // Once its holder is gone, the lock is free.
    eventually("the lock to be free", Duration::from_secs(30), || {
        env.cmd(["run", "--key", "other", "--lock", "db", "--", "true"])
            .run()
            .output
            .status
            .success()
    });
    env.cmd(["run", "-k", "x", "--lock", "", "--", "true"])
        .expect_code(2);
}
