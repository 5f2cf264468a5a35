//! Telling a person: `--on-failure` and `--on-recovery` hooks, `--ping`,
//! `--warn-after`, and `--alert-after`, which decides whether a failure is
//! an alert or stays quiet.
//!
//! A failure is an alert when it is the `--alert-after`th of its job in a
//! row or later, counted by the ledger's job row (across the job's keys,
//! hosts and reboots). Everything here happens after the outcome is durable
//! and changes neither the run's record nor idem's exit code.

mod cronitor;
mod deliver;
mod events;
mod hooks;
mod http;
mod otlp;
mod ping;
mod sentry;
mod tell;

use std::ffi::OsString;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;

use crate::exit::Failure;
use crate::ledger::{Attempt, Claim, HookRun, Ledger, Location, NewEvent, Outcome, Status};
use crate::report::Reporter;
pub use deliver::{doctor_outbox, sweep, Swept};
pub use events::{event_text, pausing, EventJson, Origin};
pub use hooks::HOOK_LIMIT;
pub use otlp::event as trace_event;
/// How a URL is shown where it might be a secret, shared with `idem
/// serve`, whose pages mask the URLs in commands so.
pub use ping::mask as mask_url;

/// Refuses a bad `--ping` before anything runs, without printing it.
pub fn check_ping(address: &str) -> Result<()> {
    ping::check_address(address).map_err(Failure::usage)?;
    Ok(())
}

/// The schedule of a period (see [`Schedule`]).
pub fn schedule(period: crate::key::Period, zone: Option<String>) -> Schedule {
    Schedule {
        crontab: period.crontab(),
        period_secs: period.seconds(),
        zone,
    }
}

/// What a run was asked to tell, and when.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--alert-after`: the failures of the job in a row that make an alert.
    pub alert_after: u64,
    pub quiet_success: bool,
    pub on_failure: Option<OsString>,
    pub on_recovery: Option<OsString>,
    pub warn_after: Option<Duration>,
    /// `--warn-every`: the slow warning again, this often, after the first.
    pub warn_every: Option<Duration>,
    /// `--ping`, each checked (see [`check_ping`]).
    pub ping: Vec<String>,
    /// The job's period, for monitors that keep a schedule.
    pub schedule: Option<Schedule>,
}

/// A job's period as monitors take it.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Five-field crontab of the period's start: `0 * * * *` hourly,
    /// `*/5 * * * *` every five minutes.
    pub crontab: String,
    pub period_secs: u64,
    /// The IANA time zone of the job's keys.
    pub zone: Option<String>,
}

impl Settings {
    /// Whether the command's output is held until the outcome is known:
    /// under `--quiet-success`, and when a failure may be quiet
    /// (`--alert-after` > 1).
    pub fn holds_output(&self) -> bool {
        self.quiet_success || self.alert_after > 1
    }

    /// Whether a run needs its job's failures in a row: for a threshold,
    /// or to tell a hook. Without them a run reads nothing more of the
    /// ledger.
    fn counts(&self) -> bool {
        self.alert_after > 1 || self.on_failure.is_some() || self.on_recovery.is_some()
    }
}

/// What an outcome means to a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A success; `recovery` after an alerted failure.
    Success { recovery: bool },
    /// A failure, the job's `failures`th in a row; `alert` at or past the
    /// threshold.
    Failure { alert: bool, failures: u64 },
    /// A failure, the job's `failures`th in a row, whose outcome paused
    /// its job (`--pause-after`): always an alert, `IDEM_EVENT=paused`.
    Paused { failures: u64 },
    /// A person stopped the run: no failure (no hook, no `/fail`), and
    /// each monitor's run is ended rather than left started.
    Stopped,
}

/// The alerts of one claimed run.
pub struct Alerts {
    inner: Arc<Inner>,
}

struct Inner {
    settings: Settings,
    job: String,
    key: String,
    run_id: String,
    /// The job's failures in a row when the run was claimed.
    before: u64,
    /// The start pings, sent beside the command.
    started: Mutex<tell::Started>,
    /// When the claim was made, for a check-in's duration.
    claimed_at: std::time::Instant,
    budget: Arc<tell::Budget>,
    reporter: Reporter,
    claimed: uuid::Uuid,
    /// The hooks that ran, to be recorded with the run.
    ran: Mutex<Vec<HookRun>>,
}

