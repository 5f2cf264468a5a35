//! `--ping`: which monitor an address names (a plain URL is Healthchecks,
//! `sentry:DSN` Sentry, `cronitor:URL` Cronitor), how it is checked and
//! masked, and the Healthchecks protocol (`URL/start`, `URL`, `URL/fail`,
//! `URL/log`, each with `?rid=RUN_ID` and the output tail as the body).
//!
//! A monitor that is down or hangs must never hold a cron job for long: each
//! try has a short timeout, a ping is tried three times with backoff, and
//! all the pings of a run share one budget of [`BUDGET`]; what is not
//! delivered then stays owed in the ledger's outbox. The URL holds the
//! check's secret, so every line idem prints shows only its scheme and host.

use std::time::Duration;

use super::events::Payload;
use super::http::Request;
use crate::ledger::NewEvent;

/// The most time all of a run's pings may take, tries and backoff
/// included: what a monitor that is down costs a run at most. What is not
/// delivered then is owed, and the next idem on the ledger delivers it.
pub const BUDGET: Duration = Duration::from_secs(5);

/// The start pings' share: they run beside the command, and the
/// outcome's must still have time for their tries.
pub const START_BUDGET: Duration = Duration::from_secs(3);

/// The most output a ping carries: Healthchecks keeps 10 KB of a body.
pub const BODY_LIMIT: usize = 10_000;

/// The monitor an address names, by its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Monitor<'a> {
    Healthchecks(&'a str),
    /// A DSN: `https://KEY@HOST/PROJECT`.
    Sentry(&'a str),
    Cronitor(&'a str),
    /// An OTLP/HTTP traces endpoint: a run's trace.
    Otlp(&'a str),
}

pub fn monitor(address: &str) -> Monitor<'_> {
    if let Some(url) = address.strip_prefix(super::otlp::PREFIX) {
        Monitor::Otlp(url)
    } else if let Some(dsn) = address.strip_prefix("sentry:") {
        Monitor::Sentry(dsn)
    } else if let Some(url) = address.strip_prefix("cronitor:") {
        Monitor::Cronitor(url)
    } else {
        Monitor::Healthchecks(address)
    }
}

/// Checks a `--ping` address of any monitor without printing it.
pub fn check_address(address: &str) -> Result<(), String> {
    match monitor(address) {
        Monitor::Healthchecks(url) => check(url, ""),
        Monitor::Cronitor(url) => check(url, "cronitor: "),
        Monitor::Otlp(_) => Err(
            "--ping takes no otlp: address; --trace URL sends a run's trace to a collector"
                .to_owned(),
        ),
        Monitor::Sentry(dsn) => {
            check(dsn, "sentry: ")?;
            super::sentry::Dsn::parse(dsn).map(|_| ())
        }
    }
}

/// What lines say of an address: its prefix and its masked URL.
pub fn shown(address: &str) -> String {
    match monitor(address) {
        Monitor::Healthchecks(url) => mask(url),
        Monitor::Sentry(dsn) => format!("sentry:{}", mask(dsn)),
        Monitor::Cronitor(url) => format!("cronitor:{}", mask(url)),
        Monitor::Otlp(url) => format!("{}{}", super::otlp::PREFIX, mask(url)),
    }
}

/// The Healthchecks ping for `event` to `url`: `rid` is the run id, the
/// body the output tail. A URL that ends in a slug (`/ping/KEY/SLUG`)
/// asks for its check to be made when missing (`create=1`); Healthchecks
/// takes no period or grace with a ping, so the check gets its project's
/// defaults.
pub fn healthchecks<'a>(url: &str, event: &'a NewEvent, payload: &Payload) -> Request<'a> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let base = base.trim_end_matches('/');
    let suffix = match event.kind.as_str() {
        "start" => "/start",
        // A stop ends the check's run without a failure: the success
        // signal, so that the check does not stay started.
        "success" | "recovery" | "stopped" => "",
        "failure" if payload.alert => "/fail",
        _ => "/log",
    };
    let mut query: Vec<String> = query.map(str::to_owned).into_iter().collect();
    if slug_url(base) {
        query.push("create=1".to_owned());
    }
    query.push(format!("rid={}", event.run_id));
    Request {
        post: true,
        url: format!("{base}{suffix}?{}", query.join("&")),
        headers: Vec::new(),
        body: event.body.as_slice().into(),
    }
}

