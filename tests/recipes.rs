//! The recipes in `examples/systemd`, `examples/kubernetes` and
//! `examples/ci`, tested as far as one machine allows: each file is checked
//! by the tool that reads it (`systemd-analyze verify`; the CronJob against
//! Kubernetes' JSON schema, kept in `tests/data`), its fields are checked,
//! and its idem command line is run as the recipe runs it (twice, and at
//! once, against a real ledger) to show the work happens exactly once.
//!
//! YAML is read by Debian's python3 with its yaml and jsonschema modules.
//! Where a tool is missing the test fails, naming it (`scripts/test`
//! installs them).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::pg::Server;
use crate::util::{assert_code, text, Env};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Debian's python3, where `apt-get install python3-yaml python3-jsonschema`
/// puts the modules.
const PYTHON: &str = "/usr/bin/python3";

fn example(path: &str) -> PathBuf {
    Path::new(ROOT).join("examples").join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// Fails `test`, saying why it cannot run.
fn missing<T>(test: &str, what: &str) -> Option<T> {
    crate::util::require(false, &format!("{test}: {what}"));
    None
}

fn python(test: &str) -> Option<()> {
    let ready = Command::new(PYTHON)
        .args(["-c", "import yaml, jsonschema"])
        .output()
        .is_ok_and(|output| output.status.success());
    if ready {
        Some(())
    } else {
        missing(
            test,
            "/usr/bin/python3 with the yaml and jsonschema modules \
             (apt-get install python3-yaml python3-jsonschema)",
        )
    }
}

/// The YAML documents of `path`, as JSON.
fn yaml(path: &Path) -> Vec<Value> {
    let output = Command::new(PYTHON)
        .args([
            "-c",
            "import json, sys, yaml\n\
             print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))",
        ])
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{} is not YAML: {}",
        path.display(),
        text(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("python prints JSON")
}

/// Errors of the documents in `path` (YAML or JSON) against the JSON
/// schema `schema`, one a line; empty when valid.
fn schema_errors(schema: &Path, path: &Path) -> String {
    let output = Command::new(PYTHON)
        .args([
            "-c",
            "import json, sys, yaml, jsonschema\n\
             schema = json.load(open(sys.argv[1]))\n\
             check = jsonschema.validators.validator_for(schema)\n\
             check.check_schema(schema)\n\
             for doc in yaml.safe_load_all(open(sys.argv[2])):\n\
             \x20   for e in check(schema).iter_errors(doc):\n\
             \x20       print('/'.join(map(str, e.absolute_path)) + ': ' + e.message)",
        ])
        .arg(schema)
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
}

/// A folder with `idem` (this build) and the recipes' commands: `job`
/// counts its runs in `counter` and takes a second, so that two runs at
/// once would overlap.
fn stand_ins(env: &Env) -> PathBuf {
    let bin = env.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_idem"), bin.join("idem")).unwrap();
    let job = bin.join("job");
    std::fs::write(
        &job,
        format!("#!/bin/sh\n{}\nsleep 1\n", env.count_cmd("counter")),
    )
    .unwrap();
    std::fs::set_permissions(&job, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Runs a recipe's command line with `sh -c`, in a clean environment
/// holding only PATH (the stand-ins first), HOME and `vars`.
fn sh(env: &Env, line: &str, vars: &BTreeMap<String, String>) -> std::process::Child {
    let bin = env.path("bin");
    Command::new("/bin/sh")
        .args(["-c", line])
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", env.dir.path())
        .envs(vars)
        .current_dir(env.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs")
}

/// The line run twice at once (or, with `at_once` false, one after the
/// other), then once more: every run exits 0 and the job ran exactly once.
fn once(env: &Env, line: &str, vars: &BTreeMap<String, String>, at_once: bool) {
    let mut outputs = Vec::new();
    if at_once {
        let first = sh(env, line, vars);
        let second = sh(env, line, vars);
        outputs.push(first.wait_with_output().unwrap());
        outputs.push(second.wait_with_output().unwrap());
    } else {
        outputs.push(sh(env, line, vars).wait_with_output().unwrap());
    }
    outputs.push(sh(env, line, vars).wait_with_output().unwrap());
    for output in &outputs {
        assert_code(output, 0);
    }
    assert_eq!(env.count("counter"), 1, "{line}: the job ran exactly once");
}

/// `Key=value` settings of a unit file's `[section]`, in order.
fn unit(path: &Path, section: &str) -> Vec<(String, String)> {
    let mut settings = Vec::new();
    let mut inside = false;
    for line in read(path).lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
        } else if inside && !line.is_empty() && !line.starts_with('#') {
            let (key, value) = line.split_once('=').expect("Key=value");
            settings.push((key.to_owned(), value.to_owned()));
        }
    }
    settings
}

fn setting<'a>(settings: &'a [(String, String)], key: &str) -> Option<&'a str> {
    settings
        .iter()
        .find(|(name, _)| name == key)
        .map(|(_, value)| value.as_str())
}

#[test]
fn the_systemd_timer_runs_the_daily_job_once() {
    let service = example("systemd/idem-job.service");
    let timer = example("systemd/idem-job.timer");
    let timing = unit(&timer, "Timer");
    assert_eq!(setting(&timing, "OnCalendar"), Some("daily"));
    assert_eq!(setting(&timing, "Persistent"), Some("true"));
    assert_eq!(
        setting(&unit(&timer, "Install"), "WantedBy"),
        Some("timers.target")
    );
    let settings = unit(&service, "Service");
    assert_eq!(setting(&settings, "Type"), Some("oneshot"));
    assert_eq!(setting(&settings, "KillMode"), Some("mixed"));
    assert_eq!(setting(&settings, "StateDirectory"), Some("idem"));
    let exec = setting(&settings, "ExecStart").expect("ExecStart");
    assert!(
        exec.starts_with("/usr/bin/idem run --key 'job-{date}' -- "),
        "{exec}"
    );
    let mut vars = BTreeMap::new();
    for (key, value) in settings.iter().filter(|(key, _)| key == "Environment") {
        for assignment in value.split_whitespace() {
            let (name, value) = assignment.split_once('=').expect("NAME=value");
            vars.insert(name.to_owned(), value.to_owned());
        }
        assert!(!value.contains(['"', '\'']), "{key}={value}: unquoted here");
    }
    assert_eq!(vars["IDEM_DB"], "/var/lib/idem/ledger.db");

    // The command as systemd runs it, with this build, a stand-in job and
    // a ledger in the tempdir. Started again the same day: skipped. (systemd
    // never starts a unit twice at once.)
    let env = Env::new();
    let bin = stand_ins(&env);
    vars.insert("IDEM_DB".into(), env.db().display().to_string());
    let line = exec
        .replace("/usr/bin/idem", &bin.join("idem").display().to_string())
        .replace("/usr/local/bin/job", &bin.join("job").display().to_string());
    once(&env, &line, &vars, false);
    let runs = env.list_json();
    let key = runs[0]["key"].as_str().unwrap();
    assert!(
        key.starts_with("job-20") && key.len() == "job-2026-01-01".len(),
        "{key}"
    );

    // systemd-analyze reads both units (with ExecStart naming this build,
    // since it checks that the program exists): no error, no warning.
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        return missing(
            "the_systemd_timer_runs_the_daily_job_once",
            "systemd-analyze (the systemd package)",
        )
        .unwrap_or(());
    };
    assert!(version.status.success());
    let units = env.path("units");
    std::fs::create_dir_all(&units).unwrap();
    let idem = bin.join("idem").display().to_string();
    std::fs::write(
        units.join("idem-job.service"),
        read(&service).replace("/usr/bin/idem", &idem),
    )
    .unwrap();
    std::fs::copy(&timer, units.join("idem-job.timer")).unwrap();
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(units.join("idem-job.service"))
        .arg(units.join("idem-job.timer"))
        .output()
        .expect("systemd-analyze runs");
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("idem-job"), "{stderr}");
}

