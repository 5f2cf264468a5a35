//! A shared ledger on a primary and a streaming standby, named together by
//! one multi-host URL: idem finds the primary, rides a failover out (the
//! primary killed, the standby promoted), and a claim an asynchronous
//! standby never received stops its run.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::pg::Server;
use crate::util::{eventually, text, wait_for_file, Env};

/// A primary and its hot standby, and the URL that names both.
struct Pair {
    primary: Server,
    standby: Server,
}

impl Pair {
    /// A primary and its standby, synchronous when `synchronous`; `None`:
    /// the test is skipped.
    fn new(test: &str, synchronous: bool) -> Option<Pair> {
        let primary = Server::start(test)?;
        let standby = primary.standby();
        let streaming = "SELECT count(*)::text FROM pg_stat_replication WHERE state = 'streaming'";
        eventually("the standby to stream", Duration::from_secs(30), || {
            primary.value(streaming) == "1"
        });
        if synchronous {
            primary.synchronous();
        }
        Some(Pair { primary, standby })
    }

    /// The URL naming `first`, then `second`, asking for the one that
    /// accepts writes.
    fn url(first: &Server, second: &Server) -> String {
        let host = |server: &Server| {
            server
                .socket_dir()
                .to_str()
                .unwrap()
                .replace('%', "%25")
                .replace('/', "%2F")
        };
        format!(
            "postgresql://postgres@{},{}/idem?target_session_attrs=read-write",
            host(first),
            host(second)
        )
    }

    /// An environment on the primary-first URL.
    fn env(&self) -> Env {
        Env::on_ledger(Pair::url(&self.primary, &self.standby))
    }

    /// Waits until the standby has replayed all the primary wrote.
    fn caught_up(&self) {
        let lsn = self.primary.value("SELECT pg_current_wal_lsn()::text");
        eventually("the standby to catch up", Duration::from_secs(30), || {
            self.standby.value(&format!(
                "SELECT (pg_last_wal_replay_lsn() >= '{lsn}')::text"
            )) == "true"
        });
    }

    /// The primary killed (no shutdown checkpoint, connections cut), the
    /// standby promoted: when the new primary took writes.
    fn fail_over(&mut self) -> Instant {
        self.primary.stop();
        self.standby.promote();
        Instant::now()
    }
}

/// A command that counts itself in `counter`, creates `started`, then
/// waits (bounded) for the file `go`.
fn script(env: &Env) -> String {
    format!(
        "{}; touch '{}'; i=0; while [ ! -e '{}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        env.count_cmd("counter"),
        env.path("started").display(),
        env.path("go").display()
    )
}

