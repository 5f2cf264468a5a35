//! A claimed run: its attempts, each recorded, the waits between them, and
//! how the run ends: its outcome recorded, then told to a person.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::config::{Config, Retry, RetryPolicy, NOT_INHERITED};
pub(super) use super::record::attempt_record;
use super::record::set_up_failed;
use super::streams::Output;
use crate::alert::Alerts;
use crate::console::Event;
use crate::exit::{self, Failure};
use crate::ledger::{Attempt, Claim, Ledger, NewEvent, Outcome, Status};
use crate::process::{AttemptEnd, AttemptError, End, Spec, Supervisor};
use crate::report;
use crate::report::Reporter;

/// How long idem keeps trying to record an outcome (a locked ledger, a
/// database restarting) before it gives up with 125: giving up leaves the
/// run to be found abandoned and run again, so a slow ledger must not.
const RECORD_FOR: Duration = Duration::from_secs(300);

/// How a run ends.
pub(super) enum Ending {
    /// With an outcome for the ledger: idem exits `code`. `last` is the
    /// attempt that ended the run; none when it ended between attempts.
    Outcome {
        code: u8,
        outcome: Outcome,
        last: Option<Attempt>,
    },
    /// idem cannot go on. When `failed`, the command never ran, and the run
    /// is recorded failed if the ledger still takes that write; otherwise
    /// it is left to be found abandoned.
    Broken { error: anyhow::Error, failed: bool },
    /// A step of the attempt's setup failed: the command never ran, and
    /// the run is recorded failed with `attempt`, ended, if the ledger
    /// still takes that write.
    SetUpFailed {
        error: anyhow::Error,
        attempt: Attempt,
    },
}

impl Ending {
    /// The operator stopped the run by `signal` between attempts.
    fn interrupted(signal: i32) -> Ending {
        let code = exit::for_signal(signal);
        Ending::Outcome {
            code,
            outcome: failed(code, Some(signal)),
            last: None,
        }
    }
}

/// What an attempt leaves its run with.
enum Step {
    /// Another attempt follows; the text tells how this one ended.
    Retry(String),
    Over(Ending),
}

/// A claimed run of the config's command.
pub(super) struct Run<'a> {
    pub config: &'a Config,
    pub claim: &'a Claim,
    pub recovered: bool,
    /// `IDEM_SLOT`, with `--catch-up`.
    pub slot: Option<&'a str>,
    pub reporter: &'a Reporter,
    /// The run's trace, when one is asked for.
    pub trace: Option<&'a crate::trace::Recorder>,
}

