//! The connection to the server: unreachable, cut, restarted or
//! partitioned away while a run goes on; TLS, passwords and the libpq
//! variables that fill a URL's gaps.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{wait_for_attempt, wait_for_start, Pg};
use crate::pg::Server;
use crate::util::{assert_code, eventually, require, text, Env};

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

/// A password that holds every character that ends a part of a URL,
/// each beside two letters no other part of the URL holds: written as a
/// person would (`@ : ? #` as they are, `/` and `%` encoded), it is the
/// password, the host is the URL's host, and no output shows any of it.
#[test]
fn postgres_a_password_of_url_delimiters_connects_to_the_urls_host_and_never_shows() {
    let Some(server) = Server::start_tcp(
        "postgres_a_password_of_url_delimiters_connects_to_the_urls_host_and_never_shows",
    ) else {
        return;
    };
    let env = Env::new();
    let port = server.port.unwrap();
    server.sql(
        "postgres",
        "CREATE ROLE odd LOGIN SUPERUSER PASSWORD 'Zq@Xy:Wv?Ut#Sr/Qp%'",
    );
    let pieces = ["Zq", "Xy", "Wv", "Ut", "Sr", "Qp"];
    let url = |password: &str| format!("postgresql://odd:{password}@localhost:{port}/idem");
    let good = url("Zq@Xy:Wv?Ut#Sr%2FQp%25");
    let shows_none = |ran: crate::util::Ran| {
        let all = format!("{}{}", ran.stdout(), ran.stderr());
        for piece in pieces {
            assert!(!all.contains(piece), "{piece} shown: {all}");
        }
        ran
    };
    let run = |url: &str, key: &str| {
        env.cmd(["run", "--key", key, "--", "true"])
            .db(url)
            .env_remove("PGPASSWORD")
    };
    shows_none(run(&good, "a").succeeds());
    let path = shows_none(env.cmd(["ledger", "path"]).db(&good).succeeds());
    assert_eq!(
        path.stdout().trim(),
        format!("postgresql://odd:***@localhost:{port}/idem")
    );
    shows_none(env.cmd(["ledger", "list"]).db(&good).succeeds());
    // A wrong password: refused by the server at the URL's host.
    let wrong = url("Zq@Xy:Wv?Ut#Sr%2FQp%25Nn");
    shows_none(run(&wrong, "b").expect_code(125).stderr_has("localhost"));
    // A `/` left unencoded cannot be told from the path: refused, the
    // credentials unshown, and nothing runs.
    let slash = url("Zq@Xy:Wv?Ut#Sr/Qp%25");
    shows_none(run(&slash, "c").expect_code(125).stderr_has("%2F"));
    assert_eq!(server.value("SELECT count(*)::text FROM idem.runs"), "1");
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

/// The pid the owner's command writes to `pid_file` once it starts.
fn command_pid(pid_file: &std::path::Path, owner: &mut Child) -> i32 {
    // The file is there a moment before its pid is written in it.
    let written = || {
        std::fs::read_to_string(pid_file)
            .is_ok_and(|text| text.ends_with('\n') && text.trim().parse::<i32>().is_ok())
    };
    eventually("the command to start", Duration::from_secs(30), || {
        if written() {
            return true;
        }
        if owner.try_wait().unwrap().is_some() {
            let mut stderr = String::new();
            let _ = owner.stderr.take().unwrap().read_to_string(&mut stderr);
            panic!("idem ended early: {stderr}");
        }
        false
    });
    std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
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
    // The pid as `/proc` names it: `$$` is the namespace's in a run's own.
    let script = format!(
        "read -r me _ < /proc/self/stat; echo $me > '{}'; exec sleep 600",
        pid_file.display()
    );
    let template = pg.idem([
        "run", "--key", "p", "--lease", "3s", "--shell", "--", &script,
    ]);
    let mut owner = crate::util::wrapped(&template, &["ip", "netns", "exec", &link.namespace])
        .env("IDEM_DB", &url)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let command = command_pid(&pid_file, &mut owner);
    wait_for_attempt(&pg);
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
