//! The heartbeat of a claim on a shared ledger.
//!
//! While the command runs, a thread renews the claim's lease every lease/3
//! on a connection of its own. Another host takes the key over once the
//! lease has passed, so the command must never outlive it: when renewals
//! keep failing for two thirds of the lease (database gone, network cut),
//! or the claim turns out lost (taken over, or gone with a failover that
//! lost its commit), the command is stopped (SIGTERM to its group, SIGKILL
//! at most lease/6 later), well before the lease runs out. A heartbeat
//! also reads whether a person asked to stop the run (`idem stop`), so the
//! run stops within a third of its lease of the request; from the first
//! heartbeat on (a second in), its connection also listens for the
//! request's notification, and the run stops within a moment.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ledger::{self, Claim, Ledger, Location, Renewal};
use crate::process::Stopper;

/// When the first heartbeat comes, at the latest.
const FIRST_BEAT: Duration = Duration::from_secs(1);

/// How often the heartbeat's connection is looked at, without a round
/// trip, for a notice of a stop request or of its own end.
const LISTEN_EVERY: Duration = Duration::from_millis(200);

/// Renews a claim's lease until dropped.
pub struct Lease {
    /// Dropping it tells the renewer to stop.
    _done: mpsc::Sender<()>,
    over: Arc<AtomicBool>,
}

enum Beat {
    /// When the renewal that succeeded was sent, on both clocks.
    Renewed(Instant, i64),
    /// A person asked to stop the run with this signal (`idem stop`).
    Stop(i32),
    /// The claim is no longer this run's: how it was lost.
    Lost(Renewal),
    Failed(String),
}

impl Lease {
    /// Starts renewing `claim`, whose lease of `lease` was just taken (the
    /// milliseconds since the claim's commit are within the lease/6 margin).
    pub fn start(location: &Location, claim: &Claim, lease: Duration, stopper: Stopper) -> Lease {
        let claimed = Instant::now();
        guard(&stopper, lease, crate::process::monotonic_ms());
        let (done, done_rx) = mpsc::channel::<()>();
        let (beats, beats_rx) = mpsc::channel();
        let over = Arc::new(AtomicBool::new(false));
        let renewer = Renewer {
            location: location.clone(),
            claim: claim.clone(),
            every: lease / 3,
        };
        std::thread::spawn(move || renewer.run(&done_rx, &beats));
        let watcher = Watcher {
            key: claim.key.clone(),
            lease,
            stopper,
            over: over.clone(),
        };
        std::thread::spawn(move || watcher.run(claimed, &beats_rx));
        Lease { _done: done, over }
    }
}

/// Renews the claim every lease/3 on a connection of its own, telling each
/// try's result, until told to stop or the claim is lost.
struct Renewer {
    location: Location,
    claim: Claim,
    every: Duration,
}

impl Renewer {
    fn run(self, done: &mpsc::Receiver<()>, beats: &mpsc::Sender<Beat>) {
        let mut ledger: Option<Box<dyn Ledger>> = None;
        // The first heartbeat comes early (its connection then listens for
        // a stop request), but not so early that a short run opens it.
        let mut wait = self.every.min(FIRST_BEAT);
        loop {
            if !self.pause(wait, done, &mut ledger) {
                return;
            }
            let sent = Instant::now();
            let sent_ms = crate::process::monotonic_ms();
            let result = match &mut ledger {
                Some(ledger) => Ok(ledger),
                None => ledger::open(&self.location).map(|opened| {
                    let opened = ledger.insert(opened);
                    // Without it a stop waits for the next heartbeat.
                    let _ = opened.listen_for_stop(self.claim.run_id);
                    opened
                }),
            }
            .and_then(|ledger| ledger.heartbeat(&self.claim));
            let beat = match result {
                Ok(Renewal::Renewed) => {
                    wait = self.every;
                    Beat::Renewed(sent, sent_ms)
                }
                Ok(Renewal::Stop(signal)) => {
                    wait = self.every;
                    if beats.send(Beat::Stop(signal)).is_err() {
                        return;
                    }
                    Beat::Renewed(sent, sent_ms)
                }
                Ok(lost) => Beat::Lost(lost),
                Err(error) => {
                    // Try again soon, on a new connection.
                    ledger = None;
                    wait = (self.every / 4).max(Duration::from_millis(50));
                    Beat::Failed(format!("{error:#}"))
                }
            };
            let lost = matches!(beat, Beat::Lost(_));
            if beats.send(beat).is_err() || lost {
                return;
            }
        }
    }

