//! `idem serve`'s buttons: pause, resume and stop pressed from the page by
//! a user who signed in, recorded under their name; refused without the
//! form's token, from another site's page, or on a server without
//! credentials (read-only). The buttons are looked at in a real headless
//! browser; the presses are plain HTTP requests, as a browser's form makes
//! them.

use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;

use crate::serve::{dom, get, Server};
use crate::util::{eventually, wait_for_file, Env};

const PASSWORD: &str = "right horse";

/// `idem serve` with an auth file of user `ana`, on an open address.
fn with_users(env: &Env) -> (Server, String) {
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let users = env.path("users");
    std::fs::write(&users, format!("ana:{hash}\n")).unwrap();
    let mut command = env.idem(["serve", "--listen", "0.0.0.0:0"]);
    command.arg("--auth-file").arg(&users);
    let server = Server::start_with(command, &[]);
    let port = server.url.rsplit(':').next().unwrap().to_owned();
    (server, format!("http://127.0.0.1:{port}"))
}

fn basic(pair: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
    format!("Basic {encoded}")
}

fn ana() -> String {
    basic(&format!("ana:{PASSWORD}"))
}

/// An answer to a POST: its status, `Location` and body.
struct Posted {
    status: u16,
    location: String,
    body: String,
}

/// POSTs `form` (already encoded) to `url` as a browser's form would,
/// with `headers`; redirects are not followed.
fn post(url: &str, headers: &[(&str, &str)], form: &str) -> Posted {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut request = agent
        .post(url)
        .header("Content-Type", "application/x-www-form-urlencoded");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut response = request
        .send(form)
        .unwrap_or_else(|error| panic!("POST {url}: {error}"));
    let location = response
        .headers()
        .get("location")
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default();
    Posted {
        status: response.status().as_u16(),
        location,
        body: response.body_mut().read_to_string().unwrap_or_default(),
    }
}

/// The form token a page's buttons carry.
fn token_of(page: &str) -> String {
    page.split("name=\"token\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no form token in {page}"))
        .to_owned()
}

/// `idem run --key KEY -- sh -c 'append to the counter n'`.
fn counted(env: &Env, key: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["run", "--key", key].map(str::to_owned).to_vec();
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    args.extend(["--", "sh", "-c"].map(str::to_owned));
    args.push(env.count_cmd("n"));
    args
}

/// The job's entry of `idem status --json`.
fn status_of(env: &Env, job: &str) -> serde_json::Value {
    let all = env.cmd(["status", "--json"]).run().json();
    all.as_array()
        .and_then(|jobs| jobs.iter().find(|entry| entry["job"] == job).cloned())
        .unwrap_or_else(|| panic!("no job {job} in {all}"))
}

#[test]
fn with_a_user_the_pages_show_buttons_and_a_wrong_password_is_401() {
    let env = Env::new();
    env.cmd(counted(&env, "backup", &[])).succeeds();
    let (_server, url) = with_users(&env);
    let wrong = get(&format!("{url}/"), Some(&basic("ana:wrong horse")));
    assert_eq!(wrong.status, 401);
    assert!(!wrong.body.contains("backup"), "{}", wrong.body);
    // The browser signs in with the user and password of the address.
    let signed_in = url.replace("http://", &format!("http://ana:{}@", "right%20horse"));
    for page in ["/", "/job/backup"] {
        let dom = dom(&env, &format!("{signed_in}{page}"));
        assert!(
            dom.contains("action=\"/job/backup/pause\"") && dom.contains(">Pause</button>"),
            "no pause button on {page}: {dom}"
        );
        assert!(dom.contains("name=\"reason\"") && dom.contains("name=\"until\""));
        assert!(!dom.contains(">Resume</button>") && !dom.contains(">Stop</button>"));
        assert!(!dom.contains(PASSWORD), "the password shows on {page}");
    }
}

#[test]
fn a_post_without_the_token_or_from_another_site_is_refused() {
    let env = Env::new();
    env.cmd(counted(&env, "backup", &[])).succeeds();
    let (_server, url) = with_users(&env);
    let page = get(&format!("{url}/job/backup"), Some(&ana()));
    let token = token_of(&page.body);
    let pause = format!("{url}/job/backup/pause");
    let auth = ana();
    let no_token = post(&pause, &[("Authorization", &auth)], "reason=x");
    assert_eq!(no_token.status, 403, "{}", no_token.body);
    assert!(no_token.body.contains("token"), "{}", no_token.body);
    let wrong = post(&pause, &[("Authorization", &auth)], "token=0123abcd");
    assert_eq!(wrong.status, 403);
    let elsewhere = post(
        &pause,
        &[("Authorization", &auth), ("Origin", "http://evil.example")],
        &format!("token={token}"),
    );
    assert_eq!(elsewhere.status, 403);
    assert!(
        elsewhere.body.contains("another site"),
        "{}",
        elsewhere.body
    );
    let referred = post(
        &pause,
        &[
            ("Authorization", &auth),
            ("Referer", "http://evil.example/job/backup"),
        ],
        &format!("token={token}"),
    );
    assert_eq!(referred.status, 403);
    let no_user = post(&pause, &[], &format!("token={token}"));
    assert_eq!(no_user.status, 401);
    assert!(
        status_of(&env, "backup")["paused"].is_null(),
        "paused after all"
    );
}

