//! The spans of one run, kept as the run goes and encoded once at its end:
//! the run's span (a child of the `TRACEPARENT` idem was given, else a
//! trace's root) and its children, the claim, each attempt and each
//! backoff.

use std::sync::Mutex;
use std::time::SystemTime;

use prost::Message;

use super::proto::{self, KeyValue};
use super::{Context, Exporter};

/// A span's id.
pub type SpanId = [u8; 8];

/// The trace of one run, filled in as it goes.
pub struct Recorder {
    pub exporter: Exporter,
    /// The run's own span: its trace, its id, the flags it passes on.
    pub run: Context,
    /// The span of the process that started idem, if it said one: the
    /// run's span's parent, remote (flags bit 0x200).
    parent: Option<SpanId>,
    /// `TRACESTATE`, passed on as it came.
    pub tracestate: String,
    started: u64,
    spans: Mutex<Vec<proto::Span>>,
}

/// Now, in nanoseconds since the epoch, as OTLP counts time.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// A new span id, random and never zero.
pub fn span_id() -> SpanId {
    loop {
        let id = fastrand::u64(..).to_be_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

impl Recorder {
    /// A run begins now: a child of `TRACEPARENT` (and its `TRACESTATE`)
    /// when idem's environment holds a valid one, else a new trace.
    pub fn begin(exporter: Exporter) -> Recorder {
        let given = std::env::var("TRACEPARENT")
            .ok()
            .and_then(|text| Context::parse(&text));
        let trace_id = given.map_or_else(
            || loop {
                let id = fastrand::u128(..).to_be_bytes();
                if id != [0; 16] {
                    break id;
                }
            },
            |given| given.trace_id,
        );
        let tracestate = match given {
            Some(_) => std::env::var("TRACESTATE").unwrap_or_default(),
            None => String::new(),
        };
        Recorder {
            exporter,
            run: Context {
                trace_id,
                span_id: span_id(),
                flags: given.map_or(1, |given| given.flags),
            },
            parent: given.map(|given| given.span_id),
            tracestate,
            started: now(),
            spans: Mutex::new(Vec::new()),
        }
    }

    /// The `TRACEPARENT` of span `id` of this run, for the command.
    pub fn traceparent(&self, id: SpanId) -> String {
        Context {
            span_id: id,
            ..self.run
        }
        .traceparent()
    }

    /// A child of the run's span, ended: the claim, an attempt, a backoff.
    pub fn child(
        &self,
        id: SpanId,
        name: &str,
        times: (u64, u64),
        attributes: Vec<KeyValue>,
        error: Option<String>,
    ) {
        let span = self.span(id, Some(self.run.span_id), name, times, attributes, error);
        self.spans
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(span);
    }

    fn span(
        &self,
        id: SpanId,
        parent: Option<SpanId>,
        name: &str,
        (start, end): (u64, u64),
        attributes: Vec<KeyValue>,
        error: Option<String>,
    ) -> proto::Span {
        proto::Span {
            trace_id: self.run.trace_id.to_vec(),
            span_id: id.to_vec(),
            trace_state: self.tracestate.clone(),
            parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default(),
            name: name.to_owned(),
            kind: 1,
            start_time_unix_nano: start,
            end_time_unix_nano: end.max(start),
            attributes,
            events: Vec::new(),
            links: Vec::new(),
            status: Some(match error {
                Some(message) => proto::Status { message, code: 2 },
                None => proto::Status::default(),
            }),
            flags: u32::from(self.run.flags)
                | 0x100
                | if parent.is_some() && parent == self.parent {
                    0x200
                } else {
                    0
                },
        }
    }

    /// The run ends now: its span, with `attributes`, and its children,
    /// as one export request's bytes.
    pub fn finish(&self, name: &str, attributes: Vec<KeyValue>, error: Option<String>) -> Vec<u8> {
        let run = self.span(
            self.run.span_id,
            self.parent,
            name,
            (self.started, now()),
            attributes,
            error,
        );
        let mut spans = std::mem::take(
            &mut *self
                .spans
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        spans.insert(0, run);
        self.request(spans)
    }

    fn request(&self, spans: Vec<proto::Span>) -> Vec<u8> {
        let resource = self
            .exporter
            .resource
            .iter()
            .map(|(key, value)| proto::text(key, value.as_str()))
            .collect();
        proto::ExportTraceServiceRequest {
            resource_spans: vec![proto::ResourceSpans {
                resource: Some(proto::Resource {
                    attributes: resource,
                }),
                scope_spans: vec![proto::ScopeSpans {
                    scope: Some(proto::InstrumentationScope {
                        name: "idem".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                    }),
                    spans,
                }],
            }],
        }
        .encode_to_vec()
    }
}
