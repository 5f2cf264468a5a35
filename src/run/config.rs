//! The run's settings, made once from the command line: every flag is
//! checked and turned into the values the engine works with before anything
//! is opened (the ledger, a temporary file, the terminal), so a bad flag
//! never leaves a trace, and the engine never sees clap's types.

use std::ffi::OsString;
use std::ops::RangeInclusive;
use std::time::Duration;

use anyhow::Result;
use jiff::Timestamp;

use super::decide::{OnAbandoned, Rules};
use super::overlap::Overlap;
use crate::alert;
use crate::cli::{self, RunArgs};
use crate::exit::{self, Failure};
use crate::key::{self, Period, Template};
use crate::ledger::{JobInfo, NamedLock};

/// The environment twins that make a run's identity or its notifications:
/// the command does not inherit them, so an idem inside the job is a job of
/// its own (it does not wait for the outer run's lock, nor ping and alert
/// as the outer job). The twins that are defaults (`IDEM_DB`, retries,
/// backoff, timeouts, output) pass on, as a crontab's header means them.
pub const NOT_INHERITED: [&str; 11] = [
    "IDEM_LOCK",
    "IDEM_AFTER",
    "IDEM_PING_URL",
    "IDEM_ON_FAILURE",
    "IDEM_ON_RECOVERY",
    "IDEM_ALERT_AFTER",
    "IDEM_WARN_AFTER",
    "IDEM_WARN_EVERY",
    "IDEM_CATCH_UP",
    "IDEM_MISFIRE",
    "IDEM_OVERLAP",
];

/// The shortest `--lease`: shorter, and one slow round trip to a shared
/// ledger would stop the command.
const MIN_LEASE: Duration = Duration::from_secs(1);

/// Everything one `idem run` was asked to do.
pub struct Config {
    /// `--key` as typed, and expanded now.
    pub template: Template,
    pub key: String,
    pub job: JobInfo,
    /// Where the run's trace goes, when one is asked for.
    pub trace: Option<crate::trace::Exporter>,
    /// `--catch-up N`: the template's period, and N.
    pub catch_up: Option<(Period, u32)>,
    /// `--misfire latest`: a catch-up runs the newest period due only.
    pub misfire_latest: bool,
    /// `--overlap`: what a run does while another run of its job runs.
    pub overlap: Overlap,
    pub command: Vec<OsString>,
    pub shell: bool,
    /// The command's fingerprint (see [`key::fingerprint`]).
    pub fingerprint: [u8; 32],
    pub force: bool,
    /// `--replace`: a run that holds the key is stopped, then this one runs.
    pub replace: bool,
    pub ttl: Option<Duration>,
    pub on_abandoned: OnAbandoned,
    pub retry: RetryPolicy,
    pub timeout: Option<Duration>,
    pub kill_after: Duration,
    pub timeout_signal: i32,
    /// Bytes of each stream's tail kept per attempt.
    pub capture: usize,
    pub splay: Option<Duration>,
    pub wait: Option<Duration>,
    pub lease: Duration,
    /// The `--lock` names, once each, in the order they are taken.
    pub locks: Vec<NamedLock>,
    pub skipped_exit_code: u8,
    pub conflict_exit_code: u8,
    pub paused_exit_code: u8,
    /// `--pause-after`: the failures in a row that pause the job.
    pub pause_after: Option<u32>,
    pub quiet_success: bool,
    pub replay: bool,
    pub alerts: alert::Settings,
    /// `--after`: the upstream keys a run waits for.
    pub after: super::after::After,
    /// `--contain`, as this host gives it.
    pub contain: crate::process::Containment,
    /// `--nice`, and `--ionice` as ioprio_set(2) takes it.
    pub priority: crate::process::Priority,
}

impl Config {
    /// Checks the flags in the order their errors are reported: the key,
    /// the clock, the command, the limits, locks, ping, lease, job and
    /// catch-up.
    pub fn from_args(args: &RunArgs) -> Result<Config> {
        Config::with_key(args, &args.key, args.job.as_deref())
    }

