//! The outbox: every ping and hook a run owes, kept in the ledger until it
//! is delivered or a day old.
//!
//! An event is written in the transaction that records what causes it (the
//! claim owes `start`, the outcome `success`, `failure` or `recovery`), so
//! that no outcome is durable without its notifications.
//!
//! Each monitor (a ping's address; its `dest`, a hash) hears its events in
//! the order their runs started, a run's start before its outcome, one at
//! a time: an event goes out only once every earlier event of its target
//! is settled, and none of the target's is being sent. An event that a
//! newer run's outcome, sent to the same target, has overtaken is
//! superseded: never sent (the monitor already holds a newer state), and
//! never counted lost. A hook is a person's command, not a monitor that
//! keeps a state: each run runs its own hooks, and those that failed are
//! run again, oldest first, by `idem ledger deliver`.
//!
//! At most once, whatever the disk does: whoever delivers an event first
//! records, in a transaction of its own, that it is being sent (its
//! `sending_at`, under a lease), and only then sends it; it is settled by
//! that holder alone. A sending whose holder never settled it (killed, or
//! its disk full) is never sent again: past its lease it is "sent, not
//! confirmed".
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

/// How long a sending holds its target: a delivery is bounded well below
/// it, so that nothing else goes to that target while it is under way.
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
    /// Which target it goes to, kept once its address is dropped: the
    /// events of one target go out in order (see [`dest`]).
    pub dest: String,
}

/// The `dest` of an address: the first 16 bytes of its SHA-256, in hex,
/// which tell targets apart without keeping the address.
pub fn dest(address: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(address.as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// An event taken for delivery: recorded as being sent by `holder`.
#[derive(Debug, Clone)]
pub struct Owed {
    pub event: NewEvent,
    pub created_at: Timestamp,
    /// Deliveries tried before this one.
    pub attempts: u32,
    /// Who holds it: only they may settle it.
    pub holder: Uuid,
}

/// Which events [`Outbox::take_next`] may take.
#[derive(Debug, Clone, Copy)]
pub struct Pick<'a> {
    /// Only these targets; every target when empty.
    pub targets: &'a [String],
    /// Never these targets (they failed just now).
    pub skip: &'a [String],
    /// Hook events too.
    pub hooks: bool,
    /// Whether or not their next try has come.
    pub now: bool,
    /// Only this run's events.
    pub run: Option<Uuid>,
    /// At most this many (one a target).
    pub limit: u32,
}

/// What [`Outbox::take_next`] took, and what it found overtaken.
#[derive(Debug, Clone, Default)]
pub struct Taken {
    pub owed: Vec<Owed>,
    /// Events found superseded now (never to be sent).
    pub superseded: u64,
}

/// A target that could not be reached, from its first failed delivery
/// until one reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outage {
    pub dest: String,
    /// As people see it: `ping 1 3fa2c1d0`.
    pub target: String,
    pub since: Timestamp,
    /// Events still owed to it.
    pub owed: u64,
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
    /// Overtaken by a newer run's outcome to its target: never sent.
    pub superseded: bool,
    /// When it was last handed to its target, while not settled: being
    /// sent (`confirmed` unknown yet), or sent and never confirmed.
    pub sending_at: Option<Timestamp>,
    /// A sending whose lease passed unsettled: it may have gone out, so it
    /// is never sent again.
    pub unconfirmed: bool,
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
    /// Whether any event is due (owed, its next try come): a read, so
    /// that an idem with nothing to deliver writes nothing.
    fn any_due(&mut self) -> Result<bool>;

    /// In one transaction: gives up the events older than [`GIVE_UP`]
    /// (lost, never sent), marks superseded every owed event that a newer
    /// run's outcome to its target has overtaken (sent, or being sent),
    /// then takes for `holder`, recorded as being sent until [`LEASE`]
    /// from now, the next event of each target that may go out now: the
    /// first owed one in the target's order, due, with none of the
    /// target's being sent. Only the targets in `targets` (every target
    /// with `targets` empty, up to `limit`), never those in `skip`; hook
    /// events only with `hooks`. With `now`, whether or not the next try
    /// has come: a run tries its own targets once, and `idem ledger
    /// deliver` every target, to find a monitor back.
    fn take_next(&mut self, holder: Uuid, pick: &Pick<'_>) -> Result<Taken>;

    /// Settles each event (by its id) that `holder` still holds, in one
    /// transaction: a delivery clears its target's outage and makes what
    /// the target is owed due at once, a ping's failure opens one; how many it held (one whose lease passed is
    /// sent, not confirmed, and stays so).
    fn settle(&mut self, holder: Uuid, settled: &[(Uuid, Settled)]) -> Result<u64>;

    /// The events still owed (neither sent, superseded nor lost), per
    /// job, in job order.
    fn owed(&mut self) -> Result<Vec<(String, u64)>>;

    /// The events of run `run_id`, oldest first.
    fn events(&mut self, run_id: Uuid) -> Result<Vec<EventState>>;

    /// The events given up, newest first, at most `limit`.
    fn lost(&mut self, limit: u32) -> Result<Vec<EventState>>;

    /// The targets that cannot be reached now, oldest outage first.
    fn outages(&mut self) -> Result<Vec<Outage>>;

    /// Of the outages of `dests`, those not yet said, marked said now (in
    /// one transaction): what a run prints once per target per outage.
    fn say_outages(&mut self, dests: &[String]) -> Result<Vec<Outage>>;

    /// Drops the events made before `before` that are settled (delivered,
    /// superseded, lost, or sent and not confirmed); how many (counted
    /// only, with `dry_run`).
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
