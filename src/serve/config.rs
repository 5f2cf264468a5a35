//! What `idem serve` is told, checked before anything listens: the
//! address, the ledger, and the credentials an address off this host
//! needs.

use std::net::SocketAddr;
use std::path::Path;
use std::str::FromStr;

use anyhow::Result;

use super::auth::{Guard, User};
use super::forms::Forms;
use crate::cli::ServeArgs;
use crate::exit::{self, Failure};
use crate::ledger::Location;

/// The environment variable holding the bearer token: not a flag, since
/// a flag's value shows in every process listing.
pub const TOKEN_VARIABLE: &str = "IDEM_SERVE_TOKEN";

/// The server's settings, from [`ServeArgs`] and the environment.
pub struct Config {
    pub listen: SocketAddr,
    pub location: Location,
    pub guard: Guard,
    /// The form tokens of those who may press the buttons.
    pub forms: Forms,
}

impl Config {
    /// Reads the auth file and the token; refuses (usage, 2) an address
    /// other than loopback that would serve the ledger to anyone.
    pub fn from_args(args: &ServeArgs, location: &Location) -> Result<Config> {
        let users = match &args.auth_file {
            Some(path) => read_users(path)?,
            None => Vec::new(),
        };
        let token = match std::env::var_os(TOKEN_VARIABLE) {
            None => None,
            Some(token) if token.is_empty() => {
                return Err(Failure::usage(format!(
                    "{TOKEN_VARIABLE} is empty; set it to a token, or unset it"
                ))
                .into())
            }
            Some(token) => Some(token.into_string().map_err(|_| {
                Failure::usage(format!(
                    "{TOKEN_VARIABLE} is not UTF-8; give a token in UTF-8"
                ))
            })?),
        };
        let guard = Guard::new(users, token);
        if guard.is_open() && !args.listen.ip().to_canonical().is_loopback() {
            return Err(Failure::usage(format!(
                "--listen {} is not a loopback address, and anyone who reaches it would read the ledger; give --auth-file FILE or set {TOKEN_VARIABLE} (or listen on 127.0.0.1)",
                args.listen
            ))
            .into());
        }
        Ok(Config {
            listen: args.listen,
            location: location.clone(),
            forms: Forms::new(guard.everyone())?,
            guard,
        })
    }

    /// The ledger's name for pages and lines: a SQLite file's path, or a
    /// PostgreSQL URL's scheme and host alone (its user, password and
    /// database are nobody's business on a web page).
    pub fn ledger_name(&self) -> String {
        match &self.location {
            Location::Sqlite(_) => self.location.display(),
            Location::Postgres(url) => crate::alert::mask_url(url),
        }
    }
}

/// The users of an auth file: one `user:bcrypt-hash` a line; blank lines
/// and lines starting with `#` are skipped.
fn read_users(path: &Path) -> Result<Vec<User>> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|error| {
        Failure::usage(format!(
            "could not read auth file {name}: {}; give a readable file of user:bcrypt-hash lines",
            exit::io_words(&error)
        ))
    })?;
    let mut users = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let user = line
            .split_once(':')
            .filter(|(user, hash)| !user.is_empty() && bcrypt::HashParts::from_str(hash).is_ok());
        let Some((user, hash)) = user else {
            return Err(Failure::usage(format!(
                "auth file {name} line {} is not user:bcrypt-hash; write each line as `htpasswd -nbB USER PASSWORD` prints it",
                number + 1
            ))
            .into());
        };
        users.push(User::new(user, hash));
    }
    if users.is_empty() {
        return Err(Failure::usage(format!(
            "auth file {name} holds no user; add a line user:bcrypt-hash (`htpasswd -nbB USER PASSWORD` prints one)"
        ))
        .into());
    }
    Ok(users)
}
