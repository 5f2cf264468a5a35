//! What keeps another site from pressing a button with a user's
//! credentials (a browser sends them to this server whatever page makes
//! the request): every form carries its user's token, drawn at random
//! when the server starts and never readable by another site, and a POST
//! whose `Origin` or `Referer` names another site is refused whatever it
//! carries. Also the reading of a form's body and of a page's query.

use std::collections::HashMap;

use axum::http::header::{HOST, ORIGIN, REFERER};
use axum::http::HeaderMap;
use percent_encoding::percent_decode_str;
use sha2::{Digest, Sha256};

use super::auth::Who;
use crate::exit::{self, Failure};

/// The form tokens, one per user who may press a button.
pub struct Forms {
    tokens: HashMap<Who, String>,
}

impl Forms {
    /// A token for each of `who`, drawn from the system's random source.
    pub fn new(who: impl IntoIterator<Item = Who>) -> anyhow::Result<Forms> {
        let mut tokens = HashMap::new();
        for who in who {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|error| {
                Failure::new(
                    exit::IDEM_FAILED,
                    format!("could not draw a form token from the system's random source: {error}; check /dev/urandom"),
                )
            })?;
            let token: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
            tokens.insert(who, token);
        }
        Ok(Forms { tokens })
    }

    /// The token `who`'s forms carry; `None` for who may press nothing.
    pub fn token(&self, who: &Who) -> Option<&str> {
        self.tokens.get(who).map(String::as_str)
    }

    /// Whether `given` is `who`'s token. Compared by digest, so the time a
    /// comparison takes tells nothing of the token.
    pub fn accepts(&self, who: &Who, given: &str) -> bool {
        let digest = |text: &str| -> [u8; 32] { Sha256::digest(text.as_bytes()).into() };
        self.token(who)
            .is_some_and(|token| digest(token) == digest(given))
    }
}

/// Whether a POST came from a page of this server, as far as its headers
/// say: an `Origin` (or, without one, a `Referer`) must name the host the
/// request was sent to. A request with neither (a script's) passes here;
/// its form token still has to be right.
pub fn same_site(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(HOST).and_then(|value| value.to_str().ok()) else {
        return false;
    };
    let named = |value: &str| {
        let rest = value
            .strip_prefix("http://")
            .or_else(|| value.strip_prefix("https://"));
        rest.is_some_and(|rest| {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            authority.eq_ignore_ascii_case(host)
        })
    };
    if let Some(origin) = headers.get(ORIGIN) {
        // `null` too is refused: a page that hides where it is from.
        return origin.to_str().is_ok_and(named);
    }
    match headers.get(REFERER) {
        Some(referer) => referer.to_str().is_ok_and(named),
        None => true,
    }
}

/// The fields of an `application/x-www-form-urlencoded` body or a query,
/// in order, decoded (`+` is a space).
pub fn fields(text: &str) -> Vec<(String, String)> {
    let decode = |text: &str| {
        let spaced = text.replace('+', " ");
        percent_decode_str(&spaced).decode_utf8_lossy().into_owned()
    };
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name), decode(value))
        })
        .collect()
}

/// The value of field `name`, if given.
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(field, _)| field == name)
        .map(|(_, value)| value.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(axum::http::HeaderName, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn a_post_from_another_site_is_told_apart() {
        let host = (HOST, "127.0.0.1:8417");
        assert!(same_site(&headers(std::slice::from_ref(&host))));
        assert!(same_site(&headers(&[
            host.clone(),
            (ORIGIN, "http://127.0.0.1:8417")
        ])));
        assert!(!same_site(&headers(&[
            host.clone(),
            (ORIGIN, "http://evil.example")
        ])));
        assert!(!same_site(&headers(&[host.clone(), (ORIGIN, "null")])));
        assert!(same_site(&headers(&[
            host.clone(),
            (REFERER, "http://127.0.0.1:8417/job/x")
        ])));
        assert!(!same_site(&headers(&[
            host,
            (REFERER, "http://127.0.0.1:8417.evil.example/")
        ])));
        assert!(!same_site(&headers(&[(ORIGIN, "http://127.0.0.1:8417")])));
    }

    #[test]
    fn each_user_has_a_token_of_their_own() {
        let ana = Who::User("ana".to_owned());
        let forms = Forms::new([ana.clone(), Who::Token]).unwrap_or_else(|_| Forms {
            tokens: HashMap::new(),
        });
        let token = forms.token(&ana).unwrap_or_default().to_owned();
        assert_eq!(token.len(), 64);
        assert!(forms.accepts(&ana, &token));
        assert!(!forms.accepts(&Who::Token, &token));
        assert!(!forms.accepts(&ana, ""));
        assert!(!forms.accepts(&Who::Anyone, ""));
    }

    #[test]
    fn fields_are_decoded() {
        let read = fields("token=ab&reason=disk+full%21&until=");
        assert_eq!(field(&read, "reason"), Some("disk full!"));
        assert_eq!(field(&read, "until"), Some(""));
        assert_eq!(field(&read, "other"), None);
    }
}
