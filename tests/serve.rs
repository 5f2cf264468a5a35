//! `idem serve` on a real ledger made by real runs, on a free loopback
//! port: its pages read by a real headless browser (Debian's chromium),
//! its metrics and JSON by plain HTTP requests and held against what
//! `idem ledger metrics` and `idem status --json` print.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;

use crate::util::{on_every_backend, require, Backend, Env};

/// A running `idem serve`, stopped by SIGTERM when dropped.
pub(crate) struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub(crate) url: String,
}

impl Server {
    /// `idem serve --listen 127.0.0.1:0 ARGS`: the kernel picks the port,
    /// and the server's first line says which.
    pub(crate) fn start(env: &Env, args: &[&str]) -> Server {
        Server::start_with(env.idem(["serve", "--listen", "127.0.0.1:0"]), args)
    }

    pub(crate) fn start_with(mut command: Command, args: &[&str]) -> Server {
        let mut child = command
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("idem serve starts");
        let mut line = String::new();
        let stderr = child.stderr.take().expect("stderr");
        BufReader::new(stderr)
            .read_line(&mut line)
            .expect("a line from idem serve");
        let url = line
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .trim_end_matches('/')
            .to_owned();
        Server { child, url }
    }

    fn get(&self, path: &str) -> Reply {
        get(&format!("{}{path}", self.url), None)
    }

    /// Stops the server as systemd would, and returns its exit code.
    fn stop(mut self) -> Option<i32> {
        terminate(&self.child);
        self.child.wait().expect("idem serve ends").code()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        terminate(&self.child);
        let _ = self.child.wait();
    }
}

fn terminate(child: &Child) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
}

/// An HTTP answer: its status, content type, `WWW-Authenticate` and body.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) content_type: String,
    pub(crate) challenge: Vec<String>,
    pub(crate) body: String,
}

/// GET `url` with an `Authorization` header when given.
pub(crate) fn get(url: &str, authorization: Option<&str>) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut request = agent.get(url);
    if let Some(authorization) = authorization {
        request = request.header("Authorization", authorization);
    }
    let mut response = request
        .call()
        .unwrap_or_else(|error| panic!("GET {url}: {error}"));
    let header = |name: &str| -> Vec<String> {
        response
            .headers()
            .get_all(name)
            .iter()
            .map(|value| value.to_str().unwrap().to_owned())
            .collect()
    };
    let content_type = header("content-type").join(", ");
    let challenge = header("www-authenticate");
    Reply {
        status: response.status().as_u16(),
        content_type,
        challenge,
        body: response.body_mut().read_to_string().expect("a text body"),
    }
}

/// Debian's chromium, headless; the tests fail (not skip) without it.
pub(crate) fn chromium(env: &Env) -> Command {
    let found = Command::new("sh")
        .args(["-c", "command -v chromium"])
        .output()
        .is_ok_and(|output| output.status.success());
    require(found, "chromium (Debian's package of that name)");
    let mut command = Command::new("chromium");
    command
        .args(["--headless", "--no-sandbox", "--disable-gpu"])
        .arg(format!(
            "--user-data-dir={}",
            env.path("chromium").display()
        ))
        .args(["--no-first-run", "--disable-extensions", "--mute-audio"])
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// The page at `url` as the browser built it (`--dump-dom`).
pub(crate) fn dom(env: &Env, url: &str) -> String {
    let output = chromium(env)
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(output.status.success(), "chromium --dump-dom {url} failed");
    String::from_utf8(output.stdout).expect("a UTF-8 DOM")
}

/// Runs that make three jobs: one failing (its output holds markup), one
/// ok, one periodic and ok.
fn three_jobs(env: &Env) {
    env.cmd(["run", "--key", "nightly-{date}", "--", "true"])
        .succeeds();
    env.cmd(["run", "--key", "report", "--", "echo", "made"])
        .succeeds();
    env.cmd([
        "run",
        "--key",
        "import",
        "--retries",
        "1",
        "--backoff",
        "10ms",
        "--",
        "sh",
        "-c",
        "echo '<script>alert(1)</script>'; echo 'bad row' >&2; exit 3",
    ])
    .expect_code(3);
}

/// The states of the board's rows, in order, as the browser has them.
fn board_states(dom: &str) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    for row in dom.split("<tr class=\"").skip(1) {
        let state = row.split('"').next().unwrap().to_owned();
        let job = row
            .split("<a href=\"/job/")
            .nth(1)
            .and_then(|rest| rest.split('>').nth(1))
            .and_then(|rest| rest.split('<').next())
            .unwrap()
            .to_owned();
        rows.push((job, state));
    }
    rows
}

