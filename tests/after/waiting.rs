//! `--after-wait`: a blocked run that waits starts soon after its
//! upstream's success, and holds no claim meanwhile.

use std::process::Stdio;
use std::time::Duration;

use crate::util::{eventually, on_every_backend, Backend, Env};

on_every_backend!(a_waiting_downstream_starts_within_a_second_of_its_upstream);

/// Whether the job `name` is `blocked` in `status`.
fn blocked(env: &Env, name: &str) -> bool {
    // Until the first write there is no ledger, and no JSON.
    let all: Option<serde_json::Value> =
        serde_json::from_str(&env.cmd(["status", "--json"]).run().stdout()).ok();
    all.as_ref()
        .and_then(|all| all.as_array())
        .is_some_and(|jobs| {
            jobs.iter()
                .any(|job| job["job"] == name && job["state"] == "blocked")
        })
}

/// One upstream success and its waiting downstream (keys `extract-TAG`
/// and `report-TAG`): the microseconds from the end of the upstream's
/// command to the start of the downstream's, which include recording the
/// upstream's outcome.
pub fn one_delay(env: &Env, tag: &str) -> i64 {
    let stamp = |name: &str| format!("date +%s%6N > '{}'", env.path(name).display());
    let (upstream, downstream) = (format!("extract-{tag}"), format!("report-{tag}"));
    let mut waiting = env
        .cmd([
            "run",
            "--key",
            &downstream,
            "--after",
            &upstream,
            "--after-wait",
            "60s",
            "--shell",
            "--",
            &stamp(&downstream),
        ])
        .command()
        .stderr(Stdio::null())
        .spawn()
        .expect("idem starts");
    eventually(
        "the downstream to be blocked",
        Duration::from_secs(30),
        || blocked(env, &downstream),
    );
    env.cmd([
        "run",
        "--key",
        &upstream,
        "--shell",
        "--",
        &stamp(&upstream),
    ])
    .succeeds();
    let status = waiting.wait().expect("the downstream ends");
    assert!(status.success(), "the downstream ran: {status}");
    let read = |name: &str| -> i64 {
        std::fs::read_to_string(env.path(name))
            .expect("its command stamped the time")
            .trim()
            .parse()
            .expect("microseconds")
    };
    read(&downstream) - read(&upstream)
}

fn a_waiting_downstream_starts_within_a_second_of_its_upstream(backend: &Backend) {
    let env = backend.env();
    let delay = one_delay(&env, "d1");
    assert!(
        (0..1_000_000).contains(&delay),
        "started {delay}us after its upstream"
    );
    // Nothing was claimed while it waited: one run each.
    assert_eq!(env.list_json().as_array().unwrap().len(), 2);
}

/// The figure of the README: the median of 20 delays on each ledger.
/// `cargo test --locked -- --ignored --nocapture after::waiting::delay`
#[test]
#[ignore = "a measurement, run by hand"]
fn delay_from_an_upstream_success_to_its_waiting_downstream() {
    let mut backends = vec![("sqlite", Backend::Sqlite)];
    if let Some(postgres) = Backend::postgres("after_delay") {
        backends.push(("postgres", postgres));
    }
    for (name, backend) in backends {
        let env = backend.env();
        let mut delays: Vec<i64> = (0..20).map(|n| one_delay(&env, &format!("m{n}"))).collect();
        delays.sort_unstable();
        println!(
            "{name}: median {}ms, min {}ms, max {}ms over {}",
            delays[delays.len() / 2] / 1000,
            delays[0] / 1000,
            delays[delays.len() - 1] / 1000,
            delays.len()
        );
    }
}
