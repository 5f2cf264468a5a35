//! The arguments of `idem serve`.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address and port to listen on: 127.0.0.1:8417, [::1]:8417,
    /// localhost:8417; any address that is not loopback needs --auth-file
    /// or IDEM_SERVE_TOKEN
    #[arg(
        long,
        env = "IDEM_SERVE_LISTEN",
        default_value = "127.0.0.1:8417",
        value_name = "ADDR",
        value_parser = listen_address
    )]
    pub listen: std::net::SocketAddr,

    /// Ask every request for a user and password (HTTP basic
    /// authentication) from FILE: one `user:bcrypt-hash` a line, as
    /// `htpasswd -nbB user password` writes them
    #[arg(long, env = "IDEM_SERVE_AUTH_FILE", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
}

/// Parses `--listen`: an IP address and port, or `localhost:PORT`.
pub fn listen_address(text: &str) -> Result<std::net::SocketAddr, String> {
    const HINT: &str =
        "give an address and port such as 127.0.0.1:8417, [::1]:8417 or localhost:8417";
    let text = text.trim();
    if let Some(port) = text.strip_prefix("localhost:") {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("'{port}' is not a port from 0 to 65535; {HINT}"))?;
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse()
        .map_err(|_| format!("'{text}' is not an address and port; {HINT}"))
}
