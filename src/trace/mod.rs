//! A trace of a run over OTLP/HTTP: where it goes (OpenTelemetry's own
//! variables, or `--trace URL`), the W3C trace context a run is a child
//! of and hands its command (`TRACEPARENT`), and the spans of a run,
//! encoded as one export request for the outbox to deliver.
//!
//! Nothing here runs unless tracing is asked for: a run without an OTEL
//! variable or `--trace` reads a few variables of its own environment and
//! makes nothing.

pub mod proto;
pub mod spans;

pub use spans::{Recorder, SpanId};

/// Where a run's spans go, and what is said of what sent them.
#[derive(Debug, Clone)]
pub struct Exporter {
    /// The traces URL, `/v1/traces` included.
    pub url: String,
    /// `OTEL_EXPORTER_OTLP_HEADERS`, values percent-decoded.
    pub headers: Vec<(String, String)>,
    /// The resource's attributes: `OTEL_RESOURCE_ATTRIBUTES`, then
    /// `service.name` (`OTEL_SERVICE_NAME`, else `idem`).
    pub resource: Vec<(String, String)>,
}

impl Exporter {
    /// The exporter asked for: `--trace URL` (or `IDEM_TRACE`) as it is,
    /// else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces`; none when
    /// `OTEL_SDK_DISABLED=true` turns OpenTelemetry's variables off (the
    /// flag still counts: it was asked for by name).
    pub fn from_env(flag: Option<&str>) -> Result<Option<Exporter>, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let disabled =
            var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let url = match flag.filter(|flag| !flag.is_empty()) {
            Some(flag) => flag.to_owned(),
            None if disabled => return Ok(None),
            None => match (
                var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
                var("OTEL_EXPORTER_OTLP_ENDPOINT"),
            ) {
                (Some(traces), _) => traces,
                (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
                (None, None) => return Ok(None),
            },
        };
        let url = url.trim().to_owned();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            // Not shown: a URL may hold a secret.
            return Err("the traces endpoint is not an http:// or https:// URL; OTLP/HTTP needs one (such as http://localhost:4318/v1/traces)".to_owned());
        }
        if let Some(protocol) =
            var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        {
            if protocol.trim() != "http/protobuf" {
                return Err(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: idem sends traces over http/protobuf only; unset it or set it to http/protobuf"
                ));
            }
        }
        let headers = pairs(
            &var("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
                .or_else(|| var("OTEL_EXPORTER_OTLP_HEADERS"))
                .unwrap_or_default(),
        );
        let mut resource = pairs(&var("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default());
        let service = var("OTEL_SERVICE_NAME")
            .or_else(|| {
                resource
                    .iter()
                    .find(|(k, _)| k == "service.name")
                    .map(|(_, v)| v.clone())
            })
            .unwrap_or_else(|| "idem".to_owned());
        resource.retain(|(key, _)| key != "service.name");
        resource.push(("service.name".to_owned(), service));
        Ok(Some(Exporter {
            url,
            headers,
            resource,
        }))
    }
}

/// `k=v,k2=v2` as OpenTelemetry's variables write lists, values
/// percent-decoded; a member without `=` is passed by, as the SDKs do.
fn pairs(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter_map(|member| member.split_once('='))
        .map(|(key, value)| {
            let value = percent_encoding::percent_decode_str(value.trim()).decode_utf8_lossy();
            (key.trim().to_owned(), value.into_owned())
        })
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

/// A W3C trace context: the trace, the span that is the parent, the flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub flags: u8,
}

impl Context {
    /// `00-<32 hex>-<16 hex>-<2 hex>`; none for any other form, an id of
    /// zeros or version `ff`, which the spec says to ignore.
    pub fn parse(traceparent: &str) -> Option<Context> {
        let parts: Vec<&str> = traceparent.trim().split('-').collect();
        let [version, trace, span, flags, ..] = parts[..] else {
            return None;
        };
        if version.len() != 2 || version == "ff" || (version == "00" && parts.len() != 4) {
            return None;
        }
        let trace_id: [u8; 16] = hex(trace)?.try_into().ok()?;
        let span_id: [u8; 8] = hex(span)?.try_into().ok()?;
        let flags = *hex(flags)?.first().filter(|_| flags.len() == 2)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Context {
            trace_id,
            span_id,
            flags,
        })
    }

    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            to_hex(&self.trace_id),
            to_hex(&self.span_id),
            self.flags
        )
    }
}

/// Lowercase hex only, as the W3C format has it.
fn hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2)
        || !text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).ok())
        .collect()
}

pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_and_written_back() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = Context::parse(text).expect("a context");
        assert_eq!(context.flags, 1);
        assert_eq!(context.traceparent(), text);
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "nonsense",
        ] {
            assert_eq!(Context::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn lists_are_read_as_the_sdks_read_them() {
        assert_eq!(
            pairs("a=1, b = two%20words,broken,=x"),
            [
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "two words".to_owned())
            ]
        );
    }
}