impl Run<'_> {
    /// Runs attempts, each recorded, until one ends the run.
    pub fn attempts(
        &self,
        supervisor: &Supervisor,
        ledger: &mut dyn Ledger,
        streams: super::Streams,
        output: &mut Output,
        alerts: &Alerts,
    ) -> Ending {
        let config = self.config;
        let told = std::cell::Cell::new(false);
        let still_held = (self.claim.hold.as_ref())
            .map(|hold| || super::lock_wait::still_held(self.claim, hold, &told, self.reporter));
        let mut spec = Spec {
            argv: &config.command,
            shell: config.shell,
            env: Vec::new(),
            env_remove: Vec::new(),
            timeout: config.timeout,
            kill_after: config.kill_after,
            capture: config.capture,
            still_held: still_held.as_ref().map(|held| held as &dyn Fn() -> bool),
            timeout_signal: config.timeout_signal,
            merged: streams.merged,
            stdin: streams.spool.as_ref(),
            terminal: streams.merged && super::streams::at_the_terminal(),
            contain: config.contain,
            cgroup_name: String::new(),
            priority: config.priority,
        };
        let mut number = 1;
        loop {
            let said = match self.attempt(supervisor, &mut spec, number, ledger, output, alerts) {
                Step::Retry(said) => said,
                Step::Over(ending) => return ending,
            };
            if let Some(ending) = self.wait_to_retry(supervisor, number, &said, output) {
                return ending;
            }
            number += 1;
        }
    }

    /// Attempt `number`: what follows it, once it is recorded.
    fn attempt(
        &self,
        supervisor: &Supervisor,
        spec: &mut Spec<'_>,
        number: u32,
        ledger: &mut dyn Ledger,
        output: &mut Output,
        alerts: &Alerts,
    ) -> Step {
        let (claim, key) = (self.claim, &self.claim.key);
        if let Some(signal) = supervisor.pending_signal() {
            return Step::Over(Ending::interrupted(signal));
        }
        if number > 1 || supervisor.requested().is_some() {
            if let Some(ending) = self.stop_requested(ledger, supervisor.requested(), output) {
                return Step::Over(ending);
            }
        }
        if let Some(reason) = supervisor.stopped() {
            let line = format!("{key}: {reason}");
            self.reporter.notice(output.lines(), Event::Stopped, &line);
            return Step::Over(Ending::Outcome {
                code: exit::IDEM_FAILED,
                outcome: failed(exit::IDEM_FAILED, None),
                last: None,
            });
        }
        (spec.env, spec.env_remove) = self.env(number);
        crate::console::attempt(number);
        let span = super::traced::attempt_starts(self.trace, &mut spec.env);
        spec.cgroup_name = format!("{}-{number}", claim.run_id);
        let share = match claim
            .hold
            .as_ref()
            .map(|hold| hold.for_attempt())
            .transpose()
        {
            Ok(share) => share,
            Err(error) => {
                let error = Failure::new(
                    exit::IDEM_FAILED,
                    format!(
                        "could not lock the run of {key} for its attempt: {}; nothing ran",
                        exit::io_words(&error)
                    ),
                );
                return Step::Over(Ending::Broken {
                    error: error.into(),
                    failed: true,
                });
            }
        };
        let watch = alerts.watch(number);
        let attempted = supervisor.attempt(
            spec,
            &mut output.stdout,
            &mut output.stderr,
            share,
            &mut |pgid, contained| ledger.attempt_started(claim, number, pgid, contained),
            &mut |notice| self.tell(notice),
        );
        drop(watch);
        match attempted {
            Ok(mut end) => {
                super::traced::attempt_ended(self.trace, span, number, &end);
                let asked = supervisor.requested();
                match self.stopped_after(ledger, &mut end, number, asked, output) {
                    Some(ending) => Step::Over(ending),
                    None => self.after(end, number, spec.terminal, ledger, output),
                }
            }
            Err(error) => Step::Over(unended(error, number)),
        }
    }

    /// What the command learns of attempt `number`, and what it must not
    /// inherit from idem's own environment.
    fn env(&self, number: u32) -> (Vec<(&'static str, std::ffi::OsString)>, Vec<&'static str>) {
        let claim = self.claim;
        let mut env = vec![
            ("IDEM_KEY", claim.key.clone().into()),
            ("IDEM_RUN_ID", claim.run_id.to_string().into()),
            ("IDEM_ATTEMPT", number.to_string().into()),
            (
                "IDEM_MAX_ATTEMPTS",
                self.config.retry.attempts().to_string().into(),
            ),
            ("IDEM_FENCE", claim.fence.to_string().into()),
        ];
        let mut remove = NOT_INHERITED.to_vec();
        if self.recovered {
            env.push(("IDEM_RECOVERED", "1".into()));
        } else {
            remove.push("IDEM_RECOVERED");
        }
        env.push(("IDEM_JOB", self.config.job.name.clone().into()));
        match self.slot {
            Some(slot) => env.push(("IDEM_SLOT", slot.into())),
            None => remove.push("IDEM_SLOT"),
        }
        (env, remove)
    }

    /// What the end of attempt `number` means for the run; an attempt
    /// that another follows is recorded now.
    fn after(
        &self,
        mut end: AttemptEnd,
        number: u32,
        terminal: bool,
        ledger: &mut dyn Ledger,
        output: &mut Output,
    ) -> Step {
        let key = &self.claim.key;
        if let End::Signaled(signal @ (nix::libc::SIGINT | nix::libc::SIGQUIT)) = end.end {
            // At the terminal a Ctrl-C reaches the command, not idem; it
            // is the operator's all the same: never retried.
            if terminal && end.interrupted.is_none() {
                end.interrupted = Some(signal);
            }
        }
        if let End::NotStarted { reason, .. } = &end.end {
            let line = format!("{key}: {reason}");
            self.reporter.notice(output.lines(), Event::Failed, &line);
        }
        let event = super::cause::noted(&end);
        let next = next(&self.config.retry, key, &end, number);
        let record = attempt_record(number, &mut end);
        let said = match next {
            Next::Finish {
                code,
                outcome,
                notice,
            } => {
                if let Some(notice) = notice {
                    self.reporter.notice(output.lines(), event, &notice);
                }
                return Step::Over(Ending::Outcome {
                    code,
                    outcome,
                    last: Some(record),
                });
            }
            Next::Retry { said } => said,
        };
        match ledger.attempt_finished(self.claim, &record) {
            Ok(()) => Step::Retry(said),
            // Said with what the command did; what was held is shown.
            Err(error) => Step::Over(Ending::Broken {
                error: error.context(format!("{key}: {said}, but idem could not record it")),
                failed: false,
            }),
        }
    }

    /// The backoff after failed attempt `number`, shown; a signal during
    /// it ends the run.
    fn wait_to_retry(
        &self,
        supervisor: &Supervisor,
        number: u32,
        said: &str,
        output: &mut Output,
    ) -> Option<Ending> {
        let key = &self.claim.key;
        let delay = self.config.retry.delay(number);
        self.reporter.notice(
            output.lines(),
            Event::Retry,
            &format!("{key}: {said}; retrying in {}", report::short(delay)),
        );
        let spinner = if self.config.quiet_success {
            None
        } else {
            self.reporter.spinner()
        };
        let max = self.config.retry.attempts();
        let began = super::traced::now(self.trace);
        let interrupted = supervisor.sleep(delay, Duration::from_millis(100), &mut |left| {
            if let Some(bar) = &spinner {
                bar.set_message(format!(
                    "retry {}/{max} of {key} in {}",
                    number + 1,
                    report::short(left)
                ));
            }
        });
        drop(spinner);
        super::traced::backoff(self.trace, began, number);
        let signal = interrupted?;
        self.reporter.notice(
            output.lines(),
            Event::Interrupted,
            &format!("{key}: interrupted by signal {signal} while waiting to retry"),
        );
        Some(Ending::interrupted(signal))
    }

    /// Records how the run ended and shows held output when a person
    /// should see it; the exit code, and the events the outcome owes, for
    /// the alerts to tell once the run has let go of its key, and whether
    /// the run is otherwise quiet (then a monitor down goes unsaid). `lost`: the
    /// run was stopped because its lease could not be kept.
    pub fn conclude(
        &self,
        ending: Ending,
        lost: bool,
        ledger: &mut dyn Ledger,
        mut output: Output,
        alerts: &Alerts,
    ) -> Result<(u8, Vec<NewEvent>, bool)> {
        let (code, outcome, last) = match ending {
            Ending::Outcome {
                code,
                outcome,
                last,
            } => (code, outcome, last),
            Ending::Broken {
                error,
                failed: never_ran,
            } => {
                // Held output is shown, as after any run that did not succeed.
                output.show_held();
                alerts.settle_start(ledger);
                if never_ran {
                    let _ = ledger.finish(self.claim, None, &failed(exit::IDEM_FAILED, None));
                }
                return Err(error);
            }
            Ending::SetUpFailed { error, attempt } => {
                output.show_held();
                alerts.settle_start(ledger);
                let outcome = failed(exit::IDEM_FAILED, None);
                let _ = ledger.finish(self.claim, Some(&attempt), &outcome);
                return Err(error);
            }
        };
        // A run stopped because its lease could not be kept has lost its
        // claim by now: one try says so.
        let patience = if lost { Duration::ZERO } else { RECORD_FOR };
        let (verdict, mut owed) = alerts.owe(ledger, &outcome, last.as_ref());
        let job = &self.config.job.name;
        owed.extend(super::traced::event(self.trace, self.claim, job, &outcome));
        let recorded = self.record(ledger, last.as_ref(), &outcome, &owed, patience);
        let verdict = recorded.is_ok().then(|| {
            let judged =
                super::paused::judge(self.config, self.claim, ledger, self.reporter, verdict);
            if judged != verdict {
                crate::alert::pausing(&mut owed);
            }
            judged
        });
        let shown = match verdict {
            Some(verdict) => alerts.shows_output(verdict),
            None => outcome.status != Status::Succeeded,
        };
        if shown {
            output.show_held();
        }
        recorded.map_err(|error| {
            error.context(format!(
                "the command exited {}, but idem could not record it",
                outcome.exit_code
            ))
        })?;
        let quiet = verdict.is_some_and(|verdict| alerts.is_quiet(verdict));
        Ok((code, owed, quiet))
    }

    /// Records the outcome, trying again while the ledger refuses for a
    /// while (locked, restarting) for up to `patience`; the key stays held
    /// all the while, so nothing runs it meanwhile.
    fn record(
        &self,
        ledger: &mut dyn Ledger,
        last: Option<&Attempt>,
        outcome: &Outcome,
        owed: &[NewEvent],
        patience: Duration,
    ) -> Result<()> {
        let until = Instant::now() + patience;
        let mut delay = Duration::from_millis(100);
        let mut said = false;
        loop {
            let error = match ledger.finish_owing(self.claim, last, outcome, owed) {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            if !Failure::is_transient(&error) || Instant::now() + delay >= until {
                return Err(error);
            }
            if !said {
                said = true;
                self.reporter.notice(
                    &mut std::io::stderr(),
                    Event::Ledger,
                    &format!(
                        "{}: could not record the outcome yet ({error:#}); trying again for up to {}",
                        self.claim.key,
                        report::short(patience)
                    ),
                );
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }
}

/// How attempt `number` ends its run when it has no end to tell.
fn unended(error: AttemptError, number: u32) -> Ending {
    match error {
        // The command was held and never ran: the run failed, known and
        // not abandoned.
        AttemptError::Unrecorded(error) => Ending::Broken {
            error: error.context("the command did not run"),
            failed: true,
        },
        AttemptError::SetupFailed { started_at, error } => Ending::SetUpFailed {
            error: error.context("the command did not run"),
            attempt: set_up_failed(number, started_at),
        },
        AttemptError::Failed(error) => Ending::Broken {
            error,
            failed: false,
        },
    }
}

/// What an attempt's end means for its run.
enum Next {
    /// The run ends: idem exits `code`, the ledger records `outcome`, and
    /// `notice` (if any) tells why.
    Finish {
        code: u8,
        outcome: Outcome,
        notice: Option<String>,
    },
    /// Another attempt follows; `said` describes this one.
    Retry { said: String },
}

fn next(retry: &RetryPolicy, key: &str, end: &AttemptEnd, number: u32) -> Next {
    let code = end.code();
    let said = describe(end, number, retry.attempts());
    let finish = |code, signal, notice| Next::Finish {
        code,
        outcome: failed(code, signal),
        notice: Some(notice),
    };
    if let Some(reason) = &end.stopped {
        // The lease could not be kept: idem failed, loudly.
        let notice = format!("{key}: {reason}; {said}");
        return Next::Finish {
            code: exit::IDEM_FAILED,
            outcome: failed(code, end.signal()),
            notice: Some(notice),
        };
    }
    if let Some(signal) = end.interrupted {
        // The operator stopped it: recorded as failed, never retried.
        let code = if code == 0 {
            exit::for_signal(signal)
        } else {
            code
        };
        return finish(
            code,
            Some(signal),
            format!("{key}: interrupted by signal {signal}; {said}"),
        );
    }
    if end.reader_gone && code != exit::SUCCESS {
        // What read idem's output is gone: no retry can fix that.
        return finish(
            exit::for_signal(nix::libc::SIGPIPE),
            end.signal(),
            format!(
                "{key}: the reader of its output went away (a closed pipe); {said} (not retried)"
            ),
        );
    }
    if code == exit::SUCCESS {
        return Next::Finish {
            code,
            outcome: Outcome {
                status: Status::Succeeded,
                exit_code: 0,
                signal: None,
                stopped: false,
            },
            notice: None,
        };
    }
    match retry.after(number, code) {
        Retry::Again => Next::Retry { said },
        Retry::Exhausted => finish(code, end.signal(), format!("{key} failed: {said}")),
        Retry::Permanent => finish(
            code,
            end.signal(),
            format!("{key} failed: {said} (not retried)"),
        ),
    }
}

fn failed(code: u8, signal: Option<i32>) -> Outcome {
    Outcome {
        status: Status::Failed,
        exit_code: code.into(),
        signal,
        stopped: false,
    }
}

fn describe(end: &AttemptEnd, number: u32, max: u32) -> String {
    let what = if end.timed_out {
        "timed out".to_owned()
    } else {
        match &end.end {
            End::Exited(code) => format!("exited {code}"),
            End::Signaled(signal) => format!("was killed by signal {signal}"),
            End::NotStarted { code, .. } => format!("could not start ({code})"),
        }
    };
    format!("attempt {number}/{max} {what}")
}
