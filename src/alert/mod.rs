//! Telling a person: `--on-failure` and `--on-recovery` hooks, `--ping`,
//! `--warn-after`, and `--alert-after`, which decides whether a failure is
//! an alert or stays quiet.
//!
//! A failure is an alert when it is the `--alert-after`th of its job in a
//! row or later, counted by the ledger's job row (across the job's keys,
//! hosts and reboots). Everything here happens after the outcome is durable
//! and changes neither the run's record nor idem's exit code.

mod hooks;
mod ping;

use std::ffi::OsString;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;

use crate::exit::Failure;
use crate::ledger::{Attempt, Claim, HookRun, Ledger, Outcome, Status};
use crate::report::Reporter;
pub use hooks::HOOK_LIMIT;
/// How a URL is shown where it might be a secret, shared with `idem
/// serve`, whose pages mask the URLs in commands so.
pub use ping::mask as mask_url;
use ping::Ping;

/// Refuses a bad `--ping` before anything runs, without printing it.
pub fn check_ping(url: &str) -> Result<()> {
    ping::check(url).map_err(Failure::usage)?;
    Ok(())
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
    /// `--ping`, checked (see [`check_ping`]).
    pub ping: Option<String>,
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
    /// The start ping, sent beside the command.
    started: Mutex<Option<JoinHandle<()>>>,
    ping: Option<Ping>,
    reporter: Reporter,
    claimed: uuid::Uuid,
    /// The hooks that ran, to be recorded with the run.
    ran: Mutex<Vec<HookRun>>,
}

impl Alerts {
    /// Called once the claim has committed: reads the job's failures in a
    /// row and sends `URL/start`.
    pub fn start(
        settings: &Settings,
        claim: &Claim,
        job: &str,
        ledger: &mut dyn Ledger,
        reporter: &Reporter,
    ) -> Alerts {
        let run_id = claim.run_id.to_string();
        let ping = settings.ping.as_deref().map(Ping::new);
        let started = ping
            .as_ref()
            .map(|ping| ping.start(&run_id, &claim.key, reporter));
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
                ping,
                started: Mutex::new(started),
                reporter: reporter.clone(),
                claimed: claim.run_id,
                ran: Mutex::default(),
            }),
        }
    }

    /// Watches attempt `number` for `--warn-after`: reports it once if it is
    /// still running then. Dropping the watch ends it.
    pub fn watch(&self, number: u32) -> Option<Watch> {
        let after = self.inner.settings.warn_after?;
        let (ended, wait) = mpsc::channel::<()>();
        let inner = Arc::clone(&self.inner);
        let thread = std::thread::spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = wait.recv_timeout(after) {
                inner.slow(number, after);
            }
        });
        Some(Watch {
            ended: Some(ended),
            thread: Some(thread),
        })
    }

    /// Judges a recorded outcome, reading the job's failures in a row
    /// again (another key of the job may have failed meanwhile).
    pub fn judge(&self, ledger: &mut dyn Ledger, outcome: &Outcome) -> Verdict {
        let inner = &self.inner;
        let alert_after = inner.settings.alert_after;
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
            .filter(|failures| *failures > 0)
            .unwrap_or(inner.before + 1);
        Verdict::Failure {
            alert: failures >= alert_after,
            failures,
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
        }
    }

    /// Runs the hooks and sends the ping that `verdict` calls for.
    pub fn tell(
        &self,
        verdict: Verdict,
        outcome: &Outcome,
        last: Option<&Attempt>,
        ledger: &mut dyn Ledger,
    ) {
        self.tell_now(verdict, outcome, last);
        self.record_hooks(ledger);
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
                &format!(
                    "{}: could not record its hooks ({error:#}); the run's outcome stands",
                    self.inner.key
                ),
            );
        }
    }

    fn tell_now(&self, verdict: Verdict, outcome: &Outcome, last: Option<&Attempt>) {
        let inner = &*self.inner;
        let settings = &inner.settings;
        let (hook, event, failures, suffix) = match verdict {
            Verdict::Success { recovery } => (
                recovery
                    .then_some(settings.on_recovery.as_ref())
                    .flatten()
                    .map(|hook| ("--on-recovery", hook)),
                "recovery",
                inner.before,
                "",
            ),
            Verdict::Failure { alert, failures } => (
                alert
                    .then_some(settings.on_failure.as_ref())
                    .flatten()
                    .map(|hook| ("--on-failure", hook)),
                "failure",
                failures,
                if alert { "/fail" } else { "/log" },
            ),
            Verdict::Paused { failures } => (
                settings
                    .on_failure
                    .as_ref()
                    .map(|hook| ("--on-failure", hook)),
                "paused",
                failures,
                "/fail",
            ),
        };
        if hook.is_none() && inner.ping.is_none() {
            return;
        }
        // Made only when told: the tails may be megabytes each.
        let output = last
            .map(|attempt| [&attempt.stdout_tail[..], &attempt.stderr_tail[..]].concat())
            .unwrap_or_default();
        if let Some((flag, command)) = hook {
            inner.hook(
                flag,
                command,
                event,
                Some(outcome.exit_code),
                failures,
                &output,
            );
        }
        inner.ping(suffix, ping::body(&output));
    }
}

impl Drop for Alerts {
    fn drop(&mut self) {
        // A run that ended early (an error) still lets its start ping go.
        self.inner.after_start();
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

    fn after_start(&self) {
        let started = self
            .started
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(started) = started {
            let _ = started.join();
        }
    }

    /// `--warn-after`: attempt `number` has run `after` and still runs.
    fn slow(&self, number: u32, after: Duration) {
        let line = format!(
            "{}: attempt {number} is still running after {}; it keeps running (--warn-after)",
            self.key,
            humantime::format_duration(after)
        );
        self.reporter.notice(&mut std::io::stderr(), &line);
        if let Some(command) = &self.settings.on_failure {
            self.hook("--on-failure", command, "slow", None, self.before, &[]);
        }
        self.ping("/log", crate::exit::line(&line).as_bytes());
    }

    /// Runs hook `command` (given as `flag`) for `event`, and keeps what it
    /// did for the ledger.
    fn hook(
        &self,
        flag: &str,
        command: &OsString,
        event: &'static str,
        exit_code: Option<i32>,
        failures: u64,
        output: &[u8],
    ) {
        let event = hooks::Event {
            name: event,
            job: &self.job,
            key: &self.key,
            run_id: &self.run_id,
            exit_code,
            failures,
            output,
        };
        let code = hooks::run(flag, command, &event, &self.reporter);
        self.ran(event.name, code);
    }

    /// Sends `URL{suffix}` with `body`, after the start ping, if `--ping`.
    fn ping(&self, suffix: &str, body: &[u8]) {
        if let Some(ping) = &self.ping {
            self.after_start();
            ping.send(
                suffix,
                &self.run_id,
                body,
                ping::BUDGET,
                &self.key,
                &self.reporter,
            );
        }
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
