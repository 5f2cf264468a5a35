//! One request to a monitor, tried three times with backoff within a
//! budget, its failure said without the secret its URL holds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ping::mask;

/// One try's timeout: connect, send, and read the answer.
const TRY_FOR: Duration = Duration::from_secs(2);

/// The waits before the second and third try.
const BACKOFF: [Duration; 2] = [Duration::from_millis(250), Duration::from_millis(500)];

/// A request to send.
pub struct Request<'a> {
    /// POST with `body`, else GET.
    pub post: bool,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: std::borrow::Cow<'a, [u8]>,
}

/// A monitor's HTTP client, made for one address.
pub struct Http {
    agent: ureq::Agent,
    /// What lines say of the address: `https://hc-ping.com/***`.
    pub masked: String,
    /// What must never be printed: the address's path, a DSN's key.
    secrets: Vec<String>,
}

impl Http {
    /// A client for `url` (the address without its protocol's prefix);
    /// `secrets` are taken out of every error's words besides its path.
    pub fn new(url: &str, masked: String, mut secrets: Vec<String>) -> Http {
        // A status of 500 is an error to retry; proxies come from
        // HTTPS_PROXY, HTTP_PROXY and NO_PROXY, as with curl.
        let agent = ureq::Agent::config_builder()
            .tls_config(tls(url))
            .http_status_as_error(true)
            .user_agent(concat!("idem/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let path = url
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|at| rest[at..].to_owned()))
            .filter(|path| path.len() > 1);
        secrets.extend(path);
        secrets.retain(|secret| !secret.is_empty());
        Http {
            agent,
            masked,
            secrets,
        }
    }

    /// Sends `request` for at most `most` in all: tried again with
    /// backoff, up to three times, only while the monitor answers with an
    /// error status (a 500 may pass); a monitor that refuses the
    /// connection, cannot be found or does not answer in time is down,
    /// and trying it again would only hold the run. The last failure's
    /// words, masked, when none went through.
    pub fn send(&self, request: &Request<'_>, most: Duration) -> Result<Duration, String> {
        let began = Instant::now();
        let mut failure = String::new();
        for try_number in 0..=BACKOFF.len() {
            let left = most.saturating_sub(began.elapsed());
            if left.is_zero() {
                if failure.is_empty() {
                    failure = "no time left of its budget".to_owned();
                }
                break;
            }
            let timeout = TRY_FOR.min(left);
            match self.try_once(request, timeout) {
                Ok(()) => return Ok(began.elapsed()),
                Err(error) => {
                    failure = self.words(&error, &request.url, timeout);
                    if !matches!(error, ureq::Error::StatusCode(_)) {
                        break;
                    }
                }
            }
            if let Some(wait) = BACKOFF.get(try_number) {
                std::thread::sleep((*wait).min(most.saturating_sub(began.elapsed())));
            }
        }
        Err(failure)
    }

    fn try_once(&self, request: &Request<'_>, timeout: Duration) -> Result<(), ureq::Error> {
        if request.post {
            let mut builder = self.agent.post(&request.url);
            for (name, value) in &request.headers {
                builder = builder.header(name, value);
            }
            builder
                .config()
                .timeout_global(Some(timeout))
                .build()
                .send(&request.body[..])?;
        } else {
            let mut builder = self.agent.get(&request.url);
            for (name, value) in &request.headers {
                builder = builder.header(name, value);
            }
            builder
                .config()
                .timeout_global(Some(timeout))
                .build()
                .call()?;
        }
        Ok(())
    }

    /// An error's words, said as a person would (ureq's own say `timeout:
    /// global`), with the secrets taken out wherever they appear.
    fn words(&self, error: &ureq::Error, url: &str, timeout: Duration) -> String {
        let said = match error {
            ureq::Error::Timeout(_) => format!(
                "no answer within {}",
                humantime::format_duration(Duration::from_millis(
                    u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)
                ))
            ),
            ureq::Error::StatusCode(code) => format!("it answered HTTP {code}"),
            ureq::Error::HostNotFound => "its host was not found".to_owned(),
            ureq::Error::ConnectionFailed => "the connection failed".to_owned(),
            ureq::Error::Io(io) => match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "the connection was refused".to_owned(),
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::UnexpectedEof => {
                    "the connection was closed without an answer".to_owned()
                }
                _ => io.to_string(),
            },
            other => other.to_string(),
        };
        let mut text = said.replace(url, &mask(url));
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), "***");
        }
        text
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
