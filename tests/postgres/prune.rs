//! `idem ledger prune` of many runs while clients claim keys of the same
//! job: it deletes in batches, each its own transaction, so the claims go
//! on between them and every one succeeds.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Pg;
use crate::ledger::prune::CLIENT;
use crate::util::{assert_code, eventually, wrapped};

/// Old runs inserted straight into the ledger; sized so the test stays
/// well under half a minute.
const OLD_RUNS: u64 = 200_000;
const OLD_KEYS: u64 = 100;
const CLIENTS: usize = 4;

#[test]
fn postgres_prune_deletes_in_batches_while_every_claim_succeeds() {
    let Some(pg) = Pg::new("postgres_prune_deletes_in_batches_while_every_claim_succeeds") else {
        return;
    };
    // The schema, and the job the old runs and the clients share.
    assert_code(
        &pg.run(["run", "--key", "seed", "--job", "nightly", "--", "true"]),
        0,
    );
    pg.server.sql("idem", &old_runs_sql());
    let count = |like: &str| -> u64 {
        let sql = format!("SELECT count(*)::text FROM idem.runs WHERE key LIKE '{like}'");
        pg.server.value(&sql).parse().unwrap()
    };
    assert_eq!(count("old-%"), OLD_RUNS);

    let (stop, fails) = (pg.env.path("stop"), pg.env.path("fails"));
    std::fs::write(&fails, "").unwrap();
    let mut clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let name = format!("c{client}");
            let mut command: Command = wrapped(
                &pg.idem(["run", "--job", "nightly"]),
                &["sh", "-c", CLIENT, &name],
            );
            command
                .env("STOP", &stop)
                .env("FAILS", &fails)
                .spawn()
                .unwrap()
        })
        .collect();
    eventually("the clients to claim", Duration::from_secs(60), || {
        count("live-%") >= CLIENTS as u64
    });

    // Seen from outside while it runs: the old runs go in steps, each
    // batch committed on its own (one transaction shows all or none).
    let before = count("live-%");
    let started = Instant::now();
    let mut prune = pg
        .idem(["ledger", "prune", "--older-than", "30d"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut partial = false;
    let done = loop {
        if let Some(status) = prune.try_wait().unwrap() {
            break status;
        }
        let left = count("old-%");
        partial |= left > OLD_KEYS && left < OLD_RUNS;
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "prune took over 2 minutes"
        );
    };
    let during = count("live-%") - before;
    std::fs::write(&stop, "").unwrap();
    for client in &mut clients {
        assert!(client.wait().unwrap().success());
    }
    assert!(done.success(), "prune failed");
    let summary = std::io::read_to_string(prune.stdout.take().unwrap()).unwrap();
    let pruned = OLD_RUNS - OLD_KEYS;
    assert!(
        summary.starts_with(&format!("pruned {pruned} runs")),
        "{summary}"
    );
    assert!(partial, "no batch was seen committed on its own");
    assert!(during > 0, "no claim ran during the prune");
    let failures = std::fs::read_to_string(&fails).unwrap();
    assert!(
        failures.is_empty(),
        "claims failed during the prune:\n{failures}"
    );

    // Each key's head stayed; every batch counted its runs down from the
    // job: left are the clients' runs, the seed's and the heads.
    assert_eq!(count("old-%"), OLD_KEYS);
    let succeeded = pg
        .server
        .value("SELECT succeeded::text FROM idem.jobs WHERE job = 'nightly'");
    assert_eq!(succeeded, (count("live-%") + 1 + OLD_KEYS).to_string());
}

/// `OLD_RUNS` succeeded runs of job `nightly` under `OLD_KEYS` keys, 40
/// days old, each key's last one its head, counted in the job's figures.
fn old_runs_sql() -> String {
    format!(
        "INSERT INTO idem.keys (key) SELECT 'old-' || k FROM generate_series(1, {OLD_KEYS}) k;
         INSERT INTO idem.runs (run_id, key, status, exit_code, attempts, started_at,
             finished_at, host, pid, command, shell, job)
         SELECT gen_random_uuid(), 'old-' || (n % {OLD_KEYS} + 1), 'succeeded', 0, 1,
             now() - interval '40 days' + n * interval '1 ms',
             now() - interval '40 days' + n * interval '1 ms', 'old-host', 1, 'true', false,
             'nightly'
         FROM generate_series(1, {OLD_RUNS}) n;
         INSERT INTO idem.attempts (run, n, started_at, finished_at, exit_code)
         SELECT id, 1, started_at, finished_at, 0 FROM idem.runs WHERE key LIKE 'old-%';
         UPDATE idem.keys k SET head = (SELECT max(id) FROM idem.runs r WHERE r.key = k.key)
         WHERE key LIKE 'old-%';
         UPDATE idem.jobs SET succeeded = succeeded + {OLD_RUNS} WHERE job = 'nightly';
         ANALYZE idem.runs;"
    )
}