/// Whether a Healthchecks URL names its check by slug: `/ping/KEY/SLUG`.
fn slug_url(base: &str) -> bool {
    let path = crate::url::Url::parse(base).map_or("", |url| url.rest);
    let parts: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    matches!(parts.as_slice(), ["ping", _, _])
}

/// The forms a `--ping` takes, as its errors give them.
const FORMS: &str = "https://hc-ping.com/UUID, sentry:https://KEY@o0.ingest.sentry.io/ID \
    or cronitor:https://cronitor.link/p/KEY/JOB";

/// Checks a `--ping` URL without printing it: a typo (a `\\` for a `/`, a
/// `/` missing after the port) would otherwise reach the monitor's host
/// name, and every line that names the URL, with its secret inside.
/// `form` is the address's prefix (`sentry: `, `cronitor: `, or none).
pub fn check(url: &str, form: &str) -> Result<(), String> {
    let parsed = match crate::url::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(crate::url::UrlError::NoScheme) => {
            return Err(format!(
                "--ping {form}needs a URL with its scheme (none found); give one like {FORMS}"
            ))
        }
        Err(error) => {
            return Err(format!(
                "--ping {form}{}: {error}; give a URL like {FORMS}",
                mask(url)
            ))
        }
    };
    let scheme = parsed.scheme;
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return Err(format!(
            "--ping {form}needs an http:// or https:// URL, not {scheme}://; give one like {FORMS}"
        ));
    }
    if parsed.hosts.is_empty() {
        return Err(format!(
            "--ping {form}names no host; give a URL like {FORMS}"
        ));
    }
    if shown_host(parsed.hosts).is_none() {
        return Err(format!(
            "--ping {form}has a host that is not a host name ({}); check the URL for a \\ \
             instead of a / or a / missing after the host or port",
            mask(url)
        ));
    }
    Ok(())
}

/// `url` with everything after its host replaced by `***`, any user and
/// password dropped, and the host itself hidden when it does not look like
/// one a person typed (it may hold the secret a typo ran into it).
pub fn mask(url: &str) -> String {
    let Ok(parsed) = crate::url::Url::parse(url) else {
        return crate::url::masked(url);
    };
    let scheme = parsed.scheme;
    match shown_host(parsed.hosts) {
        None => format!("{scheme}://***"),
        Some(host) if parsed.rest.is_empty() => format!("{scheme}://{host}"),
        Some(host) => format!("{scheme}://{host}/***"),
    }
}

/// `host[:port]` (a URL's hosts, see [`crate::url::Url`]) when
/// it is a host name, an IPv4 or a bracketed IPv6 address with a port that
/// fits, and no label is long or hex enough to be a secret run into it.
fn shown_host(host_port: &str) -> Option<&str> {
    let (host, port) = match host_port.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') && !port.contains(']') => (host, Some(port)),
        _ => (host_port, None),
    };
    if port.is_some_and(|port| port.parse::<u16>().is_err()) {
        return None;
    }
    let bracketed = host.starts_with('[') && host.ends_with(']');
    let named = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 24
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !hex_run(label, 8)
        });
    let address = bracketed
        && host[1..host.len() - 1]
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
    (named || address).then_some(host_port)
}

/// Whether `text` holds `n` hexadecimal digits in a row with a letter among
/// them, as a token's UUID does and a host name's label rarely does.
fn hex_run(text: &str, n: usize) -> bool {
    text.as_bytes()
        .split(|b| !b.is_ascii_hexdigit())
        .any(|run| run.len() >= n && run.iter().any(u8::is_ascii_alphabetic))
}