#[test]
fn the_systemd_service_serves_the_board_on_loopback() {
    let service = example("systemd/idem-serve.service");
    let settings = unit(&service, "Service");
    assert_eq!(setting(&settings, "Type"), Some("exec"));
    assert_eq!(setting(&settings, "StateDirectory"), Some("idem"));
    assert_eq!(
        setting(&settings, "Environment"),
        Some("IDEM_DB=/var/lib/idem/ledger.db")
    );
    assert_eq!(
        setting(&settings, "ExecStart"),
        Some("/usr/bin/idem serve --listen 127.0.0.1:8417")
    );
    assert_eq!(
        setting(&unit(&service, "Install"), "WantedBy"),
        Some("multi-user.target")
    );
    // systemd-analyze reads it (with ExecStart naming this build): no
    // error, no warning.
    let env = Env::new();
    let units = env.path("units");
    std::fs::create_dir_all(&units).unwrap();
    let installed = units.join("idem-serve.service");
    std::fs::write(
        &installed,
        read(&service).replace("/usr/bin/idem", env!("CARGO_BIN_EXE_idem")),
    )
    .unwrap();
    let Ok(output) = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&installed)
        .output()
    else {
        return missing(
            "the_systemd_service_serves_the_board_on_loopback",
            "systemd-analyze (the systemd package)",
        )
        .unwrap_or(());
    };
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("idem-serve"), "{stderr}");
}