/// Jobs the old runs of [`two_prunes_at_once_never_deadlock`] are spread
/// over, so that every batch counts down many jobs' rows.
const JOBS: u64 = 200;
/// Old runs of [`two_prunes_at_once_never_deadlock`]: every batch of one
/// prune meets the other's many times.
const SHARED_RUNS: u64 = 100_000;

/// Two hosts' cron lines prune at the same midnight: each batch takes its
/// jobs' rows in one order, so neither prune waits for the other in a
/// cycle (a deadlock would fail one), and a run that both found is
/// deleted, reported and counted down once.
#[test]
fn two_prunes_at_once_never_deadlock() {
    let Some(pg) = Pg::new("two_prunes_at_once_never_deadlock") else {
        return;
    };
    assert_code(&pg.run(["run", "--key", "seed", "--", "true"]), 0);
    pg.server.sql("idem", &many_jobs_sql());
    let pruned = SHARED_RUNS - OLD_KEYS;

    let prunes: Vec<_> = (0..2)
        .map(|_| {
            pg.idem(["ledger", "prune", "--older-than", "30d"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut reported = 0;
    for prune in prunes {
        let output = prune.wait_with_output().unwrap();
        assert_code(&output, 0);
        let summary = String::from_utf8_lossy(&output.stdout).into_owned();
        let runs = summary
            .strip_prefix("pruned ")
            .and_then(|rest| rest.split(' ').next());
        reported += runs
            .and_then(|runs| runs.parse::<u64>().ok())
            .expect(&summary);
    }
    assert_eq!(reported, pruned, "runs reported pruned by the two");
    let left = pg
        .server
        .value("SELECT count(*)::text FROM idem.runs WHERE key LIKE 'old-%'");
    assert_eq!(left, OLD_KEYS.to_string());
    let wrong = pg.server.value(
        "SELECT count(*)::text FROM idem.jobs j WHERE j.succeeded <>
             (SELECT count(*) FROM idem.runs r WHERE r.job = j.job AND r.status = 'succeeded')",
    );
    assert_eq!(wrong, "0", "jobs whose figures are off");
}

/// `SHARED_RUNS` succeeded runs 40 days old under `OLD_KEYS` keys, spread
/// over `JOBS` jobs, each key's last one its head, counted in the jobs.
fn many_jobs_sql() -> String {
    format!(
        "INSERT INTO idem.jobs (job, template)
         SELECT 'job-' || j, 'job-' || j FROM generate_series(1, {JOBS}) j;
         INSERT INTO idem.keys (key) SELECT 'old-' || k FROM generate_series(1, {OLD_KEYS}) k;
         INSERT INTO idem.runs (run_id, key, status, exit_code, attempts, started_at,
             finished_at, host, pid, command, shell, job)
         SELECT gen_random_uuid(), 'old-' || (n % {OLD_KEYS} + 1), 'succeeded', 0, 1,
             now() - interval '40 days' + n * interval '1 ms',
             now() - interval '40 days' + n * interval '1 ms', 'old-host', 1, 'true', false,
             'job-' || (n * 7 % {JOBS} + 1)
         FROM generate_series(1, {SHARED_RUNS}) n;
         INSERT INTO idem.attempts (run, n, started_at, finished_at, exit_code)
         SELECT id, 1, started_at, finished_at, 0 FROM idem.runs WHERE key LIKE 'old-%';
         UPDATE idem.keys k SET head = (SELECT max(id) FROM idem.runs r WHERE r.key = k.key)
         WHERE key LIKE 'old-%';
         UPDATE idem.jobs j SET succeeded =
             (SELECT count(*) FROM idem.runs r WHERE r.job = j.job AND r.status = 'succeeded');
         ANALYZE idem.runs;"
    )
}
