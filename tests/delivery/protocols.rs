//! Sentry's cron check-ins and Cronitor's telemetry, as their
//! documentation gives them, judged by the test monitor; and one run
//! heard by all three monitors at once.

use super::monitor::{Headers, Mode, Monitor, Ping, Protocol, SECRET, SENTRY_KEY};
use crate::util::Env;

/// The ping a Sentry envelope is (status, `check_in_id`, the check-in's
/// JSON), or what is wrong with it.
pub fn sentry(first: &str, headers: &Headers, body: &[u8]) -> Result<Ping, String> {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(have, _)| have == name)
            .map_or("", |(_, value)| value.as_str())
    };
    if first.split_whitespace().take(2).collect::<Vec<_>>() != ["POST", "/api/42/envelope/"] {
        return Err(format!("{first}: not the project's envelope endpoint"));
    }
    let auth = header("x-sentry-auth");
    if !auth.starts_with("Sentry ")
        || !auth.contains("sentry_version=7")
        || !auth.contains(&format!("sentry_key={SENTRY_KEY}"))
    {
        return Err(format!("X-Sentry-Auth is {auth:?}"));
    }
    if header("content-type") != "application/x-sentry-envelope" {
        return Err(format!("content type {:?}", header("content-type")));
    }
    let text = String::from_utf8_lossy(body);
    let lines: Vec<&str> = text.lines().collect();
    let [envelope, item_header, item] = lines[..] else {
        return Err(format!("an envelope of {} lines", lines.len()));
    };
    serde_json::from_str::<serde_json::Value>(envelope)
        .map_err(|e| format!("envelope header: {e}"))?;
    let item_header: serde_json::Value =
        serde_json::from_str(item_header).map_err(|e| e.to_string())?;
    if item_header["type"] != "check_in" || item_header["length"] != item.len() {
        return Err(format!("item header {item_header}"));
    }
    let check_in: serde_json::Value = serde_json::from_str(item).map_err(|e| e.to_string())?;
    let id = check_in["check_in_id"].as_str().unwrap_or("");
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("check_in_id {id:?}"));
    }
    let status = check_in["status"].as_str().unwrap_or("").to_owned();
    let finished = matches!(status.as_str(), "ok" | "error");
    if !finished && status != "in_progress" {
        return Err(format!("status {status:?}"));
    }
    if finished != check_in["duration"].is_number() {
        return Err(format!("{status} with duration {}", check_in["duration"]));
    }
    if check_in["monitor_slug"]
        .as_str()
        .is_none_or(|slug| slug.is_empty())
    {
        return Err("no monitor_slug".to_owned());
    }
    Ok(Ping {
        suffix: status,
        rid: id.to_owned(),
        query: String::new(),
        body: item.as_bytes().to_vec(),
        answered: false,
    })
}

/// The ping a Cronitor telemetry request is (state, series, message), or
/// what is wrong with it.
pub fn cronitor(first: &str, body: &[u8]) -> Result<Ping, String> {
    let mut words = first.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if method != "GET" || !body.is_empty() || path != format!("/p/{SECRET}/nightly") {
        return Err(format!("{first}: not a telemetry GET of the monitor"));
    }
    let value = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .map(|value| {
                percent_encoding::percent_decode_str(value)
                    .decode_utf8_lossy()
                    .into_owned()
            })
    };
    let state = value("state").unwrap_or_default();
    if !["run", "complete", "fail"].contains(&state.as_str()) {
        return Err(format!("state {state:?}"));
    }
    let series = value("series").unwrap_or_default();
    if series.len() != 36 {
        return Err(format!("series {series:?}"));
    }
    if state != "run"
        && value("status_code")
            .and_then(|code| code.parse::<i32>().ok())
            .is_none()
    {
        return Err(format!("{state} without a status_code"));
    }
    let message = value("message").unwrap_or_default();
    if message.chars().count() > 2000 {
        return Err(format!(
            "a message of {} characters",
            message.chars().count()
        ));
    }
    Ok(Ping {
        suffix: state,
        rid: series,
        query: query.to_owned(),
        body: message.into_bytes(),
        answered: false,
    })
}