#[test]
fn pause_and_resume_from_the_page_are_recorded_under_the_users_name() {
    let env = Env::new();
    env.cmd(counted(&env, "backup", &[])).succeeds();
    let (_server, url) = with_users(&env);
    let auth = ana();
    let token = token_of(&get(&format!("{url}/"), Some(&auth)).body);
    let origin = url.clone();
    let headers = [
        ("Authorization", auth.as_str()),
        ("Origin", origin.as_str()),
    ];
    let reason = "disk+%3Cswap%3E+https%3A%2F%2Ft.example%2Fx%3Fk%3Ds3cret";
    let form = format!("token={token}&back=job&reason={reason}&until=");
    let paused = post(&format!("{url}/job/backup/pause"), &headers, &form);
    assert_eq!(paused.status, 303, "{}", paused.body);
    assert_eq!(paused.location, "/job/backup?done=paused");

    let status = status_of(&env, "backup");
    assert_eq!(status["state"], "paused", "{status}");
    let by = status["paused"]["by"].as_str().unwrap_or_default();
    assert!(by.starts_with("ana@"), "{status}");
    assert_eq!(
        status["paused"]["reason"],
        "disk <swap> https://t.example/x?k=s3cret"
    );
    env.cmd(counted(
        &env,
        "backup",
        &["--force", "--paused-exit-code", "3"],
    ))
    .expect_code(3);
    assert_eq!(env.count("n"), 1, "a paused job's command ran");

    let page = get(&format!("{url}{}", paused.location), Some(&auth)).body;
    assert!(
        page.contains("Paused backup: its runs start nothing"),
        "{page}"
    );
    assert!(page.contains("disk &lt;swap&gt;") && !page.contains("<swap>"));
    assert!(page.contains("https://t.example/***") && !page.contains("s3cret"));
    assert!(page.contains(">Resume</button>") && !page.contains(">Pause</button>"));

    let form = format!("token={token}&back=board");
    let resumed = post(&format!("{url}/job/backup/resume"), &headers, &form);
    assert_eq!(resumed.status, 303, "{}", resumed.body);
    assert_eq!(resumed.location, "/?done=resumed&job=backup");
    let board = get(&format!("{url}{}", resumed.location), Some(&auth)).body;
    assert!(
        board.contains("Resumed backup: its next run runs."),
        "{board}"
    );
    assert!(status_of(&env, "backup")["paused"].is_null());
    env.cmd(counted(&env, "backup", &["--force"])).succeeds();
    assert_eq!(env.count("n"), 2);
}

#[test]
fn a_stop_from_the_page_stops_a_running_run_at_once() {
    let env = Env::new();
    let mut command = env.idem(["serve", "--listen", "0.0.0.0:0"]);
    command.env("IDEM_SERVE_TOKEN", "t0ken-of-the-fleet");
    let server = Server::start_with(command, &[]);
    let port = server.url.rsplit(':').next().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let script = format!("touch '{}'; sleep 300", env.path("started").display());
    let mut owner = env
        .idem([
            "run",
            "--key",
            "nap",
            "--retries",
            "2",
            "--shell",
            "--",
            &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&env.path("started"), Duration::from_secs(30), &mut owner);
    let run_id = env.show_json("nap")["run_id"].as_str().unwrap().to_owned();
    let pids = crate::util::processes_of(&run_id);
    assert!(!pids.is_empty(), "the run's processes are not found");

    let bearer = "Bearer t0ken-of-the-fleet";
    let page = get(&format!("{url}/job/nap"), Some(bearer)).body;
    assert!(page.contains(">Stop</button>"), "{page}");
    let form = format!("token={}&back=job", token_of(&page));
    let asked = Instant::now();
    let stopped = post(
        &format!("{url}/job/nap/stop"),
        &[("Authorization", bearer)],
        &form,
    );
    assert_eq!(stopped.status, 303, "{}", stopped.body);
    assert_eq!(stopped.location, "/job/nap?done=stopping");
    assert!(asked.elapsed() < Duration::from_secs(5), "the stop waited");

    let ended = owner.wait_with_output().unwrap();
    assert_eq!(ended.status.code(), Some(143));
    eventually(
        "the run's processes to end",
        Duration::from_secs(30),
        || crate::util::processes_of(&run_id).is_empty(),
    );
    let run = env.show_json("nap");
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["attempts"], 1, "a stopped run is not retried: {run}");
    let shown = env.cmd(["ledger", "show", "nap"]).succeeds().stdout();
    assert!(shown.contains("stopped by token@"), "{shown}");
    let again = post(
        &format!("{url}/job/nap/stop"),
        &[("Authorization", bearer)],
        &form,
    );
    assert_eq!(again.location, "/job/nap?done=not-running");
}

#[test]
fn without_credentials_the_pages_are_read_only() {
    let env = Env::new();
    env.cmd(counted(&env, "backup", &[])).succeeds();
    let server = Server::start(&env, &[]);
    let dom = dom(&env, &format!("{}/job/backup", server.url));
    assert!(dom.contains("Latest runs"), "{dom}");
    assert!(!dom.contains("<form") && !dom.contains("<button"), "{dom}");
    let board = get(&format!("{}/", server.url), None).body;
    assert!(!board.contains("<form"), "{board}");
    let refused = post(
        &format!("{}/job/backup/pause", server.url),
        &[],
        "token=x&reason=y",
    );
    assert_eq!(refused.status, 403);
    assert_eq!(refused.body.lines().count(), 1, "{}", refused.body);
    assert!(refused.body.contains("read-only"), "{}", refused.body);
    assert!(status_of(&env, "backup")["paused"].is_null());
}
