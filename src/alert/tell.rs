//! What a run tells, once its key is free: its start pings, sent beside
//! the command on a connection of their own so that each is settled the
//! moment it goes out, then its outcome's pings and hooks, each target's
//! events in their order, within the run's budget; and a target that
//! cannot be reached, said once per outage, never by a run that is
//! otherwise quiet.

use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::deliver::{self, Swept};
use super::events::is_hook;
use super::{ping, Alerts, Inner};
use crate::ledger::{Ledger, Location, NewEvent, Pick};
use crate::report::Reporter;

/// How one event of the run's targets went: its target, and the line
/// that says why it did not go out.
pub(super) type Sent = (String, Result<(), String>);

/// The start pings: under way on a thread of their own, then how each
/// went.
pub(super) enum Started {
    None,
    Sending(JoinHandle<Vec<Sent>>),
    Sent(Vec<Sent>),
}

/// The time a run's own pings have taken, against [`ping::BUDGET`].
#[derive(Default)]
pub(super) struct Budget(Mutex<Duration>);

impl Budget {
    pub(super) fn left(&self) -> Duration {
        ping::BUDGET.saturating_sub(
            *self
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }

    /// Delivers one ping event of the run within what is left, at most
    /// `most`; how it went, said by the caller.
    pub(super) fn deliver(
        &self,
        event: &NewEvent,
        most: Duration,
        reporter: &Reporter,
    ) -> Result<(), String> {
        let began = Instant::now();
        let result = deliver::deliver(event, self.left().min(most), reporter);
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) += began.elapsed();
        result
    }
}

/// Sends the run's start pings beside its command, on a connection of its
/// own: each target's next event (the run's own start, or an older one
/// owed to it first), recorded as being sent, sent, and settled at once.
/// A ledger that cannot be opened sends nothing: the run's end does.
pub(super) fn start(
    location: &Location,
    run_id: uuid::Uuid,
    dests: Vec<String>,
    budget: std::sync::Arc<Budget>,
) -> Started {
    let location = location.clone();
    Started::Sending(std::thread::spawn(move || {
        let quiet = Reporter::new(true, false, false);
        let Ok(mut ledger) = crate::ledger::open(&location) else {
            return Vec::new();
        };
        let pick = Pick {
            targets: &dests,
            skip: &[],
            hooks: false,
            now: true,
            run: None,
            limit: u32::try_from(dests.len()).unwrap_or(u32::MAX),
        };
        let Ok(taken) = ledger.take_next(run_id, &pick) else {
            return Vec::new();
        };
        let mut sent = Vec::new();
        for owed in taken.owed {
            let result = budget.deliver(&owed.event, ping::START_BUDGET, &quiet);
            // Unrecorded, the event stays "being sent", never sent again.
            let _ = deliver::settle(
                ledger.as_mut(),
                &owed,
                result.clone(),
                &mut Swept::default(),
            );
            sent.push((owed.event.dest, result));
        }
        ledger.leave();
        sent
    }))
}

impl Alerts {
    /// Delivers the events the recorded outcome owes (`owed`) once the run
    /// has let go of its key: each of its targets' events in order (an
    /// older run's owed there go first), its pings within the run's
    /// budget, its hooks each within their limit; what is not delivered
    /// stays owed for the next idem. A target that failed is said once
    /// per outage, unless the run is `quiet` (a failure below
    /// `--alert-after`, a success under `--quiet-success`). With the time
    /// left, delivers what other runs owe.
    pub fn tell(&self, owed: &[NewEvent], quiet: bool, ledger: &mut dyn Ledger) {
        let inner = &*self.inner;
        inner.join_start();
        let mut failed: Vec<Sent> = inner
            .take_started()
            .into_iter()
            .filter(|(_, result)| result.is_err())
            .collect();
        // A run's trace goes with its pings, within the same budget.
        let traces = owed.iter().filter(|event| event.kind == "trace");
        let pings: Vec<String> = (inner.settings.ping.iter())
            .map(|url| crate::ledger::dest(url))
            .chain(traces.map(|event| event.dest.clone()))
            .collect();
        inner.deliver_own(ledger, &pings, false, owed, &mut failed);
        let hooks: Vec<String> = owed
            .iter()
            .filter(|event| is_hook(event))
            .map(|event| event.dest.clone())
            .collect();
        inner.deliver_own(ledger, &hooks, true, owed, &mut Vec::new());
        self.record_hooks(ledger);
        if !quiet {
            inner.say_outages(ledger, &failed);
        }
        let skip: Vec<String> = failed.into_iter().map(|(dest, _)| dest).collect();
        let left = inner.budget.left();
        if !left.is_zero() {
            let _ = deliver::sweep(ledger, left, false, false, &skip, &inner.reporter);
        }
    }

