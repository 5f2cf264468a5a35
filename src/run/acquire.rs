//! Getting the key for a run: decide without writing (the skip path), and
//! claim, or mark an abandoned run, only when that is what the key needs;
//! wait on a busy key with `--wait`.

use std::time::Instant;

use anyhow::Result;
use jiff::Timestamp;
use uuid::Uuid;

use super::config::Config;
use super::decide::{decide, Refusal, Rules, Verdict};
use super::replace::Replacer;
use super::reserve::Reserve;
use super::{catchup, locks, WAIT_POLL};
use crate::exit::{self, Failure};
use crate::ledger::{Claim, Head, Ledger, NewRun, Plan};
use crate::report::{self, Reporter};

/// What came of getting the key.
pub(super) enum Acquired {
    /// The key is this run's; `recovered` when its last run was abandoned;
    /// `reserve`, the room kept for its last writes.
    Claimed {
        claim: Claim,
        recovered: bool,
        reserve: Option<Reserve>,
    },
    /// Nothing runs: idem exits with this code.
    Done(u8),
}

/// Gets `key` for a run of `config`'s command.
pub(super) fn acquire(
    config: &Config,
    key: &str,
    ledger: &mut dyn Ledger,
    reporter: &Reporter,
) -> Result<Acquired> {
    let mut acquirer = Acquirer {
        config,
        key,
        reporter,
        wait_until: (config.wait)
            .or(Replacer::wait(config))
            .map(|wait| Instant::now() + wait),
        spinner: None,
        replacer: Replacer::default(),
        reserve: None,
    };
    ledger.pause_with_head(&config.job.name);
    loop {
        let rules = config.rules(Timestamp::now());
        match acquirer.look(&rules, ledger)? {
            Look::Claimed { claim, recovered } => {
                drop(acquirer.spinner.take());
                if recovered {
                    reporter.aside(crate::console::Event::Recovered, || format!("{key}: the last run was abandoned (its outcome is unknown); running it again with IDEM_RECOVERED=1"));
                }
                let reserve = acquirer.reserve.take();
                return Ok(Acquired::Claimed {
                    claim,
                    recovered,
                    reserve,
                });
            }
            Look::Again => std::thread::sleep(WAIT_POLL),
            Look::Done(code) => return Ok(Acquired::Done(code)),
            Look::Refused(refusal, head) => {
                if let Some(code) = acquirer.refuse(refusal, head.as_ref(), &rules, ledger)? {
                    return Ok(Acquired::Done(code));
                }
            }
        }
    }
}

/// What one look at the key found.
// One value per look, moved once and never kept: its size costs nothing.
#[allow(clippy::large_enum_variant)]
enum Look {
    Claimed {
        claim: Claim,
        recovered: bool,
    },
    /// The ledger was briefly away while `--wait` lasts: look again.
    Again,
    /// A named lock stayed held: the conflict's exit code, said.
    Done(u8),
    /// The key is not this run's to take; with the head read first.
    Refused(Refusal, Option<Head>),
}

struct Acquirer<'a> {
    config: &'a Config,
    key: &'a str,
    reporter: &'a Reporter,
    /// `--wait`: a key another run holds is waited for until then.
    wait_until: Option<Instant>,
    /// Shown while waiting (see `wait_a_moment`).
    spinner: Option<Option<report::Spinner>>,
    /// `--replace`: the stop of the run that holds the key.
    replacer: Replacer,
    /// Taken before the first claim that would run the command.
    reserve: Option<Reserve>,
}