    /// As [`Config::from_args`], for the key template `typed` of the job
    /// `job` (else the template names the job): `idem backfill` finds them
    /// from its first word.
    pub fn with_key(args: &RunArgs, typed: &str, job: Option<&str>) -> Result<Config> {
        let template = Template::parse(typed)?;
        let key = template.expand_now()?;
        check(args)?;
        let locks = super::locks::parse(&args.lock)?;
        let ping = args.ping.clone();
        for address in &ping {
            alert::check_ping(address)?;
        }
        check_lease(args)?;
        let job = job_info(job.unwrap_or(typed), typed, &template)?;
        let overlap = match args.overlap {
            cli::Overlap::Allow => Overlap::Allow,
            cli::Overlap::Skip => Overlap::Skip,
            cli::Overlap::Queue => Overlap::Queue,
            cli::Overlap::Replace => Overlap::Replace,
        };
        let locks = super::overlap::with_job_lock(locks, overlap, &job.name);
        let after = super::after::After::from_args(args)?;
        let trace =
            crate::trace::Exporter::from_env(args.trace.as_deref()).map_err(Failure::usage)?;
        let contain = containment(args.contain)?;
        let priority = priority(args)?;
        let schedule = template
            .period()
            .map(|period| alert::schedule(period, job.zone.clone()));
        let catch_up = match args.catch_up {
            Some(periods) => Some((catch_up_period(&template, typed)?, periods)),
            None => None,
        };
        Ok(Config {
            key,
            job,
            trace,
            catch_up,
            misfire_latest: args.misfire == cli::Misfire::Latest,
            overlap,
            fingerprint: key::fingerprint(&args.command, args.shell),
            command: args.command.clone(),
            shell: args.shell,
            force: args.force,
            replace: args.replace,
            ttl: args.ttl.map(Into::into),
            on_abandoned: match args.on_abandoned {
                cli::OnAbandoned::Rerun => OnAbandoned::Rerun,
                cli::OnAbandoned::Fail => OnAbandoned::Fail,
            },
            retry: RetryPolicy::new(args),
            timeout: args.timeout.map(Into::into),
            kill_after: args.kill_after.into(),
            timeout_signal: args.timeout_signal.0,
            capture: usize::try_from(args.capture.0).unwrap_or(usize::MAX),
            splay: args.splay.map(Into::into),
            wait: args.wait.map(Into::into),
            lease: args.lease.into(),
            locks,
            skipped_exit_code: args.skipped_exit_code,
            conflict_exit_code: args.conflict_exit_code,
            paused_exit_code: args.paused_exit_code,
            pause_after: args.pause_after,
            quiet_success: args.quiet_success,
            replay: args.replay,
            alerts: alert_settings(args, ping, schedule),
            template,
            after,
            contain,
            priority,
        })
    }

    /// What the decision on the key depends on, at `now`.
    pub fn rules(&self, now: Timestamp) -> Rules {
        Rules {
            fingerprint: self.fingerprint,
            force: self.force,
            ttl: self.ttl,
            on_abandoned: self.on_abandoned,
            now,
        }
    }

    /// Whether the command's output is held until the outcome is known.
    pub fn holds_output(&self) -> bool {
        self.alerts.holds_output()
    }
}

/// What `--contain` gets on this host; a choice it cannot give is
/// refused before anything is claimed.
fn containment(choice: cli::Contain) -> Result<crate::process::Containment> {
    use crate::process::Choice;
    let choice = match choice {
        cli::Contain::Auto => Choice::Auto,
        cli::Contain::Cgroup => Choice::Cgroup,
        cli::Contain::PidNamespace => Choice::PidNamespace,
        cli::Contain::Guardian => Choice::Guardian,
    };
    crate::process::resolve(choice).map_err(|refusal| Failure::usage(refusal).into())
}

/// `--nice` and `--ionice`, refused before anything is claimed where
/// this user may not take them (a nice value below idem's own, the
/// realtime I/O class: both root's).
fn priority(args: &RunArgs) -> Result<crate::process::Priority> {
    let root = nix::unistd::geteuid().is_root();
    if let Some(nice) = args.nice {
        // A nice value of -1 is also getpriority's error return; for
        // this process it cannot fail.
        // SAFETY: getpriority takes integers.
        let own = unsafe { nix::libc::getpriority(nix::libc::PRIO_PROCESS, 0) };
        if nice < own && !root {
            return Err(Failure::usage(format!(
                "--nice {nice}: only root may run a command before idem's own nice value {own}; give {own} or more"
            ))
            .into());
        }
    }
    if let Some(ionice) = args.ionice.filter(|ionice| ionice.class == 1) {
        if !root {
            return Err(Failure::usage(format!(
                "--ionice realtime:{}: only root may give the realtime I/O class; give best-effort:0 or idle",
                ionice.level
            ))
            .into());
        }
    }
    Ok(crate::process::Priority {
        nice: args.nice,
        // ioprio_set(2): the class in the top bits, the level below.
        ionice: args
            .ionice
            .map(|ionice| (ionice.class << 13) | ionice.level),
    })
}

