//! `--ping sentry:DSN`: Sentry's cron check-ins, each an envelope of one
//! `check_in` item sent to the project's envelope endpoint. The claim
//! checks in `in_progress`; the outcome `ok` or `error` with the same
//! `check_in_id` (the run id) and the run's duration. Every check-in
//! carries the monitor's config, so that Sentry makes or updates the
//! monitor: the job's period as a crontab, its time zone, and
//! `--alert-after` as the failures that open an issue.

use serde::Serialize;

use super::events::Payload;
use super::http::Request;
use crate::ledger::NewEvent;

/// A DSN's parts: `SCHEME://KEY@HOST[:PORT][/PATH]/PROJECT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dsn {
    /// `SCHEME://HOST[:PORT][/PATH]`.
    base: String,
    /// The public key: a secret, never printed.
    pub key: String,
    project: String,
}

impl Dsn {
    pub fn parse(dsn: &str) -> Result<Dsn, String> {
        let unusable = |why: &str| {
            Err(format!(
                "--ping sentry: needs a DSN like https://KEY@o0.ingest.sentry.io/123 ({why})"
            ))
        };
        let Ok(url) = crate::url::Url::parse(dsn) else {
            return unusable("no scheme, or an @ after the host");
        };
        let Some(key) = url.user().filter(|key| !key.is_empty()) else {
            return unusable("no key before the host");
        };
        let key = String::from_utf8_lossy(&key).into_owned();
        let Some((path, project)) = url.rest.trim_end_matches('/').rsplit_once('/') else {
            return unusable("no project id after the host");
        };
        if project.is_empty() || !project.bytes().all(|b| b.is_ascii_digit()) {
            return unusable("its key or project id is missing");
        }
        let (scheme, host_path) = (url.scheme, format!("{}{path}", url.hosts));
        Ok(Dsn {
            base: format!("{scheme}://{host_path}"),
            key,
            project: project.to_owned(),
        })
    }
}

/// The job's name as a monitor slug: lower case letters, digits and
/// single dashes, at most 50.
pub fn slug(job: &str) -> String {
    let mut slug = String::new();
    for c in job.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let mut slug: String = slug.trim_end_matches('-').chars().take(50).collect();
    while slug.ends_with('-') {
        slug.pop();
    }
    if slug.is_empty() {
        slug.push_str("idem");
    }
    slug
}

#[derive(Serialize)]
struct CheckIn<'a> {
    check_in_id: String,
    monitor_slug: String,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    environment: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    monitor_config: Option<MonitorConfig<'a>>,
}

#[derive(Serialize)]
struct MonitorConfig<'a> {
    schedule: Schedule<'a>,
    /// Minutes after the expected time before a check-in is missed: a
    /// tenth of the period, at least one.
    checkin_margin: u64,
    failure_issue_threshold: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    timezone: Option<&'a str>,
}

#[derive(Serialize)]
struct Schedule<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    value: &'a str,
}

/// The envelope for `event`, or none for an event Sentry has no
/// check-in for (`slow`).
pub fn request(dsn: &Dsn, event: &NewEvent, payload: &Payload) -> Option<Request<'static>> {
    let status = match event.kind.as_str() {
        "start" => "in_progress",
        "success" | "recovery" | "stopped" => "ok",
        "failure" => "error",
        _ => return None,
    };
    let monitor_config = payload.crontab.as_deref().map(|crontab| MonitorConfig {
        schedule: Schedule {
            kind: "crontab",
            value: crontab,
        },
        checkin_margin: (payload.period_secs.unwrap_or(600) / 600).max(1),
        failure_issue_threshold: payload.alert_after.max(1),
        timezone: payload.zone.as_deref(),
    });
    let check_in = CheckIn {
        check_in_id: event.run_id.simple().to_string(),
        monitor_slug: slug(&event.job),
        status,
        duration: (status != "in_progress")
            .then(|| payload.duration_ms.map(|ms| ms as f64 / 1000.0))
            .flatten(),
        environment: payload.environment.as_deref(),
        monitor_config,
    };
    let item = serde_json::to_string(&check_in).ok()?;
    let envelope = format!(
        "{{\"sent_at\":\"{}\"}}\n{{\"type\":\"check_in\",\"length\":{}}}\n{item}\n",
        jiff::Timestamp::now(),
        item.len()
    );
    Some(Request {
        post: true,
        url: format!("{}/api/{}/envelope/", dsn.base, dsn.project),
        headers: vec![
            (
                "content-type".to_owned(),
                "application/x-sentry-envelope".to_owned(),
            ),
            (
                "x-sentry-auth".to_owned(),
                format!(
                    "Sentry sentry_version=7, sentry_client=idem/{}, sentry_key={}",
                    env!("CARGO_PKG_VERSION"),
                    dsn.key
                ),
            ),
        ],
        body: envelope.into_bytes().into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dsn_parts_and_a_slug() {
        let dsn = Dsn::parse("https://abc123@o0.ingest.sentry.io/4505").unwrap();
        assert_eq!(dsn.base, "https://o0.ingest.sentry.io");
        assert_eq!((dsn.key.as_str(), dsn.project.as_str()), ("abc123", "4505"));
        assert!(Dsn::parse("https://o0.ingest.sentry.io/4505").is_err());
        assert_eq!(slug("Backup: nightly {date}"), "backup-nightly-date");
        assert_eq!(slug("--"), "idem");
    }
}