#[test]
fn every_monitor_hears_the_run_in_its_own_protocol() {
    let env = Env::new();
    let healthchecks = Monitor::start(Mode::Ok);
    let sentry = Monitor::speaking(Protocol::Sentry, Mode::Ok);
    let cronitor = Monitor::speaking(Protocol::Cronitor, Mode::Ok);
    // A Healthchecks URL that names its check by slug.
    let slugged = format!("{}/nightly-backup", healthchecks.url());
    let script = "head -c 5000 /dev/zero | tr '\\0' a; echo; echo the-end; exit 3";
    let args = [
        "run",
        "-k",
        "nightly-{date}",
        "--retries",
        "0",
        "--ping",
        &slugged,
        "--ping",
        &sentry.url(),
        "--ping",
        &cronitor.url(),
        "--",
        "sh",
        "-c",
        script,
    ];
    env.cmd(args)
        .env("SENTRY_ENVIRONMENT", "staging")
        .run()
        .expect_code(3)
        .stdout_lacks(SECRET)
        .stderr_lacks(SECRET)
        .stderr_lacks(SENTRY_KEY);
    let run = &env.list_json()[0];
    let run_id = run["run_id"].as_str().unwrap().to_owned();

    let pings = healthchecks.delivered();
    let seen: Vec<(&str, &str)> = pings
        .iter()
        .map(|p| (p.suffix.as_str(), p.query.as_str()))
        .collect();
    let query = format!("create=1&rid={run_id}");
    assert_eq!(
        seen,
        [("/start", query.as_str()), ("/fail", query.as_str())]
    );

    sentry_heard(&sentry, &run_id);
    cronitor_heard(&cronitor, &run_id);
}

#[test]
fn check_ins_owed_to_a_sentry_that_was_down_keep_their_check_in_id() {
    let env = Env::new();
    let sentry = Monitor::speaking(Protocol::Sentry, Mode::Fail);
    let url = sentry.url();
    let args = [
        "run",
        "-k",
        "k",
        "--retries",
        "0",
        "--ping",
        &url,
        "--",
        "true",
    ];
    env.cmd(args)
        .run()
        .succeeds()
        .stderr_has("could not send the start ping to sentry:http://127.0.0.1:")
        .stderr_lacks(SENTRY_KEY);
    let run_id = env.show_json("k")["run_id"]
        .as_str()
        .unwrap()
        .replace('-', "");
    assert_eq!(sentry.delivered(), []);
    sentry.set(Mode::Ok);
    env.cmd(["ledger", "deliver"])
        .run()
        .succeeds()
        .stdout_has("delivered 2, failed 0; 0 still owed");
    let check_ins: Vec<(String, String)> = sentry
        .delivered()
        .into_iter()
        .map(|p| (p.suffix, p.rid))
        .collect();
    assert_eq!(
        check_ins,
        [
            ("in_progress".to_owned(), run_id.clone()),
            ("ok".to_owned(), run_id)
        ]
    );
}

/// Sentry's check-ins of the failed run: in progress, then an error with
/// the same id and the monitor's config.
fn sentry_heard(sentry: &Monitor, run_id: &str) {
    let check_ins = sentry.delivered();
    let statuses: Vec<&str> = check_ins.iter().map(|p| p.suffix.as_str()).collect();
    assert_eq!(statuses, ["in_progress", "error"]);
    let simple = run_id.replace('-', "");
    assert!(check_ins.iter().all(|p| p.rid == simple), "{check_ins:?}");
    let error: serde_json::Value = serde_json::from_slice(&check_ins[1].body).unwrap();
    assert_eq!(error["monitor_slug"], "nightly-date");
    assert_eq!(error["environment"], "staging");
    assert_eq!(error["monitor_config"]["schedule"]["type"], "crontab");
    assert_eq!(error["monitor_config"]["schedule"]["value"], "0 0 * * *");
    assert_eq!(error["monitor_config"]["failure_issue_threshold"], 1);
}

/// Cronitor's telemetry of the failed run: run, then fail with its exit
/// code and the output's last 2,000 characters.
fn cronitor_heard(cronitor: &Monitor, run_id: &str) {
    let telemetry = cronitor.delivered();
    let states: Vec<(&str, &str)> = telemetry
        .iter()
        .map(|p| (p.suffix.as_str(), p.rid.as_str()))
        .collect();
    assert_eq!(states, [("run", run_id), ("fail", run_id)]);
    assert!(
        telemetry[1].query.contains("status_code=3"),
        "{}",
        telemetry[1].query
    );
    let message = String::from_utf8_lossy(&telemetry[1].body);
    assert!(
        message.ends_with("the-end\n") && message.chars().count() == 2000,
        "{}",
        message.len()
    );
}
