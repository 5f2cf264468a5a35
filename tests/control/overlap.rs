//! `--overlap`: a job's policy for a run that arrives while another run of
//! the job, under any key, is running. Each scenario holds on both ledgers;
//! on PostgreSQL the arrivals come from hosts of their own.

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::util::{assert_code, eventually, on_every_backend, text, Backend, Env};

on_every_backend!(
    a_queue_lets_one_wait_and_turns_the_others_away,
    skip_is_a_conflict_and_replace_stops_the_running_run,
);

/// A command that notes its key in `count` while it holds `lock` (`flock
/// -n`: `overlap` in `overlaps` when another run's command holds it), and
/// runs until the file `gate` exists.
fn gated(env: &Env) -> String {
    format!(
        "flock -n -E 99 '{lock}' sh -c 'echo $IDEM_KEY >> {count}; while [ ! -e {gate} ]; do sleep 0.05; done'; if [ $? -eq 99 ]; then echo overlap >> '{overlaps}'; fi",
        lock = env.path("lock").display(),
        count = env.path("count").display(),
        gate = env.path("gate").display(),
        overlaps = env.path("overlaps").display(),
    )
}

/// `idem run` of key `key` of job `sync` under `--overlap policy`, as host
/// `host` on PostgreSQL.
fn arrival(backend: &Backend, env: &Env, host: &str, key: &str, policy: &str) -> Command {
    let script = gated(env);
    let args = [
        "run",
        "--key",
        key,
        "--job",
        "sync",
        "--overlap",
        policy,
        "--retries",
        "0",
        "--shell",
        "--",
        &script,
    ];
    let idem = env.cmd(args);
    let idem = match backend.is_postgres() {
        true => super::on_host(idem, host).expect("a host of its own"),
        false => idem,
    };
    let mut command = idem.command();
    command.stdout(Stdio::null()).stderr(Stdio::piped());
    command
}

fn lines(env: &Env, name: &str) -> Vec<String> {
    std::fs::read_to_string(env.path(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits (bounded) until `count` holds `n` lines.
fn started(env: &Env, n: usize) {
    eventually("the runs to start", Duration::from_secs(60), || {
        lines(env, "count").len() >= n
    });
}

/// A long run, then four arrivals under `--overlap queue`: exactly one
/// waits and runs after it, the other three exit as a conflict saying one
/// is queued, and no two commands ever run at once.
fn a_queue_lets_one_wait_and_turns_the_others_away(backend: &Backend) {
    let env = backend.env();
    let mut first = arrival(backend, &env, "host-0", "sync-0", "queue")
        .spawn()
        .unwrap();
    started(&env, 1);
    let mut arrivals: Vec<Child> = (1..=4)
        .map(|n| {
            let key = format!("sync-{n}");
            arrival(backend, &env, &format!("host-{n}"), &key, "queue")
                .spawn()
                .unwrap()
        })
        .collect();
    // Three are turned away while the first runs; one stays, queued.
    let mut turned_away: Vec<Output> = Vec::new();
    eventually(
        "three arrivals to be turned away",
        Duration::from_secs(60),
        || {
            let mut index = 0;
            while index < arrivals.len() {
                if arrivals[index].try_wait().unwrap().is_some() {
                    turned_away.push(arrivals.remove(index).wait_with_output().unwrap());
                } else {
                    index += 1;
                }
            }
            turned_away.len() >= 3
        },
    );
    assert_eq!(turned_away.len(), 3, "exactly one waits");
    assert_eq!(lines(&env, "count"), ["sync-0"], "the queued run waits");
    for output in &turned_away {
        assert_code(output, 75);
        let stderr = text(&output.stderr);
        assert!(
            stderr.starts_with("idem: sync-")
                && stderr.ends_with(
                    ": a run of job sync is running and another is already queued behind it (--overlap queue)\n"
                )
                && stderr.lines().count() == 1,
            "{stderr}"
        );
    }
    std::fs::write(env.path("gate"), "").unwrap();
    assert_eq!(first.wait().unwrap().code(), Some(0));
    let queued = arrivals.remove(0).wait_with_output().unwrap();
    assert_code(&queued, 0);
    let count = lines(&env, "count");
    assert_eq!(count.len(), 2, "{count:?}");
    assert_eq!(count[0], "sync-0");
    assert_eq!(
        lines(&env, "overlaps"),
        Vec::<String>::new(),
        "two ran at once"
    );
}

/// A run under `--overlap skip` holds the job: another key's `skip` is a
/// conflict; a `replace` stops it, waits until it is gone, and runs.
fn skip_is_a_conflict_and_replace_stops_the_running_run(backend: &Backend) {
    let env = backend.env();
    let mut first = arrival(backend, &env, "host-0", "sync-0", "skip")
        .spawn()
        .unwrap();
    started(&env, 1);
    let skipped = arrival(backend, &env, "host-1", "sync-1", "skip")
        .output()
        .unwrap();
    assert_code(&skipped, 75);
    assert!(
        text(&skipped.stderr).contains("sync-1: a run of job sync is running (--overlap skip)"),
        "{}",
        text(&skipped.stderr)
    );
    // The replacing run's command finds the gate open and ends at once.
    let mut replacing = arrival(backend, &env, "host-2", "sync-2", "replace")
        .spawn()
        .unwrap();
    eventually(
        "the first run to be stopped",
        Duration::from_secs(120),
        || first.try_wait().unwrap().is_some(),
    );
    assert_eq!(
        first.wait().unwrap().code(),
        Some(143),
        "stopped by SIGTERM"
    );
    std::fs::write(env.path("gate"), "").unwrap();
    assert_eq!(replacing.wait().unwrap().code(), Some(0));
    assert_eq!(lines(&env, "count"), ["sync-0", "sync-2"]);
    assert_eq!(
        lines(&env, "overlaps"),
        Vec::<String>::new(),
        "two ran at once"
    );
    // A policy idem does not know is refused in one line.
    let bad = env.run(["run", "-k", "x", "--overlap", "forbid", "--", "true"]);
    assert_code(&bad, 2);
    assert!(text(&bad.stderr).contains("invalid value 'forbid' for '--overlap <POLICY>'"));
}
