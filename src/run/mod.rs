//! The run state machine: decide, claim, execute with retries, record.
//!
//! A key's state is the status of its head run (its latest, unless
//! forgotten):
//!
//! ```text
//!  (none) ──claim──▶ running ──exit 0──────────────▶ succeeded
//!                       │    ──failure, no retries──▶ failed
//!                       │    ──idem and its group gone (found by
//!                       │      the next run, or a lease ran out)──▶ abandoned
//!  failed, abandoned, expired or forced succeeded ──claim──▶ running
//! ```
//!
//! Who writes what: only a claim transaction creates a `running` run, and
//! only after reading the head under the ledger's write lock and finding it
//! claimable, so two runs of a key never overlap. Only the owner of a run
//! writes its final state (`succeeded` or `failed`), and only while the run
//! is still `running`. Any later `idem run` may write `abandoned`, and only
//! for a running head whose owner it has found dead.

mod catchup;
mod decide;
mod lease;
mod locks;
mod report;

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::Result;
use jiff::Timestamp;

use crate::alert::{self, Alerts};
use crate::cli::RunArgs;
use crate::exit::{self, Failure};
use crate::host;
use crate::key::{self, Template};
use crate::ledger::{
    self, Attempt, Claim, JobInfo, Ledger, Location, NewRun, Outcome, Plan, Status,
};
use crate::process::{self, AttemptEnd, AttemptError, End, Notice, Sink, Spec, Supervisor};
use decide::{decide, Decision, Rules, Verdict};
pub use report::Reporter;

/// How often a waiter looks at the ledger again.
const WAIT_POLL: Duration = Duration::from_millis(100);

/// The shortest `--lease`: shorter, and one slow round trip to a shared
/// ledger would stop the command.
const MIN_LEASE: Duration = Duration::from_secs(1);

/// How long idem keeps trying to record an outcome (a locked ledger, a
/// database restarting) before it gives up with 125: giving up leaves the
/// run to be found abandoned and run again, so a slow ledger must not.
const RECORD_FOR: Duration = Duration::from_secs(300);

pub fn run(args: &RunArgs, location: &Location, reporter: &Reporter) -> Result<u8> {
    let template = Template::parse(&args.key)?;
    let key = template.expand_now()?;
    check(args)?;
    let job = catchup::job_info(args, &template)?;
    if let Some(periods) = args.catch_up {
        return catchup::run(args, &template, &job, periods, location, reporter);
    }
    run_key(args, &key, &job, None, location, reporter)
}

/// One run of `key` for `job`; `slot` is the start of the period it is
/// for (`IDEM_SLOT`), with `--catch-up`.
fn run_key(
    args: &RunArgs,
    key: &str,
    job: &JobInfo,
    slot: Option<&str>,
    location: &Location,
    reporter: &Reporter,
) -> Result<u8> {
    let merged = process::same_file(&std::io::stdout(), &std::io::stderr());
    // Made before the claim: a claim whose output cannot be held would be
    // left `running` with nothing run.
    let held = if alert::holds_output(args) {
        let stdout = Sink::held()?;
        // One file for both when idem's two are one, so the order is kept.
        let stderr = if merged {
            stdout.alias()?
        } else {
            Sink::held()?
        };
        Some((stdout, stderr))
    } else {
        None
    };
    // stdin that is not a terminal is kept, so that a retry gets it whole.
    let spool = if args.retries > 0 && !std::io::stdin().is_terminal() && stdin_is_open() {
        Some(process::Spool::new()?)
    } else {
        None
    };
    if let Some(splay) = args.splay {
        splay_wait(key, splay.into(), reporter);
    }
    let mut ledger = ledger::open(location)?;
    let (claim, recovered) = match acquire(args, key, job, ledger.as_mut(), reporter)? {
        Acquired::Claimed(claim, recovered) => (claim, recovered),
        Acquired::Done(code) => return Ok(code),
    };
    let alerts = Alerts::start(args, &claim, &job.name, ledger.as_mut(), reporter);
    // A shared ledger's claim lives only as long as its heartbeat.
    let lease = ledger
        .leased()
        .then(|| (location, Into::<Duration>::into(args.lease)));
    let (stdout, stderr) = match held {
        Some(held) => held,
        None => (
            Sink::live(std::io::stdout())?,
            Sink::live(std::io::stderr())?,
        ),
    };
    let streams = Streams {
        stdout,
        stderr,
        merged,
        spool,
    };
    let mut env = vec![("IDEM_JOB", job.name.clone().into())];
    env.extend(slot.map(|slot| ("IDEM_SLOT", slot.into())));
    execute(
        args,
        &claim,
        recovered,
        ledger.as_mut(),
        lease,
        streams,
        reporter,
        &env,
        &alerts,
    )
}