    /// Waits `wait` before the next renewal, cut short when the server
    /// closes the connection: a primary gone in a failover is then noticed
    /// within lease/12, not at the next turn, lease/3 later at worst, so a
    /// claim the new primary never received stops its run in time. False:
    /// told to stop.
    fn pause(
        &self,
        wait: Duration,
        done: &mpsc::Receiver<()>,
        ledger: &mut Option<Box<dyn Ledger>>,
    ) -> bool {
        let due = Instant::now() + wait;
        loop {
            let slice = due
                .saturating_duration_since(Instant::now())
                .min(self.every / 4)
                .min(LISTEN_EVERY);
            match done.recv_timeout(slice) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return false,
            }
            let heard = |ledger: &mut Box<dyn Ledger>| ledger.cut() || ledger.stop_heard();
            if Instant::now() >= due || ledger.as_mut().is_some_and(heard) {
                return true;
            }
        }
    }
}

/// Stops the command when the renewals stop succeeding in time.
struct Watcher {
    key: String,
    lease: Duration,
    stopper: Stopper,
    /// Raised once the run no longer needs its lease.
    over: Arc<AtomicBool>,
}

impl Watcher {
    fn run(self, claimed: Instant, beats: &mpsc::Receiver<Beat>) {
        let Watcher {
            key,
            lease,
            stopper,
            over,
        } = self;
        // Stop at 2/3 of the lease after the last renewal; SIGKILL by 5/6.
        let stop_after = lease * 2 / 3;
        let mut renewed = claimed;
        let mut last_error = None;
        let reason = loop {
            let deadline = renewed + stop_after;
            match beats.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Beat::Renewed(at, at_ms)) => {
                    renewed = at;
                    last_error = None;
                    guard(&stopper, lease, at_ms);
                }
                Ok(Beat::Failed(error)) => last_error = Some(error),
                Ok(Beat::Stop(signal)) => stopper.request(signal),
                Ok(Beat::Lost(how)) => break lost(&key, how),
                Err(RecvTimeoutError::Timeout) => {
                    if Instant::now() < deadline {
                        continue;
                    }
                    break format!(
                        "could not renew the lease on key {key} for {}{}",
                        humantime::format_duration(round(stop_after)),
                        last_error.map_or(String::new(), |error| format!(" ({error})")),
                    );
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
        if !over.load(Ordering::SeqCst) {
            stopper.stop(
                format!("{reason}; stopped the command so that it does not run unowned"),
                lease / 6,
            );
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.over.store(true, Ordering::SeqCst);
    }
}

/// Gives the guardian its own deadline, a little after this module's: it
/// acts only when idem cannot (frozen, killed), and must still stop the run
/// before the lease renewed at monotonic ms `sent_ms` ends and another
/// host may take the key.
fn guard(stopper: &Stopper, lease: Duration, sent_ms: i64) {
    stopper.renewed(sent_ms + (lease * 3 / 4).as_millis() as i64, lease / 6);
}

/// Why the claim on `key` is no longer this run's, and what would have
/// kept it.
fn lost(key: &str, how: Renewal) -> String {
    match how {
        Renewal::Gone => format!(
            "lost the claim on key {key}: the ledger has no trace of this run (a failover to a standby that had not received the claim; make the standby synchronous, see `idem doctor`)"
        ),
        _ => format!(
            "lost the claim on key {key}: its lease ran out and another run took the key over"
        ),
    }
}

fn round(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis() as u64)
}
