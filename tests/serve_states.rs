//! The board, a job's page, `/api/status` and `idem status --json` take a
//! job's state from one judgement: for a job in each state they agree.

use std::process::{Child, Stdio};
use std::time::Duration;

use crate::serve::{dom, get, Server};
use crate::util::{wait_for_file, Env};

/// A running run of job `slow`, ended by `idem stop` when dropped.
struct Slow<'a> {
    env: &'a Env,
    key: &'a str,
    child: Child,
}

impl<'a> Slow<'a> {
    fn start(env: &'a Env) -> Slow<'a> {
        Slow::named(env, "slow")
    }

    /// A running run of job `key`.
    fn named(env: &'a Env, key: &'a str) -> Slow<'a> {
        let started = env.path("started");
        let _ = std::fs::remove_file(&started);
        let script = format!("touch '{}'; sleep 60", started.display());
        let mut child = env
            .idem(["run", "--key", key, "--shell", "--", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("idem run starts");
        wait_for_file(&started, Duration::from_secs(30), &mut child);
        Slow { env, key, child }
    }
}

impl Drop for Slow<'_> {
    fn drop(&mut self) {
        let _ = self.env.run(["stop", self.key]);
        let _ = self.child.wait();
    }
}

/// A job in each state the ledger can be brought to here without a clock
/// of its own: ok, failing, blocked, paused (before its first run and
/// after runs), stopped and running.
fn jobs_in_every_state(env: &Env) {
    drop(Slow::named(env, "halted"));
    env.cmd(["run", "--key", "report", "--", "true"]).succeeds();
    env.cmd(["run", "--key", "import", "--", "false"])
        .expect_code(1);
    env.cmd(["run", "--key", "load", "--after", "extract", "--", "true"])
        .succeeds();
    env.cmd(["run", "--key", "backup", "--", "true"]).succeeds();
    env.cmd(["pause", "backup", "--reason", "disk swap"])
        .succeeds();
    env.cmd(["pause", "nightly"]).succeeds();
    env.cmd([
        "ledger",
        "mark",
        "restore",
        "--succeeded",
        "--reason",
        "copied back by hand",
    ])
    .succeeds();
}

/// The board says under its table what `idem status` says under its own,
/// and a job's page tells a success marked by hand from a run.
fn the_notes_are_the_clis(env: &Env, url: &str) {
    let board = dom(env, &format!("{url}/"));
    let cli = env.cmd(["status"]).expect_code(1).stdout();
    for (told, by_cli) in [
        ("backup paused by ", "backup paused by "),
        ("(disk swap)", ": disk swap"),
        (
            "load is blocked: waiting for extract",
            "load is blocked: waiting for extract",
        ),
    ] {
        assert!(board.contains(told), "the board lacks {told:?}: {board}");
        assert!(cli.contains(by_cli), "status lacks {by_cli:?}: {cli}");
    }
    let page = get(&format!("{url}/job/restore"), None).body;
    assert!(page.contains("marked"), "{page}");
    assert!(page.contains("copied back by hand"), "{page}");
    assert!(
        !page.contains("(pid "),
        "a marked success ran nothing: {page}"
    );
}

/// The state a page shows in its first `state` span.
fn page_state(html: &str) -> String {
    let after = html
        .split("<span class=\"state ")
        .nth(1)
        .unwrap_or_else(|| panic!("no state on the page: {html}"));
    after.split('"').next().unwrap_or_default().to_owned()
}

/// The board's rows as the browser built them: (job, state).
fn board_rows(dom: &str) -> Vec<(String, String)> {
    dom.split("<tr class=\"")
        .skip(1)
        .map(|row| {
            let state = row.split('"').next().unwrap_or_default().to_owned();
            let job = row
                .split("<a href=\"/job/")
                .nth(1)
                .and_then(|rest| rest.split('>').nth(1))
                .and_then(|rest| rest.split('<').next())
                .unwrap_or_default()
                .to_owned();
            (job, state)
        })
        .collect()
}

#[test]
fn the_board_a_job_page_the_api_and_status_agree_in_every_state() {
    let env = Env::new();
    jobs_in_every_state(&env);
    let slow = Slow::start(&env);
    let status = env.cmd(["status", "--json"]).expect_code(1).stdout();
    let json: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    let cli: Vec<(String, String)> = json
        .as_array()
        .expect("an array")
        .iter()
        .map(|job| {
            let name = job["job"].as_str().expect("a name").to_owned();
            (name, job["state"].as_str().expect("a state").to_owned())
        })
        .collect();
    let states: Vec<&str> = cli.iter().map(|(_, state)| state.as_str()).collect();
    for state in ["ok", "failing", "blocked", "paused", "stopped", "running"] {
        assert!(states.contains(&state), "no {state} job: {cli:?}");
    }
    let server = Server::start(&env, &[]);
    let api = get(&format!("{}/api/status", server.url), None);
    assert_eq!(api.body, status, "/api/status is status --json");
    assert_eq!(board_rows(&dom(&env, &format!("{}/", server.url))), cli);
    for (job, state) in &cli {
        let page = get(&format!("{}/job/{job}", server.url), None);
        assert_eq!(page.status, 200, "/job/{job}");
        assert_eq!(&page_state(&page.body), state, "the page of {job}");
    }
    the_notes_are_the_clis(&env, &server.url);
    let metrics = get(&format!("{}/metrics", server.url), None).body;
    assert_eq!(metrics, env.cmd(["ledger", "metrics"]).succeeds().stdout());
    for (job, state) in &cli {
        let series = format!("idem_job_state{{job=\"{job}\",state=\"{state}\"}} 1");
        assert!(metrics.contains(&series), "no {series} in {metrics}");
        let owed = format!("idem_events_owed{{job=\"{job}\"}} 0");
        assert!(metrics.contains(&owed), "no {owed} in {metrics}");
        let lost = format!("idem_events_lost{{job=\"{job}\"}} 0");
        assert!(metrics.contains(&lost), "no {lost} in {metrics}");
    }
    drop(slow);
}
