//! What `idem run` does with a key, given the key's head: a pure function,
//! called once without writing (the skip path) and again inside the claim
//! transaction, where its answer is final.

use std::time::Duration;

use jiff::Timestamp;

use crate::cli::OnAbandoned;
use crate::ledger::{Head, Owner, Status};

/// Everything the decision depends on besides the head.
pub struct Rules {
    pub fingerprint: [u8; 32],
    pub force: bool,
    pub ttl: Option<Duration>,
    pub on_abandoned: OnAbandoned,
    pub now: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Claim the key and run; `recovered` when the last run was abandoned.
    Run { recovered: bool },
    /// The key succeeded within its TTL with this command.
    Skip { finished_at: Timestamp },
    /// The key succeeded with a different command (exit 65).
    Mismatch,
    /// The key is running under a live owner (exit 75, or wait).
    Busy { owner: Owner, since: Timestamp },
    /// Processes left by an ended run of the key still hold it (75, or wait).
    Lingering,
    /// The last run was abandoned and `--on-abandoned fail` was given (69).
    AbandonedFail,
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
    if lingering {
        return decision(Verdict::Lingering);
    }
    let Some(head) = head else {
        return decision(Verdict::Run { recovered: false });
    };
    let run = &head.run;
    let abandoned = match (&run.status, &head.owner) {
        (Status::Running, Some(owner)) if owner.presumed_alive() => {
            // Even --force never overlaps a live run.
            return decision(Verdict::Busy {
                owner: owner.clone(),
                since: run.started_at,
            });
        }
        (Status::Running, _) => true,
        (Status::Abandoned, _) => false,
        (Status::Succeeded, _) => {
            // A success stamped ahead of the clock (a clock that ran fast,
            // then was set right) is no success within its TTL: taken as
            // fresh, it would count for as long as the clock was ahead,
            // longer than one made now. Without a finish time its age is
            // unknown, and under a TTL it is not fresh either.
            let fresh = match (rules.ttl, run.finished_at) {
                (Some(ttl), Some(finished)) => {
                    let now = head.read_at.unwrap_or(rules.now);
                    let age = now.duration_since(finished);
                    !age.is_negative() && age.unsigned_abs() < ttl
                }
                (Some(_), None) => false,
                (None, _) => true,
            };
            return decision(if rules.force || !fresh {
                Verdict::Run { recovered: false }
            } else if run.fingerprint() != rules.fingerprint {
                Verdict::Mismatch
            } else {
                Verdict::Skip {
                    finished_at: run.finished_at.unwrap_or(run.started_at),
                }
            });
        }
        (Status::Failed, _) => return decision(Verdict::Run { recovered: false }),
    };
    // The last run died without an outcome (or was just found dead).
    let verdict = if rules.force || rules.on_abandoned == OnAbandoned::Rerun {
        Verdict::Run { recovered: true }
    } else {
        Verdict::AbandonedFail
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
            },
            owner: (status == Status::Running).then(|| Owner {
                host: "h".into(),
                pid: 1,
                pgid: None,
                alive: Some(true),
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

    #[test]
    fn the_state_machine() {
        let now = Timestamp::now();
        let rerun = OnAbandoned::Rerun;
        let run = |recovered| Verdict::Run { recovered };
        assert_eq!(verdict(None, false, None, true, rerun).verdict, run(false));

        let ok = head(Status::Succeeded, "true", Some(10), now);
        assert!(matches!(
            verdict(Some(&ok), false, None, true, rerun).verdict,
            Verdict::Skip { .. }
        ));
        assert!(matches!(
            verdict(Some(&ok), false, Some(60), true, rerun).verdict,
            Verdict::Skip { .. }
        ));
        assert_eq!(
            verdict(Some(&ok), false, Some(5), true, rerun).verdict,
            run(false)
        );
        assert_eq!(
            verdict(Some(&ok), true, None, true, rerun).verdict,
            run(false)
        );
        let other = head(Status::Succeeded, "false", Some(10), now);
        assert_eq!(
            verdict(Some(&other), false, None, true, rerun).verdict,
            Verdict::Mismatch
        );
        assert_eq!(
            verdict(Some(&other), true, None, true, rerun).verdict,
            run(false)
        );

        let failed = head(Status::Failed, "false", Some(1), now);
        assert_eq!(
            verdict(Some(&failed), false, None, true, rerun).verdict,
            run(false)
        );

        let running = head(Status::Running, "true", None, now);
        assert!(matches!(
            verdict(Some(&running), true, None, true, rerun).verdict,
            Verdict::Busy { .. }
        ));
        let dead = verdict(Some(&running), false, None, false, rerun);
        assert_eq!(
            dead,
            Decision {
                verdict: run(true),
                abandon_head: true
            }
        );
        let dead = verdict(Some(&running), false, None, false, OnAbandoned::Fail);
        assert_eq!(
            dead,
            Decision {
                verdict: Verdict::AbandonedFail,
                abandon_head: true
            }
        );

        let abandoned = head(Status::Abandoned, "true", Some(1), now);
        let fail = verdict(Some(&abandoned), false, None, true, OnAbandoned::Fail);
        assert_eq!(
            fail,
            Decision {
                verdict: Verdict::AbandonedFail,
                abandon_head: false
            }
        );
        assert!(!fail.writes());
        assert_eq!(
            verdict(Some(&abandoned), true, None, true, OnAbandoned::Fail).verdict,
            run(true)
        );
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
        assert!(matches!(
            decide(Some(&running), false, &rules).verdict,
            Verdict::Busy { .. }
        ));
        let failed = head(Status::Failed, "true", Some(1), now);
        assert_eq!(
            decide(Some(&failed), true, &rules).verdict,
            Verdict::Lingering
        );
        assert_eq!(decide(None, true, &rules).verdict, Verdict::Lingering);
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
        assert!(matches!(
            verdict(Some(&ahead), false, None, true, rerun).verdict,
            Verdict::Skip { .. }
        ));
        // A success made now is fresh.
        let made_now = head(Status::Succeeded, "true", Some(0), now);
        assert!(matches!(
            verdict(Some(&made_now), false, Some(3600), true, rerun).verdict,
            Verdict::Skip { .. }
        ));
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
        assert!(matches!(
            verdict(Some(&ok), false, Some(60), true, rerun).verdict,
            Verdict::Skip { .. }
        ));
        // ...but the shared database's clock says 2 minutes have passed.
        ok.read_at = Some(now + jiff::SignedDuration::from_secs(110));
        assert_eq!(
            verdict(Some(&ok), false, Some(60), true, rerun).verdict,
            Verdict::Run { recovered: false }
        );
    }
}