/// The checks that need nothing but the flags.
/// Refuses a lease too short for its heartbeat.
fn check_lease(args: &RunArgs) -> Result<()> {
    if *args.lease < MIN_LEASE {
        return Err(Failure::usage(format!(
            "--lease {} is too short: its heartbeat (every lease/3) must reach the database in time; give at least 1s, like 60s",
            args.lease
        ))
        .into());
    }
    Ok(())
}

/// What a run tells, and whom: its hooks, its pings (checked) and its
/// job's schedule.
fn alert_settings(
    args: &RunArgs,
    ping: Vec<String>,
    schedule: Option<alert::Schedule>,
) -> alert::Settings {
    alert::Settings {
        alert_after: args.alert_after,
        quiet_success: args.quiet_success,
        on_failure: args.on_failure.clone(),
        on_recovery: args.on_recovery.clone(),
        warn_after: args.warn_after.map(Into::into),
        warn_every: args.warn_every.map(Into::into),
        ping,
        schedule,
    }
}

fn check(args: &RunArgs) -> Result<()> {
    if std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .is_err()
    {
        return Err(Failure::new(
            exit::IDEM_FAILED,
            "the system clock is set before 1970, so no run can be stamped; set the clock (timedatectl, ntp); nothing ran",
        )
        .into());
    }
    if args
        .command
        .first()
        .is_some_and(|program| program.is_empty())
    {
        return Err(Failure::usage("the command after -- is empty; name a program to run").into());
    }
    if args.timeout.is_some_and(|timeout| timeout.is_zero()) {
        return Err(Failure::usage(
            "--timeout 0 would kill every attempt at once; give a positive duration",
        )
        .into());
    }
    Ok(())
}

/// Whether `name` (a job's, a lock's) can be told apart and shown: at most
/// as long as a key, and without characters that act on the text around.
pub(super) fn printable_name(name: &str) -> bool {
    name.len() <= key::MAX_KEY_BYTES && !name.chars().any(key::is_hidden)
}

/// The run's job: `--job`, else the key as typed, with the zone its keys
/// are made in (so that `status` judges periods as the keys were cut).
fn job_info(name: &str, typed: &str, template: &Template) -> Result<JobInfo> {
    let name = name.to_owned();
    if name.is_empty() || !printable_name(&name) {
        return Err(Failure::usage(format!(
            "invalid --job '{}': name the job with 1 to {} bytes of printable characters",
            crate::render::printable(&name),
            key::MAX_KEY_BYTES
        ))
        .into());
    }
    let zone = if template.needs_time() {
        crate::host::zone().iana_name().map(str::to_owned)
    } else {
        None
    };
    Ok(JobInfo {
        name,
        template: typed.to_owned(),
        zone,
    })
}

/// `--catch-up` goes back by the periods of the key's template.
fn catch_up_period(template: &Template, typed: &str) -> Result<Period> {
    template.period().ok_or_else(|| {
        Failure::usage(format!(
            "--catch-up needs a key template with a time placeholder ({{minute}} {{minute/N}} {{hour}} {{hour/N}} {{date}} {{week}} {{month}} {{year}}); key '{}' has none",
            crate::render::printable(typed)
        ))
        .into()
    })
}

/// `--retries`, `--backoff`, `--max-backoff`, `--retry-on` and
/// `--no-retry-on`: whether a failed attempt is tried again, and when.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    attempts: u32,
    backoff: Duration,
    max_backoff: Duration,
    /// Only these codes are retried (all when `None`).
    retry_on: Option<Codes>,
    /// These never are.
    no_retry_on: Codes,
}

/// What follows a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Another attempt, after [`RetryPolicy::delay`].
    Again,
    /// None: that was the last attempt allowed.
    Exhausted,
    /// None: the code is not one to retry, though attempts were left.
    Permanent,
}

