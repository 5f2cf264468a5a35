//! What a monitor is told of a job of N minutes: Sentry's monitor gets
//! the five-minute schedule; Healthchecks takes no period with a ping.

use super::monitor::{Mode, Monitor, Protocol, SECRET};
use crate::util::Env;

#[test]
fn a_five_minute_job_tells_sentry_its_schedule() {
    let env = Env::new();
    let sentry = Monitor::speaking(Protocol::Sentry, Mode::Ok);
    let healthchecks = Monitor::start(Mode::Ok);
    let slugged = format!("{}/nightly-backup", healthchecks.url());
    let sentry_url = sentry.url();
    let args = [
        "run",
        "-k",
        "sync-{minute/5}",
        "--ping",
        &sentry_url,
        "--ping",
        &slugged,
        "--",
        "true",
    ];
    env.cmd(args).run().succeeds().stderr_lacks(SECRET);
    let check_ins = sentry.delivered();
    let statuses: Vec<&str> = check_ins.iter().map(|p| p.suffix.as_str()).collect();
    assert_eq!(statuses, ["in_progress", "ok"]);
    for check_in in &check_ins {
        let body: serde_json::Value = serde_json::from_slice(&check_in.body).unwrap();
        assert_eq!(body["monitor_slug"], "sync-minute-5", "{body:#}");
        let config = &body["monitor_config"];
        assert_eq!(config["schedule"]["type"], "crontab", "{body:#}");
        assert_eq!(config["schedule"]["value"], "*/5 * * * *", "{body:#}");
        // A tenth of five minutes, at least the one minute Sentry counts.
        assert_eq!(config["checkin_margin"], 1, "{body:#}");
    }
    // Healthchecks documents no period or grace on a ping that creates
    // its check: the slug asks for the check, and nothing else is made up.
    let run_id = env.list_json()[0]["run_id"].as_str().unwrap().to_owned();
    let query = format!("create=1&rid={run_id}");
    let seen: Vec<(String, String)> = healthchecks
        .delivered()
        .into_iter()
        .map(|p| (p.suffix, p.query))
        .collect();
    assert_eq!(
        seen,
        [("/start".to_owned(), query.clone()), (String::new(), query)]
    );
}
