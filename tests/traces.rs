//! A trace of each run over OTLP/HTTP, as a collector on loopback decodes
//! it with opentelemetry-proto's published definitions: the run's span and
//! its children (the claim, each attempt, each backoff) with their ids,
//! parents, times and attributes; a `TRACEPARENT` idem was given and the
//! one it gives its command; spans owed while the collector is down and
//! delivered once when it is back; a collector that hangs holding no run.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::util::{eventually, require, wait_for_file, Env};

/// The collector of `tests/data/otlp_collector.py`, stopped when dropped.
struct Collector {
    child: Child,
    out: PathBuf,
    port: u16,
}

impl Collector {
    fn start(env: &Env, port: u16, mode: &str) -> Collector {
        require(
            Command::new("python3")
                .args([
                    "-c",
                    "import opentelemetry.proto.collector.trace.v1.trace_service_pb2",
                ])
                .status()
                .is_ok_and(|status| status.success()),
            "python3 with opentelemetry-proto (pip install opentelemetry-proto)",
        );
        let out = env.path(&format!("collector-{mode}-{port}"));
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/otlp_collector.py");
        let mut child = Command::new("python3")
            .args([script, &port.to_string(), out.to_str().unwrap(), mode])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let port_file = PathBuf::from(format!("{}.port", out.display()));
        wait_for_file(&port_file, Duration::from_secs(30), &mut child);
        let port = std::fs::read_to_string(&port_file)
            .unwrap()
            .parse()
            .unwrap();
        Collector { child, out, port }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The export requests received, in order.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// The spans of the one request received.
    fn spans(&self) -> Vec<Value> {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "one export request: {requests:?}");
        let scopes = &requests[0]["resources"][0]["scopes"];
        assert_eq!(scopes[0]["name"], "idem");
        scopes[0]["spans"].as_array().unwrap().clone()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|span| span["name"] == name)
        .unwrap_or_else(|| panic!("no span {name}: {spans:?}"))
}

fn times(span: &Value) -> (u64, u64) {
    let (start, end) = (
        span["start"].as_u64().unwrap(),
        span["end"].as_u64().unwrap(),
    );
    assert!(start > 0 && start <= end, "{span}");
    (start, end)
}

#[test]
fn a_run_with_two_attempts_and_a_backoff_is_one_trace() {
    let env = Env::new();
    let collector = Collector::start(&env, 0, "ok");
    let marker = env.path("tried");
    let script = format!(
        "test -e '{0}' || {{ touch '{0}'; exit 3; }}",
        marker.display()
    );
    env.cmd([
        "run",
        "--key",
        "nightly:1",
        "--job",
        "nightly",
        "--retries",
        "1",
        "--backoff",
        "10ms",
        "--shell",
        "--",
        &script,
    ])
    .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint() + "/")
    .env(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "authorization=Bearer%20s3cret",
    )
    .env("OTEL_SERVICE_NAME", "backups")
    .env(
        "OTEL_RESOURCE_ATTRIBUTES",
        "deployment.environment=prod,service.name=other",
    )
    .succeeds();
    let request = &collector.requests()[0];
    assert_eq!(request["path"], "/v1/traces");
    assert_eq!(request["content_type"], "application/x-protobuf");
    assert_eq!(request["authorization"], "Bearer s3cret");
    let resource = &request["resources"][0]["attributes"];
    assert_eq!(resource["service.name"], "backups");
    assert_eq!(resource["deployment.environment"], "prod");
    let spans = collector.spans();
    let names: Vec<&str> = spans.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "idem run nightly",
            "claim",
            "attempt 1",
            "backoff",
            "attempt 2"
        ]
    );
    let run = &spans[0];
    let shown = env.show_json("nightly:1");
    assert_eq!(run["parent"], "", "a root without a TRACEPARENT");
    assert_eq!(run["trace_id"].as_str().unwrap().len(), 32);
    assert_ne!(run["trace_id"], "0".repeat(32));
    let attributes = &run["attributes"];
    assert_eq!(attributes["idem.key"], "nightly:1");
    assert_eq!(attributes["idem.job"], "nightly");
    assert_eq!(attributes["idem.run_id"], shown["run_id"]);
    assert!(attributes["idem.fence"].is_i64(), "{attributes}");
    assert!(attributes["host.name"]
        .as_str()
        .is_some_and(|h| !h.is_empty()));
    assert_eq!(attributes["process.exit.code"], 0);
    assert_eq!(attributes["idem.cause"], "exit 0");
    assert_eq!(run["status"], 0);
    let mut ids = vec![run["span_id"].as_str().unwrap()];
    for child in &spans[1..] {
        assert_eq!(child["trace_id"], run["trace_id"]);
        assert_eq!(child["parent"], run["span_id"], "{child}");
        ids.push(child["span_id"].as_str().unwrap());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5, "every span its own id");
    let first = named(&spans, "attempt 1");
    assert_eq!(first["attributes"]["process.exit.code"], 3);
    assert_eq!(first["attributes"]["idem.cause"], "exit 3");
    assert_eq!(first["status"], 2, "an attempt that failed is an error");
    assert_eq!(named(&spans, "attempt 2")["status"], 0);
    // In order, each inside the run's span.
    let (run_start, run_end) = times(run);
    let mut last = run_start;
    for child in &spans[1..] {
        let (start, end) = times(child);
        assert!(
            start >= last && end <= run_end,
            "{child} after {last}, before {run_end}"
        );
        last = end;
    }
}

