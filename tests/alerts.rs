//! Telling a person: when `--on-failure` and `--on-recovery` hooks run
//! (the hooks themselves are in `hooks.rs`), `--ping` against a monitor
//! this file starts on loopback, `--alert-after` and `--warn-after`. The
//! monitor records every request and can be told to answer 500, to hang,
//! or be down.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::pg::Server;
use crate::util::{Env, Ran};

/// The check's secret, in every ping URL: it must never be printed.
const SECRET: &str = "5bf3c1d8-secret-check-uuid";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ok,
    Fail,
    Hang,
}

#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    query: String,
    body: String,
}

impl Request {
    /// `POST /start`: the method and the path after the check's URL.
    fn short(&self) -> String {
        let path = self
            .path
            .strip_prefix(&format!("/ping/{SECRET}"))
            .unwrap_or(&self.path);
        format!(
            "{} {}",
            self.method,
            if path.is_empty() { "/" } else { path }
        )
    }

    fn rid(&self) -> &str {
        self.query.strip_prefix("rid=").unwrap_or("")
    }
}

/// A Healthchecks-like monitor on a loopback port.
struct Monitor {
    port: u16,
    mode: Arc<Mutex<Mode>>,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Monitor {
    fn start(mode: Mode) -> Monitor {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(mode));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (shared_mode, shared_requests) = (Arc::clone(&mode), Arc::clone(&requests));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mode = Arc::clone(&shared_mode);
                let requests = Arc::clone(&shared_requests);
                std::thread::spawn(move || serve(stream, &mode, &requests));
            }
        });
        Monitor {
            port,
            mode,
            requests,
        }
    }

    /// A port nothing listens on.
    fn down() -> Monitor {
        let monitor = Monitor::start(Mode::Ok);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        Monitor { port, ..monitor }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/ping/{SECRET}", self.port)
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    fn log(&self) -> Vec<String> {
        self.requests().iter().map(Request::short).collect()
    }
}

fn serve(stream: TcpStream, mode: &Mutex<Mode>, requests: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let mut words = first.split_whitespace();
    let method = words.next().unwrap_or("").to_owned();
    let target = words.next().unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    requests.lock().unwrap().push(Request {
        method,
        path: path.to_owned(),
        query: query.to_owned(),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let mode = *mode.lock().unwrap();
    let mut stream = stream;
    match mode {
        Mode::Hang => std::thread::sleep(Duration::from_secs(120)),
        Mode::Ok => {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK");
        }
        Mode::Fail => {
            let _ = stream.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    }
}

/// `idem run` with `args` before `--` and `command` after it, on the
/// ledger `db` (the Env's SQLite file when `None`), run and checked never
/// to print the ping URL's secret; its exit is for the caller to check.
#[must_use = "check its exit: .expect_code(N) or .succeeds()"]
pub(crate) fn run(env: &Env, db: Option<&str>, args: &[&str], command: &[&str]) -> Ran {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push("--");
    all.extend_from_slice(command);
    let mut idem = env.cmd(&all);
    if let Some(db) = db {
        idem = idem.db(db);
    }
    idem.run().stdout_lacks(SECRET).stderr_lacks(SECRET)
}

pub(crate) fn lines(env: &Env, name: &str) -> Vec<String> {
    std::fs::read_to_string(env.path(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_success_pings_start_then_success_with_the_output() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Ok);
    let url = monitor.url();
    run(
        &env,
        None,
        &["-k", "ok", "--retries", "0", "--ping", &url],
        &["echo", "all well"],
    )
    .succeeds()
    .stdout_is("all well\n")
    .stderr_is("");
    let requests = monitor.requests();
    assert_eq!(monitor.log(), ["POST /start", "POST /"]);
    let run_id = env.show_json("ok")["run_id"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default();
    for request in &requests {
        assert_eq!(request.rid(), run_id, "{request:?}");
    }
    assert_eq!(requests[0].body, "");
    assert_eq!(requests[1].body, "all well\n");
    // Never stored: nothing in the ledger holds the secret.
    let ledger = std::fs::read(env.db()).unwrap();
    assert!(!String::from_utf8_lossy(&ledger).contains(SECRET));
}

#[test]
fn a_failure_at_the_default_threshold_pings_fail_and_keeps_its_code() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Ok);
    let url = monitor.url();
    let output = run(
        &env,
        None,
        &["-k", "bad", "--retries", "0", "--ping", &url],
        &["sh", "-c", "echo broken; exit 3"],
    )
    .expect_code(3);
    assert_eq!(output.stdout(), "broken\n");
    assert_eq!(monitor.log(), ["POST /start", "POST /fail"]);
    assert_eq!(monitor.requests()[1].body, "broken\n");
}

#[test]
fn the_ping_body_is_the_last_ten_kilobytes() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Ok);
    let url = monitor.url();
    run(
        &env,
        None,
        &["-k", "big", "--retries", "0", "--ping", &url],
        &["sh", "-c", "head -c 30000 /dev/zero | tr '\\0' a; echo end"],
    )
    .succeeds();
    let body = &monitor.requests()[1].body;
    assert_eq!(body.len(), 10_000);
    assert!(
        body.ends_with("aaa\nend\n") || body.ends_with("aend\n"),
        "{body:?}"
    );
}

#[test]
fn a_retried_attempt_that_succeeds_pings_one_start_and_one_success() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Ok);
    let url = monitor.url();
    // Fails until its second start.
    let script = format!(
        "{}; [ $(wc -l < '{}') -ge 2 ]",
        env.count_cmd("tries"),
        env.path("tries").display()
    );
    run(
        &env,
        None,
        &[
            "-k",
            "retried",
            "--retries",
            "2",
            "--backoff",
            "10ms",
            "--ping",
            &url,
        ],
        &["sh", "-c", &script],
    )
    .succeeds();
    assert_eq!(env.count("tries"), 2);
    assert_eq!(monitor.log(), ["POST /start", "POST /"]);
}

