//! One reading of every URL idem takes (a PostgreSQL ledger's, a ping's, a
//! Sentry DSN): where its credentials end and its host begins. What idem
//! masks, shows and connects to are the parts this reading gives, so a
//! password can never be shown in part, nor taken for a host.
//!
//! The rule is the WHATWG URL standard's for the authority, widened so
//! that a password may hold `@`, `:`, `?` and `#` as written: the
//! credentials end at the last `@` before the first `/` after `scheme://`,
//! and the host list then ends at the first `/`, `?` or `#`. A password
//! holding `/` or `%` must be percent-encoded (`%2F`, `%25`), as in any
//! URL; an `@` after the host list is refused, since it most likely ends a
//! password whose `/` was not.

use std::borrow::Cow;

use percent_encoding::{percent_decode_str, percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Every byte but RFC 3986's unreserved ones is encoded in credentials
/// written back, so that any reader of the URL splits it where idem did.
const CREDENTIALS: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A URL cut into the parts idem reads; each borrows the text as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Url<'a> {
    /// As written, without `://`.
    pub scheme: &'a str,
    /// `user[:password]`, still percent-encoded.
    credentials: Option<&'a str>,
    /// `host[:port]`, or several of them separated by commas (libpq's
    /// list of hosts to try); empty when the URL names none.
    pub hosts: &'a str,
    /// The path, query and fragment: from the `/`, `?` or `#` that ends
    /// the hosts.
    pub rest: &'a str,
}

/// Why a text is not a URL idem can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("no scheme:// found")]
    NoScheme,
    #[error(
        "an @ after the host; write a password's / as %2F (and its % as %25) so the host is found"
    )]
    AtAfterHost,
}

impl<'a> Url<'a> {
    /// Cuts `text` by the rule of the module's comment.
    pub fn parse(text: &'a str) -> Result<Url<'a>, UrlError> {
        let (scheme, after) = text.split_once("://").ok_or(UrlError::NoScheme)?;
        if !is_scheme(scheme) {
            return Err(UrlError::NoScheme);
        }
        let slash = after.find('/').unwrap_or(after.len());
        let (credentials, from_hosts) = match after[..slash].rfind('@') {
            Some(at) => (Some(&after[..at]), &after[at + 1..]),
            None => (None, after),
        };
        let end = from_hosts.find(['/', '?', '#']).unwrap_or(from_hosts.len());
        let (hosts, rest) = from_hosts.split_at(end);
        if rest.contains('@') {
            return Err(UrlError::AtAfterHost);
        }
        Ok(Url {
            scheme,
            credentials,
            hosts,
            rest,
        })
    }

    /// The user name, percent-decoded.
    pub fn user(&self) -> Option<Cow<'a, [u8]>> {
        let credentials = self.credentials?;
        let user = credentials
            .split_once(':')
            .map_or(credentials, |(user, _)| user);
        Some(percent_decode_str(user).into())
    }

    /// The password, percent-decoded: everything after the first `:` of
    /// the credentials.
    pub fn password(&self) -> Option<Cow<'a, [u8]>> {
        let (_, password) = self.credentials?.split_once(':')?;
        Some(percent_decode_str(password).into())
    }

    /// The URL for people: a password in the credentials, or a
    /// `password=` option of the query, is `***`; the rest as written.
    pub fn masked(&self) -> String {
        let credentials = match self.credentials {
            Some(credentials) => match credentials.split_once(':') {
                Some((user, _)) => format!("{user}:***@"),
                None => format!("{credentials}@"),
            },
            None => String::new(),
        };
        format!(
            "{}://{credentials}{}{}",
            self.scheme,
            self.hosts,
            mask_password_option(self.rest)
        )
    }

    /// The URL with its credentials encoded strictly, so that a reader
    /// that splits them at the first `@` or `:` (libpq's rule, and the
    /// PostgreSQL driver's) finds the user, the password and the hosts
    /// this reading found.
    pub fn normalized(&self) -> String {
        let encode = |bytes: Cow<'_, [u8]>| percent_encode(&bytes, CREDENTIALS).to_string();
        let credentials = match (self.user(), self.password()) {
            (Some(user), Some(password)) => format!("{}:{}@", encode(user), encode(password)),
            (Some(user), None) => format!("{}@", encode(user)),
            _ => String::new(),
        };
        format!("{}://{credentials}{}{}", self.scheme, self.hosts, self.rest)
    }
}

