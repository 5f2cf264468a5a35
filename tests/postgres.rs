//! `idem run` and `idem ledger` on a shared PostgreSQL ledger, against a
//! real server each test starts for itself (see `pg.rs`): what only a
//! shared ledger has (leases, hosts, connections, TLS, the server's clock).
//! The ledger scenarios that hold on every backend are in `ledger.rs`.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use idem::ledger::PostgresLedger;

use crate::pg::Server;
use crate::util::{assert_code, eventually, require, text, wait_for_file, wrapped, Env, Idem};

/// An isolated environment whose ledger is a fresh PostgreSQL database.
/// Its [`Env`] keeps the SQLite ledger of its tempdir, for tests that
/// move one to the other.
struct Pg {
    env: Env,
    server: Server,
}

impl Pg {
    fn new(test: &str) -> Option<Pg> {
        Some(Pg {
            server: Server::start(test)?,
            env: Env::new(),
        })
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn cmd<const N: usize>(&self, args: [&str; N]) -> Idem {
        self.env.cmd(args).db(self.url())
    }

    fn idem<const N: usize>(&self, args: [&str; N]) -> Command {
        self.cmd(args).command()
    }

    fn run<const N: usize>(&self, args: [&str; N]) -> Output {
        self.cmd(args).run().into_output()
    }

    /// `idem ARGS` as if on another host: its own UTS namespace, renamed.
    /// Needs root (CI runs as root); `None` says the test is skipped.
    fn on_host<const N: usize>(&self, host: &str, args: [&str; N]) -> Option<Command> {
        let works = Command::new("unshare")
            .args(["--uts", "true"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !require(works, "`unshare --uts` (it needs root)") {
            return None;
        }
        Some(wrapped(
            &self.idem(args),
            &[
                "unshare",
                "--uts",
                "sh",
                "-c",
                "hostname \"$0\" && exec \"$@\"",
                host,
            ],
        ))
    }

    /// An owner of `key` on another host (`host-a`), its lease `lease`, as
    /// the one test needs it: its command touches a file, then does `then`;
    /// returned once that file is there. `None`: the test is skipped.
    fn owner_on_another_host(
        &self,
        key: &str,
        lease: &str,
        then: &str,
        stderr: Stdio,
    ) -> Option<Child> {
        let started = self.env.path("started");
        let script = format!("touch '{}'; {then}", started.display());
        let mut owner = self
            .on_host(
                "host-a",
                [
                    "run", "--key", key, "--lease", lease, "--shell", "--", &script,
                ],
            )?
            .stderr(stderr)
            .spawn()
            .unwrap();
        wait_for_start(&started, &mut owner);
        Some(owner)
    }

    fn list_json(&self) -> serde_json::Value {
        self.cmd(["ledger", "list", "--json", "--limit", "100000"])
            .succeeds()
            .json()
    }

    fn count_cmd(&self, name: &str) -> String {
        self.env.count_cmd(name)
    }

    fn count(&self, name: &str) -> usize {
        self.env.count(name)
    }
}

/// Waits (bounded) until the owner's command has created `path`.
#[track_caller]
fn wait_for_start(path: &std::path::Path, owner: &mut Child) {
    wait_for_file(path, Duration::from_secs(60), owner);
}

/// Waits (bounded) until the latest run's first attempt is recorded.
#[track_caller]
fn wait_for_attempt(pg: &Pg) {
    eventually(
        "the attempt to be recorded",
        Duration::from_secs(60),
        || pg.list_json()[0]["attempts"] == 1,
    );
}

#[test]
fn postgres_thirty_racers_run_one_command() {
    let Some(pg) = Pg::new("postgres_thirty_racers_run_one_command") else {
        return;
    };
    // Claims keep to READ COMMITTED whatever the database's default.
    pg.server.sql(
        "postgres",
        "ALTER DATABASE idem SET default_transaction_isolation = 'serializable'",
    );
    // The command holds a lock file while it runs and notes an overlap if
    // it cannot take it at once.
    let lock = pg.env.path("lock");
    let script = format!(
        "flock -n '{}' -c \"{}; sleep 0.3\" || echo overlap >> '{}'",
        lock.display(),
        pg.count_cmd("count"),
        pg.env.path("overlaps").display()
    );
    let racers: Vec<Child> = (0..30)
        .map(|_| {
            pg.idem(["run", "--key", "race", "--shell", "--", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("idem starts")
        })
        .collect();
    for racer in racers {
        let output = racer.wait_with_output().unwrap();
        let code = output.status.code();
        assert!(
            code == Some(0) || code == Some(75),
            "a racer exited {code:?}: {}",
            text(&output.stderr)
        );
    }
    assert_eq!(pg.count("count"), 1, "the command ran more than once");
    assert_eq!(pg.count("overlaps"), 0, "two runs overlapped");
    let runs = pg.list_json();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    assert_eq!(runs[0]["status"], "succeeded");
}

#[test]
fn postgres_unreachable_database_runs_nothing() {
    let env = Env::new();
    let nowhere = env.path("no-server");
    std::fs::create_dir(&nowhere).unwrap();
    let url = format!(
        "postgresql://idem:s3cret@{}/idem",
        nowhere.to_str().unwrap().replace('/', "%2F")
    );
    env.cmd([
        "run",
        "--key",
        "k",
        "--shell",
        "--",
        &env.count_cmd("count"),
    ])
    .db(&url)
    .expect_code(125)
    .stderr_starts_with("idem: could not connect to ledger")
    // The password is never printed.
    .stderr_lacks("s3cret");
    assert_eq!(env.count("count"), 0);
}

#[test]
fn postgres_fresh_database_migrated_by_many_at_once() {
    let Some(pg) = Pg::new("postgres_fresh_database_migrated_by_many_at_once") else {
        return;
    };
    for round in 0..5 {
        let db = format!("fresh{round}");
        pg.server.sql("postgres", &format!("CREATE DATABASE {db}"));
        let url = pg.server.url_of(&db);
        let children: Vec<Child> = (0..2)
            .map(|index| {
                pg.idem(["run", "--key", &format!("k{index}"), "--", "true"])
                    .env("IDEM_DB", &url)
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            assert_code(&child.wait_with_output().unwrap(), 0);
        }
    }
}

#[test]
fn postgres_heartbeat_keeps_a_run_past_its_lease() {
    let Some(pg) = Pg::new("postgres_heartbeat_keeps_a_run_past_its_lease") else {
        return;
    };
    let then = format!("sleep 4; {}", pg.count_cmd("count"));
    // The owner is on another host, so only its lease tells it is alive.
    let Some(mut owner) = pg.owner_on_another_host("long", "1s", &then, Stdio::piped()) else {
        return;
    };
    let script = format!("touch '{}'; {then}", pg.env.path("started").display());
    // Four leases long: every try from this host meets a live claim.
    let mut tries = 0;
    while owner.try_wait().unwrap().is_none() && tries < 100 {
        let output = pg.run(["run", "--key", "long", "--shell", "--", &script]);
        if owner.try_wait().unwrap().is_some() {
            break;
        }
        assert_code(&output, 75);
        tries += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        tries >= 3,
        "the owner ended too soon to tell ({tries} tries)"
    );
    let output = owner.wait_with_output().unwrap();
    assert_code(&output, 0);
    assert_eq!(pg.count("count"), 1);
    let runs = pg.list_json();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[0]["host"], "host-a");
}

#[test]
fn postgres_takeover_after_the_owner_vanished() {
    let Some(pg) = Pg::new("postgres_takeover_after_the_owner_vanished") else {
        return;
    };
    let Some(mut owner) = pg.owner_on_another_host("job", "2s", "exec sleep 600", Stdio::null())
    else {
        return;
    };
    // The owner (and with it its command) vanishes without a word.
    owner.kill().unwrap();
    owner.wait().unwrap();

    let second = format!(
        "echo \"recovered=$IDEM_RECOVERED\" >> '{}'",
        pg.env.path("count").display()
    );
    let output = pg.run([
        "run", "--key", "job", "--wait", "60s", "--lease", "2s", "--shell", "--", &second,
    ]);
    assert_code(&output, 0);
    assert_eq!(
        std::fs::read_to_string(pg.env.path("count")).unwrap(),
        "recovered=1\n"
    );
    let runs = pg.list_json();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[1]["status"], "abandoned");
    assert_eq!(runs[1]["host"], "host-a");
}

#[test]
fn postgres_lost_database_stops_the_command_before_the_lease_ends() {
    let Some(mut pg) = Pg::new("postgres_lost_database_stops_the_command_before_the_lease_ends")
    else {
        return;
    };
    let started = pg.env.path("started");
    let script = format!("touch '{}'; exec sleep 600", started.display());
    let mut owner = pg
        .idem([
            "run", "--key", "k", "--lease", "3s", "--shell", "--", &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_start(&started, &mut owner);
    // Once the attempt's start is recorded, only the heartbeat still talks
    // to the database while the command runs.
    wait_for_attempt(&pg);
    let stopped_at = Instant::now();
    pg.server.stop();
    let output = owner.wait_with_output().unwrap();
    // Loose bound: stopped within the lease, not after the command's 600s.
    assert!(stopped_at.elapsed() < Duration::from_secs(60));
    assert_code(&output, 125);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("could not renew the lease on key k"),
        "{stderr}"
    );
    assert!(stderr.contains("does not run unowned"), "{stderr}");
}

#[test]
fn postgres_outcome_recorded_after_the_server_restarted() {
    let Some(pg) = Pg::new("postgres_outcome_recorded_after_the_server_restarted") else {
        return;
    };
    let started = pg.env.path("started");
    let go = pg.env.path("go");
    let script = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; {}",
        started.display(),
        go.display(),
        pg.count_cmd("count")
    );
    let mut owner = pg
        .idem(["run", "--key", "k", "--shell", "--", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_start(&started, &mut owner);
    wait_for_attempt(&pg);
    // Every connection is cut while the command runs.
    pg.server.restart();
    std::fs::write(&go, "").unwrap();
    assert_code(&owner.wait_with_output().unwrap(), 0);
    assert_eq!(pg.count("count"), 1);
    assert_eq!(pg.list_json()[0]["status"], "succeeded");
}

#[test]
fn postgres_tls_and_passwords_where_the_url_asks() {
    let Some(server) = Server::start_tcp("postgres_tls_and_passwords_where_the_url_asks") else {
        return;
    };
    let env = Env::new();
    let port = server.port.unwrap();
    let run = |url: &str, key: &str, vars: &[(&str, &str)]| {
        let mut run = env
            .cmd(["run", "--key", key, "--", "true"])
            .db(url)
            .env_remove("PGPASSWORD");
        for (name, value) in vars {
            run = run.env(name, value);
        }
        run
    };
    let ca = server.ca();
    let ca = ca.to_str().unwrap();
    let tls = format!("postgresql://postgres@localhost:{port}/idem?sslmode=require");

    // No password anywhere: refused, nothing runs.
    run(&tls, "a", &[("PGSSLROOTCERT", ca)])
        .expect_code(125)
        .stderr_has("password");

    // From PGPASSWORD, over TLS verified against the test CA.
    run(
        &tls,
        "b",
        &[("PGSSLROOTCERT", ca), ("PGPASSWORD", crate::pg::PASSWORD)],
    )
    .succeeds();

    // The certificate is checked: without the CA, refused.
    run(&tls, "c", &[("PGPASSWORD", crate::pg::PASSWORD)])
        .expect_code(125)
        .stderr_has("certificate");

    // From ~/.pgpass (HOME is the test's dir), only while private.
    let pgpass = env.path(".pgpass");
    std::fs::write(
        &pgpass,
        format!("localhost:{port}:idem:postgres:{}\n", crate::pg::PASSWORD),
    )
    .unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).unwrap();
    run(&tls, "d", &[("PGSSLROOTCERT", ca)]).expect_code(125);
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    run(&tls, "d", &[("PGSSLROOTCERT", ca)]).succeeds();

    // From the URL, in the clear where the URL does not ask for TLS; the
    // password is never printed.
    let plain = format!(
        "postgresql://postgres:{}@localhost:{port}/idem",
        crate::pg::PASSWORD
    );
    run(&plain, "e", &[]).succeeds();
    let path = env.cmd(["ledger", "path"]).db(&plain).succeeds().stdout();
    assert_eq!(
        path.trim(),
        format!("postgresql://postgres:***@localhost:{port}/idem")
    );
    env.cmd(["ledger", "list"])
        .db(&plain)
        .succeeds()
        .stdout_lacks(crate::pg::PASSWORD);
    let wrong = format!("postgresql://postgres:nope@localhost:{port}/idem");
    run(&wrong, "f", &[]).expect_code(125).stderr_lacks("nope");
}

#[test]
fn postgres_an_owner_on_this_host_is_judged_by_its_lease_alone() {
    // A pid says nothing across PID namespaces (two containers with one
    // host name): a shared ledger judges every owner by its lease.
    let Some(pg) = Pg::new("postgres_an_owner_on_this_host_is_judged_by_its_lease_alone") else {
        return;
    };
    if !crate::liveness::require_root_namespaces() {
        return;
    }
    let started = pg.env.path("started");
    let first = format!("touch '{}'; exec sleep 600", started.display());
    let template = pg.idem([
        "run", "--key", "job", "--lease", "3s", "--shell", "--", &first,
    ]);
    let mut owner = crate::liveness::in_pid_namespace(&template)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_start(&started, &mut owner);
    wait_for_attempt(&pg);
    let count = pg.count_cmd("count");
    let busy = pg.run(["run", "--key", "job", "--shell", "--", &count]);
    assert_code(&busy, 75);
    // Killed with everything it ran, its lease runs out and the key is
    // taken over, told that the last run was abandoned.
    owner.kill().unwrap();
    owner.wait().unwrap();
    let began = Instant::now();
    let second = format!(
        "echo \"recovered=$IDEM_RECOVERED\" >> '{}'",
        pg.env.path("count").display()
    );
    let output = pg.run([
        "run", "--key", "job", "--wait", "60s", "--shell", "--", &second,
    ]);
    assert_code(&output, 0);
    eprintln!("takeover after {:?}", began.elapsed());
    assert_eq!(
        std::fs::read_to_string(pg.env.path("count")).unwrap(),
        "recovered=1\n"
    );
    assert_eq!(pg.list_json()[1]["status"], "abandoned");
}

/// `idem ledger export` of `env`'s ledger (the SQLite one unless `db`).
#[track_caller]
fn export_of(env: &Env, db: Option<&str>) -> Vec<u8> {
    let mut export = env.cmd(["ledger", "export"]);
    if let Some(db) = db {
        export = export.db(db);
    }
    export.succeeds().into_output().stdout
}

#[test]
fn postgres_import_moves_a_sqlite_ledger() {
    let Some(pg) = Pg::new("postgres_import_moves_a_sqlite_ledger") else {
        return;
    };
    // A SQLite ledger (in the same Env) with non-UTF-8 argv and output, a
    // retried failure and a forgotten key.
    let local = &pg.env;
    local
        .cmd(["run", "--key", "bin", "--", "printf"])
        .arg(std::ffi::OsStr::from_bytes(b"\xff\xfe-out\n"))
        .succeeds();
    let flaky = "echo try >&2; exit 3";
    local
        .cmd([
            "run",
            "--key",
            "flaky",
            "--retries",
            "1",
            "--backoff",
            "1ms",
            "--shell",
            "--",
            flaky,
        ])
        .expect_code(3);
    let count = pg.count_cmd("count");
    local
        .cmd(["run", "--key", "done", "--shell", "--", &count])
        .succeeds();
    local
        .cmd(["run", "--key", "dropped", "--", "true"])
        .succeeds();
    local.cmd(["ledger", "forget", "dropped"]).succeeds();
    let stream = export_of(local, None);
    let file = local.path("export.jsonl");
    std::fs::write(&file, &stream).unwrap();

    for (round, expected) in [
        (
            0,
            "imported 4 runs (0 updated, 0 already here); 3 became their keys' deciding runs\n",
        ),
        (
            1,
            "imported 0 runs (0 updated, 4 already here); 0 became their keys' deciding runs\n",
        ),
    ] {
        pg.cmd(["ledger", "import", file.to_str().unwrap()])
            .succeeds()
            .stdout_is(expected);
        assert_eq!(
            export_of(local, Some(&pg.url())),
            stream,
            "the move is lossless (round {round})"
        );
    }
    assert_eq!(pg.list_json(), local.list_json());
    let show = pg
        .cmd(["ledger", "show", "bin", "--json"])
        .succeeds()
        .json();
    assert_eq!(show, local.show_json("bin"));

    // The shared ledger decides as the local one did.
    pg.cmd(["run", "--key", "done", "--shell", "--", &count])
        .succeeds();
    assert_eq!(pg.count("count"), 1);
    pg.cmd(["run", "--key", "dropped", "--shell", "--", &count])
        .succeeds();
    assert_eq!(pg.count("count"), 2);
}

/// The `IDEM_FENCE` of each run that noted it, in order.
fn fences_seen(env: &Env) -> Vec<i64> {
    std::fs::read_to_string(env.path("fences"))
        .unwrap_or_default()
        .lines()
        .map(|line| line.parse().expect("a fence"))
        .collect()
}

#[test]
fn postgres_fences_go_on_growing_in_a_ledger_moved_by_export_and_import() {
    let Some(pg) = Pg::new("postgres_fences_go_on_growing_in_a_ledger_moved_by_export_and_import")
    else {
        return;
    };
    let note = format!(
        "echo \"$IDEM_FENCE\" >> '{}'",
        pg.env.path("fences").display()
    );
    let claim = |url: &str| {
        pg.env
            .cmd(["run", "--key", "k", "--force", "--shell", "--", &note])
            .db(url)
            .succeeds();
    };
    for _ in 0..3 {
        claim(&pg.url());
    }
    let mut old = PostgresLedger::open(&pg.url(), "old").unwrap();
    let highest = old.highest_fence().unwrap();
    assert_eq!(fences_seen(&pg.env).last(), Some(&highest));

    pg.server.sql("postgres", "CREATE DATABASE moved");
    let moved = pg.server.url_of("moved");
    let file = pg.env.path("export.jsonl");
    std::fs::write(&file, export_of(&pg.env, Some(&pg.url()))).unwrap();
    pg.env
        .cmd(["ledger", "import", file.to_str().unwrap()])
        .db(&moved)
        .succeeds();
    // What import does with the highest fence an export carries.
    let mut new = PostgresLedger::open(&moved, "moved").unwrap();
    new.raise_fence(highest).unwrap();
    new.raise_fence(1).unwrap();
    assert_eq!(
        new.highest_fence().unwrap(),
        highest,
        "a raise never lowers"
    );
    claim(&moved);
    let after = *fences_seen(&pg.env).last().unwrap();
    assert!(
        after > highest,
        "fence {after} after the move, {highest} before"
    );
}

#[test]
fn postgres_a_count_below_zero_is_an_error_naming_the_ledger() {
    let Some(pg) = Pg::new("postgres_a_count_below_zero_is_an_error_naming_the_ledger") else {
        return;
    };
    pg.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    // idem never writes one; a ledger changed by hand may hold one all the
    // same, and it must not be read as some other count.
    pg.server.sql("idem", "UPDATE idem.runs SET attempts = -3");
    for args in [
        &["ledger", "list"][..],
        &["ledger", "show", "k"],
        &["ledger", "export"],
        &["run", "--key", "k", "--", "true"],
    ] {
        pg.env
            .cmd(args.iter().copied())
            .db(pg.url())
            .expect_code(125)
            .stderr_has("ledger postgresql://")
            .stderr_has("a stored value cannot be read (the number -3 is out of range)")
            .stderr_one_line();
    }
    pg.server.sql(
        "idem",
        "UPDATE idem.runs SET attempts = 1; UPDATE idem.jobs SET failures = -1",
    );
    pg.cmd(["status"])
        .expect_code(125)
        .stderr_has("a stored value cannot be read (the number -1 is out of range)")
        .stderr_one_line();
}

#[test]
fn postgres_a_run_that_lost_its_claim_never_overwrites_the_newer_one() {
    let Some(pg) = Pg::new("postgres_a_run_that_lost_its_claim_never_overwrites_the_newer_one")
    else {
        return;
    };
    let Some(owner) = pg.owner_on_another_host("k", "1s", "exec sleep 600", Stdio::piped()) else {
        return;
    };
    wait_for_attempt(&pg);
    // The owner freezes (a paused VM, a stalled host): no heartbeat, and
    // its lease runs out; a run on this host takes the key over.
    let frozen = nix::unistd::Pid::from_raw(owner.id() as i32);
    nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let second = format!("echo second >> '{}'", pg.env.path("count").display());
    let output = pg.run([
        "run", "--key", "k", "--wait", "60s", "--shell", "--", &second,
    ]);
    nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert_code(&output, 0);

    // Thawed, the old owner stops its command and records nothing.
    let thawed = owner.wait_with_output().unwrap();
    assert_code(&thawed, 125);
    let stderr = text(&thawed.stderr);
    assert!(stderr.contains("does not run unowned"), "{stderr}");
    assert!(
        stderr.contains("the command exited 143, but idem could not record it"),
        "{stderr}"
    );
    let runs = pg.list_json();
    assert_eq!(runs[0]["status"], "succeeded");
    assert_ne!(runs[0]["host"], "host-a");
    assert_eq!(runs[1]["status"], "abandoned");
    assert_eq!(runs[1]["host"], "host-a");
    assert_eq!(pg.count("count"), 1);
}

#[test]
fn postgres_a_stuck_lock_holder_makes_a_claim_give_up() {
    let Some(pg) = Pg::new("postgres_a_stuck_lock_holder_makes_a_claim_give_up") else {
        return;
    };
    pg.cmd(["run", "--key", "k", "--force", "--", "true"])
        .succeeds();
    // A session that took the key's row and went quiet mid-transaction.
    let mut stuck = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
    let mut tx = stuck.transaction().unwrap();
    tx.execute("SELECT 1 FROM idem.keys WHERE key = 'k' FOR UPDATE", &[])
        .unwrap();
    let count = pg.count_cmd("count");
    let run = || pg.cmd(["run", "--key", "k", "--force", "--shell", "--", &count]);
    run()
        .expect_code(125)
        .stderr_has("another session held its row for 10s");
    assert_eq!(pg.count("count"), 0);
    tx.rollback().unwrap();
    run().succeeds();
    assert_eq!(pg.count("count"), 1);
}

#[test]
fn postgres_doctor_checks_a_shared_ledger_and_changes_nothing() {
    let Some(pg) = Pg::new("postgres_doctor_checks_a_shared_ledger_and_changes_nothing") else {
        return;
    };
    let doctor = |url: &str| {
        let output = pg
            .idem(["doctor", "--json"])
            .env("IDEM_DB", url)
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("doctor --json prints JSON: {}", text(&output.stderr)));
        (output.status.code(), report)
    };
    let status = |report: &serde_json::Value, name: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|check| check["check"] == name)
            .unwrap_or_else(|| panic!("no check {name} in {report}"))["status"]
            .clone()
    };

    // A database idem never used: a warning, and doctor creates nothing.
    for _ in 0..2 {
        let (code, report) = doctor(&pg.url());
        assert_eq!(code, Some(0), "{report}");
        assert_eq!(status(&report, "connection"), "ok");
        assert_eq!(status(&report, "schema"), "warn");
        assert_eq!(report["schema_version"], 0, "doctor created the schema");
    }

    // In use, with a key whose owner and command were killed together.
    assert_code(&pg.run(["run", "--key", "done", "--", "true"]), 0);
    let (code, report) = doctor(&pg.url());
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["healthy"], true);
    for name in ["connection", "schema", "rights", "running keys"] {
        assert_eq!(status(&report, name), "ok", "{name}: {report}");
    }
    let mut owner = {
        use std::os::unix::process::CommandExt;
        // A shared ledger judges an owner by its lease alone.
        pg.idem([
            "run", "--key", "stuck", "--lease", "2s", "--", "sleep", "600",
        ])
        .process_group(0)
        .spawn()
        .unwrap()
    };
    eventually(
        "the attempt to be recorded",
        Duration::from_secs(60),
        || {
            let latest = &pg.list_json()[0];
            latest["key"] == "stuck" && latest["attempts"] == 1
        },
    );
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(owner.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    owner.wait().unwrap();
    // Its command is stopped by its guardian, and its lease runs out.
    let report = eventually(
        "doctor to find the key stuck",
        Duration::from_secs(30),
        || {
            let (code, report) = doctor(&pg.url());
            (code == Some(1)).then_some(report)
        },
    );
    assert_eq!(status(&report, "running keys"), "problem", "{report}");
    assert_eq!(report["stuck_keys"], serde_json::json!(["stuck"]));
    assert_eq!(
        pg.list_json()[0]["status"],
        "running",
        "doctor changed nothing"
    );

    // A role that may read but not write is told what to grant.
    pg.server.sql(
        "idem",
        "CREATE ROLE reader LOGIN;
         GRANT USAGE ON SCHEMA idem TO reader;
         GRANT SELECT ON ALL TABLES IN SCHEMA idem TO reader;",
    );
    let reader = pg.url().replacen("postgres@", "reader@", 1);
    let (code, report) = doctor(&reader);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(status(&report, "rights"), "problem", "{report}");
    assert_eq!(report["role"], "reader");
    assert!(report
        .to_string()
        .contains("GRANT USAGE ON SCHEMA idem TO reader"));

    // A server that is not there.
    let (code, report) = doctor("postgres://127.0.0.1:1/idem?connect_timeout=5");
    assert_eq!(code, Some(1));
    assert_eq!(status(&report, "connection"), "problem", "{report}");
}

#[test]
fn postgres_url_gaps_are_filled_from_libpq_variables() {
    let Some(pg) = Pg::new("postgres_url_gaps_are_filled_from_libpq_variables") else {
        return;
    };
    let count = pg.count_cmd("count");
    let run = |url: &str| {
        pg.cmd(["run", "--key", "k", "--shell", "--", &count])
            .db(url)
            .env("PGHOST", pg.server.socket_dir())
            .env("PGUSER", "postgres")
            .env("PGDATABASE", "idem")
    };
    run("postgresql:///idem").succeeds();
    // Host, user and database all from the environment: the same ledger.
    run("postgresql://").succeeds();
    assert_eq!(pg.count("count"), 1);
    // What the URL says wins over the variables.
    pg.cmd(["ledger", "list"])
        .env("PGHOST", "/nonexistent")
        .env("PGUSER", "nobody")
        .env("PGDATABASE", "nope")
        .succeeds()
        .stdout_has("succeeded");
}

fn guarded(pg: &Pg, seconds: u32) -> String {
    crate::util::guarded(&pg.env, seconds)
}

#[test]
fn postgres_a_frozen_idem_has_its_run_stopped_before_the_lease_ends() {
    let Some(pg) = Pg::new("postgres_a_frozen_idem_has_its_run_stopped_before_the_lease_ends")
    else {
        return;
    };
    let first = guarded(&pg, 600);
    let mut owner = pg
        .idem([
            "run", "--key", "k", "--lease", "3s", "--shell", "--", &first,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    crate::util::wait_for_count(&pg.env, 1, &mut owner);
    wait_for_attempt(&pg);
    // idem alone is frozen: its guardian must stop the command by itself,
    // before another host may take the key over.
    let frozen = nix::unistd::Pid::from_raw(owner.id() as i32);
    nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let began = Instant::now();
    let second = guarded(&pg, 0);
    let output = pg.run([
        "run", "--key", "k", "--wait", "60s", "--shell", "--", &second,
    ]);
    eprintln!("taken over {:?} after the freeze", began.elapsed());
    nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert_code(&output, 0);
    let _ = owner.wait();
    assert_eq!(pg.count("count"), 2);
    assert_eq!(pg.count("overlaps"), 0, "the frozen run's command ran on");
}

#[test]
fn postgres_a_killed_idem_takes_its_whole_run_with_it() {
    let Some(pg) = Pg::new("postgres_a_killed_idem_takes_its_whole_run_with_it") else {
        return;
    };
    // A grandchild in a session of its own, then idem alone is SIGKILLed.
    let first = format!("setsid sh -c \"{}\" & sleep 600", guarded(&pg, 600));
    let mut owner = pg
        .idem([
            "run", "--key", "k", "--lease", "3s", "--shell", "--", &first,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    crate::util::wait_for_count(&pg.env, 1, &mut owner);
    wait_for_attempt(&pg);
    owner.kill().unwrap();
    owner.wait().unwrap();
    let began = Instant::now();
    let output = pg.run([
        "run",
        "--key",
        "k",
        "--wait",
        "60s",
        "--shell",
        "--",
        &guarded(&pg, 0),
    ]);
    eprintln!("taken over {:?} after the SIGKILL", began.elapsed());
    assert_code(&output, 0);
    assert_eq!(pg.count("count"), 2);
    assert_eq!(pg.count("overlaps"), 0, "the grandchild ran on");
}

#[test]
fn postgres_a_waiter_rides_out_a_server_restart() {
    let Some(pg) = Pg::new("postgres_a_waiter_rides_out_a_server_restart") else {
        return;
    };
    let started = pg.env.path("started");
    let go = pg.env.path("go");
    let first = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; exit 1",
        started.display(),
        go.display()
    );
    let mut owner = pg
        .idem([
            "run",
            "--key",
            "k",
            "--retries",
            "0",
            "--shell",
            "--",
            &first,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_start(&started, &mut owner);
    wait_for_attempt(&pg);
    let count = pg.count_cmd("count");
    let waiter = pg
        .idem([
            "run", "--key", "k", "--wait", "60s", "--shell", "--", &count,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    pg.server.restart();
    std::fs::write(&go, "").unwrap();
    assert_code(&owner.wait_with_output().unwrap(), 1);
    // The owner failed: the waiter claims the key and runs it, once.
    assert_code(&waiter.wait_with_output().unwrap(), 0);
    assert_eq!(pg.count("count"), 1);
}

#[test]
fn postgres_a_lease_counts_from_when_the_claim_is_written() {
    let Some(pg) = Pg::new("postgres_a_lease_counts_from_when_the_claim_is_written") else {
        return;
    };
    assert_code(&pg.run(["run", "--key", "k", "--", "true"]), 0);
    // Another session holds the key's row for longer than the lease, so
    // the claim waits for it; its lease must not be spent when it commits.
    let mut session = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
    let mut tx = session.transaction().unwrap();
    tx.execute("SELECT 1 FROM idem.keys WHERE key = 'k' FOR UPDATE", &[])
        .unwrap();
    let first = guarded(&pg, 3);
    let mut owner = pg
        .idem([
            "run", "--key", "k", "--force", "--lease", "2s", "--shell", "--", &first,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    tx.commit().unwrap();
    crate::util::wait_for_count(&pg.env, 1, &mut owner);
    let second = guarded(&pg, 0);
    let output = pg.run(["run", "--key", "k", "--force", "--shell", "--", &second]);
    assert_code(&output, 75);
    assert!(owner.wait().unwrap().success());
    assert_eq!(pg.count("overlaps"), 0);
}

/// Kills its child when dropped, also when the test fails first.
struct KilledWhenDropped<'a>(&'a mut Child);

impl Drop for KilledWhenDropped<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
    }
}

/// A network namespace holding a veth link to this one, so that a test can
/// cut the network between idem and the server; gone when dropped.
struct Link {
    namespace: String,
    outside: String,
}

impl Link {
    /// `10.N.0.1` here, `10.N.0.2` inside; `None` (or a failure under CI)
    /// when namespaces cannot be made.
    fn new(n: u8) -> Option<Link> {
        let pid = std::process::id();
        let link = Link {
            namespace: format!("idem-part-{pid}"),
            outside: format!("idp{}a", pid % 100_000),
        };
        let inside = format!("idp{}b", pid % 100_000);
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|status| status.success())
        };
        let made = ip(&["netns", "add", &link.namespace])
            && ip(&[
                "link",
                "add",
                &link.outside,
                "type",
                "veth",
                "peer",
                "name",
                &inside,
            ])
            && ip(&["link", "set", &inside, "netns", &link.namespace])
            && ip(&[
                "addr",
                "add",
                &format!("10.{n}.0.1/24"),
                "dev",
                &link.outside,
            ])
            && ip(&["link", "set", &link.outside, "up"])
            && ip(&[
                "netns",
                "exec",
                &link.namespace,
                "ip",
                "addr",
                "add",
                &format!("10.{n}.0.2/24"),
                "dev",
                &inside,
            ])
            && ip(&[
                "netns",
                "exec",
                &link.namespace,
                "ip",
                "link",
                "set",
                &inside,
                "up",
            ]);
        if !require(made, "`ip netns` and veth links (root, iproute2)") {
            return None;
        }
        Some(link)
    }

    fn cut(&self) {
        let status = Command::new("ip")
            .args(["link", "set", &self.outside, "down"])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.outside])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.namespace])
            .status();
    }
}

#[test]
fn postgres_a_partitioned_idem_stops_its_command_and_exits_in_bounded_time() {
    let Some(mut pg) =
        Pg::new("postgres_a_partitioned_idem_stops_its_command_and_exits_in_bounded_time")
    else {
        return;
    };
    let Some(link) = Link::new(77) else {
        return;
    };
    let port = pg.server.listen_on("10.77.0.1");
    let url = format!("postgresql://postgres@10.77.0.1:{port}/idem");
    let pid_file = pg.env.path("pid");
    let script = format!("echo $$ > '{}'; exec sleep 600", pid_file.display());
    let template = pg.idem([
        "run", "--key", "p", "--lease", "3s", "--shell", "--", &script,
    ]);
    let mut owner = crate::util::wrapped(&template, &["ip", "netns", "exec", &link.namespace])
        .env("IDEM_DB", &url)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the command to start", Duration::from_secs(30), || {
        if pid_file.exists() {
            return true;
        }
        if owner.try_wait().unwrap().is_some() {
            let mut stderr = String::new();
            let _ = owner.stderr.take().unwrap().read_to_string(&mut stderr);
            panic!("idem ended early: {stderr}");
        }
        false
    });
    wait_for_attempt(&pg);
    let command: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cut = Instant::now();
    link.cut();
    // The command is stopped before its lease ends, by idem or its guardian.
    eventually(
        "the command to stop (it ran on)",
        Duration::from_secs(30).saturating_sub(cut.elapsed()),
        || nix::sys::signal::kill(nix::unistd::Pid::from_raw(command), None).is_err(),
    );
    let stopped = cut.elapsed();
    {
        // A failed wait leaves no idem behind in the namespace.
        let owner = KilledWhenDropped(&mut owner);
        eventually(
            "idem to exit (it still waits for a partitioned server)",
            Duration::from_secs(90).saturating_sub(cut.elapsed()),
            || owner.0.try_wait().unwrap().is_some(),
        );
    }
    let exited = cut.elapsed();
    let output = owner.wait_with_output().unwrap();
    eprintln!("partitioned: command stopped after {stopped:?}, idem exited after {exited:?}");
    assert!(
        stopped < Duration::from_secs(3),
        "stopped after {stopped:?}"
    );
    assert!(exited < Duration::from_secs(60), "exited after {exited:?}");
    assert_code(&output, 125);
    assert!(
        text(&output.stderr).contains("does not run unowned"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn postgres_since_and_prune_cutoffs_come_from_the_databases_clock() {
    let Some(pg) = Pg::new("postgres_since_and_prune_cutoffs_come_from_the_databases_clock") else {
        return;
    };
    if !crate::util::have_faketime() {
        return;
    }
    assert_code(&pg.run(["run", "--key", "k", "--", "true"]), 0);
    assert_code(&pg.run(["run", "--key", "k", "--force", "--", "true"]), 0);
    // This host's clock runs two hours ahead of the database's.
    let run = |args: &[&str]| {
        let mut template = pg.idem(["ledger"]);
        template.args(args);
        crate::util::wrapped(&template, &["faketime", "-f", "+2h"])
            .output()
            .unwrap()
    };
    let listed = run(&["list", "--json", "--since", "1h"]);
    assert_code(&listed, 0);
    let runs: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(runs.as_array().map(Vec::len), Some(2), "{runs}");
    let pruned = run(&["prune", "--older-than", "1h"]);
    assert_code(&pruned, 0);
    assert_eq!(pg.list_json().as_array().map(Vec::len), Some(2));
}
