//! Which `--db` values are URLs: a `postgres://` or `postgresql://` one
//! names the shared ledger; a URL of any other scheme (`mysql://`, a
//! mistyped `postgress://`) is refused, where it would otherwise name a
//! SQLite file in a folder called `mysql:`, and a run would go on against
//! a ledger no other host shares.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::exit::Failure;

use super::super::Location;

/// The schemes of a PostgreSQL ledger's URL.
const SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

impl Location {
    /// Refuses `db` when it starts like a URL (`scheme://`, the scheme as
    /// RFC 3986 spells one) of a scheme other than PostgreSQL's: a usage
    /// error (exit 2) naming the schemes idem knows, its password masked.
    /// A file whose name starts so is still reached as `./NAME`.
    pub fn refuse_unknown_scheme(db: &OsStr) -> Result<(), Failure> {
        let bytes = db.as_bytes();
        let Some(scheme) = url_scheme(bytes) else {
            return Ok(());
        };
        if SCHEMES
            .iter()
            .any(|known| bytes.starts_with(known.as_bytes()))
        {
            return Ok(());
        }
        Err(Failure::usage(format!(
            "--db {} is a {scheme}:// URL, which idem does not know; give a postgres:// or postgresql:// URL, or a file path (./NAME for a file whose name looks like a URL)",
            crate::url::masked(&String::from_utf8_lossy(bytes))
        )))
    }
}

impl Location {
    /// Refuses `db` when it starts as a PostgreSQL URL with its `://`
    /// mistyped (`postgres:/`, `postgresql//`, `postgres:host`): taken
    /// as a path, it would make a SQLite ledger of this host's own in a
    /// folder called `postgresql`, where the fleet meant to share one.
    /// What follows the scheme is not shown: it may hold a password.
    pub fn refuse_mistyped_scheme(db: &OsStr) -> Result<(), Failure> {
        let bytes = db.as_bytes();
        for scheme in ["postgresql", "postgres"] {
            let Some(tail) = bytes
                .get(..scheme.len())
                .filter(|head| head.eq_ignore_ascii_case(scheme.as_bytes()))
                .map(|_| &bytes[scheme.len()..])
            else {
                continue;
            };
            let typed = tail.iter().take_while(|b| matches!(b, b':' | b'/')).count();
            if tail.starts_with(b"://") || (tail.first() != Some(&b':') && !tail.starts_with(b"//"))
            {
                return Ok(());
            }
            let typed = String::from_utf8_lossy(&bytes[..scheme.len() + typed]);
            return Err(Failure::usage(format!(
                "--db {typed}... is not a URL: a PostgreSQL ledger's URL starts {scheme}:// \
                 (postgresql://USER@HOST/DATABASE); for a file of that name write ./NAME"
            )));
        }
        Ok(())
    }
}

/// The scheme of `text` when it starts `scheme://`.
fn url_scheme(text: &[u8]) -> Option<&str> {
    let end = text.windows(3).position(|three| three == b"://")?;
    std::str::from_utf8(&text[..end])
        .ok()
        .filter(|scheme| crate::url::is_scheme(scheme))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(db: &str) -> Option<String> {
        Location::refuse_unknown_scheme(OsStr::new(db))
            .err()
            .map(|failure| failure.message)
    }

    #[test]
    fn postgres_urls_and_paths_pass() {
        for db in [
            "postgres://u:pw@h/db",
            "postgresql:///idem",
            "postgresql://",
            "ledger.db",
            "/var/lib/idem/ledger.db",
            "./mysql://x",
            "dir/a://b",
            "1x://y",
            "://nothing",
            "",
        ] {
            assert_eq!(refused(db), None, "{db}");
        }
    }

    #[test]
    fn a_mistyped_postgres_scheme_is_a_usage_error_that_shows_no_more_than_it() {
        let refused = |db: &str| {
            Location::refuse_mistyped_scheme(OsStr::new(db))
                .err()
                .map(|failure| (failure.code, failure.message))
        };
        let (code, message) = refused("postgresql//idem:hunter2@127.0.0.1/idem").unwrap();
        assert_eq!(code, crate::exit::USAGE);
        assert_eq!(
            message,
            "--db postgresql//... is not a URL: a PostgreSQL ledger's URL starts postgresql:// \
             (postgresql://USER@HOST/DATABASE); for a file of that name write ./NAME"
        );
        for db in [
            "postgres:/idem@127.0.0.1/idem",
            "postgres:idem:hunter2@h/idem",
            "POSTGRES//h/idem",
        ] {
            let shown = refused(db).map(|(_, message)| message);
            let message = shown.unwrap_or_else(|| panic!("{db} passed"));
            assert!(
                !message.contains("hunter2") && !message.contains("idem@"),
                "{message}"
            );
        }
        for db in [
            "postgresql://u@h/idem",
            "postgres/ledger.db",
            "postgres.db",
            "postgresql",
            "./postgres:/x",
        ] {
            assert_eq!(refused(db), None, "{db}");
        }
    }

    #[test]
    fn other_schemes_are_usage_errors_with_the_password_masked() {
        let message = refused("postgress://u:secretpw@h/db").unwrap();
        assert_eq!(
            message,
            "--db postgress://u:***@h/db is a postgress:// URL, which idem does not know; give a postgres:// or postgresql:// URL, or a file path (./NAME for a file whose name looks like a URL)"
        );
        for db in [
            "mysql://root:hunter2@db/app",
            "POSTGRES://u:hunter2@h/db",
            "sqlite://ledger.db",
            "postgres+ssl://u:hunter2@h/db",
        ] {
            let message = refused(db).unwrap_or_else(|| panic!("{db} passed"));
            assert!(!message.contains("hunter2"), "{message}");
            assert!(message.starts_with("--db "), "{message}");
        }
        let failure = Location::refuse_unknown_scheme(OsStr::new("mysql://h/db")).unwrap_err();
        assert_eq!(failure.code, crate::exit::USAGE);
    }
}
