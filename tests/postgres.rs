//! `idem run` and `idem ledger` on a shared PostgreSQL ledger, against a
//! real server each test starts for itself (see `pg.rs`).

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::pg::Server;
use crate::util::{assert_code, text, Env};

/// An isolated environment whose ledger is a fresh PostgreSQL database.
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

    fn idem<const N: usize>(&self, args: [&str; N]) -> Command {
        let mut command = self.env.idem(args);
        command.env("IDEM_DB", self.url());
        command
    }

    fn run<const N: usize>(&self, args: [&str; N]) -> Output {
        self.idem(args).output().expect("idem runs")
    }

    /// `idem ARGS` as if on another host: its own UTS namespace, renamed.
    /// Needs root (CI runs as root); `None` says the test is skipped.
    fn on_host<const N: usize>(&self, host: &str, args: [&str; N]) -> Option<Command> {
        let probe = Command::new("unshare")
            .args(["--uts", "true"])
            .stderr(Stdio::null())
            .status();
        if !probe.is_ok_and(|status| status.success()) {
            let why = "`unshare --uts` is not available (it needs root)";
            if std::env::var_os("CI").is_some() {
                panic!("{why}");
            }
            eprintln!("skipped: {why}");
            return None;
        }
        let template = self.idem(args);
        let mut command = Command::new("unshare");
        command
            .args(["--uts", "sh", "-c", "hostname \"$0\" && exec \"$@\"", host])
            .arg(template.get_program())
            .args(template.get_args())
            .current_dir(self.env.dir.path())
            .stdin(Stdio::null());
        for (name, value) in template.get_envs() {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        Some(command)
    }

    fn list_json(&self) -> serde_json::Value {
        let output = self.run(["ledger", "list", "--json", "--limit", "100000"]);
        assert_code(&output, 0);
        serde_json::from_slice(&output.stdout).expect("ledger list --json prints JSON")
    }

    fn count_cmd(&self, name: &str) -> String {
        self.env.count_cmd(name)
    }

    fn count(&self, name: &str) -> usize {
        self.env.count(name)
    }
}