#[test]
fn a_run_inside_a_traceparent_is_its_child_and_its_command_gets_its_attempt() {
    let env = Env::new();
    let collector = Collector::start(&env, 0, "ok");
    let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let script = format!(
        "echo \"$TRACEPARENT\" > '{}'; echo \"$TRACESTATE\" > '{}'",
        env.path("traceparent").display(),
        env.path("tracestate").display()
    );
    env.cmd(["run", "--key", "ci", "--shell", "--", &script])
        .env("IDEM_TRACE", collector.endpoint() + "/v1/traces")
        .env("TRACEPARENT", format!("00-{trace}-{parent}-01"))
        .env("TRACESTATE", "vendor=abc")
        .succeeds();
    let spans = collector.spans();
    let run = &spans[0];
    assert_eq!(run["trace_id"], trace);
    assert_eq!(run["parent"], parent);
    assert_eq!(run["trace_state"], "vendor=abc");
    assert_eq!(
        run["flags"].as_u64().unwrap() & 0x3ff,
        0x301,
        "sampled, remote parent"
    );
    let attempt = named(&spans, "attempt 1");
    assert_eq!(attempt["trace_id"], trace);
    assert_eq!(
        attempt["flags"].as_u64().unwrap() & 0x3ff,
        0x101,
        "a local parent"
    );
    let given = std::fs::read_to_string(env.path("traceparent")).unwrap();
    assert_eq!(
        given.trim(),
        format!("00-{trace}-{}-01", attempt["span_id"].as_str().unwrap())
    );
    let state = std::fs::read_to_string(env.path("tracestate")).unwrap();
    assert_eq!(state.trim(), "vendor=abc");
}

#[test]
fn spans_owed_while_the_collector_is_down_are_delivered_once_when_it_is_back() {
    let env = Env::new();
    // A port nothing listens on: taken, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}/v1/traces");
    env.cmd(["run", "--key", "k", "--trace", &endpoint, "--", "true"])
        .succeeds()
        .stderr_has("could not send the trace ping to otlp:http://127.0.0.1");
    let collector = Collector::start(&env, port, "ok");
    assert!(collector.requests().is_empty());
    env.cmd(["ledger", "deliver"])
        .succeeds()
        .stdout_has("delivered 1, failed 0; 0 still owed");
    env.cmd(["ledger", "deliver"]).succeeds();
    env.cmd(["run", "--key", "k", "--trace", &endpoint, "--", "true"])
        .succeeds();
    let spans = collector.spans();
    assert_eq!(
        spans[0]["attributes"]["idem.run_id"],
        env.show_json("k")["run_id"]
    );
    assert_eq!(spans.len(), 3, "the run, its claim, its attempt: {spans:?}");
}

#[test]
fn a_collector_that_hangs_holds_no_run_past_its_budget() {
    let env = Env::new();
    let collector = Collector::start(&env, 0, "hang");
    env.cmd([
        "run",
        "--key",
        "k",
        "--retries",
        "0",
        "--",
        "sh",
        "-c",
        "exit 4",
    ])
    .env(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        collector.endpoint() + "/v1/traces",
    )
    .expect_code(4)
    .stderr_has("could not send the trace ping");
    // The run is over while the collector still holds the request.
    let hung = PathBuf::from(format!("{}.hung", collector.out.display()));
    eventually(
        "the request to reach the collector",
        Duration::from_secs(30),
        || hung.exists(),
    );
    assert!(!PathBuf::from(format!("{}.answered", collector.out.display())).exists());
}

#[test]
fn without_otel_variables_or_the_flag_there_is_no_trace() {
    let env = Env::new();
    let script = format!(
        "echo \"${{TRACEPARENT-unset}}\" > '{}'",
        env.path("tp").display()
    );
    env.cmd(["run", "--key", "k", "--shell", "--", &script])
        .env("OTEL_SDK_DISABLED", "true")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .succeeds()
        .stderr_is("");
    assert_eq!(std::fs::read_to_string(env.path("tp")).unwrap(), "unset\n");
    assert_eq!(env.show_json("k")["status"], "succeeded");
}

#[test]
fn a_bad_traces_endpoint_is_one_line() {
    let env = Env::new();
    env.cmd([
        "run",
        "--key",
        "k",
        "--trace",
        "localhost:4318",
        "--",
        "true",
    ])
    .expect_code(2)
    .stderr_one_line()
    .stderr_has("not an http:// or https:// URL");
    env.cmd(["run", "--key", "k", "--", "true"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .expect_code(2)
        .stderr_one_line()
        .stderr_has("http/protobuf only");
    env.cmd([
        "run",
        "--key",
        "k",
        "--ping",
        "otlp:http://127.0.0.1:4318",
        "--",
        "true",
    ])
    .expect_code(2)
    .stderr_has("--trace URL");
}
