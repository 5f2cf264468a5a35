//! Stopping a running run wherever it runs (`idem stop`, `run
//! --replace`): the request is written in the ledger, where the run's
//! owner reads it (see `run::stopped`). On a local ledger the run's processes
//! are also signalled here, found by the `IDEM_RUN_ID` they inherit, so
//! that the stop works even when the owning idem is frozen; its guardian
//! ends once they are gone. On a shared ledger the owner's heartbeat
//! brings the request, within a third of its lease.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Result;
use nix::libc;

use crate::ledger::{self, Head, Ledger, ListFilter, Plan, Status, StopRequest};
use crate::process::processes_of_run;

/// A stop under way: what was asked of which run, and, on a local ledger,
/// which of its processes were signalled.
pub struct Stopping {
    pub key: String,
    pub head: Head,
    signal: i32,
    grace: Duration,
    asked_at: Instant,
    /// Whether this host signals the run's processes (a local ledger).
    local: bool,
    signalled: HashSet<i32>,
    killed: bool,
}

/// What a look at a key found for a stop.
pub enum Found {
    /// The key has no running run.
    NotRunning,
    /// Its running run's owner was gone: the run is now abandoned.
    Abandoned(Box<Head>),
    /// The run is asked to stop.
    Stopping(Box<Stopping>),
}

/// Asks the running run of `key`, if any, to stop: `signal` first, then
/// SIGKILL after `grace` (by its owner on a shared ledger, by this process
/// on a local one).
pub fn stop(ledger: &mut dyn Ledger, key: &str, signal: i32, grace: Duration) -> Result<Found> {
    let Some(head) = ledger.head(key)? else {
        return Ok(Found::NotRunning);
    };
    stop_head(ledger, head, signal, grace)
}

/// As [`stop`], for a head already read.
pub fn stop_head(
    ledger: &mut dyn Ledger,
    head: Head,
    signal: i32,
    grace: Duration,
) -> Result<Found> {
    stop_head_by(ledger, head, signal, grace, ledger::stops::requester())
}

/// As [`stop_head`], asked by `by` (`user@host`): `idem serve` asks for
/// the user who pressed its button, not for the user it runs as.
pub fn stop_head_by(
    ledger: &mut dyn Ledger,
    head: Head,
    signal: i32,
    grace: Duration,
    by: String,
) -> Result<Found> {
    if head.run.status != Status::Running {
        return Ok(Found::NotRunning);
    }
    let key = head.run.key.clone();
    if owner_gone(&head) {
        return abandon(ledger, head);
    }
    ledger.request_stop(&StopRequest {
        run_id: head.run.run_id,
        key: key.clone(),
        by,
        requested_at: jiff::Timestamp::now(),
        signal,
        seen_at: None,
    })?;
    let local = !ledger.leased() || left_here(&head);
    let mut stopping = Stopping {
        key,
        head,
        signal,
        grace,
        asked_at: Instant::now(),
        local,
        signalled: HashSet::new(),
        killed: false,
    };
    stopping.press();
    Ok(Found::Stopping(Box::new(stopping)))
}

/// Asks every running run of `job` to stop, as `by` (`user@host`), each
/// key's running run once: what each look found.
pub fn stop_job(
    ledger: &mut dyn Ledger,
    job: &str,
    signal: i32,
    grace: Duration,
    by: &str,
) -> Result<Vec<Found>> {
    let filter = ListFilter {
        job_glob: Some(ledger::glob_literal(job)),
        statuses: vec![Status::Running],
        // More running runs of one job than any fleet has at once.
        limit: 10_000,
        ..ListFilter::default()
    };
    let mut keys: Vec<String> = ledger
        .list(&filter)?
        .into_iter()
        .map(|run| run.key)
        .collect();
    keys.sort();
    keys.dedup();
    let mut found = Vec::new();
    for key in keys {
        if let Some(head) = ledger.head(&key)? {
            found.push(stop_head_by(ledger, head, signal, grace, by.to_owned())?);
        }
    }
    Ok(found)
}

/// What became of a stop, looked at once.
pub enum State {
    /// The run still goes on, or its owner has not recorded it yet.
    Going,
    /// Its owner recorded it so (`None`: another run took the key).
    Recorded(Option<Status>),
    /// Its owner was gone: the run is now abandoned.
    Abandoned,
}

impl Stopping {
    /// Signals what of the run this host can reach and has not signalled
    /// yet, SIGKILL once the grace is over: processes that forked since
    /// the last look are found at the next.
    pub fn press(&mut self) {
        if !self.local {
            return;
        }
        let kill = self.asked_at.elapsed() >= self.grace;
        let run_id = self.head.run.run_id.to_string();
        // A run in cgroups ends at once, a process forking meanwhile too.
        if kill && crate::process::kill_run(&run_id) {
            self.killed = true;
        }
        let pids = processes_of_run(&run_id);
        for pid in pids {
            let signal = if kill {
                libc::SIGKILL
            } else if self.signalled.insert(pid) {
                self.signal
            } else {
                continue;
            };
            // SAFETY: kill has no memory effects; a pid gone meanwhile
            // gives ESRCH, which is no failure here.
            unsafe {
                libc::kill(pid, signal);
                libc::kill(pid, libc::SIGCONT);
            }
        }
        self.killed |= kill;
    }

    /// Whether this host signals the run's processes (a local ledger).
    pub fn local(&self) -> bool {
        self.local
    }

    /// Whether any process of the run lives that this host can see.
    pub fn lives(&self) -> bool {
        self.local && !processes_of_run(&self.head.run.run_id.to_string()).is_empty()
    }

    /// Looks at the key once: presses the stop, and tells whether the run
    /// is recorded over.
    pub fn look(&mut self, ledger: &mut dyn Ledger) -> Result<State> {
        self.press();
        let head = ledger.head(&self.key)?;
        let Some(head) = head.filter(|head| head.run.run_id == self.head.run.run_id) else {
            return Ok(State::Recorded(None));
        };
        if head.run.status != Status::Running {
            return Ok(State::Recorded(Some(head.run.status)));
        }
        if owner_gone(&head) {
            return Ok(match abandon(ledger, head)? {
                Found::Abandoned(_) => State::Abandoned,
                _ => State::Recorded(None),
            });
        }
        Ok(State::Going)
    }
}

/// Whether a running head lives only by processes it left on this host
/// (its lease passed: no owner hears the request), which this host then
/// signals as on a local ledger.
fn left_here(head: &Head) -> bool {
    head.owner
        .as_ref()
        .is_some_and(|owner| owner.judged == ledger::Judged::LeftRunning)
}

/// Whether a running head's owner is known to be gone (no process of the
/// run holds its lock, or its lease ran out).
fn owner_gone(head: &Head) -> bool {
    head.owner
        .as_ref()
        .is_some_and(|owner| owner.alive == Some(false))
}

/// Marks the running head abandoned, as `ledger forget --force` would,
/// if it is still the same run and its owner still gone.
fn abandon(ledger: &mut dyn Ledger, head: Head) -> Result<Found> {
    let run_id = head.run.run_id;
    let mut marked = false;
    ledger.claim(&head.run.key, &mut |now, _| {
        let same = now.is_some_and(|now| {
            now.run.run_id == run_id && now.run.status == Status::Running && owner_gone(now)
        });
        marked = same;
        Plan {
            abandon_head: same,
            claim: None,
        }
    })?;
    Ok(if marked {
        Found::Abandoned(Box::new(head))
    } else {
        Found::NotRunning
    })
}