#[test]
fn the_board_lists_every_job_the_failing_first_with_its_strip() {
    let env = Env::new();
    three_jobs(&env);
    env.cmd(["run", "--key", "report", "--force", "--", "echo", "again"])
        .succeeds();
    let server = Server::start(&env, &[]);
    let dom = dom(&env, &format!("{}/", server.url));
    let expected: Vec<(String, String)> = env
        .cmd(["status", "--json"])
        .expect_code(1)
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|job| {
            (
                job["job"].as_str().unwrap().to_owned(),
                job["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(board_states(&dom), expected);
    assert_eq!(expected[0], ("import".to_owned(), "failing".to_owned()));
    assert_eq!(expected.len(), 3);
    // Pages refresh themselves, fit a phone, and show marks, not colours
    // alone: the report job's strip is two successes.
    assert!(dom.contains(r#"<meta http-equiv="refresh" content="30">"#));
    assert!(dom.contains(r#"name="viewport""#));
    let report = dom.split(r#"href="/job/report""#).nth(1).unwrap();
    let strip = report.split("class=\"strip\"").nth(1).unwrap();
    let strip = strip.split("</td>").next().unwrap();
    assert_eq!(strip.matches(">+</span>").count(), 2, "{strip}");
    assert!(dom.contains(r#"href="/job/nightly-%7Bdate%7D""#), "{dom}");
    assert!(!dom.contains("<script"), "{dom}");
    assert_eq!(server.stop(), Some(0));
}

#[test]
fn a_job_page_shows_a_failed_runs_output_as_text() {
    let env = Env::new();
    three_jobs(&env);
    let server = Server::start(&env, &[]);
    let dom = dom(&env, &format!("{}/job/import", server.url));
    assert!(
        dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{dom}"
    );
    assert!(!dom.contains("<script"), "{dom}");
    assert!(dom.contains("bad row"), "{dom}");
    assert_eq!(dom.matches("Attempt ").count(), 2, "{dom}");
    assert!(dom.contains("exit 3"), "{dom}");
    // The failed run is open, to be read at once.
    assert!(dom.contains("<details open"), "{dom}");

    let missing = server.get("/job/no-such-job");
    assert_eq!(missing.status, 404);
    assert!(
        missing.body.contains("no job named no-such-job"),
        "{}",
        missing.body
    );
    let periodic = server.get("/job/nightly-%7Bdate%7D");
    assert_eq!(periodic.status, 200);
    assert!(
        periodic.body.contains("<h1>nightly-{date}</h1>"),
        "{}",
        periodic.body
    );
}

#[test]
fn the_board_is_drawn_at_a_desktops_width() {
    let env = Env::new();
    three_jobs(&env);
    let server = Server::start(&env, &[]);
    let shot = env.path("board.png");
    let output = chromium(&env)
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,900")
        .arg(format!("{}/", server.url))
        .output()
        .expect("chromium runs");
    assert!(output.status.success());
    let (width, height) = png_size(&shot);
    assert_eq!((width, height), (1280, 900));
    // A blank page compresses to almost nothing; the board does not.
    let size = std::fs::metadata(&shot).unwrap().len();
    assert!(size > 20_000, "a {size}-byte screenshot");
}

/// A PNG's width and height, from its IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(
        &bytes[..8],
        b"\x89PNG\r\n\x1a\n",
        "{} is no PNG",
        path.display()
    );
    let number = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (number(16), number(20))
}

/// Each sample line of a Prometheus text exposition: `name{labels} value`.
fn assert_exposition(text: &str) {
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        assert!(value.parse::<f64>().is_ok(), "{line}");
        let (name, labels) = series.split_once('{').unwrap_or_else(|| panic!("{line}"));
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{line}"
        );
        let labels = labels.strip_suffix('}').unwrap_or_else(|| panic!("{line}"));
        for label in labels.split("\",") {
            let (key, value) = label.split_once("=\"").unwrap_or_else(|| panic!("{line}"));
            assert!(
                key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{line}"
            );
            assert!(!value.trim_end_matches('"').contains('\n'), "{line}");
        }
    }
}

fn the_api_and_metrics_are_what_the_commands_print(backend: &Backend) {
    let env = backend.env();
    three_jobs(&env);
    let server = Server::start(&env, &[]);
    let metrics = server.get("/metrics");
    assert_eq!(metrics.status, 200);
    assert_eq!(metrics.content_type, "text/plain; version=0.0.4");
    assert_eq!(
        metrics.body,
        env.cmd(["ledger", "metrics"]).succeeds().stdout()
    );
    assert!(metrics
        .body
        .contains("idem_consecutive_failures{job=\"import\"} 1"));
    assert_exposition(&metrics.body);

    let status = server.get("/api/status");
    assert_eq!(status.status, 200);
    assert_eq!(status.content_type, "application/json");
    assert_eq!(
        status.body,
        env.cmd(["status", "--json"]).expect_code(1).stdout()
    );

    let health = server.get("/healthz");
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    let board = server.get("/");
    assert_eq!(board.status, 200);
    assert!(board.content_type.starts_with("text/html"));
    // A database URL never shows whole: at most its host.
    if backend.is_postgres() {
        let url = env.ledger().into_string().unwrap();
        let database = url.rsplit('/').next().unwrap();
        assert!(!board.body.contains(&url));
        assert!(
            !board.body.contains(&format!("/{database}")),
            "{}",
            board.body
        );
        assert!(!board.body.contains("postgres@"), "{}", board.body);
    }
    assert_eq!(server.stop(), Some(0));
}

on_every_backend!(the_api_and_metrics_are_what_the_commands_print);

#[test]
fn the_health_check_fails_where_no_ledger_is() {
    let env = Env::new();
    let server = Server::start(&env, &[]);
    let health = server.get("/healthz");
    assert_eq!(health.status, 503);
    assert_eq!(health.body.lines().count(), 1, "{}", health.body);
    assert!(health.body.contains("no ledger at"), "{}", health.body);
    // The board says there is nothing yet.
    let board = server.get("/");
    assert_eq!(board.status, 200);
    assert!(board.body.contains("No jobs yet"), "{}", board.body);
    // Ctrl-C stops it as SIGTERM does.
    let mut server = server;
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_url_in_a_command_shows_its_host_alone() {
    let env = Env::new();
    let secret = "0f3c1d2e-5b6a-4c7d-8e9f-a0b1c2d3e4f5";
    let ping = format!("https://hc-ping.example/{secret}");
    env.cmd(["run", "--key", "pinged", "--", "echo", &ping])
        .succeeds();
    let server = Server::start(&env, &[]);
    for path in ["/", "/job/pinged"] {
        let page = server.get(path);
        assert_eq!(page.status, 200);
        assert!(
            page.body.contains("https://hc-ping.example/***"),
            "{}",
            page.body
        );
        // The page shows the command, masked; the output is the command's.
        let shown = page.body.replace(&format!("{ping}\n</pre>"), "");
        assert!(!shown.contains(secret), "{path}: {}", page.body);
    }
}

#[test]
fn an_open_address_needs_credentials_and_a_bad_one_is_a_usage_error() {
    let env = Env::new();
    env.cmd(["serve", "--listen", "0.0.0.0:0"])
        .expect_code(2)
        .stderr_one_line()
        .stderr_has("--auth-file");
    env.cmd(["serve", "--listen", "[::]:0"])
        .expect_code(2)
        .stderr_has("IDEM_SERVE_TOKEN");
    env.cmd(["serve", "--listen", "localhost"])
        .expect_code(2)
        .stderr_has("127.0.0.1:8417");
    env.cmd(["serve", "--listen", "127.0.0.1:0", "--auth-file", "missing"])
        .expect_code(2)
        .stderr_one_line()
        .stderr_has("auth file missing");

    // An address in use: idem itself could not serve (125), and says why.
    let server = Server::start(&env, &[]);
    let taken = server.url.trim_start_matches("http://");
    env.cmd(["serve", "--listen", taken])
        .expect_code(125)
        .stderr_one_line()
        .stderr_has("in use");
}

#[test]
fn with_an_auth_file_every_request_needs_a_users_password() {
    let env = Env::new();
    three_jobs(&env);
    let hash = bcrypt::hash("right horse", 4).unwrap();
    let users = env.path("users");
    std::fs::write(&users, format!("# who may read\nana:{hash}\n")).unwrap();
    let mut command = env.idem(["serve", "--listen", "0.0.0.0:0"]);
    command.arg("--auth-file").arg(&users);
    let server = Server::start_with(command, &[]);
    let port = server.url.rsplit(':').next().unwrap();
    let url = format!("http://127.0.0.1:{port}/api/status");
    let basic = |pair: &str| {
        let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
        format!("Basic {encoded}")
    };

    let none = get(&url, None);
    assert_eq!(none.status, 401);
    assert_eq!(none.challenge, ["Basic realm=\"idem\", charset=\"UTF-8\""]);
    assert!(!none.body.contains("import"));
    let wrong = get(&url, Some(&basic("ana:wrong horse")));
    assert_eq!(wrong.status, 401);
    assert_eq!(get(&url, Some(&basic("bob:right horse"))).status, 401);
    let right = get(&url, Some(&basic("ana:right horse")));
    assert_eq!(right.status, 200);
    assert!(right.body.contains("\"import\""), "{}", right.body);
    // Every path, the health check too.
    let health = format!("http://127.0.0.1:{port}/healthz");
    assert_eq!(get(&health, None).status, 401);
    assert_eq!(get(&health, Some(&basic("ana:right horse"))).status, 200);
}

#[test]
fn with_a_token_every_request_needs_it() {
    let env = Env::new();
    three_jobs(&env);
    let mut command = env.idem(["serve", "--listen", "0.0.0.0:0"]);
    command.env("IDEM_SERVE_TOKEN", "t0ken-of-the-fleet");
    let server = Server::start_with(command, &[]);
    let port = server.url.rsplit(':').next().unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let none = get(&url, None);
    assert_eq!(none.status, 401);
    assert_eq!(none.challenge, ["Bearer realm=\"idem\""]);
    assert_eq!(get(&url, Some("Bearer not-it")).status, 401);
    let right = get(&url, Some("Bearer t0ken-of-the-fleet"));
    assert_eq!(right.status, 200);
    assert!(right.body.contains("idem_consecutive_failures"));
    // Set and empty: a mistake, said before anything listens.
    env.cmd(["serve", "--listen", "127.0.0.1:0"])
        .env("IDEM_SERVE_TOKEN", "")
        .expect_code(2)
        .stderr_has("IDEM_SERVE_TOKEN is empty");
}