/// Three days' keys of one job fail, then the fourth succeeds: with
/// `--alert-after 3` the first two are quiet (recorded, sent as `/log`,
/// no hook, no output), the third is the alert, the fourth the recovery.
fn quiet_quiet_alert_recovery(env: &Env, db: Option<&str>) {
    let monitor = Monitor::start(Mode::Ok);
    let url = monitor.url();
    let on_failure = format!(
        "echo $IDEM_EVENT $IDEM_KEY $IDEM_FAILURES $IDEM_EXIT_CODE >> '{}'",
        env.path("hooks").display()
    );
    let on_recovery = on_failure.clone();
    let day = |key: &str, command: &[&str]| {
        run(
            env,
            db,
            &[
                "--key",
                key,
                "--job",
                "daily",
                "--retries",
                "0",
                "--alert-after",
                "3",
                "--ping",
                &url,
                "--on-failure",
                &on_failure,
                "--on-recovery",
                &on_recovery,
            ],
            command,
        )
    };
    let failing = ["sh", "-c", "echo disk full; echo oops >&2; exit 4"];
    for key in ["d1", "d2"] {
        let output = day(key, &failing).expect_code(4);
        assert_eq!(output.stdout(), "", "a quiet failure prints nothing");
        assert_eq!(output.stderr(), "", "a quiet failure prints nothing");
    }
    assert!(
        lines(env, "hooks").is_empty(),
        "no hook below the threshold"
    );
    let output = day("d3", &failing).expect_code(4);
    assert_eq!(output.stdout(), "disk full\n", "the alert shows its output");
    assert!(output.stderr().contains("oops"), "{}", output.stderr());
    assert!(output.stderr().contains("d3 failed"), "{}", output.stderr());
    assert_eq!(lines(env, "hooks"), ["failure d3 3 4"]);
    day("d4", &["echo", "fine"]).succeeds();
    assert_eq!(lines(env, "hooks"), ["failure d3 3 4", "recovery d4 3 0"]);
    // A success after a success recovers nothing.
    day("d5", &["true"]).succeeds();
    assert_eq!(lines(env, "hooks").len(), 2);
    let log = monitor.log();
    eprintln!("requests of job daily:");
    for request in monitor.requests() {
        eprintln!(
            "  {}  rid={}  body={:?}",
            request.short(),
            request.rid(),
            request.body
        );
    }
    assert_eq!(
        log,
        [
            "POST /start",
            "POST /log",
            "POST /start",
            "POST /log",
            "POST /start",
            "POST /fail",
            "POST /start",
            "POST /",
            "POST /start",
            "POST /",
        ]
    );
    assert_eq!(monitor.requests()[1].body, "disk full\noops\n");
    // All recorded, and counted: status sees the job's row.
    let mut status = env.cmd(["status", "--json"]);
    if let Some(db) = db {
        status = status.db(db);
    }
    status.run().stdout_has("daily");
    // The hooks that ran are recorded with their runs, and shown.
    let show = |key: &str, json: bool| {
        let mut show = env.cmd(["ledger", "show", key]);
        if json {
            show = show.arg("--json");
        }
        if let Some(db) = db {
            show = show.db(db);
        }
        show.succeeds().stdout()
    };
    let hooks_of = |key: &str| -> serde_json::Value {
        serde_json::from_str::<serde_json::Value>(&show(key, true)).unwrap()["hooks"].clone()
    };
    assert_eq!(hooks_of("d3")[0]["event"], "failure");
    assert_eq!(hooks_of("d3")[0]["exit_code"], 0);
    assert_eq!(hooks_of("d4")[0]["event"], "recovery");
    assert_eq!(hooks_of("d5").as_array().map(Vec::len), Some(0));
    assert_eq!(hooks_of("d1").as_array().map(Vec::len), Some(0));
    // A failure hook that did its work reads as such, not as a failure.
    let shown = show("d3", false);
    assert!(
        shown.contains("hook --on-failure (IDEM_EVENT=failure): exited 0 at "),
        "{shown}"
    );
    assert!(!shown.contains("hook failure"), "{shown}");
    assert!(
        show("d4", false).contains("hook --on-recovery (IDEM_EVENT=recovery): exited 0 at "),
        "{}",
        show("d4", false)
    );
}

