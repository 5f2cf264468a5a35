//! `idem ledger prune` of many runs of a SQLite ledger while clients claim
//! keys of the same job: it deletes in batches, each its own write
//! transaction, so the claims go on between them and every one succeeds;
//! and it drops what a dry run says, the jobs' figures right at the end. A
//! dry run only reads, so it never waits for the writers' lock.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{eventually, sqlite, text, wait_for_file, wrapped, Env};

/// Old runs written straight into the ledger; sized so that a prune of
/// them takes many batches and the test stays well under half a minute.
const OLD_RUNS: u64 = 100_000;
const OLD_KEYS: u64 = 100;
/// Keys forgotten (no head) whose runs are all old: prune drops them.
const FORGOTTEN: u64 = 10;
const CLIENTS: usize = 3;

/// Each client runs a new key of job `nightly` in a loop until the file
/// `$STOP` is there, and appends each failure (key, exit code) to `$FAILS`.
pub(crate) const CLIENT: &str = r#"n=0
while [ ! -e "$STOP" ]; do
    "$@" --key "live-$0-$n" -- true 2>>"$FAILS" || echo "live-$0-$n exited $?" >>"$FAILS"
    n=$((n + 1))
done"#;

#[test]
fn sqlite_prune_deletes_in_batches_while_every_claim_succeeds() {
    let env = Env::new();
    env.cmd(["run", "--key", "seed", "--job", "nightly", "--", "true"])
        .succeeds();
    sqlite(&env.db(), &old_runs_sql());
    let db = env.db();
    let count = |like: &str| -> u64 { count_runs(&db, like) };
    let old = count("old-%");
    assert_eq!(old + count("gone-%"), OLD_RUNS);
    let weekly = weekly_status(&env);

    // What a dry run says is what the prune does (less "would").
    let dry = env
        .cmd(["ledger", "prune", "--older-than", "30d", "--dry-run"])
        .succeeds()
        .stdout();
    let would = dry.split(" that finished").next().unwrap().to_owned();
    assert!(would.starts_with("would prune "), "{dry}");

    let (stop, fails) = (env.path("stop"), env.path("fails"));
    let mut clients = start_clients(&env, &stop, &fails);
    eventually("the clients to claim", Duration::from_secs(60), || {
        count("live-%") >= CLIENTS as u64
    });

    let (summary, seen, between) = watch_prune(&env, old);
    std::fs::write(&stop, "").unwrap();
    for client in &mut clients {
        assert!(client.wait().unwrap().success());
    }
    assert_eq!(
        summary.split(" that finished").next().unwrap(),
        would.replacen("would prune", "pruned", 1),
    );
    assert!(seen, "no batch was seen committed on its own");
    assert!(between, "no claim was committed between two batches");
    let failures = std::fs::read_to_string(&fails).unwrap();
    assert!(
        failures.is_empty(),
        "claims failed during the prune:\n{failures}"
    );

    // Each key's head stayed, the forgotten keys went, and every batch
    // counted its runs down from their jobs.
    assert_eq!(count("old-%"), OLD_KEYS);
    assert_eq!(count("gone-%"), 0);
    assert_eq!(
        sqlite(&db, "SELECT count(*) FROM keys WHERE key LIKE 'gone-%'"),
        "0"
    );
    assert_eq!(sqlite(&db, FIGURES_WRONG), "", "jobs whose figures are off");
    assert_eq!(weekly_status(&env), weekly, "the status of a job");
}

/// `CLIENTS` loops of [`CLIENT`], claiming new keys of job `nightly`.
fn start_clients(env: &Env, stop: &Path, fails: &Path) -> Vec<Child> {
    std::fs::write(fails, "").unwrap();
    (0..CLIENTS)
        .map(|client| {
            let name = format!("c{client}");
            let mut command: Command = wrapped(
                &env.idem(["run", "--job", "nightly"]),
                &["sh", "-c", CLIENT, &name],
            );
            command.env("STOP", stop).env("FAILS", fails);
            command.spawn().unwrap()
        })
        .collect()
}