/// The command's streams: output through or held (`--quiet-success`), stdin
/// as it is or kept for retries.
struct Streams {
    stdout: Sink,
    stderr: Sink,
    /// idem's stdout and stderr are one file (see `Spec::merged`).
    merged: bool,
    /// stdin kept for retries.
    spool: Option<process::Spool>,
}

/// Whether idem runs in the foreground of the terminal that is its stdin
/// and its output, as a command typed at a shell does.
fn at_the_terminal() -> bool {
    let stdin = std::io::stdin();
    stdin.is_terminal()
        && std::io::stdout().is_terminal()
        && nix::unistd::tcgetpgrp(&stdin).is_ok_and(|group| group == nix::unistd::getpgrp())
}

/// Whether idem was started with a stdin at all (a closed descriptor 0 is
/// left to the command as it is).
fn stdin_is_open() -> bool {
    nix::fcntl::fcntl(std::io::stdin(), nix::fcntl::FcntlArg::F_GETFD).is_ok()
}

/// `--splay`: a random wait before the claim, so that a fleet started by
/// one clock does not reach a shared ledger at one instant.
fn splay_wait(key: &str, splay: Duration, reporter: &Reporter) {
    let until = Instant::now() + splay.mul_f64(fastrand::f64());
    let spinner = reporter.spinner();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if let Some(bar) = &spinner {
            bar.set_message(format!(
                "{key}: --splay, claiming in {}",
                report::short(left)
            ));
        }
        std::thread::sleep(left.min(WAIT_POLL));
    }
    if let Some(bar) = spinner {
        bar.finish_and_clear();
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
    locks::check(args)?;
    alert::check(args)?;
    if *args.lease < MIN_LEASE {
        return Err(Failure::usage(format!(
            "--lease {} is too short: its heartbeat (every lease/3) must reach the database in time; give at least 1s, like 60s",
            args.lease
        ))
        .into());
    }
    Ok(())
}

enum Acquired {
    Claimed(Claim, bool),
    Done(u8),
}

