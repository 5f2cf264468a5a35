//! A run's trace as an outbox event: the spans, encoded once as an
//! OTLP/HTTP export request, are its body; delivering it is one POST of
//! that body to the traces endpoint, tried and owed again as a ping is.

use sha2::{Digest, Sha256};

use super::http::Request;
use crate::ledger::NewEvent;
use crate::trace::Exporter;

/// What an address of a trace event starts with.
pub const PREFIX: &str = "otlp:";

/// The event that delivers `spans` (an export request's bytes) of run
/// `run_id` to the exporter's endpoint: the run sends it within its
/// budget; else the next idem or `idem ledger deliver` does.
pub fn event(
    exporter: &Exporter,
    run_id: uuid::Uuid,
    job: &str,
    key: &str,
    spans: Vec<u8>,
) -> NewEvent {
    let digest = Sha256::digest(exporter.url.as_bytes());
    let short: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let payload = serde_json::json!({
        "key": key,
        "exit_code": null,
        "failures": 0,
        "alert": false,
        "headers": exporter.headers,
    });
    let address = format!("{PREFIX}{}", exporter.url);
    NewEvent {
        event_id: crate::id::new(),
        run_id,
        job: job.to_owned(),
        kind: "trace".to_owned(),
        target: format!("trace {short}"),
        payload: payload.to_string(),
        body: spans,
        dest: crate::ledger::dest(&address),
        address,
    }
}

/// The POST of a trace event: its spans as protobuf, with the headers
/// `OTEL_EXPORTER_OTLP_HEADERS` gave when the run was made.
pub fn request<'a>(url: &str, event: &'a NewEvent) -> Request<'a> {
    let headers: Vec<(String, String)> = serde_json::from_str::<serde_json::Value>(&event.payload)
        .ok()
        .and_then(|payload| serde_json::from_value(payload["headers"].clone()).ok())
        .unwrap_or_default();
    let mut all = vec![(
        "content-type".to_owned(),
        "application/x-protobuf".to_owned(),
    )];
    all.extend(headers);
    Request {
        post: true,
        url: url.to_owned(),
        headers: all,
        body: event.body.as_slice().into(),
    }
}
