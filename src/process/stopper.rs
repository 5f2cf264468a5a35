//! How another thread reaches the running attempt: a [`Stopper`] asks the
//! supervisor's event loop to stop it, and tells the attempt's guardian
//! (through the [`Link`]) of each lease renewal.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::events::{Event, Requester};
use super::wire;

/// The current attempt's guardian, and the lease deadline it must enforce.
#[derive(Default)]
pub(super) struct Link {
    pub(super) guardian: Option<UnixStream>,
    /// Monotonic ms to stop the run at, and the grace before SIGKILL.
    pub(super) deadline: Option<(i64, i64)>,
}

impl Link {
    pub(super) fn tell(&mut self, kind: u8, a: i64, b: i64) {
        if let Some(guardian) = &mut self.guardian {
            // A guardian that is gone has nothing left to stop.
            let _ = guardian.write_all(&wire::encode_to(kind, a, b));
        }
    }
}

/// Lets another thread stop the running command: SIGTERM to its group,
/// SIGKILL after `grace` (at most `--kill-after`). Used when a shared
/// ledger's lease cannot be renewed; and it tells the guardian of each
/// renewal, so that the guardian stops the run by itself should idem be
/// frozen or killed before the lease runs out.
#[derive(Clone)]
pub struct Stopper {
    pub(super) requests: Requester,
    pub(super) link: Arc<Mutex<Link>>,
}

impl Stopper {
    pub fn stop(&self, reason: String, grace: Duration) {
        self.requests.send(Event::Stop { reason, grace });
    }

    /// A person asked to stop the run (`idem stop`): `signal` to all of
    /// it, SIGKILL after `--kill-after`; no attempt follows.
    pub fn request(&self, signal: i32) {
        self.requests.send(Event::Requested { signal });
    }

    /// The lease holds until monotonic ms `until`; past it the guardian
    /// stops the run, and SIGKILLs it `grace` later.
    pub fn renewed(&self, until: i64, grace: Duration) {
        let grace = grace.as_millis() as i64;
        if let Ok(mut link) = self.link.lock() {
            link.deadline = Some((until, grace));
            link.tell(wire::DEADLINE, until, grace);
        }
    }
}
