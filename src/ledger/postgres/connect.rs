//! Connecting to a PostgreSQL ledger: the URL, the password and TLS.
//!
//! What the URL leaves out comes from libpq's environment variables
//! (`PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`) and defaults.
//! A password comes from the URL, else `PGPASSWORD`, else the password file
//! (`PGPASSFILE` or `~/.pgpass`, as libpq reads it); idem never prints it
//! and never stores it. TLS is used only where the URL asks for it
//! (`sslmode=require`), verified against the system's roots and the file
//! named by `PGSSLROOTCERT`.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::{Config, NoTls};

use super::client::Client;

use crate::ledger::error::LedgerError;

/// How long a connection attempt may take when the URL does not say.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Keepalive probes of an idle connection: after 10s idle, every 5s, 3
/// unanswered mean the peer is gone (25s in all).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 3;

/// Data sent and not acknowledged for this long fails the connection.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(20);

/// Parses `url` into a connection config, with idem's defaults and the
/// password looked up where libpq would look.
pub(crate) fn config(url: &str, shown: &str) -> Result<Config, LedgerError> {
    // The driver knows disable, prefer and require; idem's require already
    // verifies the certificate and the host name, as verify-full does.
    // The driver splits credentials at the first `@` and `:`; idem reads
    // them as crate::url does, and hands it the URL written back so that
    // it splits there too, whatever the password holds.
    let url = crate::url::Url::parse(url)
        .map_err(|error| LedgerError::BadUrl {
            url: shown.to_owned(),
            why: error.to_string(),
        })?
        .normalized()
        .replace("sslmode=verify-full", "sslmode=require")
        .replace("sslmode=verify-ca", "sslmode=require");
    let mut config = Config::from_str(&url).map_err(|error| LedgerError::BadUrl {
        url: shown.to_owned(),
        why: describe(&error),
    })?;
    fill_from_environment(&mut config);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    // A partition must be noticed in bounded time, not when TCP gives up
    // retransmitting (about 15 minutes): probe an idle connection, and let
    // unacknowledged data fail the connection after a while. The lease's
    // own deadline still stops the command first.
    config
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_RETRIES)
        .tcp_user_timeout(TCP_USER_TIMEOUT);
    if config.get_application_name().is_none() {
        config.application_name("idem");
    }
    if config.get_password().is_none() {
        if let Some(password) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty()) {
            use std::os::unix::ffi::OsStrExt;
            config.password(password.as_bytes());
        } else if let Some(password) = pgpass_lookup(&config) {
            config.password(password);
        }
    }
    Ok(config)
}

/// libpq's default folder for the server's Unix socket (Debian's).
const DEFAULT_SOCKET_FOLDER: &str = "/var/run/postgresql";

/// Fills in what the URL leaves out as libpq does: from `PGHOST` (a path
/// is a Unix socket's folder; several are comma-separated), `PGPORT`,
/// `PGUSER` and `PGDATABASE`, else libpq's defaults (the local Unix socket,
/// the login name, a database named after the user).
fn fill_from_environment(config: &mut Config) {
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        let hosts = var("PGHOST").unwrap_or_else(|| DEFAULT_SOCKET_FOLDER.to_owned());
        for host in hosts.split(',') {
            if host.starts_with('/') {
                config.host_path(host);
            } else {
                config.host(host);
            }
        }
    }
    if config.get_ports().is_empty() {
        if let Some(port) = var("PGPORT").and_then(|port| port.parse().ok()) {
            config.port(port);
        }
    }
    if config.get_user().is_none() {
        config.user(var("PGUSER").unwrap_or_else(current_user));
    }
    if config.get_dbname().is_none() {
        if let Some(database) = var("PGDATABASE") {
            config.dbname(&database);
        }
    }
}

/// Connects, with TLS only where the URL asks for it; says in words why not.
pub fn connect(config: &Config) -> Result<Client, String> {
    // One thread: the connection is driven only while idem waits on it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start a connection: {error}"))?;
    let connected = match config.get_ssl_mode() {
        SslMode::Require => {
            let tls = rustls_connector().map_err(|error| format!("tls setup failed: {error}"))?;
            runtime
                .block_on(config.connect(tls))
                .map(|(client, connection)| (client, Client::new_link(connection)))
        }
        // `prefer` without a TLS connector connects in the clear, as libpq
        // does when it was built without TLS.
        _ => runtime
            .block_on(config.connect(NoTls))
            .map(|(client, connection)| (client, Client::new_link(connection))),
    };
    match connected {
        Ok((client, link)) => Ok(Client::new(runtime, client, link)),
        Err(error) => Err(match error.as_db_error() {
            // The server answered: where it is was not the problem.
            Some(_) => describe(&error),
            None => format!("{} (tried {})", describe(&error), tried(config)),
        }),
    }
}

