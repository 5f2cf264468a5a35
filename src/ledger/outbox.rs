//! The outbox: every ping and hook a run owes, kept in the ledger until it
//! is delivered or a day old.
//!
//! An event is written in the transaction that records what causes it (the
//! claim owes `start`, the outcome `success`, `failure` or `recovery`), so
//! that no outcome is durable without its notifications. Whoever delivers
//! one first takes it for a short lease in a transaction of its own (the
//! run that wrote it holds it from the start), so two idems never send the
//! same event at once; it is marked delivered only by its holder.
//!
//! An event keeps the address it goes to (a ping URL, a hook's command):
//! a later idem must be able to deliver it. That address lives only here,
//! in the ledger, and is never printed; people see its `target`, an index
//! and a hash. Once delivered or given up, an event keeps neither its
//! address nor its body: only the record of its delivery, which `ledger
//! prune` drops with the runs of its age.

use std::time::Duration;

use anyhow::Result;
use jiff::Timestamp;
use uuid::Uuid;

/// How long a taker holds an event: a delivery is bounded well below it,
/// so that no other idem takes it while it is under way.
pub const LEASE: Duration = Duration::from_secs(60);

/// The age at which an event still owed is given up and reported lost.
pub const GIVE_UP: Duration = Duration::from_secs(24 * 3600);

/// An event to write with the transaction that causes it.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The event's own id: a Sentry `check_in_id`, and the key that makes
    /// its delivery at most once.
    pub event_id: Uuid,
    pub run_id: Uuid,
    pub job: String,
    /// `start`, `success`, `failure`, `recovery`, `slow` or `paused`.
    pub kind: String,
    /// What people see of where it goes: `ping 1 3fa2c1d0`,
    /// `--on-failure 9b1e07aa`.
    pub target: String,
    /// Where it goes: the URL, or the hook's command. Never printed.
    pub address: String,
    /// What its delivery needs besides the body (JSON).
    pub payload: String,
    /// The output tail it carries, bounded by its protocol's limit.
    pub body: Vec<u8>,
    /// Whether the run writing it holds it (until [`LEASE`]), to deliver
    /// it itself; else it is for any idem, at once.
    pub held: bool,
}

/// An event taken for delivery.
#[derive(Debug, Clone)]
pub struct Owed {
    pub event: NewEvent,
    pub created_at: Timestamp,
    /// Deliveries tried before this one.
    pub attempts: u32,
    /// Who holds it: only they may settle it.
    pub holder: Uuid,
}

/// How one delivery went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    Delivered,
    /// Try again no sooner than `retry_in`; `error` says why, masked.
    Failed {
        error: String,
        retry_in: Duration,
    },
}

/// An event as people see it (`ledger show`, `doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventState {
    pub event_id: Uuid,
    pub run_id: Uuid,
    pub job: String,
    pub kind: String,
    pub target: String,
    pub created_at: Timestamp,
    pub attempts: u32,
    pub delivered_at: Option<Timestamp>,
    pub lost: bool,
    /// The last delivery's error, masked.
    pub error: Option<String>,
}

/// The wait before the next try after `attempts` failed deliveries: none
/// after the run's own (it tried with backoff already, and the next idem
/// should try at once), then 30 s doubling up to an hour.
pub fn backoff(attempts: u32) -> Duration {
    match attempts {
        0 | 1 => Duration::ZERO,
        n => Duration::from_secs(30u64 << (n - 2).min(7)).min(Duration::from_secs(3600)),
    }
}

/// What a ledger keeps of the events owed.
pub trait Outbox {
    /// Whether any event is due (owed, not held, its next try come): a
    /// read, so that an idem with nothing to deliver writes nothing.
    fn any_due(&mut self) -> Result<bool>;

    /// In one transaction: gives up the events older than [`GIVE_UP`]
    /// (lost, never sent), then takes up to `limit` due events, oldest
    /// first, for `holder` until [`LEASE`] from now; hook events only
    /// with `hooks`. Never the events of a run still running (they are
    /// its own to deliver, however long it runs), nor those of run
    /// `except` (the caller's own, settled by it).
    fn take_due(
        &mut self,
        holder: Uuid,
        limit: u32,
        hooks: bool,
        except: Option<Uuid>,
    ) -> Result<Vec<Owed>>;

    /// The run's own events, written held by it: handed over as taken.
    fn take_held(&mut self, run_id: Uuid) -> Result<Vec<Owed>>;

    /// Settles each event (by its id) that `holder` still holds, in one
    /// transaction; how many it held (one whose lease passed may have
    /// been taken by another).
    fn settle(&mut self, holder: Uuid, settled: &[(Uuid, Settled)]) -> Result<u64>;

    /// The events still owed (neither delivered nor lost), per job, in
    /// job order.
    fn owed(&mut self) -> Result<Vec<(String, u64)>>;

    /// The events of run `run_id`, oldest first.
    fn events(&mut self, run_id: Uuid) -> Result<Vec<EventState>>;

    /// The events given up, newest first, at most `limit`.
    fn lost(&mut self, limit: u32) -> Result<Vec<EventState>>;

    /// Drops the events made before `before` that are settled (delivered
    /// or lost); how many (counted only, with `dry_run`).
    fn prune_events(&mut self, before: Timestamp, dry_run: bool) -> Result<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_idem_tries_at_once_then_backs_off_to_an_hour() {
        assert_eq!(backoff(1), Duration::ZERO);
        assert_eq!(backoff(2), Duration::from_secs(30));
        assert_eq!(backoff(3), Duration::from_secs(60));
        assert_eq!(backoff(40), Duration::from_secs(3600));
    }
}