/// Decides without writing; claims (or marks an abandoned run) only when
/// that is what the key needs, and waits on a busy key with `--wait`.
fn acquire(
    args: &RunArgs,
    key: &str,
    job: &JobInfo,
    ledger: &mut dyn Ledger,
    reporter: &Reporter,
) -> Result<Acquired> {
    let fingerprint = key::fingerprint(&args.command, args.shell);
    let wait_until = args.wait.map(|wait| Instant::now() + *wait);
    let mut spinner = None;
    loop {
        let rules = Rules {
            fingerprint,
            force: args.force,
            ttl: args.ttl.map(Into::into),
            on_abandoned: args.on_abandoned,
            now: Timestamp::now(),
        };
        // A waiter rides out a ledger that is briefly away (a database
        // restarting) until its wait runs out.
        let riding_out = |error: &anyhow::Error| {
            Failure::is_transient(error)
                && wait_until.is_some_and(|until| Instant::now() + WAIT_POLL < until)
        };
        let head = match ledger.head(key) {
            Err(error) if riding_out(&error) => {
                std::thread::sleep(WAIT_POLL);
                continue;
            }
            head => head?,
        };
        let mut decision = decide(head.as_ref(), false, &rules);
        let run_id = uuid::Uuid::now_v7();
        // Named locks are taken before the claim, so a run waiting for
        // one holds no claim (nothing to find abandoned if it dies).
        let taken = match decision.verdict {
            Verdict::Run { .. } if !args.lock.is_empty() => {
                match locks::take(args, key, ledger, run_id, wait_until, reporter)? {
                    Ok(taken) => Some(taken),
                    Err(code) => return Ok(Acquired::Done(code)),
                }
            }
            _ => None,
        };
        if decision.writes() {
            let mut recovered = false;
            let claimed = ledger.claim(key, &mut |head, lingering| {
                decision = decide(head, lingering, &rules);
                let claim = match decision.verdict {
                    Verdict::Run { recovered: was } => {
                        recovered = was;
                        Some(new_run(args, run_id, job, was))
                    }
                    _ => None,
                };
                Plan {
                    abandon_head: decision.abandon_head,
                    claim,
                }
            });
            let claim = match claimed {
                Err(error) if riding_out(&error) => {
                    locks::release(taken, ledger, run_id);
                    std::thread::sleep(WAIT_POLL);
                    continue;
                }
                Err(error) => {
                    locks::release(taken, ledger, run_id);
                    return Err(error);
                }
                Ok(claim) => claim,
            };
            if let Some(mut claim) = claim {
                drop(spinner.take());
                if recovered {
                    reporter.aside(|| format!("{key}: the last run was abandoned (its outcome is unknown); running it again with IDEM_RECOVERED=1"));
                }
                if let Some(taken) = taken {
                    locks::attach(&mut claim, taken);
                }
                return Ok(Acquired::Claimed(claim, recovered));
            }
        }
        locks::release(taken, ledger, run_id);
        let Decision { verdict, .. } = decision;
        if !matches!(verdict, Verdict::Busy { .. } | Verdict::Lingering) {
            drop(spinner.take());
        }
        let code = match verdict {
            Verdict::Run { .. } => unreachable!("a run verdict always claims"),
            Verdict::Skip { finished_at } => {
                catchup::stamp(job, head.as_ref(), &rules, ledger);
                skip(args, key, finished_at, ledger, reporter)?
            }
            Verdict::Mismatch => {
                return Err(Failure::new(
                    exit::FINGERPRINT_MISMATCH,
                    format!("key {key} succeeded with a different command; nothing ran (--force runs this one)"),
                )
                .into())
            }
            Verdict::AbandonedFail => {
                return Err(Failure::new(
                    exit::ABANDONED,
                    format!("the last run of key {key} was abandoned (its outcome is unknown); check, then `idem ledger forget {key}` or --force"),
                )
                .into())
            }
            Verdict::Busy { .. } | Verdict::Lingering => {
                let holder = match &verdict {
                    Verdict::Busy { owner, since } => format!(
                        "is running elsewhere: {} on {} since {}",
                        report::holder(owner),
                        owner.host,
                        crate::render::local_with_zone(*since)
                    ),
                    _ => "is still held by processes an earlier run of it left running".to_owned(),
                };
                if wait_a_moment(wait_until, &mut spinner, reporter, |left| {
                    format!("waiting for {key}: it {holder}; {left} left")
                }) {
                    continue;
                }
                conflict(args, reporter, &format!("{key} {holder}"))
            }
        };
        return Ok(Acquired::Done(code));
    }
}

/// One poll of a `--wait` for something another run holds: the spinner
/// says `waiting(time left)`; false once the wait ran out (or none was
/// given), and then the spinner is gone.
fn wait_a_moment(
    until: Option<Instant>,
    spinner: &mut Option<Option<report::Spinner>>,
    reporter: &Reporter,
    waiting: impl FnOnce(String) -> String,
) -> bool {
    let Some(until) = until.filter(|until| Instant::now() < *until) else {
        drop(spinner.take());
        return false;
    };
    if let Some(bar) = spinner.get_or_insert_with(|| reporter.spinner()) {
        bar.set_message(waiting(report::short(until - Instant::now())));
    }
    std::thread::sleep(WAIT_POLL.min(until.saturating_duration_since(Instant::now())));
    true
}

/// Another run holds what this one needs: said (quietly, as a skip, under
/// `--conflict-exit-code 0`), and the conflict's exit code.
fn conflict(args: &RunArgs, reporter: &Reporter, what: &str) -> u8 {
    let line = || {
        format!(
            "{what}; {}",
            if args.wait.is_some() {
                "--wait ran out"
            } else {
                "--wait DUR waits for it"
            }
        )
    };
    if args.conflict_exit_code == exit::SUCCESS {
        reporter.info(line);
    } else {
        reporter.notice(&mut std::io::stderr(), &line());
    }
    args.conflict_exit_code
}

fn new_run(args: &RunArgs, run_id: uuid::Uuid, job: &JobInfo, recovered: bool) -> NewRun {
    NewRun {
        run_id,
        job: job.clone(),
        command: args.command.clone(),
        shell: args.shell,
        host: host::name(),
        pid: std::process::id(),
        recovered,
        lease: args.lease.into(),
    }
}