#[test]
fn failures_in_a_row_across_keys_are_quiet_until_the_threshold() {
    let env = Env::new();
    quiet_quiet_alert_recovery(&env, None);
}

#[test]
fn failures_in_a_row_across_keys_on_a_shared_ledger() {
    let Some(server) = Server::start("alerts_on_a_shared_ledger") else {
        return;
    };
    let env = Env::new();
    quiet_quiet_alert_recovery(&env, Some(&server.url()));
}

/// A monitor answering 500 is tried three times, and then is down for
/// the run: its outcome's ping is owed, not tried again; the first run
/// after the monitor is back sends what was owed first, in order.
#[test]
fn a_monitor_answering_500_is_tried_three_times_and_changes_nothing() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Fail);
    let url = monitor.url();
    let output = run(
        &env,
        None,
        &["-k", "k", "--retries", "0", "--ping", &url],
        &["true"],
    )
    .succeeds();
    assert_eq!(monitor.log(), ["POST /start"; 3]);
    let stderr = output.stderr();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "http://127.0.0.1:{}/***: it answered HTTP 500",
            monitor.port
        )) && stderr.contains("2 events owed to it"),
        "{stderr}"
    );
    assert_eq!(env.show_json("k")["status"], "succeeded");
    // The monitor back: the next run sends the two the first run still
    // owed first, then its own, each once, at the first try.
    monitor.set(Mode::Ok);
    run(
        &env,
        None,
        &["-k", "k2", "--retries", "0", "--ping", &url],
        &["true"],
    )
    .succeeds()
    .stderr_is("");
    let requests = monitor.requests();
    let sent: Vec<(String, &str)> = requests[3..]
        .iter()
        .map(|request| (request.short(), request.rid()))
        .collect();
    let first = env.show_json("k")["run_id"].as_str().unwrap().to_owned();
    let second = env.show_json("k2")["run_id"].as_str().unwrap().to_owned();
    let expected = [
        ("POST /start".to_owned(), first.as_str()),
        ("POST /".to_owned(), first.as_str()),
        ("POST /start".to_owned(), second.as_str()),
        ("POST /".to_owned(), second.as_str()),
    ];
    assert_eq!(sent, expected);
}