    /// Waits for the start pings of a run that ended early (an error):
    /// they settle themselves.
    pub fn settle_start(&self, _ledger: &mut dyn Ledger) {
        self.inner.join_start();
    }

    /// Records with the run the hooks that ran (`slow` ones included). A
    /// ledger that refuses it is told on stderr: the outcome stands.
    fn record_hooks(&self, ledger: &mut dyn Ledger) {
        let ran = std::mem::take(
            &mut *self
                .inner
                .ran
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        if ran.is_empty() {
            return;
        }
        if let Err(error) = ledger.hooks_ran(self.inner.claimed, &ran) {
            self.inner.reporter.notice(
                &mut std::io::stderr(),
                crate::console::Event::Ledger,
                &format!(
                    "{}: could not record its hooks ({error:#}); the run's outcome stands",
                    self.inner.key
                ),
            );
        }
    }
}

impl Inner {
    /// Delivers `dests`' events in order until the run's own outcome
    /// event of each has gone (or a target fails, or the pings' budget
    /// runs out: nothing is taken that there is no time to send); with
    /// `hooks`, the run's own hooks alone.
    fn deliver_own(
        &self,
        ledger: &mut dyn Ledger,
        dests: &[String],
        hooks: bool,
        owed: &[NewEvent],
        failed: &mut Vec<Sent>,
    ) {
        let mut left: Vec<String> = dests
            .iter()
            .filter(|dest| owed.iter().any(|event| &event.dest == *dest))
            .filter(|dest| !failed.iter().any(|(down, _)| down == *dest))
            .cloned()
            .collect();
        while !left.is_empty() && (hooks || !self.budget.left().is_zero()) {
            let pick = Pick {
                targets: &left,
                skip: &[],
                hooks,
                now: true,
                // A hook is the run's own to run (see `ledger::outbox`).
                run: hooks.then_some(self.claimed),
                limit: u32::try_from(left.len()).unwrap_or(u32::MAX),
            };
            let Ok(taken) = ledger.take_next(self.claimed, &pick) else {
                return;
            };
            if taken.owed.is_empty() {
                return;
            }
            for taken in taken.owed {
                // The run's own, as it knows them now (a failure that paused
                // its job says so).
                let event = owed
                    .iter()
                    .find(|event| event.event_id == taken.event.event_id)
                    .unwrap_or(&taken.event);
                let result = self.send(event);
                let mine = taken.event.run_id == self.claimed && taken.event.kind != "start";
                let dest = taken.event.dest.clone();
                if let Err(error) =
                    deliver::settle(ledger, &taken, result.clone(), &mut Swept::default())
                {
                    self.reporter.notice(
                        &mut std::io::stderr(),
                        crate::console::Event::Ledger,
                        &format!("{}: {error:#}", self.key),
                    );
                }
                if result.is_err() || mine {
                    left.retain(|other| *other != dest);
                }
                if let Err(why) = result {
                    failed.push((dest, Err(why)));
                }
            }
        }
    }

    /// Sends one taken event: a hook run as the run's, a ping within the
    /// budget.
    fn send(&self, event: &NewEvent) -> Result<(), String> {
        if is_hook(event) {
            self.hook(event)
        } else {
            self.budget.deliver(event, ping::BUDGET, &self.reporter)
        }
    }

    /// Says each target that failed and was not said since it was last
    /// reached: what failed, how many events it is owed, and who sends
    /// them.
    fn say_outages(&self, ledger: &mut dyn Ledger, failed: &[Sent]) {
        let dests: Vec<String> = failed.iter().map(|(dest, _)| dest.clone()).collect();
        let Ok(unsaid) = ledger.say_outages(&dests) else {
            return;
        };
        for outage in unsaid {
            let Some((_, Err(why))) = failed.iter().find(|(dest, _)| *dest == outage.dest) else {
                continue;
            };
            let line = format!(
                "{why}; {} owed to it, which `idem ledger deliver` sends once it is back \
                 (said once until it is reached again); the run's outcome stands",
                crate::render::count(outage.owed, "event")
            );
            self.reporter.notice(
                &mut std::io::stderr(),
                crate::console::Event::PingFailed,
                &line,
            );
        }
    }
}