/// The last [`BODY_LIMIT`] bytes of `output`.
pub fn body(output: &[u8]) -> &[u8] {
    &output[output.len().saturating_sub(BODY_LIMIT)..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str) -> NewEvent {
        NewEvent {
            event_id: uuid::Uuid::nil(),
            run_id: uuid::Uuid::from_u128(1),
            job: "j".into(),
            kind: kind.into(),
            target: "ping 1 00000000".into(),
            address: String::new(),
            payload: String::new(),
            body: b"out".to_vec(),
            dest: String::new(),
        }
    }

    #[test]
    fn a_healthchecks_ping_by_its_event_and_a_slug_url_asks_for_its_check() {
        let rid = "rid=00000000-0000-0000-0000-000000000001";
        let quiet = Payload::default();
        let alert = Payload {
            alert: true,
            ..Payload::default()
        };
        let url = "https://hc-ping.com/5d1f";
        let sent = |kind: &str, payload: &Payload| healthchecks(url, &event(kind), payload).url;
        assert_eq!(sent("start", &quiet), format!("{url}/start?{rid}"));
        assert_eq!(sent("recovery", &quiet), format!("{url}?{rid}"));
        assert_eq!(sent("failure", &alert), format!("{url}/fail?{rid}"));
        assert_eq!(sent("failure", &quiet), format!("{url}/log?{rid}"));
        let slug = "https://hc-ping.com/ping/KEY/backup/?x=1";
        assert_eq!(
            healthchecks(slug, &event("success"), &quiet).url,
            format!("https://hc-ping.com/ping/KEY/backup?x=1&create=1&{rid}")
        );
        assert!(!slug_url("https://hc.example/ping/5d1f"));
    }

    #[test]
    fn each_monitor_by_its_prefix_and_masked_with_it() {
        assert_eq!(
            monitor("sentry:https://k@h/1"),
            Monitor::Sentry("https://k@h/1")
        );
        assert_eq!(
            monitor("cronitor:https://c/p/k/j"),
            Monitor::Cronitor("https://c/p/k/j")
        );
        assert_eq!(
            shown("sentry:https://key@o1.ingest.sentry.io/42"),
            "sentry:https://o1.ingest.sentry.io/***"
        );
        assert!(check_address("sentry:https://o1.ingest.sentry.io/42").is_err());
        assert!(check_address("cronitor:ftp://x/y").is_err());
    }

    #[test]
    fn masks_all_after_the_host() {
        assert_eq!(
            mask("https://hc-ping.com/5d1f-secret"),
            "https://hc-ping.com/***"
        );
        assert_eq!(
            mask("http://user:pw@127.0.0.1:8000/ping/abc?x=1"),
            "http://127.0.0.1:8000/***"
        );
        assert_eq!(mask("https://hc.example"), "https://hc.example");
        assert_eq!(mask("nonsense"), "***");
        assert_eq!(mask("http://[::1]:8000/ping/x"), "http://[::1]:8000/***");
    }

    /// The shapes a mistyped ping URL takes: none prints its secret, and
    /// each is refused before anything runs, or is masked as a whole.
    #[test]
    fn a_mistyped_url_never_shows_its_secret() {
        let secret = "5d1fa0b2-7c3e-4f6a-9b8d-0e1f2a3b4c5d";
        let typos = [
            format!("https://hc-ping.com\\{secret}"),
            format!("http://127.0.0.1:8000{secret}"),
            format!("https://hc-ping.com{secret}"),
            format!("https:/hc-ping.com/{secret}"),
            format!("https//hc-ping.com/{secret}"),
            format!("hc-ping.com/{secret}"),
            format!("https://hc-ping.com/{secret}"),
            format!("https://{secret}@hc-ping.com/x"),
        ];
        for url in &typos {
            let masked = mask(url);
            assert!(!masked.contains("5d1fa0b2"), "{url}: {masked}");
            if let Err(said) = check(url, "") {
                assert!(!said.contains("5d1fa0b2"), "{url}: {said}");
            }
        }
        for typo in &typos[..3] {
            assert!(check(typo, "").is_err(), "{typo} was taken");
        }
        assert!(check(&typos[6], "").is_ok());
    }

    /// Whichever form was meant, the error shows all three.
    #[test]
    fn a_bad_ping_is_told_every_form_a_ping_takes() {
        for bad in [
            "hc-ping.com/x",
            "ftp://hc/x",
            "https:///x",
            "cronitor:ftp://c/x",
        ] {
            let said = check_address(bad).unwrap_err();
            for form in [
                "https://hc-ping.com/",
                "sentry:https://",
                "cronitor:https://",
            ] {
                assert!(said.contains(form), "{bad}: {said}");
            }
        }
        let said = check_address("cronitor:ftp://c/x").unwrap_err();
        assert!(said.starts_with("--ping cronitor: needs an http"), "{said}");
    }

    #[test]
    fn checks_the_scheme_without_printing_the_url() {
        assert!(check("https://hc-ping.com/x", "").is_ok());
        let said = check("ftp://hc/secret", "").unwrap_err();
        assert!(!said.contains("secret"), "{said}");
        assert!(check("hc-ping.com/secret", "")
            .unwrap_err()
            .find("secret")
            .is_none());
    }
}
