//! What `idem run` does with a key, given the key's head: a pure function,
//! called once without writing (the skip path) and again inside the claim
//! transaction, where its answer is final.

use std::time::Duration;

use jiff::Timestamp;

use crate::ledger::{Head, Owner, Status};

/// What a run does when its key's last run died without an outcome
/// (`--on-abandoned`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAbandoned {
    /// Run again, telling the command (`IDEM_RECOVERED=1`).
    Rerun,
    /// Refuse (exit 69) and leave the key for a person.
    Fail,
}

/// Everything the decision depends on besides the head.
pub struct Rules {
    pub fingerprint: [u8; 32],
    pub force: bool,
    pub ttl: Option<Duration>,
    pub on_abandoned: OnAbandoned,
    pub now: Timestamp,
}

impl Rules {
    /// The time by the clock that stamped the key's runs: a shared
    /// database's when the head was read from one, else this host's.
    pub fn clock(&self, head: Option<&Head>) -> Timestamp {
        head.and_then(|head| head.read_at).unwrap_or(self.now)
    }

    /// Whether the head's success still counts under `--ttl`. A success
    /// stamped ahead of the clock (a clock that ran fast, then was set
    /// right) does not: taken as fresh, it would count for as long as the
    /// clock was ahead, longer than one made now. Without a finish time its
    /// age is unknown, and under a TTL it is not fresh either.
    pub fn fresh(&self, head: &Head) -> bool {
        match (self.ttl, head.run.finished_at) {
            (Some(ttl), Some(finished)) => {
                let age = self.clock(Some(head)).duration_since(finished);
                !age.is_negative() && age.unsigned_abs() < ttl
            }
            (Some(_), None) => false,
            (None, _) => true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Claim the key and run; `recovered` when the last run was abandoned.
    Run { recovered: bool },
    /// Nothing runs.
    Refuse(Refusal),
}

/// Why nothing runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The key succeeded within its TTL with this command.
    Skip { finished_at: Timestamp },
    /// The key succeeded with a different command (exit 65).
    Mismatch,
    /// The key is running under a live owner (exit 75, or wait).
    Busy { owner: Owner, since: Timestamp },
    /// Processes left by an ended run of the key still hold it (75, or
    /// wait); `left_by`: that run, the key's head as the plan read it.
    Lingering { left_by: Option<Owner> },
    /// The last run was abandoned and `--on-abandoned fail` was given (69).
    AbandonedFail,
}

impl Refusal {
    /// Whether another run holds the key: something `--wait` waits out.
    pub fn held(&self) -> bool {
        matches!(self, Refusal::Busy { .. } | Refusal::Lingering { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    /// The head is running but its owner is gone: mark it abandoned.
    pub abandon_head: bool,
}

impl Decision {
    /// Whether acting on this decision writes to the ledger.
    pub fn writes(&self) -> bool {
        self.abandon_head || matches!(self.verdict, Verdict::Run { .. })
    }
}

/// `lingering`: the ledger found processes of an ended run still holding
/// the key (see `Ledger::claim`); even `--force` never runs beside them.
pub fn decide(head: Option<&Head>, lingering: bool, rules: &Rules) -> Decision {
    let decision = |verdict| Decision {
        verdict,
        abandon_head: false,
    };
    let refuse = |refusal| decision(Verdict::Refuse(refusal));
    if lingering {
        let left_by = head.map(|head| crate::process::holders::left_by(&head.run));
        return refuse(Refusal::Lingering { left_by });
    }
    let Some(head) = head else {
        return decision(Verdict::Run { recovered: false });
    };
    let run = &head.run;
    let abandoned = match (&run.status, &head.owner) {
        (Status::Running, Some(owner)) if owner.presumed_alive() => {
            // Even --force never overlaps a live run.
            return refuse(Refusal::Busy {
                owner: owner.clone(),
                since: run.started_at,
            });
        }
        (Status::Running, _) => true,
        (Status::Abandoned, _) => false,
        (Status::Succeeded, _) => {
            return if rules.force || !rules.fresh(head) {
                decision(Verdict::Run { recovered: false })
            } else if run.fingerprint() != rules.fingerprint && run.note.is_none() {
                refuse(Refusal::Mismatch)
            } else {
                refuse(Refusal::Skip {
                    finished_at: run.finished_at.unwrap_or(run.started_at),
                })
            };
        }
        (Status::Failed, _) => return decision(Verdict::Run { recovered: false }),
    };
    // The last run died without an outcome (or was just found dead).
    let verdict = if rules.force || rules.on_abandoned == OnAbandoned::Rerun {
        Verdict::Run { recovered: true }
    } else {
        Verdict::Refuse(Refusal::AbandonedFail)
    };
    Decision {
        verdict,
        abandon_head: abandoned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Run;

    fn head(status: Status, command: &str, finished_secs_ago: Option<i64>, now: Timestamp) -> Head {
        Head {
            run: Run {
                key: "k".into(),
                job: "k".into(),
                head: true,
                run_id: uuid::Uuid::nil(),
                status,
                exit_code: None,
                signal: None,
                attempts: 1,
                started_at: now,
                finished_at: finished_secs_ago
                    .map(|secs| now - jiff::SignedDuration::from_secs(secs)),
                host: "h".into(),
                pid: 1,
                command: vec![command.into()],
                shell: false,
                recovered: false,
                note: None,
            },
            owner: (status == Status::Running).then(|| Owner {
                host: "h".into(),
                pid: 1,
                pgid: None,
                run_id: uuid::Uuid::nil(),
                alive: Some(true),
                judged: Default::default(),
            }),
            read_at: None,
            checked_at: None,
        }
    }

    fn verdict(
        head: Option<&Head>,
        force: bool,
        ttl: Option<u64>,
        alive: bool,
        on: OnAbandoned,
    ) -> Decision {
        let mut head = head.cloned();
        if let Some(owner) = head.as_mut().and_then(|head| head.owner.as_mut()) {
            owner.alive = Some(alive);
        }
        let rules = Rules {
            fingerprint: crate::key::fingerprint(&["true".into()], false),
            force,
            ttl: ttl.map(Duration::from_secs),
            on_abandoned: on,
            now: head
                .as_ref()
                .map_or(Timestamp::now(), |head| head.run.started_at),
        };
        decide(head.as_ref(), false, &rules)
    }

    /// A decision by its kind, for a table of cases.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Kind {
        Run { recovered: bool },
        Skip,
        Mismatch,
        Busy,
        Lingering,
        AbandonedFail,
    }

    fn kind(verdict: &Verdict) -> Kind {
        match verdict {
            Verdict::Run { recovered } => Kind::Run {
                recovered: *recovered,
            },
            Verdict::Refuse(Refusal::Skip { .. }) => Kind::Skip,
            Verdict::Refuse(Refusal::Mismatch) => Kind::Mismatch,
            Verdict::Refuse(Refusal::Busy { .. }) => Kind::Busy,
            Verdict::Refuse(Refusal::Lingering { .. }) => Kind::Lingering,
            Verdict::Refuse(Refusal::AbandonedFail) => Kind::AbandonedFail,
        }
    }

    #[test]
    fn the_state_machine() {
        use OnAbandoned::{Fail, Rerun};
        use Status::{Abandoned, Failed, Running, Succeeded};
        const RUN: Kind = Kind::Run { recovered: false };
        const RECOVER: Kind = Kind::Run { recovered: true };
        // The head (status, command, finished seconds ago), --force, --ttl
        // seconds, whether a running head's owner lives, --on-abandoned;
        // then the verdict and whether the head is marked abandoned.
        #[rustfmt::skip]
        let cases = [
            ("a new key runs", None, false, None, true, Rerun, RUN, false),
            ("a success skips", Some((Succeeded, "true", Some(10))), false, None, true, Rerun, Kind::Skip, false),
            ("a success within its ttl skips", Some((Succeeded, "true", Some(10))), false, Some(60), true, Rerun, Kind::Skip, false),
            ("a success past its ttl runs", Some((Succeeded, "true", Some(10))), false, Some(5), true, Rerun, RUN, false),
            ("--force runs a success", Some((Succeeded, "true", Some(10))), true, None, true, Rerun, RUN, false),
            ("another command's success refuses", Some((Succeeded, "false", Some(10))), false, None, true, Rerun, Kind::Mismatch, false),
            ("--force runs another command's success", Some((Succeeded, "false", Some(10))), true, None, true, Rerun, RUN, false),
            ("a failure runs", Some((Failed, "false", Some(1))), false, None, true, Rerun, RUN, false),
            ("a live run is busy, even under --force", Some((Running, "true", None)), true, None, true, Rerun, Kind::Busy, false),
            ("a dead run is abandoned and run again", Some((Running, "true", None)), false, None, false, Rerun, RECOVER, true),
            ("a dead run is abandoned and refused", Some((Running, "true", None)), false, None, false, Fail, Kind::AbandonedFail, true),
            ("an abandoned run is refused", Some((Abandoned, "true", Some(1))), false, None, true, Fail, Kind::AbandonedFail, false),
            ("--force runs an abandoned run again", Some((Abandoned, "true", Some(1))), true, None, true, Fail, RECOVER, false),
        ];
        let now = Timestamp::now();
        for (case, shape, force, ttl, alive, on, expected, abandon_head) in cases {
            let head = shape.map(|(status, command, ago)| head(status, command, ago, now));
            let decision = verdict(head.as_ref(), force, ttl, alive, on);
            assert_eq!(kind(&decision.verdict), expected, "{case}");
            assert_eq!(decision.abandon_head, abandon_head, "{case}");
            let writes = abandon_head || matches!(expected, Kind::Run { .. });
            assert_eq!(decision.writes(), writes, "{case}");
        }
    }

    #[test]
    fn an_owner_that_cannot_be_judged_is_presumed_alive_and_lingerers_block_even_force() {
        let now = Timestamp::now();
        let mut running = head(Status::Running, "true", None, now);
        if let Some(owner) = running.owner.as_mut() {
            owner.alive = None;
        }
        let rules = Rules {
            fingerprint: crate::key::fingerprint(&["true".into()], false),
            force: true,
            ttl: None,
            on_abandoned: OnAbandoned::Rerun,
            now,
        };
        assert_eq!(
            kind(&decide(Some(&running), false, &rules).verdict),
            Kind::Busy
        );
        let failed = head(Status::Failed, "true", Some(1), now);
        assert_eq!(
            kind(&decide(Some(&failed), true, &rules).verdict),
            Kind::Lingering
        );
        assert_eq!(kind(&decide(None, true, &rules).verdict), Kind::Lingering);
    }

    #[test]
    fn a_success_from_the_future_is_not_fresh() {
        let now = Timestamp::now();
        let rerun = OnAbandoned::Rerun;
        // Stamped while the clock ran 30 days ahead.
        let ahead = head(Status::Succeeded, "true", Some(-30 * 86_400), now);
        assert_eq!(
            verdict(Some(&ahead), false, Some(3600), true, rerun).verdict,
            Verdict::Run { recovered: false }
        );
        // Even a second ahead counts for more than a success made now.
        let second = head(Status::Succeeded, "true", Some(-1), now);
        assert_eq!(
            verdict(Some(&second), false, Some(3600), true, rerun).verdict,
            Verdict::Run { recovered: false }
        );
        // Without a TTL a success counts forever, whenever it was stamped.
        assert_eq!(
            kind(&verdict(Some(&ahead), false, None, true, rerun).verdict),
            Kind::Skip
        );
        // A success made now is fresh.
        let made_now = head(Status::Succeeded, "true", Some(0), now);
        assert_eq!(
            kind(&verdict(Some(&made_now), false, Some(3600), true, rerun).verdict),
            Kind::Skip
        );
        // Without its finish time, its age is unknown: not fresh under a TTL.
        let endless = head(Status::Succeeded, "true", None, now);
        assert_eq!(
            verdict(Some(&endless), false, Some(3600), true, rerun).verdict,
            Verdict::Run { recovered: false }
        );
    }

    #[test]
    fn a_ttl_is_judged_by_the_clock_that_stamped_the_run() {
        let now = Timestamp::now();
        // Succeeded 10s ago by this host's clock...
        let mut ok = head(Status::Succeeded, "true", Some(10), now);
        let rerun = OnAbandoned::Rerun;
        assert_eq!(
            kind(&verdict(Some(&ok), false, Some(60), true, rerun).verdict),
            Kind::Skip
        );
        // ...but the shared database's clock says 2 minutes have passed.
        ok.read_at = Some(now + jiff::SignedDuration::from_secs(110));
        assert_eq!(
            verdict(Some(&ok), false, Some(60), true, rerun).verdict,
            Verdict::Run { recovered: false }
        );
    }
}