impl Acquirer<'_> {
    /// Reads the head and decides; writes only when the decision does.
    fn look(&mut self, rules: &Rules, ledger: &mut dyn Ledger) -> Result<Look> {
        let head = match ledger.head(self.key) {
            Err(error) if super::rides_out(&error, self.wait_until) => return Ok(Look::Again),
            head => head?,
        };
        let decision = decide(head.as_ref(), false, rules);
        // A pause is read before every claim (a skip stays a skip: it
        // would run nothing either way).
        if !matches!(decision.verdict, Verdict::Refuse(Refusal::Skip { .. })) {
            if let Some(code) = super::paused::check(self.config, ledger, self.reporter)? {
                return Ok(Look::Done(code));
            }
        }
        let writes = decision.writes();
        match decision.verdict {
            // Nothing to write: the skip path.
            Verdict::Refuse(refusal) if !writes => Ok(Look::Refused(refusal, head)),
            verdict => {
                let run = matches!(verdict, Verdict::Run { .. });
                if run && self.reserve.is_none() {
                    self.reserve = Some(Reserve::take()?);
                }
                match self.claim(run, rules, ledger)? {
                    Look::Refused(refusal, _) => Ok(Look::Refused(refusal, head)),
                    look => Ok(look),
                }
            }
        }
    }

    /// The claim transaction, with the named locks taken first when the
    /// key looked like it would `run`: a run waiting for a lock holds no
    /// claim (nothing to find abandoned if it dies).
    fn claim(&mut self, run: bool, rules: &Rules, ledger: &mut dyn Ledger) -> Result<Look> {
        let run_id = crate::id::new();
        let taken = if run && !self.config.locks.is_empty() {
            let wait_until = self.wait_until;
            match super::overlap::take(
                self.config,
                self.key,
                ledger,
                run_id,
                wait_until,
                self.reporter,
            )? {
                Ok(taken) => Some(taken),
                Err(code) => return Ok(Look::Done(code)),
            }
        } else {
            None
        };
        let mut planner = Planner {
            config: self.config,
            key: self.key,
            rules,
            run_id,
            decided: None,
        };
        let claimed = ledger.claim(self.key, &mut |head, lingering| {
            planner.plan(head, lingering)
        });
        let look = match claimed {
            Err(error) if super::rides_out(&error, self.wait_until) => Ok(Look::Again),
            Err(error) => Err(error),
            Ok(claim) => planner.settle(self.key, claim),
        };
        match look {
            Ok(Look::Claimed {
                mut claim,
                recovered,
            }) => {
                if let Some(taken) = taken {
                    locks::attach(&mut claim, taken);
                }
                claim.pause_after = self.config.pause_after;
                Ok(Look::Claimed { claim, recovered })
            }
            other => {
                locks::release(taken, ledger, run_id);
                other
            }
        }
    }

    /// A refused key: a skip, an error, a wait for whoever holds it, or a
    /// conflict. `None`: still waiting, look again.
    fn refuse(
        &mut self,
        refusal: Refusal,
        head: Option<&Head>,
        rules: &Rules,
        ledger: &mut dyn Ledger,
    ) -> Result<Option<u8>> {
        let key = self.key;
        if !refusal.held() {
            drop(self.spinner.take());
        }
        if self.config.replace && matches!(refusal, Refusal::Busy { .. }) {
            self.replacer
                .busy(self.config, head, ledger, self.reporter)?;
        }
        let holder = match refusal {
            Refusal::Skip { finished_at } => {
                catchup::stamp(&self.config.job, head, rules, ledger);
                return super::skip(self.config, key, finished_at, ledger, self.reporter).map(Some);
            }
            Refusal::Mismatch => {
                return Err(Failure::new(
                    exit::FINGERPRINT_MISMATCH,
                    format!("key {key} succeeded with a different command; nothing ran (--force runs this one)"),
                )
                .into())
            }
            Refusal::AbandonedFail => {
                return Err(Failure::new(
                    exit::ABANDONED,
                    format!("the last run of key {key} was abandoned (its outcome is unknown); check, then `idem ledger forget {key}` or --force"),
                )
                .into())
            }
            Refusal::Busy { owner, since } => format!(
                "is running elsewhere: {} on {} since {}",
                crate::process::holders::describe(&owner),
                owner.host,
                crate::render::local_with_zone(since)
            ),
            Refusal::Lingering { left_by } => crate::process::holders::lingering(left_by.as_ref()),
        };
        if super::wait_a_moment(self.wait_until, &mut self.spinner, self.reporter, |left| {
            format!("waiting for {key}: it {holder}; {left} left")
        }) {
            return Ok(None);
        }
        Ok(Some(super::conflict(
            self.config,
            self.reporter,
            &format!("{key} {holder}"),
        )))
    }
}

/// Plans the claim transaction: decides again on the head read under the
/// ledger's write lock, and keeps that decision, which is final.
struct Planner<'a> {
    config: &'a Config,
    key: &'a str,
    rules: &'a Rules,
    run_id: Uuid,
    decided: Option<Verdict>,
}

impl Planner<'_> {
    fn plan(&mut self, head: Option<&Head>, lingering: bool) -> Plan {
        let decision = decide(head, lingering, self.rules);
        let claim = match decision.verdict {
            Verdict::Run { recovered } => Some(self.new_run(recovered)),
            Verdict::Refuse(_) => None,
        };
        self.decided = Some(decision.verdict);
        Plan {
            abandon_head: decision.abandon_head,
            claim,
        }
    }

    /// What the transaction did, by its final decision and the claim the
    /// ledger returned; they agree, or the ledger failed its contract.
    fn settle(self, key: &str, claim: Option<Claim>) -> Result<Look> {
        match (self.decided, claim) {
            (Some(Verdict::Run { recovered }), Some(claim)) => {
                Ok(Look::Claimed { claim, recovered })
            }
            (Some(Verdict::Refuse(refusal)), None) => Ok(Look::Refused(refusal, None)),
            _ => Err(Failure::new(
                exit::IDEM_FAILED,
                format!("the ledger did not make the claim of key {key} as planned; nothing ran"),
            )
            .into()),
        }
    }

    fn new_run(&self, recovered: bool) -> NewRun {
        NewRun {
            run_id: self.run_id,
            job: self.config.job.clone(),
            command: self.config.command.clone(),
            shell: self.config.shell,
            host: crate::host::name(),
            pid: std::process::id(),
            recovered,
            lease: self.config.lease,
            owed: crate::alert::Origin {
                run_id: self.run_id,
                job: &self.config.job.name,
                key: self.key,
                duration_ms: None,
            }
            .start(&self.config.alerts),
        }
    }
}