impl Alerts {
    /// Called once the claim has committed: reads the job's failures in a
    /// row and sends `URL/start` (the events the claim owes) beside the
    /// command, on a connection of its own to the ledger at `location`.
    pub fn start(
        settings: &Settings,
        claim: &Claim,
        job: &str,
        location: &Location,
        ledger: &mut dyn Ledger,
        reporter: &Reporter,
    ) -> Alerts {
        let run_id = claim.run_id.to_string();
        let budget = Arc::new(tell::Budget::default());
        let started = if settings.ping.is_empty() {
            tell::Started::None
        } else {
            let dests = settings.ping.iter().map(|url| crate::ledger::dest(url));
            tell::start(location, claim.run_id, dests.collect(), Arc::clone(&budget))
        };
        let before = if settings.counts() {
            failures_in_a_row(ledger, job).unwrap_or(0)
        } else {
            0
        };
        Alerts {
            inner: Arc::new(Inner {
                settings: settings.clone(),
                job: job.to_owned(),
                key: claim.key.clone(),
                run_id,
                before,
                budget,
                started: Mutex::new(started),
                claimed_at: std::time::Instant::now(),
                reporter: reporter.clone(),
                claimed: claim.run_id,
                ran: Mutex::default(),
            }),
        }
    }

    /// Watches attempt `number` for `--warn-after`: reports it if it is
    /// still running then, and again every `--warn-every` while it runs.
    /// Dropping the watch ends it.
    pub fn watch(&self, number: u32) -> Option<Watch> {
        let after = self.inner.settings.warn_after?;
        let every = self.inner.settings.warn_every;
        let (ended, wait) = mpsc::channel::<()>();
        let inner = Arc::clone(&self.inner);
        let thread = std::thread::spawn(move || {
            let began = std::time::Instant::now();
            // The time of the warning due, said as scheduled: measured
            // from the start, so that a slow hook or ping does not push
            // the later warnings back.
            let mut due = after;
            while let Err(RecvTimeoutError::Timeout) =
                wait.recv_timeout(due.saturating_sub(began.elapsed()))
            {
                inner.slow(number, due, every.is_some() && due > after);
                let Some(every) = every else { break };
                while due <= began.elapsed() {
                    due += every;
                }
            }
        });
        Some(Watch {
            ended: Some(ended),
            thread: Some(thread),
        })
    }

    /// Judges an outcome about to be recorded, and makes the events it
    /// owes, to be written with it. The job's failures in a row are read
    /// again (another key of the job may have failed meanwhile), and this
    /// failure counted on them.
    pub fn owe(
        &self,
        ledger: &mut dyn Ledger,
        outcome: &Outcome,
        last: Option<&Attempt>,
    ) -> (Verdict, Vec<NewEvent>) {
        let verdict = self.judge(ledger, outcome);
        let inner = &*self.inner;
        let settings = &inner.settings;
        let tells = !settings.ping.is_empty()
            || settings.on_failure.is_some()
            || settings.on_recovery.is_some();
        if !tells {
            return (verdict, Vec::new());
        }
        // Made only when told: the tails may be megabytes each.
        let output = last
            .map(|attempt| [&attempt.stdout_tail[..], &attempt.stderr_tail[..]].concat())
            .unwrap_or_default();
        let origin = Origin {
            run_id: inner.claimed,
            job: &inner.job,
            key: &inner.key,
            duration_ms: u64::try_from(inner.claimed_at.elapsed().as_millis()).ok(),
        };
        let exit = (outcome.exit_code, last.and_then(Attempt::cause));
        let owed = origin.outcome(settings, verdict, exit, inner.before, &output);
        (verdict, owed)
    }

    fn judge(&self, ledger: &mut dyn Ledger, outcome: &Outcome) -> Verdict {
        let inner = &self.inner;
        let alert_after = inner.settings.alert_after;
        if outcome.stopped {
            return Verdict::Stopped;
        }
        if outcome.status == Status::Succeeded {
            return Verdict::Success {
                recovery: inner.before >= alert_after,
            };
        }
        let failures = inner
            .settings
            .counts()
            .then(|| failures_in_a_row(ledger, &inner.job))
            .flatten()
            .map_or(inner.before + 1, |failures| failures + 1);
        Verdict::Failure {
            alert: failures >= alert_after,
            failures,
        }
    }