#[test]
fn a_hung_monitor_delays_idem_by_at_most_fifteen_seconds() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Hang);
    let url = monitor.url();
    let began = Instant::now();
    let output = run(
        &env,
        None,
        &["-k", "k", "--retries", "0", "--ping", &url],
        &["sh", "-c", "exit 5"],
    );
    let took = began.elapsed();
    eprintln!("a hung monitor: idem took {took:?}");
    output.expect_code(5);
    assert!(took < Duration::from_secs(15), "took {took:?}");
    // Tried once: a monitor that hangs is down for the rest of the run.
    assert_eq!(monitor.log().len(), 1, "{:?}", monitor.log());
    assert_eq!(env.show_json("k")["status"], "failed");
}

/// A monitor that cannot be reached is said once, naming it (masked), the
/// events owed to it and who sends them; the runs after say nothing of it
/// while it stays down.
#[test]
fn a_down_monitor_is_said_once_per_outage() {
    let env = Env::new();
    let monitor = Monitor::down();
    let url = monitor.url();
    let began = Instant::now();
    let output = run(
        &env,
        None,
        &["-k", "k", "--retries", "0", "--ping", &url],
        &["echo", "out"],
    )
    .succeeds();
    assert!(began.elapsed() < Duration::from_secs(5));
    assert_eq!(output.stdout(), "out\n");
    let stderr = output.stderr();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("idem: k: could not send the start ping to http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("; 2 events owed to it, which `idem ledger deliver` sends once it is back"),
        "{stderr}"
    );
    for key in ["k2", "k3"] {
        run(
            &env,
            None,
            &["-k", key, "--retries", "0", "--ping", &url],
            &["echo", "out"],
        )
        .succeeds()
        .stderr_is("");
    }
}

#[test]
fn a_bad_ping_url_is_refused_without_printing_it() {
    let env = Env::new();
    let url = format!("ftp://monitor.example/{SECRET}");
    run(&env, None, &["-k", "k", "--ping", &url], &["true"])
        .expect_code(2)
        .stderr_has("http:// or https://");
    // From the environment twin too, as a crontab sets it.
    env.cmd(["run", "-k", "k", "--", "true"])
        .env("IDEM_PING_URL", format!("monitor.example/{SECRET}"))
        .expect_code(2)
        .stderr_lacks(SECRET);
    assert!(
        !env.db().exists(),
        "nothing ran: not even a ledger was made"
    );
}

#[test]
fn the_ping_url_comes_from_its_environment_twin() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Ok);
    env.cmd(["run", "-k", "k", "--retries", "0", "--", "true"])
        .env("IDEM_PING_URL", monitor.url())
        .succeeds();
    assert_eq!(monitor.log(), ["POST /start", "POST /"]);
}

#[test]
fn a_slow_attempt_is_told_once_and_keeps_running() {
    let env = Env::new();
    let monitor = Monitor::start(Mode::Ok);
    let url = monitor.url();
    let hook = format!("echo $IDEM_EVENT >> '{}'", env.path("hooks").display());
    let output = run(
        &env,
        None,
        &[
            "-k",
            "slow",
            "--retries",
            "0",
            "--warn-after",
            "300ms",
            "--on-failure",
            &hook,
            "--ping",
            &url,
        ],
        &["sh", "-c", "sleep 1; echo done"],
    )
    .succeeds();
    assert_eq!(output.stdout(), "done\n");
    assert_eq!(
        output.stderr(),
        "idem: slow: attempt 1 is still running after 300ms; it keeps running (--warn-after)\n"
    );
    assert_eq!(lines(&env, "hooks"), ["slow"]);
    assert_eq!(monitor.log(), ["POST /start", "POST /log", "POST /"]);
    // A quick attempt is not slow.
    run(
        &env,
        None,
        &[
            "-k",
            "quick",
            "--retries",
            "0",
            "--warn-after",
            "5s",
            "--on-failure",
            &hook,
        ],
        &["true"],
    )
    .succeeds()
    .stderr_is("");
    assert_eq!(lines(&env, "hooks"), ["slow"]);
}
