//! Who may read the pages: anyone (loopback, no credentials given), or a
//! request that carries a user and password of the auth file (HTTP basic
//! authentication) or the bearer token of `IDEM_SERVE_TOKEN`. Who got in
//! is kept with the request: the buttons are theirs to press, and the
//! ledger records their name.

use std::collections::HashSet;
use std::sync::Mutex;

use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::{Digest, Sha256};

/// A user of the auth file and their bcrypt hash.
pub struct User {
    name: String,
    hash: String,
}

impl User {
    pub fn new(name: &str, hash: &str) -> User {
        User {
            name: name.to_owned(),
            hash: hash.to_owned(),
        }
    }
}

/// Who a request came from, as its credentials say.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Who {
    /// No credentials are asked for (loopback): anyone may read, nobody
    /// may press a button.
    Anyone,
    /// A user of the auth file, by name.
    User(String),
    /// A holder of the bearer token, who has no name of their own.
    Token,
}

impl Who {
    /// As the ledger records who pressed a button: `USER@host` (`token@host`
    /// for the bearer token), the host being the server's; `None` for
    /// anyone, who may not.
    pub fn by(&self) -> Option<String> {
        let name = match self {
            Who::Anyone => return None,
            Who::User(name) => name.as_str(),
            Who::Token => "token",
        };
        Some(format!("{name}@{}", crate::host::name()))
    }
}

/// The credentials every request must carry, if any.
pub struct Guard {
    users: Vec<User>,
    /// The token's SHA-256: requests' tokens are compared by their digest,
    /// so the time a comparison takes tells nothing of the token.
    token: Option<[u8; 32]>,
    /// Digests of user, password and hash that bcrypt accepted: bcrypt
    /// takes a tenth of a second by design, and a board refreshes itself
    /// every 30 seconds.
    admitted: Mutex<HashSet<[u8; 32]>>,
}

impl Guard {
    pub fn new(users: Vec<User>, token: Option<String>) -> Guard {
        Guard {
            users,
            token: token.map(|token| Sha256::digest(token.as_bytes()).into()),
            admitted: Mutex::new(HashSet::new()),
        }
    }

    /// Everyone who may get in by name (or by the token).
    pub fn everyone(&self) -> Vec<Who> {
        let users = self.users.iter().map(|user| Who::User(user.name.clone()));
        let token = self.token.map(|_| Who::Token);
        users.chain(token).collect()
    }

    /// No credentials are asked for.
    pub fn is_open(&self) -> bool {
        self.users.is_empty() && self.token.is_none()
    }

    /// Who the request's `Authorization` admits, if anyone. Slow (bcrypt)
    /// the first time a user's password is seen: call it off the runtime's
    /// thread.
    pub fn admits(&self, headers: &HeaderMap) -> Option<Who> {
        if self.is_open() {
            return Some(Who::Anyone);
        }
        let given = headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())?;
        let (scheme, credentials) = given.trim().split_once(' ').unwrap_or((given, ""));
        let credentials = credentials.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            let right = self
                .token
                .is_some_and(|token| token == <[u8; 32]>::from(Sha256::digest(credentials)));
            return right.then_some(Who::Token);
        }
        if !scheme.eq_ignore_ascii_case("basic") || self.users.is_empty() {
            return None;
        }
        let (name, password) = base64::engine::general_purpose::STANDARD
            .decode(credentials)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|pair| {
                pair.split_once(':')
                    .map(|(name, password)| (name.to_owned(), password.to_owned()))
            })?;
        let user = self.users.iter().find(|user| user.name == name)?;
        self.password_matches(user, &password)
            .then_some(Who::User(name))
    }

    fn password_matches(&self, user: &User, password: &str) -> bool {
        let digest: [u8; 32] = Sha256::new()
            .chain_update(user.name.as_bytes())
            .chain_update([0])
            .chain_update(password.as_bytes())
            .chain_update([0])
            .chain_update(user.hash.as_bytes())
            .finalize()
            .into();
        let admitted = |set: &HashSet<[u8; 32]>| set.contains(&digest);
        if self.admitted.lock().is_ok_and(|set| admitted(&set)) {
            return true;
        }
        if !bcrypt::verify(password, &user.hash).unwrap_or(false) {
            return false;
        }
        if let Ok(mut set) = self.admitted.lock() {
            set.insert(digest);
        }
        true
    }

    /// 401, naming the schemes this server takes.
    pub fn challenge(&self) -> Response {
        let mut response = (
            StatusCode::UNAUTHORIZED,
            "credentials needed: a user and password of the auth file, or the bearer token\n",
        )
            .into_response();
        let headers = response.headers_mut();
        if !self.users.is_empty() {
            headers.append(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"idem\", charset=\"UTF-8\""),
            );
        }
        if self.token.is_some() {
            headers.append(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"idem\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> HeaderMap {
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {pair}")).unwrap_or(HeaderValue::from_static("")),
        );
        headers
    }

    #[test]
    fn a_user_gets_in_with_their_password_alone() {
        let hash = bcrypt::hash("right", 4).unwrap_or_default();
        let guard = Guard::new(vec![User::new("ana", &hash)], None);
        assert!(!guard.is_open());
        let ana = Some(Who::User("ana".to_owned()));
        assert_eq!(guard.admits(&basic("ana", "right")), ana);
        // Again, from what was admitted.
        assert_eq!(guard.admits(&basic("ana", "right")), ana);
        assert_eq!(guard.admits(&basic("ana", "wrong")), None);
        assert_eq!(guard.admits(&basic("bob", "right")), None);
        assert_eq!(guard.admits(&HeaderMap::new()), None);
    }

    #[test]
    fn a_bearer_token_gets_in_when_it_is_the_one() {
        let guard = Guard::new(Vec::new(), Some("s3cret".to_owned()));
        let bearer = |token: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {token}"))
                    .unwrap_or(HeaderValue::from_static("")),
            );
            headers
        };
        assert_eq!(guard.admits(&bearer("s3cret")), Some(Who::Token));
        assert_eq!(guard.admits(&bearer("s3cre")), None);
        assert_eq!(guard.admits(&basic("s3cret", "s3cret")), None);
    }
}
