//! How a PostgreSQL ledger's failures are said: an error of the server or
//! of the connection as a [`LedgerError`] naming the ledger, a stored value
//! that cannot be read as SQLite's is, and which faults may pass by
//! themselves (a lost connection, a lock not granted).

use tokio_postgres::error::SqlState;

use super::super::error::{LedgerError, Why};
use super::super::Claim;
use super::migrate::LOCK_WAIT;
use super::rows::Unreadable;
use super::{connect, PostgresLedger};

impl PostgresLedger {
    pub(super) fn fail(&self, doing: &str, error: &tokio_postgres::Error) -> anyhow::Error {
        fault(doing, &self.shown, error).into()
    }

    /// A claim of `key` failed with `error`: a key's row held past the
    /// wait is said as such.
    pub(super) fn claim_failed(&self, key: &str, error: &tokio_postgres::Error) -> anyhow::Error {
        if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
            return LedgerError::RowHeld {
                key: key.to_owned(),
                ledger: self.shown.clone(),
                secs: LOCK_WAIT.as_secs(),
            }
            .into();
        }
        self.fail("claim a key in", error)
    }

    pub(super) fn lost(claim: &Claim) -> anyhow::Error {
        LedgerError::ClaimLost {
            run: claim.run_id.to_string(),
            key: claim.key.clone(),
        }
        .into()
    }
}

/// `doing` the ledger `shown` failed with `error`: a stored value that
/// cannot be read is said as SQLite's are; anything else as the server or
/// the connection says it, a lost connection or a lock not granted being
/// worth riding out.
pub(super) fn fault(doing: &str, shown: &str, error: &tokio_postgres::Error) -> LedgerError {
    let passing = connection_lost(error) || error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE);
    let why = match unreadable(error) {
        Some(what) => Why::Unreadable(what),
        None if passing => Why::Passing(connect::describe(error)),
        None => Why::Said(connect::describe(error)),
    };
    LedgerError::Could {
        doing: doing.to_owned(),
        ledger: shown.to_owned(),
        why,
    }
}

/// The words of a stored value that cannot be read, if that is `error`.
fn unreadable(error: &tokio_postgres::Error) -> Option<String> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(unreadable) = cause.downcast_ref::<Unreadable>() {
            return Some(unreadable.to_string());
        }
        source = cause.source();
    }
    None
}

/// Whether `error` broke the connection (rather than being the server's
/// answer to a statement): worth one more try on a new connection.
pub(super) fn connection_lost(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        // Class 08: connection exception; 57P01-03: the server shut down.
        Some(code) => {
            code.code().starts_with("08") || matches!(code.code(), "57P01" | "57P02" | "57P03")
        }
        None => error.as_db_error().is_none(),
    }
}
