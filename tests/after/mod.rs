//! Jobs that wait for each other (`--after`): a run whose upstream keys
//! have not succeeded is blocked, claims nothing and exits, or waits under
//! `--after-wait`; `status` shows it `blocked`; `ledger mark` records a
//! success that did not run. Each scenario holds on both ledgers.

mod blocked;
mod days;
mod hosts;
mod marks;
mod waiting;

use crate::util::Env;

/// `idem run` of job KEY after the upstream templates `after`, whose
/// command appends its key to the counter file `ran` and exits `code`;
/// `extra` are more flags.
fn job(env: &Env, key: &str, after: &[&str], code: i32, extra: &[&str]) -> crate::util::Idem {
    let script = format!("{}; exit {code}", env.count_cmd(&ran_file(key)));
    let mut args = vec!["run", "--key", key, "--retries", "0"];
    for upstream in after {
        args.extend(["--after", upstream]);
    }
    args.extend_from_slice(extra);
    args.extend(["--shell", "--", &script]);
    env.cmd(args)
}

/// The counter file a job's command appends to.
fn ran_file(key: &str) -> String {
    format!("ran-{}", key.replace(['{', '}'], ""))
}

/// How many times the job's command ran.
fn ran(env: &Env, key: &str) -> usize {
    env.count(&ran_file(key))
}

/// `idem status --json`, its exit code and the job named `name`.
fn status_of(env: &Env, name: &str) -> (i32, serde_json::Value) {
    let ran = env.cmd(["status", "--json"]).run();
    let code = ran.code().expect("exited");
    let all = ran.json();
    let job = all
        .as_array()
        .expect("an array")
        .iter()
        .find(|job| job["job"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no job {name} in {all:#}"));
    (code, job)
}