/// `idem run` of `key`, its command [`script`], once that has started.
fn owner(env: &Env, key: &str, lease: &str) -> Child {
    let script = script(env);
    let mut owner = env
        .idem([
            "run", "--key", key, "--lease", lease, "--shell", "--", &script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("idem starts");
    wait_for_file(&env.path("started"), Duration::from_secs(60), &mut owner);
    owner
}

#[test]
fn postgres_a_multi_host_url_finds_the_primary_whichever_comes_first() {
    let Some(pair) = Pair::new(
        "postgres_a_multi_host_url_finds_the_primary_whichever_comes_first",
        true,
    ) else {
        return;
    };
    let urls = [
        Pair::url(&pair.primary, &pair.standby),
        Pair::url(&pair.standby, &pair.primary),
    ];
    for (n, url) in urls.iter().enumerate() {
        Env::on_ledger(url)
            .cmd(["run", "--key", &format!("key-{n}"), "--", "true"])
            .succeeds();
    }
    assert_eq!(
        pair.primary.value("SELECT count(*)::text FROM idem.runs"),
        "2"
    );
    pair.caught_up();
    assert_eq!(
        pair.standby.value("SELECT count(*)::text FROM idem.runs"),
        "2"
    );
}

/// Another idem on `key` finds it held (75), when a ledger answers.
#[track_caller]
fn still_held(env: &Env, key: &str) {
    env.cmd(["run", "--key", key, "--", "true"]).expect_code(75);
}

#[test]
fn postgres_a_run_rides_a_failover_out_and_is_recorded_once() {
    let Some(mut pair) = Pair::new(
        "postgres_a_run_rides_a_failover_out_and_is_recorded_once",
        true,
    ) else {
        return;
    };
    let env = pair.env();
    let owner = owner(&env, "fo", "6s");
    let waiter = env
        .idem([
            "run",
            "--key",
            "fo",
            "--wait",
            "60s",
            "--shell",
            "--",
            &script(&env),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("idem starts");
    // The waiter waits once connected (the owner has two connections): one
    // that starts while no server takes writes cannot open the ledger.
    let connected =
        "SELECT (count(*) >= 3)::text FROM pg_stat_activity WHERE application_name = 'idem'";
    eventually("the waiter to connect", Duration::from_secs(30), || {
        pair.primary.value(connected) == "true"
    });
    still_held(&env, "fo");
    pair.fail_over();
    let lease_until = "SELECT lease_until::text FROM idem.keys WHERE key = 'fo'";
    let promoted_with = pair.standby.value(lease_until);
    still_held(&env, "fo");
    // A heartbeat lands on the new primary: the lease moves on.
    eventually(
        "a heartbeat on the new primary",
        Duration::from_secs(6),
        || pair.standby.value(lease_until) != promoted_with,
    );
    still_held(&env, "fo");
    std::fs::write(env.path("go"), "").unwrap();
    let owned = owner.wait_with_output().unwrap();
    assert_eq!(owned.status.code(), Some(0), "{}", text(&owned.stderr));
    let waited = waiter.wait_with_output().unwrap();
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited.stderr));
    assert_eq!(env.count("counter"), 1, "the command ran more than once");
    let runs = env.list_json();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[0]["attempts"], 1);
}

/// The fences of `n` runs of fresh keys, in order.
fn fences(env: &Env, from: usize, n: usize) -> Vec<i64> {
    (from..from + n)
        .map(|at| {
            let key = format!("fence-{at}");
            let ran = env
                .cmd(["run", "--key", &key, "--shell", "--", "echo $IDEM_FENCE"])
                .succeeds();
            ran.stdout().trim().parse().expect("a fence")
        })
        .collect()
}

#[test]
fn postgres_fences_after_a_failover_are_above_every_fence_before() {
    let Some(mut pair) = Pair::new(
        "postgres_fences_after_a_failover_are_above_every_fence_before",
        true,
    ) else {
        return;
    };
    let env = pair.env();
    let before = fences(&env, 0, 5);
    pair.fail_over();
    let after = fences(&env, 5, 5);
    let highest = before.iter().max().unwrap();
    assert!(
        after.iter().all(|fence| fence > highest),
        "fences went back: {before:?} then {after:?}"
    );
}

#[test]
fn postgres_a_claim_an_asynchronous_standby_lost_stops_its_run() {
    let Some(mut pair) = Pair::new(
        "postgres_a_claim_an_asynchronous_standby_lost_stops_its_run",
        false,
    ) else {
        return;
    };
    let env = pair.env();
    env.cmd(["run", "--key", "first", "--", "true"]).succeeds();
    pair.caught_up();
    // The standby hears nothing of the claim that follows.
    pair.standby.stop();
    let lease = Duration::from_secs(12);
    let owner = owner(&env, "lost", "12s");
    // A run in flight for a while: its heartbeat has a connection of its
    // own, which is what sees the primary go.
    let lease_until = "SELECT lease_until::text FROM idem.keys WHERE key = 'lost'";
    let claimed_with = pair.primary.value(lease_until);
    eventually("a heartbeat", Duration::from_secs(30), || {
        pair.primary.value(lease_until) != claimed_with
    });
    pair.primary.stop();
    pair.standby.start_again();
    let promoted = pair.fail_over();
    let owned = owner.wait_with_output().unwrap();
    let took = promoted.elapsed();
    let stderr = text(&owned.stderr);
    assert!(
        took < lease / 3,
        "the run was stopped {took:?} after the promotion: {stderr}"
    );
    assert!(
        stderr.contains("lost the claim on key lost: the ledger has no trace of this run"),
        "{stderr}"
    );
    assert_ne!(owned.status.code(), Some(0), "{stderr}");
    // What synchronous replication prevents: the key runs again.
    env.cmd([
        "run",
        "--key",
        "lost",
        "--shell",
        "--",
        &env.count_cmd("counter"),
    ])
    .succeeds();
    assert_eq!(env.count("counter"), 2);
}

/// What `idem doctor --json` said of the ledger at `url`.
struct Doctor {
    code: Option<i32>,
    /// The replication check's status.
    status: String,
    /// Its message and fix.
    said: String,
    report: serde_json::Value,
}

fn doctor(url: &str) -> Doctor {
    let ran = Env::on_ledger(url).cmd(["doctor", "--json"]).run();
    let report = ran.json();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["check"] == "replication")
        .unwrap_or_else(|| panic!("no replication check in {report}"))
        .clone();
    Doctor {
        code: ran.code(),
        status: check["status"].as_str().unwrap().to_owned(),
        said: format!("{} {}", check["message"], check["fix"]),
        report,
    }
}

