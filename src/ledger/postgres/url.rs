//! Which `--db` values are URLs: a `postgres://` or `postgresql://` one
//! names the shared ledger; a URL of any other scheme (`mysql://`, a
//! mistyped `postgress://`) is refused, where it would otherwise name a
//! SQLite file in a folder called `mysql:`, and a run would go on against
//! a ledger no other host shares.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::exit::Failure;

use super::super::location::mask_password;
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
            mask_password(&String::from_utf8_lossy(bytes))
        )))
    }
}

/// The scheme of `text` when it starts `scheme://`: a letter, then letters,
/// digits, `+`, `-` or `.`.
fn url_scheme(text: &[u8]) -> Option<&str> {
    let end = text.windows(3).position(|three| three == b"://")?;
    let scheme = &text[..end];
    let first = scheme.first()?;
    let rest_ok = scheme
        .iter()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'-' | b'.'));
    if !first.is_ascii_alphabetic() || !rest_ok {
        return None;
    }
    std::str::from_utf8(scheme).ok()
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