    /// Whether the run says nothing of its own under cron: a failure
    /// below `--alert-after`, a success under `--quiet-success`. Then a
    /// monitor that cannot be reached goes unsaid too (the next run that
    /// speaks says it).
    pub fn is_quiet(&self, verdict: Verdict) -> bool {
        match verdict {
            Verdict::Success { .. } => self.inner.settings.quiet_success,
            Verdict::Failure { alert, .. } => !alert,
            Verdict::Paused { .. } | Verdict::Stopped => false,
        }
    }

    /// Whether held output is shown: an alerted failure's, and a success's
    /// when only `--alert-after` held it. A quiet failure's is dropped, so
    /// that cron mails nothing.
    pub fn shows_output(&self, verdict: Verdict) -> bool {
        match verdict {
            Verdict::Success { .. } => !self.inner.settings.quiet_success,
            Verdict::Failure { alert, .. } => alert,
            Verdict::Paused { .. } => true,
            Verdict::Stopped => false,
        }
    }
}

impl Drop for Alerts {
    fn drop(&mut self) {
        // A run that ended early (an error) still lets its start ping go;
        // its event stays held, then owed.
        self.inner.join_start();
    }
}

impl Inner {
    fn ran(&self, event: &'static str, exit_code: Option<i32>) {
        self.ran
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(HookRun {
                event: event.to_owned(),
                exit_code,
                at: jiff::Timestamp::now(),
            });
    }

    /// Waits for the start pings: the monitor sees the pings in order.
    fn join_start(&self) {
        use tell::Started;
        let mut started = self
            .started
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Started::Sending(_) = &*started {
            let Started::Sending(thread) = std::mem::replace(&mut *started, Started::None) else {
                return;
            };
            *started = Started::Sent(thread.join().unwrap_or_default());
        }
    }

    /// How the start pings went, once they were joined.
    fn take_started(&self) -> Vec<tell::Sent> {
        use tell::Started;
        let mut started = self
            .started
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match std::mem::replace(&mut *started, Started::None) {
            Started::Sent(sent) => sent,
            other => {
                *started = other;
                Vec::new()
            }
        }
    }

    /// `--warn-after`: attempt `number` has run `after` and still runs;
    /// `repeats` when `--warn-every` said it again.
    fn slow(&self, number: u32, after: Duration, repeats: bool) {
        let flag = if repeats {
            "--warn-every"
        } else {
            "--warn-after"
        };
        let line = format!(
            "{}: attempt {number} is still running after {}; it keeps running ({flag})",
            self.key,
            humantime::format_duration(after)
        );
        self.reporter
            .notice(&mut std::io::stderr(), crate::console::Event::Slow, &line);
        if let Some(command) = &self.settings.on_failure {
            let told = hooks::Event {
                name: "slow",
                job: &self.job,
                key: &self.key,
                run_id: &self.run_id,
                exit_code: None,
                cause: None,
                failures: self.before,
                output: &[],
            };
            let code = hooks::run("--on-failure", command, &told, &self.reporter);
            self.ran("slow", code);
        }
        if !self.settings.ping.is_empty() {
            self.join_start();
            let origin = Origin {
                run_id: self.claimed,
                job: &self.job,
                key: &self.key,
                duration_ms: None,
            };
            for event in origin.slow(&self.settings, crate::exit::line(&line).as_bytes()) {
                let _ = self.budget.deliver(&event, ping::BUDGET, &self.reporter);
            }
        }
    }

    /// Runs a hook event of this run, and keeps what it did for the run's
    /// record.
    fn hook(&self, event: &NewEvent) -> Result<(), String> {
        let payload = events::Payload::read(event);
        let (code, result) = deliver::deliver_hook(event, &payload, &self.reporter);
        self.ran(
            if event.kind == "recovery" {
                "recovery"
            } else {
                "failure"
            },
            code,
        );
        result
    }
}

/// A `--warn-after` timer for one attempt.
pub struct Watch {
    ended: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(ended) = self.ended.take() {
            let _ = ended.send(());
        }
        // A slow hook or ping under way finishes (each is bounded).
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The job's failures in a row, from its ledger row; `None` when the
/// ledger cannot tell (then the run's own count stands in).
fn failures_in_a_row(ledger: &mut dyn Ledger, job: &str) -> Option<u64> {
    crate::ledger::job_state(ledger, job)
        .ok()
        .flatten()
        .map(|state| state.failures)
}
