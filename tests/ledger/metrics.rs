//! `idem ledger metrics`: the Prometheus text format.

use crate::util::{on_every_backend, Backend};

use super::sh;

on_every_backend!(metrics_are_the_prometheus_text_format,);

/// Checks one line of the Prometheus text exposition format and returns
/// (name, labels, value).
fn parse_sample(line: &str) -> (String, Vec<(String, String)>, f64) {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    assert!(
        !name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit()),
        "bad metric name in {line:?}"
    );
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            let eq = rest.find('=').expect("label=value");
            let label = &rest[..eq];
            assert!(
                !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "bad label name in {line:?}"
            );
            rest = rest[eq + 1..].strip_prefix('"').expect("a quoted value");
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                let (at, c) = chars.next().expect("a closing quote");
                match c {
                    '"' => break at,
                    '\\' => match chars.next().expect("an escape").1 {
                        'n' => value.push('\n'),
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        other => panic!("bad escape \\{other} in {line:?}"),
                    },
                    '\n' => panic!("raw newline in {line:?}"),
                    c => value.push(c),
                }
            };
            labels.push((label.to_owned(), value));
            rest = &rest[end + 1..];
            if let Some(more) = rest.strip_prefix(',') {
                rest = more;
            } else {
                rest = rest.strip_prefix('}').expect("a closing brace");
                break;
            }
        }
    }
    let value = rest.strip_prefix(' ').expect("a space before the value");
    let value: f64 = value.parse().expect("a float value");
    (name.to_owned(), labels, value)
}

fn metrics_are_the_prometheus_text_format(backend: &Backend) {
    let env = backend.env();
    let odd = r#"we"ird\key"#;
    sh(&env, odd, "true").succeeds();
    let force = |script: &str| {
        env.cmd([
            "run",
            "--key",
            odd,
            "--retries",
            "0",
            "--force",
            "--shell",
            "--",
            script,
        ])
    };
    force("exit 1").expect_code(1);
    force("exit 2").expect_code(2);
    sh(&env, "fine", "true").succeeds();

    let body = env.cmd(["ledger", "metrics"]).succeeds().stdout();
    let samples = checked_samples(&body);
    let get = |name: &str, key: &str, status: Option<&str>| -> f64 {
        samples
            .iter()
            .find(|(n, labels, _)| {
                n == name
                    && labels.contains(&("job".to_owned(), key.to_owned()))
                    && status.is_none_or(|s| labels.contains(&("status".to_owned(), s.to_owned())))
            })
            .unwrap_or_else(|| panic!("no {name} for {key} {status:?} in\n{body}"))
            .2
    };
    assert_eq!(get("idem_consecutive_failures", odd, None), 2.0);
    assert_eq!(get("idem_consecutive_failures", "fine", None), 0.0);
    assert_eq!(get("idem_last_run_status", odd, Some("failed")), 1.0);
    assert_eq!(get("idem_last_run_status", odd, Some("succeeded")), 0.0);
    assert_eq!(get("idem_last_run_exit_code", odd, None), 2.0);
    assert_eq!(get("idem_runs", odd, Some("succeeded")), 1.0);
    assert_eq!(get("idem_runs", odd, Some("failed")), 2.0);
    assert_eq!(get("idem_runs", odd, Some("running")), 0.0);
    let success = get("idem_last_success_timestamp_seconds", odd, None);
    let started = get("idem_last_run_timestamp_seconds", odd, None);
    assert!(success > 1.6e9 && started >= success, "{success} {started}");
    assert!(body.contains(r#"job="we\"ird\\key""#), "{body}");
    // Each key was its own job here; --per-key adds the per-key families.
    env.cmd(["ledger", "metrics", "--per-key"])
        .run()
        .stdout_has(r#"idem_key_consecutive_failures{key="we\"ird\\key"} 2"#);

    // An empty ledger: an empty but valid exposition.
    let empty = backend.env();
    empty.cmd(["ledger", "import"]).stdin("").succeeds();
    let none = empty.cmd(["ledger", "metrics"]).succeeds();
    assert!(none.stdout().lines().all(|line| line.starts_with('#')));
}

/// A sample: its name, its labels and its value.
type Sample = (String, Vec<(String, String)>, f64);

/// The samples of an exposition, each family's HELP and TYPE checked, and
/// each sample checked to follow its family's TYPE.
fn checked_samples(body: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut typed = std::collections::HashSet::new();
    for line in body.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            let words: Vec<&str> = comment.splitn(3, ' ').collect();
            assert!(matches!(words[0], "HELP" | "TYPE"), "{line}");
            assert!(words[1].starts_with("idem_"), "{line}");
            if words[0] == "TYPE" {
                assert!(matches!(words[2], "gauge" | "counter"), "{line}");
                assert!(typed.insert(words[1].to_owned()), "TYPE twice: {line}");
            }
            continue;
        }
        let (name, labels, value) = parse_sample(line);
        assert!(name.starts_with("idem_"), "{line}");
        assert!(typed.contains(&name), "a sample before its TYPE: {line}");
        samples.push((name, labels, value));
    }
    samples
}