fn skip(
    args: &RunArgs,
    key: &str,
    finished_at: Timestamp,
    ledger: &mut dyn Ledger,
    reporter: &Reporter,
) -> Result<u8> {
    reporter.info(|| {
        format!(
            "skipped {key}: succeeded at {}; --force runs it again",
            crate::render::local_with_zone(finished_at)
        )
    });
    if args.replay {
        replay(key, ledger)?;
    }
    Ok(args.skipped_exit_code)
}

/// Prints the output tails recorded by the key's successful run.
fn replay(key: &str, ledger: &mut dyn Ledger) -> Result<()> {
    crate::cmd::ledger::replay(key, ledger)
}

/// Runs the attempts of a claimed run and records each, then the outcome.
/// `job_env` is what the command learns of its job (`IDEM_JOB`, `IDEM_SLOT`);
/// `alerts` tells a person, once the outcome is recorded.
#[allow(clippy::too_many_arguments)]
fn execute(
    args: &RunArgs,
    claim: &Claim,
    recovered: bool,
    ledger: &mut dyn Ledger,
    lease: Option<(&Location, Duration)>,
    streams: Streams,
    reporter: &Reporter,
    job_env: &[(&'static str, std::ffi::OsString)],
    alerts: &Alerts,
) -> Result<u8> {
    let supervisor = Supervisor::new()?;
    let heartbeat = lease
        .map(|(location, lease)| lease::Lease::start(location, claim, lease, supervisor.stopper()));
    let max_attempts = args.retries.saturating_add(1);
    let Streams {
        mut stdout,
        mut stderr,
        merged,
        spool,
    } = streams;
    let key = &claim.key;
    let still_held = claim.hold.as_ref().map(|hold| || hold.others_hold());

    let mut spec = Spec {
        argv: &args.command,
        shell: args.shell,
        env: Vec::new(),
        env_remove: Vec::new(),
        timeout: args.timeout.map(Into::into),
        kill_after: args.kill_after.into(),
        capture: args.capture.0 as usize,
        still_held: still_held.as_ref().map(|held| held as &dyn Fn() -> bool),
        timeout_signal: args.timeout_signal.0,
        merged,
        stdin: spool.as_ref(),
        terminal: merged && at_the_terminal(),
    };
    let mut attempt_number = 1;
    let (code, outcome, last) = loop {
        if let Some(signal) = supervisor.pending_signal() {
            let code = exit::for_signal(signal);
            break (code, failed(code, Some(signal)), None);
        }
        if let Some(reason) = supervisor.stopped() {
            reporter.notice(stderr.writer(), &format!("{key}: {reason}"));
            break (exit::IDEM_FAILED, failed(exit::IDEM_FAILED, None), None);
        }
        spec.env = vec![
            ("IDEM_KEY", key.into()),
            ("IDEM_RUN_ID", claim.run_id.to_string().into()),
            ("IDEM_ATTEMPT", attempt_number.to_string().into()),
            ("IDEM_MAX_ATTEMPTS", max_attempts.to_string().into()),
            ("IDEM_FENCE", claim.fence.to_string().into()),
        ];
        if recovered {
            spec.env.push(("IDEM_RECOVERED", "1".into()));
        } else {
            spec.env_remove = vec!["IDEM_RECOVERED"];
        }
        spec.env.extend(job_env.iter().cloned());
        if !job_env.iter().any(|(name, _)| *name == "IDEM_SLOT") {
            spec.env_remove.push("IDEM_SLOT");
        }
        let share = match claim
            .hold
            .as_ref()
            .map(|hold| hold.for_attempt())
            .transpose()
        {
            Ok(share) => share,
            Err(error) => {
                let _ = ledger.finish(claim, None, &failed(exit::IDEM_FAILED, None));
                return Err(Failure::new(
                    exit::IDEM_FAILED,
                    format!(
                        "could not lock the run of {key} for its attempt: {}; nothing ran",
                        exit::io_words(&error)
                    ),
                )
                .into());
            }
        };
        let watch = alerts.watch(attempt_number);
        let attempted = supervisor.attempt(
            &spec,
            &mut stdout,
            &mut stderr,
            share,
            &mut |pgid| ledger.attempt_started(claim, attempt_number, pgid),
            &mut |notice| {
                let line = match notice {
                    Notice::LeftRunning { count, pids } => {
                        let pids: Vec<String> = pids.iter().map(i32::to_string).collect();
                        let more = if count as usize > pids.len() { ", ..." } else { "" };
                        format!(
                            "{key}: the command exited; waiting for {count} process(es) it left running: pid {}{more}",
                            pids.join(", ")
                        )
                    }
                    Notice::Interrupted(signal) => format!(
                        "{key}: passed signal {signal} on to the command; a second signal kills it"
                    ),
                };
                if args.quiet_success {
                    reporter.info(|| line);
                } else {
                    reporter.notice(&mut std::io::stderr(), &line);
                }
            },
        );
        drop(watch);
        let mut end = match attempted {
            Ok(end) => end,
            Err(error) => {
                // Held output is shown, as after any run that did not succeed.
                let _ = stdout.release(&mut std::io::stdout());
                let _ = stderr.release(&mut std::io::stderr());
                let error = match error {
                    AttemptError::Failed(error) => return Err(error),
                    AttemptError::Unrecorded(error) => error,
                };
                // The command was held and never ran: the run failed, known
                // and not abandoned, if the ledger still takes that write.
                let _ = ledger.finish(claim, None, &failed(exit::IDEM_FAILED, None));
                return Err(error.context("the command did not run"));
            }
        };
        if let End::Signaled(signal @ (nix::libc::SIGINT | nix::libc::SIGQUIT)) = end.end {
            // At the terminal a Ctrl-C reaches the command, not idem; it
            // is the operator's all the same: never retried.
            if spec.terminal && end.interrupted.is_none() {
                end.interrupted = Some(signal);
            }
        }
        if let End::NotStarted { reason, .. } = &end.end {
            reporter.notice(stderr.writer(), &format!("{key}: {reason}"));
        }
        let next = after_attempt(args, key, &end, attempt_number, max_attempts);
        let record = attempt_record(attempt_number, &mut end);
        let said = match next {
            Next::Finish {
                code,
                outcome,
                notice,
            } => {
                if let Some(notice) = notice {
                    reporter.notice(stderr.writer(), &notice);
                }
                break (code, outcome, Some(record));
            }
            Next::Retry { said } => said,
        };
        if let Err(error) = ledger.attempt_finished(claim, &record) {
            // Say what the command did, and show what was held.
            let _ = stdout.release(&mut std::io::stdout());
            let _ = stderr.release(&mut std::io::stderr());
            return Err(error.context(format!(
                "{key}: {}, but idem could not record it",
                describe(&end, attempt_number, max_attempts)
            )));
        }
        let delay = backoff(args, attempt_number);
        reporter.notice(
            stderr.writer(),
            &format!("{key}: {said}; retrying in {}", report::short(delay)),
        );
        let spinner = if args.quiet_success {
            None
        } else {
            reporter.spinner()
        };
        let interrupted = supervisor.sleep(delay, Duration::from_millis(100), &mut |left| {
            if let Some(bar) = &spinner {
                bar.set_message(format!(
                    "retry {}/{max_attempts} of {key} in {}",
                    attempt_number + 1,
                    report::short(left)
                ));
            }
        });
        if let Some(bar) = spinner {
            bar.finish_and_clear();
        }
        if let Some(signal) = interrupted {
            let code = exit::for_signal(signal);
            reporter.notice(
                stderr.writer(),
                &format!("{key}: interrupted by signal {signal} while waiting to retry"),
            );
            break (code, failed(code, Some(signal)), None);
        }
        attempt_number += 1;
    };
    drop(heartbeat);
    // A run stopped because its lease could not be kept has lost its claim
    // by now: one try says so.
    let patience = if supervisor.stopped().is_some() {
        Duration::ZERO
    } else {
        RECORD_FOR
    };
    let recorded = record(ledger, claim, last.as_ref(), &outcome, patience, reporter);
    let verdict = recorded.is_ok().then(|| alerts.judge(ledger, &outcome));
    let shown = match verdict {
        Some(verdict) => alerts.shows_output(verdict),
        None => outcome.status != Status::Succeeded,
    };
    if shown {
        let _ = stdout.release(&mut std::io::stdout());
        let _ = stderr.release(&mut std::io::stderr());
    }
    recorded.map_err(|error| {
        error.context(format!(
            "the command exited {}, but idem could not record it",
            outcome.exit_code
        ))
    })?;
    if let Some(verdict) = verdict {
        alerts.tell(verdict, &outcome, last.as_ref(), ledger);
    }
    Ok(code)
}

/// Records the outcome, trying again while the ledger refuses for a while
/// (locked, restarting) for up to `patience`; the key stays held all the
/// while, so nothing runs it meanwhile.
fn record(
    ledger: &mut dyn Ledger,
    claim: &Claim,
    last: Option<&Attempt>,
    outcome: &Outcome,
    patience: Duration,
    reporter: &Reporter,
) -> Result<()> {
    let until = Instant::now() + patience;
    let mut delay = Duration::from_millis(100);
    let mut said = false;
    loop {
        let error = match ledger.finish(claim, last, outcome) {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        if !Failure::is_transient(&error) || Instant::now() + delay >= until {
            return Err(error);
        }
        if !said {
            said = true;
            reporter.notice(
                &mut std::io::stderr(),
                &format!(
                    "{}: could not record the outcome yet ({error:#}); trying again for up to {}",
                    claim.key,
                    report::short(patience)
                ),
            );
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(5));
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

fn after_attempt(args: &RunArgs, key: &str, end: &AttemptEnd, number: u32, max: u32) -> Next {
    let code = end.code();
    let said = describe(end, number, max);
    if let Some(reason) = &end.stopped {
        // The lease could not be kept: idem failed, loudly.
        return Next::Finish {
            code: exit::IDEM_FAILED,
            outcome: failed(code, end.signal()),
            notice: Some(format!("{key}: {reason}; {said}")),
        };
    }
    if let Some(signal) = end.interrupted {
        // The operator stopped it: recorded as failed, never retried.
        let code = if code == 0 {
            exit::for_signal(signal)
        } else {
            code
        };
        return Next::Finish {
            code,
            outcome: failed(code, Some(signal)),
            notice: Some(format!("{key}: interrupted by signal {signal}; {said}")),
        };
    }
    if end.reader_gone && code != exit::SUCCESS {
        // What read idem's output is gone: no retry can fix that.
        let code = exit::for_signal(nix::libc::SIGPIPE);
        return Next::Finish {
            code,
            outcome: failed(code, end.signal()),
            notice: Some(format!(
                "{key}: the reader of its output went away (a closed pipe); {said} (not retried)"
            )),
        };
    }
    if code == exit::SUCCESS {
        return Next::Finish {
            code,
            outcome: Outcome {
                status: Status::Succeeded,
                exit_code: 0,
                signal: None,
            },
            notice: None,
        };
    }
    if number >= max || !retryable(args, code) {
        let why = if number < max { " (not retried)" } else { "" };
        return Next::Finish {
            code,
            outcome: failed(code, end.signal()),
            notice: Some(format!("{key} failed: {said}{why}")),
        };
    }
    Next::Retry { said }
}

fn failed(code: u8, signal: Option<i32>) -> Outcome {
    Outcome {
        status: Status::Failed,
        exit_code: code.into(),
        signal,
    }
}

/// The ledger's record of an attempt; takes the output tails, which may be
/// megabytes, rather than copy them.
fn attempt_record(number: u32, end: &mut AttemptEnd) -> Attempt {
    Attempt {
        number,
        started_at: Some(end.started_at),
        finished_at: Some(end.finished_at),
        exit_code: Some(end.code().into()),
        signal: end.signal(),
        timed_out: end.timed_out,
        stdout_tail: std::mem::take(&mut end.stdout_tail),
        stderr_tail: std::mem::take(&mut end.stderr_tail),
        cut: end.cut,
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

fn retryable(args: &RunArgs, code: u8) -> bool {
    let wanted = args
        .retry_on
        .as_ref()
        .is_none_or(|codes| codes.contains(code));
    wanted && !args.no_retry_on.contains(code)
}

/// The wait before attempt `failed + 1`: random in [d/2, d] with
/// d = min(max, base * 2^(failed-1)).
fn backoff(args: &RunArgs, failed: u32) -> Duration {
    let base: Duration = args.backoff.into();
    let max: Duration = args.max_backoff.into();
    let doubled = base.saturating_mul(
        1u32.checked_shl(failed.saturating_sub(1))
            .unwrap_or(u32::MAX),
    );
    let ceiling = doubled.min(max);
    let half = ceiling / 2;
    half + ceiling.saturating_sub(half).mul_f64(fastrand::f64())
}