/// Waits (bounded) until `path` exists.
fn wait_for_file(path: &std::path::Path, child: &mut Child) {
    let until = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the owner exited ({status}) before its command started");
        }
        assert!(Instant::now() < until, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until the latest run's first attempt is recorded.
fn wait_for_attempt(pg: &Pg) {
    let until = Instant::now() + Duration::from_secs(60);
    while pg.list_json()[0]["attempts"] != 1 {
        assert!(Instant::now() < until, "the attempt was never recorded");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn postgres_runs_once_then_skips() {
    let Some(pg) = Pg::new("postgres_runs_once_then_skips") else {
        return;
    };
    let count = pg.count_cmd("count");
    for _ in 0..3 {
        assert_code(
            &pg.run(["run", "--key", "backup", "--shell", "--", &count]),
            0,
        );
    }
    assert_eq!(pg.count("count"), 1);
    let runs = pg.list_json();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    assert_eq!(runs[0]["key"], "backup");
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[0]["exit_code"], 0);
    assert_eq!(runs[0]["attempts"], 1);
    assert_eq!(runs[0]["shell"], true);

    // A different command: refused; a failure runs again; --force runs.
    assert_code(&pg.run(["run", "--key", "backup", "--", "true"]), 65);
    let fail = format!("{count}; exit 7");
    for _ in 0..2 {
        assert_code(
            &pg.run([
                "run",
                "--key",
                "f",
                "--retries",
                "1",
                "--backoff",
                "10ms",
                "--shell",
                "--",
                &fail,
            ]),
            7,
        );
    }
    assert_eq!(pg.count("count"), 5);
    assert_code(
        &pg.run(["run", "--key", "backup", "--force", "--shell", "--", &count]),
        0,
    );
    assert_eq!(pg.count("count"), 6);

    let show = pg.run(["ledger", "show", "f", "--json"]);
    assert_code(&show, 0);
    let show: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(show["status"], "failed");
    assert_eq!(show["exit_code"], 7);
    assert_eq!(show["attempts"], 2);
    assert_eq!(show["attempts_detail"].as_array().unwrap().len(), 2);
    assert_eq!(show["history"].as_array().unwrap().len(), 1);
    let failed = pg.run([
        "ledger", "list", "--json", "--status", "failed", "--key", "f*",
    ]);
    assert_code(&failed, 0);
    let failed: serde_json::Value = serde_json::from_slice(&failed.stdout).unwrap();
    assert_eq!(failed.as_array().unwrap().len(), 2);

    // Output tails and --replay come back from the database.
    assert_code(&pg.run(["run", "--key", "hello", "--", "echo", "hello"]), 0);
    let replay = pg.run(["run", "--key", "hello", "--replay", "--", "echo", "hello"]);
    assert_code(&replay, 0);
    assert_eq!(text(&replay.stdout), "hello\n");
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
    let output = env
        .idem([
            "run",
            "--key",
            "k",
            "--shell",
            "--",
            &env.count_cmd("count"),
        ])
        .env("IDEM_DB", &url)
        .output()
        .unwrap();
    assert_code(&output, 125);
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("idem: could not connect to ledger"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("s3cret"),
        "the password was printed: {stderr}"
    );
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
    let started = pg.env.path("started");
    let script = format!(
        "touch '{}'; sleep 4; {}",
        started.display(),
        pg.count_cmd("count")
    );
    // The owner is on another host, so only its lease tells it is alive.
    let Some(mut owner) = pg.on_host(
        "host-a",
        [
            "run", "--key", "long", "--lease", "1s", "--shell", "--", &script,
        ],
    ) else {
        return;
    };
    let mut owner = owner.stderr(Stdio::piped()).spawn().unwrap();
    wait_for_file(&started, &mut owner);
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
    let started = pg.env.path("started");
    let first = format!("touch '{}'; exec sleep 600", started.display());
    let Some(mut owner) = pg.on_host(
        "host-a",
        [
            "run", "--key", "job", "--lease", "2s", "--shell", "--", &first,
        ],
    ) else {
        return;
    };
    let mut owner = owner.stderr(Stdio::null()).spawn().unwrap();
    wait_for_file(&started, &mut owner);
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
    wait_for_file(&started, &mut owner);
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
    wait_for_file(&started, &mut owner);
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
        let mut command = env.idem(["run", "--key", key, "--", "true"]);
        command.env("IDEM_DB", url).env_remove("PGPASSWORD");
        for (name, value) in vars {
            command.env(name, value);
        }
        command.output().unwrap()
    };
    let ca = server.ca();
    let ca = ca.to_str().unwrap();
    let tls = format!("postgresql://postgres@localhost:{port}/idem?sslmode=require");

    // No password anywhere: refused, nothing runs.
    let output = run(&tls, "a", &[("PGSSLROOTCERT", ca)]);
    assert_code(&output, 125);
    assert!(
        text(&output.stderr).contains("password"),
        "{}",
        text(&output.stderr)
    );

    // From PGPASSWORD, over TLS verified against the test CA.
    let output = run(
        &tls,
        "b",
        &[("PGSSLROOTCERT", ca), ("PGPASSWORD", crate::pg::PASSWORD)],
    );
    assert_code(&output, 0);

    // The certificate is checked: without the CA, refused.
    let output = run(&tls, "c", &[("PGPASSWORD", crate::pg::PASSWORD)]);
    assert_code(&output, 125);
    assert!(
        text(&output.stderr).contains("certificate"),
        "{}",
        text(&output.stderr)
    );

    // From ~/.pgpass (HOME is the test's dir), only while private.
    let pgpass = env.path(".pgpass");
    std::fs::write(
        &pgpass,
        format!("localhost:{port}:idem:postgres:{}\n", crate::pg::PASSWORD),
    )
    .unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_code(&run(&tls, "d", &[("PGSSLROOTCERT", ca)]), 125);
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_code(&run(&tls, "d", &[("PGSSLROOTCERT", ca)]), 0);

    // From the URL, in the clear where the URL does not ask for TLS; the
    // password is never printed.
    let plain = format!(
        "postgresql://postgres:{}@localhost:{port}/idem",
        crate::pg::PASSWORD
    );
    assert_code(&run(&plain, "e", &[]), 0);
    let path = env
        .idem(["ledger", "path"])
        .env("IDEM_DB", &plain)
        .output()
        .unwrap();
    assert_code(&path, 0);
    assert_eq!(
        text(&path.stdout).trim(),
        format!("postgresql://postgres:***@localhost:{port}/idem")
    );
    let list = env
        .idem(["ledger", "list"])
        .env("IDEM_DB", &plain)
        .output()
        .unwrap();
    assert_code(&list, 0);
    assert!(!text(&list.stdout).contains(crate::pg::PASSWORD));
    let wrong = format!("postgresql://postgres:nope@localhost:{port}/idem");
    let output = run(&wrong, "f", &[]);
    assert_code(&output, 125);
    assert!(
        !text(&output.stderr).contains("nope"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn postgres_an_owner_on_this_host_is_judged_by_its_lease_alone() {
    // A pid says nothing across PID namespaces (two containers with one
    // host name): a shared ledger judges every owner by its lease.
    let Some(pg) = Pg::new("postgres_an_owner_on_this_host_is_judged_by_its_lease_alone") else {
        return;
    };
    crate::liveness::require_root_namespaces();
    let started = pg.env.path("started");
    let first = format!("touch '{}'; exec sleep 600", started.display());
    let template = pg.idem([
        "run", "--key", "job", "--lease", "3s", "--shell", "--", &first,
    ]);
    let mut owner = crate::liveness::in_pid_namespace(&template)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&started, &mut owner);
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

#[test]
fn postgres_waiter_adopts_the_outcome_and_ttl_expires() {
    let Some(pg) = Pg::new("postgres_waiter_adopts_the_outcome_and_ttl_expires") else {
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
        .spawn()
        .unwrap();
    wait_for_file(&started, &mut owner);
    assert_code(&pg.run(["run", "--key", "k", "--shell", "--", &script]), 75);
    let waiter = pg
        .idem([
            "run", "--key", "k", "--wait", "2m", "--shell", "--", &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::write(&go, "").unwrap();
    assert_code(&owner.wait_with_output().unwrap(), 0);
    assert_code(&waiter.wait_with_output().unwrap(), 0);
    assert_eq!(pg.count("count"), 1, "the waiter adopted the success");
    // A success counts for --ttl only.
    std::thread::sleep(Duration::from_millis(1100));
    assert_code(
        &pg.run(["run", "--key", "k", "--ttl", "1s", "--shell", "--", &script]),
        0,
    );
    assert_eq!(pg.count("count"), 2);
}

/// `idem ledger export` of `env`'s ledger (the SQLite one unless `db`).
fn export_of(env: &Env, db: Option<&str>) -> Vec<u8> {
    let mut command = env.idem(["ledger", "export"]);
    if let Some(db) = db {
        command.env("IDEM_DB", db);
    }
    let output = command.output().unwrap();
    assert_code(&output, 0);
    output.stdout
}

#[test]
fn postgres_import_moves_a_sqlite_ledger() {
    let Some(pg) = Pg::new("postgres_import_moves_a_sqlite_ledger") else {
        return;
    };
    // A SQLite ledger (in the same Env) with non-UTF-8 argv and output, a
    // retried failure and a forgotten key.
    let local = &pg.env;
    let binary = local
        .idem(["run", "--key", "bin", "--", "printf"])
        .arg(std::ffi::OsStr::from_bytes(b"\xff\xfe-out\n"))
        .output()
        .unwrap();
    assert_code(&binary, 0);
    let flaky = "echo try >&2; exit 3";
    assert_code(
        &local.run([
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
        ]),
        3,
    );
    let count = pg.count_cmd("count");
    assert_code(
        &local.run(["run", "--key", "done", "--shell", "--", &count]),
        0,
    );
    assert_code(&local.run(["run", "--key", "dropped", "--", "true"]), 0);
    assert_code(&local.run(["ledger", "forget", "dropped"]), 0);
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
        let output = pg.run(["ledger", "import", file.to_str().unwrap()]);
        assert_code(&output, 0);
        assert_eq!(text(&output.stdout), expected, "round {round}");
        assert_eq!(
            export_of(local, Some(&pg.url())),
            stream,
            "the move is lossless (round {round})"
        );
    }
    assert_eq!(pg.list_json(), local.list_json());
    let show = pg.run(["ledger", "show", "bin", "--json"]);
    assert_code(&show, 0);
    let show: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(show, local.show_json("bin"));

    // The shared ledger decides as the local one did.
    assert_code(
        &pg.run(["run", "--key", "done", "--shell", "--", &count]),
        0,
    );
    assert_eq!(pg.count("count"), 1);
    assert_code(
        &pg.run(["run", "--key", "dropped", "--shell", "--", &count]),
        0,
    );
    assert_eq!(pg.count("count"), 2);
}

#[test]
fn postgres_forget_prune_and_metrics() {
    let Some(pg) = Pg::new("postgres_forget_prune_and_metrics") else {
        return;
    };
    let count = pg.count_cmd("count");
    let run = |key: &str, script: &str| {
        pg.run([
            "run",
            "--key",
            key,
            "--retries",
            "0",
            "--force",
            "--shell",
            "--",
            script,
        ])
    };
    assert_code(&run("k", &count), 0);
    assert_code(&run("k", "exit 1"), 1);
    assert_code(&run("k", "exit 2"), 2);
    assert_code(&run("other", "true"), 0);

    let metrics = pg.run(["ledger", "metrics"]);
    assert_code(&metrics, 0);
    let body = text(&metrics.stdout);
    assert!(
        body.contains("idem_consecutive_failures{job=\"k\"} 2"),
        "{body}"
    );
    assert!(
        body.contains("idem_consecutive_failures{job=\"other\"} 0"),
        "{body}"
    );
    assert!(
        body.contains("idem_runs{job=\"k\",status=\"failed\"} 2"),
        "{body}"
    );

    // Prune keeps each key's deciding run.
    let prune = pg.run(["ledger", "prune", "--older-than", "0s"]);
    assert_code(&prune, 0);
    let runs = pg.list_json();
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");
    assert_code(
        &pg.run(["run", "--key", "other", "--shell", "--", &count]),
        65,
    );

    // Forget makes a key run again and keeps its history; --purge drops it.
    assert_code(
        &pg.run(["run", "--key", "once", "--shell", "--", &count]),
        0,
    );
    assert_code(&pg.run(["ledger", "forget", "once"]), 0);
    assert_code(
        &pg.run(["run", "--key", "once", "--shell", "--", &count]),
        0,
    );
    assert_eq!(pg.count("count"), 3);
    assert_code(&pg.run(["ledger", "forget", "--purge", "once"]), 0);
    let show = pg.run(["ledger", "show", "once"]);
    assert_code(&show, 1);
}

#[test]
fn postgres_a_run_that_lost_its_claim_never_overwrites_the_newer_one() {
    let Some(pg) = Pg::new("postgres_a_run_that_lost_its_claim_never_overwrites_the_newer_one")
    else {
        return;
    };
    let started = pg.env.path("started");
    let first = format!("touch '{}'; exec sleep 600", started.display());
    let Some(mut owner) = pg.on_host(
        "host-a",
        [
            "run", "--key", "k", "--lease", "1s", "--shell", "--", &first,
        ],
    ) else {
        return;
    };
    let mut owner = owner.stderr(Stdio::piped()).spawn().unwrap();
    wait_for_file(&started, &mut owner);
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
    assert_code(&pg.run(["run", "--key", "k", "--force", "--", "true"]), 0);
    // A session that took the key's row and went quiet mid-transaction.
    let mut stuck = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
    let mut tx = stuck.transaction().unwrap();
    tx.execute("SELECT 1 FROM idem.keys WHERE key = 'k' FOR UPDATE", &[])
        .unwrap();
    let output = pg.run([
        "run",
        "--key",
        "k",
        "--force",
        "--shell",
        "--",
        &pg.count_cmd("count"),
    ]);
    assert_code(&output, 125);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("another session held its row for 10s"),
        "{stderr}"
    );
    assert_eq!(pg.count("count"), 0);
    tx.rollback().unwrap();
    assert_code(
        &pg.run([
            "run",
            "--key",
            "k",
            "--force",
            "--shell",
            "--",
            &pg.count_cmd("count"),
        ]),
        0,
    );
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
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let latest = &pg.list_json()[0];
        if latest["key"] == "stuck" && latest["attempts"] == 1 {
            break;
        }
        assert!(Instant::now() < until, "the attempt was never recorded");
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(owner.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    owner.wait().unwrap();
    // Its command is stopped by its guardian, and its lease runs out.
    let until = Instant::now() + Duration::from_secs(30);
    let report = loop {
        let (code, report) = doctor(&pg.url());
        if code == Some(1) || Instant::now() > until {
            break report;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
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
        pg.idem(["run", "--key", "k", "--shell", "--", &count])
            .env("IDEM_DB", url)
            .env("PGHOST", pg.server.socket_dir())
            .env("PGUSER", "postgres")
            .env("PGDATABASE", "idem")
            .output()
            .unwrap()
    };
    assert_code(&run("postgresql:///idem"), 0);
    // Host, user and database all from the environment: the same ledger.
    assert_code(&run("postgresql://"), 0);
    assert_eq!(pg.count("count"), 1);
    // What the URL says wins over the variables.
    let listed = pg
        .idem(["ledger", "list"])
        .env("PGHOST", "/nonexistent")
        .env("PGUSER", "nobody")
        .env("PGDATABASE", "nope")
        .output()
        .unwrap();
    assert_code(&listed, 0);
    assert!(text(&listed.stdout).contains("succeeded"));
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
    wait_for_file(&started, &mut owner);
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
        if !crate::liveness::require(made, "`ip netns` and veth links (root, iproute2)") {
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
    let until = Instant::now() + Duration::from_secs(30);
    while !pid_file.exists() {
        if owner.try_wait().unwrap().is_some() {
            let output = owner.wait_with_output().unwrap();
            panic!("idem ended early: {}", text(&output.stderr));
        }
        assert!(Instant::now() < until, "the command never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_for_attempt(&pg);
    let command: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cut = Instant::now();
    link.cut();
    // The command is stopped before its lease ends, by idem or its guardian.
    while nix::sys::signal::kill(nix::unistd::Pid::from_raw(command), None).is_ok() {
        assert!(
            cut.elapsed() < Duration::from_secs(30),
            "the command ran on"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped = cut.elapsed();
    while owner.try_wait().unwrap().is_none() {
        if cut.elapsed() > Duration::from_secs(90) {
            owner.kill().unwrap();
            panic!("idem still waits for a partitioned server after 90s");
        }
        std::thread::sleep(Duration::from_millis(50));
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
    let faketime = Command::new("faketime")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !crate::liveness::require(faketime, "faketime (apt-get install faketime)") {
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
