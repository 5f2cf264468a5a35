//! `--ping URL`: the Healthchecks protocol (`URL/start`, `URL`, `URL/fail`,
//! `URL/log`, each with `?rid=RUN_ID` and the output tail as the body).
//!
//! A monitor that is down or hangs must never hold a cron job for long: each
//! try has a short timeout, a ping is tried three times with backoff, and
//! all the pings of a run share one budget of [`BUDGET`]; what is not
//! delivered then stays owed in the ledger's outbox. The URL holds the
//! check's secret, so every line idem prints shows only its scheme and host.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::report::Reporter;

/// The most time all of a run's pings may take, tries and backoff
/// included: what a monitor that is down costs a run at most. What is not
/// delivered then is owed, and the next idem on the ledger delivers it.
pub const BUDGET: Duration = Duration::from_secs(5);

/// The start ping's share: it runs beside the command, and the outcome's
/// ping must still have time for its tries.
const START_BUDGET: Duration = Duration::from_secs(3);

/// One try's timeout: connect, send, and read the answer.
const TRY_FOR: Duration = Duration::from_secs(2);

/// The waits before the second and third try.
const BACKOFF: [Duration; 2] = [Duration::from_millis(250), Duration::from_millis(500)];

/// The most output a ping carries: Healthchecks keeps 10 KB of a body.
pub const BODY_LIMIT: usize = 10_000;

#[derive(Clone)]
pub struct Ping {
    /// The URL without its query, and with no trailing `/`.
    base: String,
    /// Its query, kept after the path a ping adds.
    query: Option<String>,
    /// What idem prints of it: `https://hc-ping.com/***`.
    masked: String,
    agent: ureq::Agent,
    /// Time the run's pings have taken so far.
    spent: Arc<Mutex<Duration>>,
}

/// Checks a `--ping` URL without printing it: a typo (a `\\` for a `/`, a
/// `/` missing after the port) would otherwise reach the monitor's host
/// name, and every line that names the URL, with its secret inside.
pub fn check(url: &str) -> Result<(), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("--ping needs a URL like https://hc-ping.com/UUID (no scheme found)".into());
    };
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return Err(format!(
            "--ping needs an http:// or https:// URL, not {scheme}://; give one like https://hc-ping.com/UUID"
        ));
    }
    if rest.is_empty() || rest.starts_with('/') {
        return Err("--ping names no host; give a URL like https://hc-ping.com/UUID".into());
    }
    if shown_host(authority(rest)).is_none() {
        return Err(format!(
            "--ping's host is not a host name ({}); check the URL for a \\ instead of a / \
             or a / missing after the host or port",
            mask(url)
        ));
    }
    Ok(())
}

/// `url` with everything after its host replaced by `***`, any user and
/// password dropped, and the host itself hidden when it does not look like
/// one a person typed (it may hold the secret a typo ran into it).
pub fn mask(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "***".to_owned();
    };
    let authority = authority(rest);
    let Some(host) = shown_host(authority) else {
        return format!("{scheme}://***");
    };
    if authority.len() == rest.len() {
        format!("{scheme}://{host}")
    } else {
        format!("{scheme}://{host}/***")
    }
}

/// The authority of what follows `scheme://`: up to its path, query or
/// fragment.
fn authority(rest: &str) -> &str {
    &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())]
}

