//! A run's first round trip to a shared ledger: the session's settings,
//! the schema's version, the key's head and the job's pause, sent together.
//! The reads are kept for the run's first look at its key, and only while
//! nothing else has run on the connection since; if the schema is not
//! this idem's, they are dropped and the schema is checked and migrated as
//! any open does.

use anyhow::Result;
use futures_util::future::join3;

use super::super::{Head, Pause};
use super::migrate::{setup_sql, version_of};
use super::pauses::query_pause;
use super::rows::query_head;
use super::schema::LATEST;
use super::PostgresLedger;

/// What the first round trip read, for the key's first look.
pub(super) struct FirstRead {
    key: String,
    job: String,
    head: Option<(i64, Head)>,
    pause: Option<Pause>,
    /// The connection's pipelines when it was read (see
    /// [`super::client::Client::pipelines`]).
    after: u64,
}

impl PostgresLedger {
    /// [`PostgresLedger::open`] for a run of `key` in job `job`.
    pub fn open_for_run(url: &str, shown: &str, key: &str, job: &str) -> Result<PostgresLedger> {
        let mut ledger = PostgresLedger::connect(url, shown)?;
        match ledger.setup_and_read(key, job) {
            Ok(Some(first)) => ledger.first = Some(first),
            // A schema to make or migrate, or any fault: the usual way,
            // which says what went wrong.
            Ok(None) | Err(_) => ledger.check_and_migrate()?,
        }
        Ok(ledger)
    }

    /// The settings, the version and the reads in one round trip; None
    /// when the schema is not this idem's (the reads are then void).
    fn setup_and_read(
        &mut self,
        key: &str,
        job: &str,
    ) -> Result<Option<FirstRead>, tokio_postgres::Error> {
        let setup = setup_sql();
        let (version, head, pause) = self.client.pipeline(async |db| {
            Ok(join3(
                db.simple_query(&setup),
                query_head(db, key),
                query_pause(db, job),
            )
            .await)
        })?;
        if version_of(&version?) != LATEST {
            return Ok(None);
        }
        Ok(Some(FirstRead {
            key: key.to_owned(),
            job: job.to_owned(),
            head: head?,
            pause: pause?,
            after: self.client.pipelines(),
        }))
    }

    /// The first read of `key`'s head, if it is still the latest word on
    /// it; the pause read with it is kept for the next `paused`.
    pub(super) fn first_head(&mut self, key: &str) -> Option<Option<(i64, Head)>> {
        let first = self.first.take()?;
        if first.key != key || first.after != self.client.pipelines() {
            return None;
        }
        self.pause_read =
            (self.pause_job.as_deref() == Some(first.job.as_str())).then_some(first.pause);
        Some(first.head)
    }
}