/// Prunes the runs older than 30 days, watching the ledger from outside
/// while it runs: the old runs go in steps (one transaction shows all or
/// none), and claims are committed between them (none before its end).
/// Its summary; whether a step was seen; whether a claim was seen
/// committed between two steps.
fn watch_prune(env: &Env, old: u64) -> (String, bool, bool) {
    let db = env.db();
    let started = Instant::now();
    let mut prune = env
        .idem(["ledger", "prune", "--older-than", "30d"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen: Option<(u64, u64)> = None;
    let mut between = false;
    let done = loop {
        if let Some(status) = prune.try_wait().unwrap() {
            break status;
        }
        let (left, live) = (count_runs(&db, "old-%"), count_runs(&db, "live-%"));
        if left > OLD_KEYS && left < old {
            between |= seen.is_some_and(|(old, claimed)| left < old && live > claimed);
            seen = Some((left, live));
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "prune took over 2 minutes"
        );
    };
    assert!(done.success(), "prune failed");
    let summary = std::io::read_to_string(prune.stdout.take().unwrap()).unwrap();
    (summary, seen.is_some(), between)
}

/// A dry run only reads: it goes on while another process holds the
/// writers' lock (as a write would, for as long as it lasts), where taking
/// that lock would wait 10 s and fail (exit 125).
#[test]
fn sqlite_prune_dry_run_takes_no_write_lock() {
    let env = Env::new();
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    let held = env.path("held");
    // Holds the lock until `held` is removed.
    let script = format!(
        "touch '{0}'; while [ -e '{0}' ]; do sleep 0.05; done",
        held.display()
    );
    let mut holder = Command::new("flock")
        .arg(env.db())
        .args(["-c", &script])
        .spawn()
        .expect("flock (util-linux) is installed");
    wait_for_file(&held, Duration::from_secs(30), &mut holder);
    let dry = env
        .cmd(["ledger", "prune", "--older-than", "0s", "--dry-run"])
        .run();
    std::fs::remove_file(&held).unwrap();
    assert!(holder.wait().unwrap().success());
    dry.succeeds()
        .stdout_starts_with("would prune 0 runs (0 attempts, 0 B of output)");
}

fn count_runs(db: &Path, like: &str) -> u64 {
    // A reader of a WAL ledger waits only while the WAL's index is
    // rebuilt; the timeout covers that.
    let output = Command::new("sqlite3")
        .args(["-cmd", ".timeout 10000"])
        .arg(db)
        .arg(format!(
            "SELECT count(*) FROM runs r JOIN keys k ON k.id = r.key_id WHERE k.key LIKE '{like}'"
        ))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout).trim().parse().unwrap()
}

fn weekly_status(env: &Env) -> serde_json::Value {
    let jobs = env.cmd(["status", "--json"]).run().json();
    let weekly = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|job| job["job"] == "weekly");
    weekly.expect("job weekly in status").clone()
}

/// The jobs whose figures differ from a count of their runs.
const FIGURES_WRONG: &str = "SELECT j.job FROM jobs j WHERE
    (j.running, j.succeeded, j.failed, j.abandoned) IS NOT
    (SELECT coalesce(sum(status = 0), 0), coalesce(sum(status = 1), 0),
         coalesce(sum(status = 2), 0), coalesce(sum(status = 3), 0)
     FROM runs WHERE job_id = j.id)";

/// `OLD_RUNS` runs 40 days old, one in ten failed, one in seven `gone-%`
/// (forgotten keys, under job `weekly`), the rest under `OLD_KEYS` keys of
/// job `nightly`, each key's last one its head; every job's figures
/// counted from its runs.
fn old_runs_sql() -> String {
    let old = "strftime('%s', 'now', '-40 days') * 1000";
    format!(
        "INSERT INTO jobs (job, template) VALUES ('weekly', 'weekly');
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {OLD_KEYS})
         INSERT INTO keys (key) SELECT 'old-' || i FROM n;
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {FORGOTTEN})
         INSERT INTO keys (key) SELECT 'gone-' || i FROM n;
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {OLD_RUNS})
         INSERT INTO runs (run_id, key_id, status, exit_code, attempts, started_at,
             finished_at, host, pid, command, shell, job_id)
         SELECT randomblob(16),
             (SELECT id FROM keys WHERE key = CASE WHEN i % 7 = 5
                 THEN 'gone-' || (i % {FORGOTTEN} + 1) ELSE 'old-' || (i % {OLD_KEYS} + 1) END),
             CASE WHEN i % 10 = 3 THEN 2 ELSE 1 END, i % 10 = 3, 1, {old} + i, {old} + i + 1,
             'old-host', 1, CAST('true' AS BLOB), 0,
             (SELECT id FROM jobs WHERE job = CASE WHEN i % 7 = 5 THEN 'weekly'
                 ELSE 'nightly' END)
         FROM n;
         INSERT INTO attempts (run, n, started_at, finished_at, exit_code, stdout_tail)
         SELECT id, 1, started_at, finished_at, exit_code, CAST('ok' || char(10) AS BLOB)
         FROM runs WHERE host = 'old-host';
         UPDATE keys SET head = (SELECT max(id) FROM runs r WHERE r.key_id = keys.id)
         WHERE key LIKE 'old-%';
         UPDATE jobs SET (running, succeeded, failed, abandoned) =
             (SELECT sum(status = 0), sum(status = 1), sum(status = 2), sum(status = 3)
              FROM runs WHERE job_id = jobs.id),
             first_run = (SELECT min(started_at) FROM runs WHERE job_id = jobs.id),
             last_run = (SELECT max(started_at) FROM runs WHERE job_id = jobs.id)
         WHERE job = 'weekly' OR job = 'nightly';
         ANALYZE;"
    )
}