/// The `host[:port]` of an authority, without its user and password, when
/// it is a host name, an IPv4 or a bracketed IPv6 address with a port that
/// fits, and no label is long or hex enough to be a secret run into it.
fn shown_host(authority: &str) -> Option<&str> {
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
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

impl Ping {
    pub fn new(url: &str) -> Ping {
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, Some(query.to_owned())),
            None => (url, None),
        };
        // A status of 500 is an error to retry; proxies come from
        // HTTPS_PROXY, HTTP_PROXY and NO_PROXY, as with curl.
        let agent = ureq::Agent::config_builder()
            .tls_config(tls(url))
            .http_status_as_error(true)
            .user_agent(concat!("idem/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ping {
            base: base.trim_end_matches('/').to_owned(),
            query,
            masked: mask(url),
            agent,
            spent: Arc::new(Mutex::new(Duration::ZERO)),
        }
    }

    /// `URL/start`, beside the command: the handle is joined before the
    /// next ping, so the monitor sees them in order.
    pub fn start(
        &self,
        run_id: &str,
        key: &str,
        reporter: &Reporter,
    ) -> std::thread::JoinHandle<Result<(), String>> {
        let ping = self.clone();
        let run_id = run_id.to_owned();
        let key = key.to_owned();
        let reporter = reporter.clone();
        std::thread::spawn(move || ping.send("/start", &run_id, &[], START_BUDGET, &key, &reporter))
    }

    /// Sends one ping (`suffix` is `""`, `/fail`, `/log` or `/start`),
    /// within what is left of the run's budget, and at most `most` of it;
    /// a failure is one line on stderr.
    pub fn send(
        &self,
        suffix: &str,
        run_id: &str,
        body: &[u8],
        most: Duration,
        key: &str,
        reporter: &Reporter,
    ) -> Result<(), String> {
        let sent = self.try_send(suffix, run_id, body, most);
        if let Err(failure) = &sent {
            reporter.notice(&mut std::io::stderr(), &self.failed(suffix, key, failure));
        }
        sent
    }

    /// The line that says ping `suffix` of `key` could not be sent.
    pub fn failed(&self, suffix: &str, key: &str, failure: &str) -> String {
        format!(
            "{key}: could not send the {} ping to {}: {failure}; the run's outcome stands",
            match suffix {
                "" => "success",
                other => other.trim_start_matches('/'),
            },
            self.masked,
        )
    }

    /// Sends one ping, tried three times with backoff within the budget;
    /// the error's words (masked) when no try went through.
    pub fn try_send(
        &self,
        suffix: &str,
        run_id: &str,
        body: &[u8],
        most: Duration,
    ) -> Result<(), String> {
        let url = match &self.query {
            Some(query) => format!("{}{suffix}?{query}&rid={run_id}", self.base),
            None => format!("{}{suffix}?rid={run_id}", self.base),
        };
        let began = Instant::now();
        let mut failure = String::new();
        for try_number in 0..=BACKOFF.len() {
            let left = self.left().min(most.saturating_sub(began.elapsed()));
            if left.is_zero() {
                if failure.is_empty() {
                    failure = "no time left of its budget".to_owned();
                }
                break;
            }
            let tried = Instant::now();
            let sent = self
                .agent
                .post(&url)
                .config()
                .timeout_global(Some(TRY_FOR.min(left)))
                .build()
                .send(body);
            self.spend(tried.elapsed());
            match sent {
                Ok(_) => return Ok(()),
                Err(error) => failure = self.words(&error),
            }
            if let Some(wait) = BACKOFF.get(try_number) {
                let wait = (*wait)
                    .min(self.left())
                    .min(most.saturating_sub(began.elapsed()));
                std::thread::sleep(wait);
                self.spend(wait);
            }
        }
        Err(failure)
    }

    pub fn left(&self) -> Duration {
        let spent = *self
            .spent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        BUDGET.saturating_sub(spent)
    }

    fn spend(&self, time: Duration) {
        let mut spent = self
            .spent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *spent += time;
    }

    /// An error's words, with the secret taken out wherever it appears.
    fn words(&self, error: &ureq::Error) -> String {
        let text = error.to_string();
        let secret = self
            .base
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|at| &rest[at..]))
            .filter(|path| path.len() > 1);
        let text = text.replace(&self.base, &self.masked);
        match secret {
            Some(path) => text.replace(path, "/***"),
            None => text,
        }
    }
}

/// The TLS of an `https://` URL: rustls with ring and the system's roots,
/// as for PostgreSQL (an operator's own CA there is trusted here too). Read
/// only for https, since reading the roots takes a while.
fn tls(url: &str) -> ureq::tls::TlsConfig {
    let builder = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()));
    if !url
        .get(..8)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
    {
        return builder.build();
    }
    let roots: Vec<ureq::tls::Certificate<'static>> = rustls_native_certs::load_native_certs()
        .certs
        .iter()
        .map(|der| ureq::tls::Certificate::from_der(der).to_owned())
        .collect();
    builder
        .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
        .build()
}

/// The last [`BODY_LIMIT`] bytes of `output`.
pub fn body(output: &[u8]) -> &[u8] {
    &output[output.len().saturating_sub(BODY_LIMIT)..]
}

#[cfg(test)]
mod tests {
    use super::*;

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
            if let Err(said) = check(url) {
                assert!(!said.contains("5d1fa0b2"), "{url}: {said}");
            }
        }
        for typo in &typos[..3] {
            assert!(check(typo).is_err(), "{typo} was taken");
        }
        assert!(check(&typos[6]).is_ok());
    }

    #[test]
    fn checks_the_scheme_without_printing_the_url() {
        assert!(check("https://hc-ping.com/x").is_ok());
        let said = check("ftp://hc/secret").unwrap_err();
        assert!(!said.contains("secret"), "{said}");
        assert!(check("hc-ping.com/secret")
            .unwrap_err()
            .find("secret")
            .is_none());
    }
}
