//! The fence counter (`idem.fences`), which every claim draws its key's
//! epoch from: the run's `IDEM_FENCE`. A ledger moved by `export` and
//! `import` carries its highest fence along, and the new ledger's counter
//! is raised to at least it, so that a downstream system that refuses
//! older fences accepts the claims made after the move.

use anyhow::Result;

use super::client::Client;
use super::PostgresLedger;

/// The last value the sequence handed out; before its first `nextval` (or
/// after migration 2's `setval(.., false)`) the one before its next.
const HIGHEST: &str = "CASE WHEN is_called THEN last_value ELSE last_value - 1 END";

/// The highest fence `client`'s ledger has handed out; 0 when none.
pub(super) fn highest_fence(client: &mut Client) -> Result<i64, tokio_postgres::Error> {
    let row = client.query_typed_one(
        &format!("SELECT {HIGHEST} AS highest FROM idem.fences"),
        &[],
    )?;
    row.try_get("highest")
}

/// Raises the counter so that every later claim's fence is above `fence`;
/// never lowers it. One statement: a claim that draws a fence above
/// `fence` between the read and the `setval` would have it handed out
/// again, and one statement keeps that window as short as it gets without
/// a lock every claim would wait on.
pub(super) fn raise_fence(client: &mut Client, fence: i64) -> Result<(), tokio_postgres::Error> {
    client.query_typed(
        &format!("SELECT setval('idem.fences', $1) FROM idem.fences WHERE {HIGHEST} < $1"),
        typed![&fence => INT8],
    )?;
    Ok(())
}

impl PostgresLedger {
    /// The highest fence this ledger has handed out (0 when none): what an
    /// export carries, so that an import can go on from it.
    pub fn highest_fence(&mut self) -> Result<i64> {
        highest_fence(&mut self.client).map_err(|error| self.fail("read", &error))
    }

    /// Raises this ledger's fence counter so that every later claim's
    /// fence is above `fence` (an imported ledger's highest); never lowers
    /// it.
    pub fn raise_fence(&mut self, fence: i64) -> Result<()> {
        raise_fence(&mut self.client, fence)
            .map_err(|error| self.fail("raise the fences of", &error))
    }
}
