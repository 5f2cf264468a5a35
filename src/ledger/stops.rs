//! Stop requests: `idem stop` and `run --replace` ask, in the ledger, that
//! a running run be stopped; its owner reads the request (at the end of an
//! attempt, before a retry, and on a shared ledger with every heartbeat),
//! records the run `failed` and retries nothing. A request stays as the
//! run's history ("stopped by user@host at T").

use anyhow::Result;
use jiff::Timestamp;
use uuid::Uuid;

/// One request to stop a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopRequest {
    pub run_id: Uuid,
    pub key: String,
    /// Who asked: `user@host`.
    pub by: String,
    pub requested_at: Timestamp,
    /// What the run's processes are sent first (SIGKILL follows after the
    /// run's grace).
    pub signal: i32,
    /// When the run's owner took the request in; `None`: not yet.
    pub seen_at: Option<Timestamp>,
}

impl StopRequest {
    /// The request as `ledger show` tells it under its run, whose status
    /// is `status`.
    pub fn words(&self, status: super::Status, zone: &jiff::tz::TimeZone) -> String {
        let at = crate::render::local(self.requested_at, zone);
        let by = format!("by {} at {at} (signal {})", self.by, self.signal);
        match (status, self.seen_at) {
            (super::Status::Running, None) => {
                format!("stop requested {by}; its owner has not seen it yet")
            }
            (super::Status::Running, Some(_)) => format!("stopping, requested {by}"),
            _ => format!("stopped {by}"),
        }
    }
}

/// The stop requests of a ledger.
pub trait Stops {
    /// Writes `request` (its `requested_at` and `seen_at` are the ledger's
    /// to stamp), durable before it returns.
    fn request_stop(&mut self, request: &StopRequest) -> Result<()>;

    /// The first request to stop run `run_id`, marked seen now if it was
    /// not yet: its owner has it.
    fn stop_seen(&mut self, run_id: Uuid) -> Result<Option<StopRequest>>;

    /// The first request to stop run `run_id`, read only.
    fn stop_of(&mut self, run_id: Uuid) -> Result<Option<StopRequest>>;

    /// Asks to hear at once of a request to stop run `run_id` (on a
    /// shared ledger, a notification on this connection), so that its
    /// heartbeat need not wait for its turn; see [`Stops::stop_heard`].
    fn listen_for_stop(&mut self, _run_id: Uuid) -> Result<()> {
        Ok(())
    }

    /// Whether a request to stop the run listened for may have come since
    /// the last call, found without a round trip.
    fn stop_heard(&mut self) -> bool {
        false
    }
}

/// The channel a shared ledger notifies of a request to stop run `run_id`.
pub fn channel(run_id: Uuid) -> String {
    format!("idem_stop_{}", run_id.simple())
}

/// Who asks, as `user@host`: the user's name (its uid when it has none)
/// and the host's name.
pub fn requester() -> String {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |user| user.name);
    format!("{user}@{}", crate::host::name())
}