/// Where a connection was tried, as libpq would go: each host with its
/// port, a Unix socket folder as the socket file in it.
fn tried(config: &Config) -> String {
    let ports = config.get_ports();
    let port = |at: usize| ports.get(at).or(ports.first()).copied().unwrap_or(5432);
    let mut places: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(at, host)| match host {
            Host::Tcp(name) => format!("{name} port {}", port(at)),
            Host::Unix(folder) => format!(
                "socket {}",
                folder.join(format!(".s.PGSQL.{}", port(at))).display()
            ),
        })
        .collect();
    if places.is_empty() {
        places = config
            .get_hostaddrs()
            .iter()
            .enumerate()
            .map(|(at, addr)| format!("{addr} port {}", port(at)))
            .collect();
    }
    places.join(", ")
}

fn rustls_connector() -> Result<tokio_postgres_rustls::MakeRustlsConnect, rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(file) = std::env::var_os("PGSSLROOTCERT") {
        if let Ok(pem) = std::fs::read(file) {
            use rustls::pki_types::pem::PemObject;
            let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem).flatten();
            roots.add_parsable_certificates(certs);
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// A PostgreSQL error in words: the server's message, or the cause of a
/// failed connection, without the driver's wrapping.
pub fn describe(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return db.message().to_owned();
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let words = cause.to_string();
        if !text.contains(&words) {
            text = format!("{text}: {words}");
        }
        source = cause.source();
    }
    // "Connection refused (os error 111)": keep the words only.
    crate::exit::words(&text)
}

/// The password file's entry for this connection, as libpq reads it:
/// `host:port:database:user:password`, `*` matching anything, `\` escaping
/// `:` and `\`; ignored when others may read the file.
fn pgpass_lookup(config: &Config) -> Option<Vec<u8>> {
    let path = match std::env::var_os("PGPASSFILE") {
        Some(file) => PathBuf::from(file),
        None => dirs::home_dir()?.join(".pgpass"),
    };
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(&path).ok()?;
    if !metadata.is_file() || metadata.mode() & 0o077 != 0 {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let user = config
        .get_user()
        .map(str::to_owned)
        .unwrap_or_else(current_user);
    let database = config.get_dbname().unwrap_or(&user).to_owned();
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let unix = !matches!(config.get_hosts().first(), Some(Host::Tcp(_)));
    pgpass_find(&text, &host, unix, &port, &database, &user).map(String::into_bytes)
}

fn current_user() -> String {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|user| user.name)
        .unwrap_or_default()
}

fn pgpass_find(
    text: &str,
    host: &str,
    unix: bool,
    port: &str,
    database: &str,
    user: &str,
) -> Option<String> {
    text.lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .find_map(|line| {
            let fields = split_pgpass(line);
            let [h, p, d, u, password] = fields.as_slice() else {
                return None;
            };
            let host_ok = h == "*" || h == host || (unix && h == "localhost");
            let ok = |field: &String, value: &str| field == "*" || field == value;
            (host_ok && ok(p, port) && ok(d, database) && ok(u, user)).then(|| password.clone())
        })
}

fn split_pgpass(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(field)) = (chars.next(), fields.last_mut()) {
                    field.push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(field) = fields.last_mut() {
                    field.push(c);
                }
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_password_file_like_libpq() {
        let text = "# comment\n\
                    db.example:5432:idem:ci:s3cr\\:et\n\
                    *:*:*:ops:other\n\
                    localhost:5432:*:local:sock\n";
        assert_eq!(
            pgpass_find(text, "db.example", false, "5432", "idem", "ci").as_deref(),
            Some("s3cr:et")
        );
        assert_eq!(
            pgpass_find(text, "db.example", false, "5433", "idem", "ci"),
            None
        );
        assert_eq!(
            pgpass_find(text, "anywhere", false, "1", "x", "ops").as_deref(),
            Some("other")
        );
        assert_eq!(
            pgpass_find(text, "/run/postgresql", true, "5432", "x", "local").as_deref(),
            Some("sock")
        );
    }
}