#[test]
fn the_kubernetes_cronjob_makes_one_report_a_day() {
    let test = "the_kubernetes_cronjob_makes_one_report_a_day";
    if python(test).is_none() {
        return;
    }
    let path = example("kubernetes/cronjob.yaml");
    let schema = Path::new(ROOT).join("tests/data/cronjob-batch-v1.schema.json");
    let errors = schema_errors(&schema, &path);
    assert!(
        errors.is_empty(),
        "{} against the schema:\n{errors}",
        path.display()
    );

    let docs = yaml(&path);
    assert_eq!(docs.len(), 1);
    let cronjob = &docs[0];
    assert_eq!(cronjob["apiVersion"], "batch/v1");
    assert_eq!(cronjob["kind"], "CronJob");
    let spec = &cronjob["spec"];
    assert_eq!(spec["concurrencyPolicy"], "Forbid");
    let pod = &spec["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let container = &containers[0];
    let command: Vec<&str> = container["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|word| word.as_str().unwrap())
        .collect();
    assert_eq!(
        command[..5],
        ["/usr/bin/idem", "run", "--key", "report-{date}", "--"]
    );
    let mut vars = BTreeMap::new();
    for var in container["env"].as_array().unwrap() {
        let name = var["name"].as_str().unwrap().to_owned();
        if name == "IDEM_DB" {
            let secret = &var["valueFrom"]["secretKeyRef"];
            assert!(
                secret["name"].is_string() && secret["key"].is_string(),
                "{var}"
            );
        } else {
            vars.insert(name, var["value"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(vars["TZ"], spec["timeZone"].as_str().unwrap());

    // The schema is not a formality: a misspelt field fails it.
    let mut typo = cronjob.clone();
    typo["spec"]["concurrencypolicy"] = typo["spec"]["concurrencyPolicy"].take();
    typo["spec"]
        .as_object_mut()
        .unwrap()
        .remove("concurrencyPolicy");
    let env = Env::new();
    let typo_path = env.path("typo.json");
    std::fs::write(&typo_path, typo.to_string()).unwrap();
    let errors = schema_errors(&schema, &typo_path);
    assert!(errors.contains("concurrencypolicy"), "{errors}");

    // Two pods of one schedule at once, and a third later, on a shared
    // PostgreSQL ledger: one report.
    let Some(server) = Server::start(test) else {
        return;
    };
    let bin = stand_ins(&env);
    vars.insert("IDEM_DB".into(), server.url());
    let mut words = vec![bin.join("idem").display().to_string()];
    words.extend(command[1..5].iter().map(|word| format!("'{word}'")));
    words.push(bin.join("job").display().to_string());
    once(&env, &words.join(" "), &vars, true);
}

/// The deploy step of a CI recipe run as the CI service runs it, against a
/// shared PostgreSQL ledger: a run and a re-run at once deploy once, a
/// later re-run skips, another commit deploys.
fn deploys_once_per_commit(test: &str, line: &str, mut vars: BTreeMap<String, String>, sha: &str) {
    let Some(server) = Server::start(test) else {
        return;
    };
    let env = Env::new();
    let bin = stand_ins(&env);
    let deploy = env.path("deploy.sh");
    std::fs::write(
        &deploy,
        format!("#!/bin/sh\nexec {}\n", bin.join("job").display()),
    )
    .unwrap();
    std::fs::set_permissions(&deploy, std::fs::Permissions::from_mode(0o755)).unwrap();
    vars.insert("IDEM_DB".into(), server.url());
    vars.insert("CI".into(), "true".into());
    vars.insert(sha.into(), "0123abcd".into());
    once(&env, line, &vars, true);
    vars.insert(sha.into(), "4567ef01".into());
    let output = sh(&env, line, &vars).wait_with_output().unwrap();
    assert_code(&output, 0);
    assert_eq!(env.count("counter"), 2, "another commit deploys");
}

#[test]
fn the_github_actions_step_deploys_once_per_commit() {
    let test = "the_github_actions_step_deploys_once_per_commit";
    if python(test).is_none() {
        return;
    }
    let workflow = &yaml(&example("ci/github-actions.yml"))[0];
    let steps = workflow["jobs"]["deploy"]["steps"].as_array().unwrap();
    let step = steps
        .iter()
        .find(|step| {
            step["run"]
                .as_str()
                .is_some_and(|run| run.contains("idem run"))
        })
        .expect("a step that runs idem");
    let line = step["run"].as_str().unwrap();
    assert!(line.contains("--key \"deploy-$GITHUB_SHA\""), "{line}");
    let mut vars = BTreeMap::new();
    for (name, value) in step["env"].as_object().unwrap() {
        let value = value.as_str().unwrap();
        if name == "IDEM_DB" {
            assert_eq!(value, "${{ secrets.IDEM_DB }}");
        } else {
            vars.insert(name.clone(), value.to_owned());
        }
    }
    assert!(
        vars.contains_key("IDEM_WAIT"),
        "a re-run waits for a deploy under way"
    );
    deploys_once_per_commit(test, line, vars, "GITHUB_SHA");
}

#[test]
fn the_gitlab_ci_job_deploys_once_per_commit() {
    let test = "the_gitlab_ci_job_deploys_once_per_commit";
    if python(test).is_none() {
        return;
    }
    let pipeline = &yaml(&example("ci/gitlab-ci.yml"))[0];
    let job = &pipeline["deploy"];
    let script = job["script"].as_array().unwrap();
    let line = script
        .iter()
        .filter_map(Value::as_str)
        .find(|line| line.contains("idem run"))
        .expect("a script line that runs idem");
    assert!(line.contains("--key \"deploy-$CI_COMMIT_SHA\""), "{line}");
    let vars: BTreeMap<String, String> = job["variables"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, value)| (name.clone(), value.as_str().unwrap().to_owned()))
        .collect();
    assert!(
        !vars.contains_key("IDEM_DB"),
        "the ledger's URL is a masked variable"
    );
    assert!(
        vars.contains_key("IDEM_WAIT"),
        "a retry waits for a deploy under way"
    );
    deploys_once_per_commit(test, line, vars, "CI_COMMIT_SHA");
}

#[test]
fn the_recipes_and_the_package_name_this_version() {
    let version = env!("CARGO_PKG_VERSION");
    let binary = format!("idem-{version}-x86_64-linux");
    for recipe in ["ci/github-actions.yml", "ci/gitlab-ci.yml"] {
        let text = read(&example(recipe));
        assert!(text.contains(&binary), "{recipe} should install {binary}");
    }
    let changelog = read(&Path::new(ROOT).join("packaging/deb/changelog"));
    let top = changelog.lines().next().unwrap_or_default();
    assert!(
        top.starts_with(&format!("idem ({version}-1) ")),
        "packaging/deb/changelog should start with an entry for {version}-1: {top}"
    );
}