/// `text` for people: [`Url::masked`], or only its scheme when it cannot
/// be read (its credentials cannot be told from the rest), or `***` when it
/// has none.
pub fn masked(text: &str) -> String {
    match Url::parse(text) {
        Ok(url) => url.masked(),
        Err(_) => match text.split_once("://") {
            Some((scheme, _)) if is_scheme(scheme) => format!("{scheme}://***"),
            _ => "***".to_owned(),
        },
    }
}

/// A scheme as RFC 3986 spells one: a letter, then letters, digits, `+`,
/// `-` or `.`.
pub fn is_scheme(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic())
        && bytes.all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'-' | b'.'))
}

/// Masks a `password=` option in a URL's query.
fn mask_password_option(rest: &str) -> Cow<'_, str> {
    let Some((path, query)) = rest.split_once('?') else {
        return rest.into();
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (query, None),
    };
    let options: Vec<&str> = query
        .split('&')
        .map(|option| match option.split_once('=') {
            Some(("password", _)) => "password=***",
            _ => option,
        })
        .collect();
    let fragment = fragment.map_or(String::new(), |fragment| format!("#{fragment}"));
    format!("{path}?{}{fragment}", options.join("&")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A password of every character that ends a part of a URL, each
    /// beside letters no other part of the test URLs holds.
    const PIECES: [&str; 6] = ["Zq", "Xy", "Wv", "Ut", "Sr", "Qp"];

    fn written() -> String {
        // @ : ? # as written; / and % encoded, as a URL must.
        "postgresql://idem:Zq@Xy:Wv?Ut#Sr%2FQp%25@db.example:5433/ledger?sslmode=require".into()
    }

    #[test]
    fn a_password_of_every_delimiter_is_the_password_and_the_host_is_the_host() {
        let text = written();
        let url = Url::parse(&text).unwrap();
        assert_eq!(url.scheme, "postgresql");
        assert_eq!(url.hosts, "db.example:5433");
        assert_eq!(url.rest, "/ledger?sslmode=require");
        assert_eq!(url.user().unwrap().as_ref(), b"idem");
        assert_eq!(url.password().unwrap().as_ref(), b"Zq@Xy:Wv?Ut#Sr/Qp%");
        let masked = url.masked();
        assert_eq!(
            masked,
            "postgresql://idem:***@db.example:5433/ledger?sslmode=require"
        );
        for piece in PIECES {
            assert!(!masked.contains(piece), "{masked} shows {piece}");
        }
    }

    #[test]
    fn normalized_credentials_split_at_the_first_at_as_libpq_does() {
        let text = written();
        let normalized = Url::parse(&text).unwrap().normalized();
        assert_eq!(
            normalized,
            "postgresql://idem:Zq%40Xy%3AWv%3FUt%23Sr%2FQp%25@db.example:5433/ledger?sslmode=require"
        );
        let again = Url::parse(&normalized).unwrap();
        assert_eq!(again.normalized(), normalized);
        assert_eq!(
            again.password().unwrap().as_ref(),
            b"Zq@Xy:Wv?Ut#Sr/Qp%",
            "the same password read back"
        );
    }

    #[test]
    fn urls_without_credentials_or_hosts() {
        let url = Url::parse("postgresql:///idem").unwrap();
        assert_eq!((url.hosts, url.rest), ("", "/idem"));
        assert_eq!(url.user(), None);
        assert_eq!(url.masked(), "postgresql:///idem");
        let url =
            Url::parse("postgres://h1:5432,h2:5433/idem?target_session_attrs=read-write").unwrap();
        assert_eq!(url.hosts, "h1:5432,h2:5433");
        let url = Url::parse("https://hc-ping.com/0f3c1d2e?rid=1").unwrap();
        assert_eq!((url.hosts, url.rest), ("hc-ping.com", "/0f3c1d2e?rid=1"));
        let url = Url::parse("https://key@o1.ingest.sentry.io/42").unwrap();
        assert_eq!(url.user().unwrap().as_ref(), b"key");
        assert_eq!(url.masked(), "https://key@o1.ingest.sentry.io/42");
    }

    #[test]
    fn a_password_option_is_masked() {
        assert_eq!(
            masked("postgres://u@h/d?sslmode=require&password=x%26y#f"),
            "postgres://u@h/d?sslmode=require&password=***#f"
        );
    }

    #[test]
    fn an_unencoded_slash_in_a_password_is_refused_and_masked_whole() {
        let text = "postgres://u:Zq/Xy@db/idem";
        assert_eq!(Url::parse(text), Err(UrlError::AtAfterHost));
        assert_eq!(masked(text), "postgres://***");
        assert_eq!(masked("no scheme:Zq@Xy"), "***");
        assert_eq!(Url::parse("1x://y"), Err(UrlError::NoScheme));
    }
}
