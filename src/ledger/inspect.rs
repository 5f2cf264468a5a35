//! What `idem doctor` reads of a ledger, without changing it: the state of
//! its schema and the keys running now, their owners judged by the rule
//! the ledger itself decides by. Each backend answers with its own SQL;
//! the answers are plain data, and a failure is told in the backend's words.

use super::{Owner, Pause};

/// The state of a ledger's schema, as opening it for `run` would judge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// Nothing there yet (an empty file, a database idem never used): the
    /// next `idem run` creates the schema.
    None,
    /// The file is not a SQLite database at all.
    NotADatabase,
    /// Another program's SQLite database, at its `user_version`.
    Foreign { version: i64 },
    /// idem's schema at `version`; this idem writes `latest`.
    Idem { version: i64, latest: i64 },
}

impl Schema {
    /// Written by a newer idem: refused untouched, and nothing more can be
    /// read of it.
    pub fn newer(self) -> bool {
        matches!(self, Schema::Idem { version, latest } if version > latest)
    }
}

/// A ledger opened only to be read: nothing is created, migrated or
/// written, whatever it finds.
pub trait Inspect {
    /// The state of the schema.
    fn schema(&mut self) -> Result<Schema, String>;

    /// Every key whose head is running, in key order, with its owner.
    fn running(&mut self) -> Result<Vec<(String, Owner)>, String>;

    /// The pauses that hold now, in job order (none in a ledger from
    /// before pauses).
    fn pauses(&mut self) -> Result<Vec<Pause>, String>;

    /// The requests to stop a running run that its owner has not seen
    /// yet, oldest first (see `ledger::stops`).
    fn pending_stops(&mut self) -> Result<Vec<super::StopRequest>, String> {
        Ok(Vec::new())
    }

    /// Each job that waits for others (`--after`): its template and the
    /// upstream templates it waits for.
    fn upstreams(&mut self) -> Result<Vec<(String, Vec<String>)>, String>;

    /// The events of the outbox given up (a day old and never
    /// delivered), newest first; none in a ledger without an outbox.
    fn lost_events(&mut self) -> Result<Vec<super::EventState>, String> {
        Ok(Vec::new())
    }

    /// How many events of the outbox are still owed (neither delivered
    /// nor lost); none in a ledger without an outbox.
    fn owed_events(&mut self) -> Result<u64, String> {
        Ok(0)
    }
}