impl RetryPolicy {
    fn new(args: &RunArgs) -> RetryPolicy {
        RetryPolicy {
            attempts: args.retries.saturating_add(1),
            backoff: args.backoff.into(),
            max_backoff: args.max_backoff.into(),
            retry_on: args.retry_on.as_ref().map(|codes| Codes::of(&codes.0)),
            no_retry_on: Codes::of(&args.no_retry_on.0),
        }
    }

    /// The most attempts a run makes (`IDEM_MAX_ATTEMPTS`).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether attempt `number`, failed with exit `code`, is tried again.
    pub fn after(&self, number: u32, code: u8) -> Retry {
        let wanted = self
            .retry_on
            .as_ref()
            .is_none_or(|codes| codes.contains(code));
        if number >= self.attempts {
            Retry::Exhausted
        } else if wanted && !self.no_retry_on.contains(code) {
            Retry::Again
        } else {
            Retry::Permanent
        }
    }

    /// The wait before attempt `failed + 1`: random in [d/2, d] with
    /// d = min(max, base * 2^(failed-1)).
    pub fn delay(&self, failed: u32) -> Duration {
        let doubled = self.backoff.saturating_mul(
            1u32.checked_shl(failed.saturating_sub(1))
                .unwrap_or(u32::MAX),
        );
        let ceiling = doubled.min(self.max_backoff);
        let half = ceiling / 2;
        half + ceiling.saturating_sub(half).mul_f64(fastrand::f64())
    }
}

/// A set of exit codes, one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Codes([u64; 4]);

impl Codes {
    fn of(ranges: &[RangeInclusive<u8>]) -> Codes {
        let mut bits = [0u64; 4];
        for code in ranges.iter().cloned().flatten() {
            bits[usize::from(code / 64)] |= 1 << (code % 64);
        }
        Codes(bits)
    }

    fn contains(&self, code: u8) -> bool {
        self.0[usize::from(code / 64)] & (1 << (code % 64)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_command_does_not_inherit_are_twins_of_run_options() {
        use clap::CommandFactory;
        let command = crate::cli::Cli::command();
        let run = command.find_subcommand("run").expect("idem run");
        let twins: Vec<String> = run
            .get_arguments()
            .filter_map(|arg| arg.get_env())
            .map(|name| name.to_string_lossy().into_owned())
            .collect();
        for name in NOT_INHERITED {
            assert!(twins.iter().any(|twin| twin == name), "{name} is no twin");
        }
    }

    fn policy(retries: u32, retry_on: Option<&[RangeInclusive<u8>]>) -> RetryPolicy {
        RetryPolicy {
            attempts: retries + 1,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(5),
            retry_on: retry_on.map(Codes::of),
            no_retry_on: Codes::of(&[126..=127]),
        }
    }

    #[test]
    fn codes_hold_their_ranges_and_nothing_else() {
        let codes = Codes::of(&[1..=1, 3..=3, 10..=20, 255..=255]);
        let held: Vec<u8> = (0..=255).filter(|code| codes.contains(*code)).collect();
        let mut expected = vec![1, 3];
        expected.extend(10..=20);
        expected.push(255);
        assert_eq!(held, expected);
        assert!(!Codes::of(&[]).contains(0));
    }

    #[test]
    fn a_failed_attempt_is_retried_while_attempts_are_left_and_its_code_allows() {
        let any = policy(2, None);
        assert_eq!(any.after(1, 1), Retry::Again);
        assert_eq!(any.after(2, 124), Retry::Again);
        assert_eq!(any.after(3, 1), Retry::Exhausted);
        assert_eq!(any.after(1, 127), Retry::Permanent);
        // The last attempt is the last, whatever its code.
        assert_eq!(any.after(3, 127), Retry::Exhausted);
        let some = policy(2, Some(&[3..=3]));
        assert_eq!(some.after(1, 3), Retry::Again);
        assert_eq!(some.after(1, 1), Retry::Permanent);
        assert_eq!(policy(0, None).after(1, 1), Retry::Exhausted);
    }

    #[test]
    fn the_delay_doubles_up_to_its_cap_within_the_upper_half() {
        let retry = policy(10, None);
        for (failed, ceiling) in [(1, 1000), (2, 2000), (3, 4000), (4, 5000), (40, 5000)] {
            let delay = retry.delay(failed).as_millis();
            assert!(
                (ceiling / 2..=ceiling).contains(&delay),
                "attempt {failed}: {delay}ms"
            );
        }
    }
}