#[test]
fn postgres_doctor_says_how_the_server_replicates() {
    let Some(pair) = Pair::new("postgres_doctor_says_how_the_server_replicates", false) else {
        return;
    };
    let url = Pair::url(&pair.primary, &pair.standby);
    Env::on_ledger(&url)
        .cmd(["run", "--key", "k", "--", "true"])
        .succeeds();
    // Asynchronous: a warning with the fix; still healthy.
    let found = doctor(&url);
    assert_eq!(found.code, Some(0), "{}", found.report);
    assert_eq!(found.status, "warn", "{}", found.report);
    assert!(
        found.said.contains("a failover can lose a committed claim"),
        "{}",
        found.said
    );
    assert!(
        found.said.contains("synchronous_commit = on"),
        "{}",
        found.said
    );
    assert_eq!(found.report["replication"]["asynchronous"], 1);
    assert_eq!(found.report["replication"]["synchronous"], 0);

    pair.primary.synchronous();
    let found = doctor(&url);
    assert_eq!(found.code, Some(0), "{}", found.report);
    assert_eq!(found.status, "ok", "{}", found.report);
    assert_eq!(found.report["replication"]["synchronous"], 1);
    assert_eq!(found.report["replication"]["synchronous_commit"], "on");

    // The standby alone: idem could not write there.
    let found = doctor(&pair.standby.url());
    assert_eq!(found.code, Some(1), "{}", found.report);
    assert_eq!(found.status, "problem", "{}", found.report);
    assert_eq!(found.report["replication"]["in_recovery"], true);
}

#[test]
fn postgres_doctor_says_when_every_commit_waits_for_a_standby_that_is_gone() {
    let Some(mut pair) = Pair::new(
        "postgres_doctor_says_when_every_commit_waits_for_a_standby_that_is_gone",
        true,
    ) else {
        return;
    };
    pair.standby.stop();
    let url = Pair::url(&pair.primary, &pair.standby);
    let found = eventually("the standby to be gone", Duration::from_secs(30), || {
        let found = doctor(&url);
        (found.report["replication"]["standbys"] == 0).then_some(found)
    });
    assert_eq!(found.code, Some(1), "{}", found.report);
    assert_eq!(found.status, "problem", "{}", found.report);
    assert!(
        found.said.contains("every commit waits for one"),
        "{}",
        found.said
    );
}
