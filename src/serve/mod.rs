//! `idem serve`: the ledger over HTTP. A status board, each job's runs,
//! the metrics and `status --json` for scripts, and a health check; for a
//! user who signed in, buttons that pause, resume and stop a job.
//!
//! `config` turns the command line into what the server needs (and refuses
//! an open address without credentials), `auth` checks every request's
//! credentials, `forms` guards the buttons against other sites, `read`
//! asks the ledger, `press` does what a button asks, `pages` writes the
//! HTML and `routes` ties paths to them. The server is axum on a single-threaded
//! tokio runtime; every read of the ledger runs on a blocking thread, one
//! at a time.

mod auth;
mod config;
mod forms;
mod pages;
mod press;
mod read;
mod routes;

use std::sync::Arc;

use anyhow::Result;
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::ServeArgs;
use crate::exit::{self, Failure};
use crate::ledger::Location;

pub use config::Config;

/// Serves `location` until SIGTERM or SIGINT; exit 0 then.
pub fn run(args: &ServeArgs, location: &Location, quiet: bool) -> Result<u8> {
    let config = Config::from_args(args, location)?;
    // One thread answers HTTP; ledger reads go to a few blocking threads,
    // which `read::Reader` lets in one at a time.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(4)
        .build()
        .map_err(|error| {
            Failure::new(
                exit::IDEM_FAILED,
                format!(
                    "could not start the server: {}; check the limits on threads and open files",
                    exit::io_words(&error)
                ),
            )
        })?;
    runtime.block_on(serve(config, quiet))
}

async fn serve(config: Config, quiet: bool) -> Result<u8> {
    let listen = config.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|error| bind_error(listen, &error))?;
    // The address bound, not the one asked for: with port 0 the kernel
    // picks the port, and this line is how a person (or a test) learns it.
    let bound = listener
        .local_addr()
        .map_err(|error| bind_error(listen, &error))?;
    if !quiet {
        let mode = if config.guard.is_open() {
            "read-only"
        } else {
            "its users may pause, resume and stop"
        };
        exit::say(&format!(
            "serving ledger {} on http://{bound}/ ({mode}; SIGTERM or Ctrl-C stops)",
            config.ledger_name()
        ));
    }
    let app = routes::router(Arc::new(config));
    axum::serve(listener, app)
        .with_graceful_shutdown(stopped())
        .await
        .map_err(|error| {
            Failure::new(
                exit::IDEM_FAILED,
                format!(
                    "the server on {bound} failed: {}; start it again",
                    exit::io_words(&error)
                ),
            )
        })?;
    Ok(exit::SUCCESS)
}

/// An address that cannot be listened on: idem itself failed (125), as
/// with a ledger it cannot open.
fn bind_error(listen: std::net::SocketAddr, error: &std::io::Error) -> anyhow::Error {
    let fix = match error.kind() {
        std::io::ErrorKind::AddrInUse => {
            "another program listens there; stop it or give another --listen"
        }
        std::io::ErrorKind::PermissionDenied => {
            "ports below 1024 need privileges; give a port above 1023 to --listen"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            "no interface of this host has that address; give one of its addresses to --listen"
        }
        _ => "give another --listen",
    };
    Failure::new(
        exit::IDEM_FAILED,
        format!(
            "could not listen on {listen}: {}; {fix}",
            exit::io_words(error)
        ),
    )
    .into()
}

/// Resolves when SIGTERM or SIGINT arrives: the server then stops taking
/// connections and ends once the requests under way are answered.
async fn stopped() {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without handlers the signals keep their default action, which
        // stops the server all the same, only less gracefully.
        return std::future::pending().await;
    };
    let term = std::pin::pin!(term.recv());
    let int = std::pin::pin!(int.recv());
    futures_util::future::select(term, int).await;
}

#[cfg(test)]
mod tests {
    use crate::exit;

    #[test]
    fn the_help_lists_the_codes_serve_exits_with() {
        let table = crate::cli::SERVE_EXIT_CODES_HELP
            .split("Exit codes:\n")
            .nth(1)
            .unwrap_or_default();
        let codes: Vec<u8> = table
            .lines()
            .take_while(|line| line.starts_with("  "))
            .filter_map(|line| line.split_whitespace().next()?.parse().ok())
            .collect();
        assert_eq!(codes, [exit::SUCCESS, exit::USAGE, exit::IDEM_FAILED]);
    }
}
