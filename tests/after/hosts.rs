//! A shared ledger: the upstream runs on host A, its downstream waits on
//! host B, each host its own UTS namespace.

use std::process::Stdio;
use std::time::Duration;

use crate::pg::Server;
use crate::util::{eventually, host_prefix, wrapped, Env};

/// `idem ARGS` on host `host` (a UTS namespace of its own, renamed);
/// `None` where namespaces cannot be made (the test then fails, naming it).
fn on_host(env: &Env, url: &str, host: &str, args: &[&str]) -> Option<std::process::Command> {
    let mut template = env.idem(args);
    template.env("IDEM_DB", url);
    Some(wrapped(&template, &host_prefix(host)?))
}

#[test]
fn an_upstream_on_one_host_releases_its_downstream_on_another() {
    let Some(server) = Server::start("an_upstream_on_one_host_releases_its_downstream") else {
        return;
    };
    let env = Env::new();
    let url = server.url();
    let report = env.count_cmd("report");
    let Some(mut downstream) = on_host(
        &env,
        &url,
        "host-b",
        &[
            "run",
            "--key",
            "report-{date}",
            "--after",
            "extract-{date}",
            "--after-wait",
            "60s",
            "--shell",
            "--",
            &report,
        ],
    ) else {
        return;
    };
    let mut downstream = downstream.stderr(Stdio::null()).spawn().unwrap();
    eventually(
        "host B's run to be blocked",
        Duration::from_secs(30),
        || {
            let status = env.cmd(["status", "--json"]).db(&url).run();
            serde_json::from_str::<serde_json::Value>(&status.stdout())
                .ok()
                .is_some_and(|jobs| jobs.to_string().contains(r#""blocked""#))
        },
    );
    assert_eq!(
        env.count("report"),
        0,
        "blocked while its upstream has not run"
    );
    let extract = env.count_cmd("extract");
    let status = on_host(
        &env,
        &url,
        "host-a",
        &["run", "--key", "extract-{date}", "--shell", "--", &extract],
    )
    .expect("made once already")
    .status()
    .unwrap();
    assert!(status.success());
    assert!(downstream.wait().unwrap().success());
    assert_eq!((env.count("extract"), env.count("report")), (1, 1));
    let runs = env
        .cmd(["ledger", "list", "--json"])
        .db(&url)
        .succeeds()
        .json();
    let hosts: Vec<(&str, &str)> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|run| (run["job"].as_str().unwrap(), run["host"].as_str().unwrap()))
        .collect();
    assert_eq!(
        hosts,
        [("report-{date}", "host-b"), ("extract-{date}", "host-a")]
    );
}
