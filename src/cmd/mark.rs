//! `idem ledger mark KEY --succeeded --reason TEXT`: a success recorded
//! without running anything (the work was done by hand, or elsewhere), so
//! the key is skipped and the runs that wait for it (`--after`) go on.
//!
//! A mark is written as an import of one run (the rule that decides when
//! an imported run becomes its key's head is written once, in
//! `ledger/rules.rs`): a run with no attempts whose note says by whom and
//! why. It never takes the place of a running head.

use anyhow::Result;

use crate::exit::{self, Failure};
use crate::key::Template;
use crate::ledger::{self, Head, ImportReport, ImportSink, Location, Run, Status};

/// The longest reason kept, in bytes: a line for people, not a log.
const MAX_REASON: usize = 500;

/// Marks `typed` (a key, or a template expanded now) succeeded.
pub fn mark(
    typed: &str,
    reason: &str,
    job: Option<&str>,
    location: &Location,
    quiet: bool,
) -> Result<u8> {
    let key = Template::parse(typed)
        .and_then(|template| template.expand_now())
        .map_err(|error| {
            Failure::usage(error.message.replacen(
                "invalid --key",
                &format!("invalid key '{typed}'"),
                1,
            ))
        })?;
    if reason.trim().is_empty() || reason.len() > MAX_REASON || reason.chars().any(char::is_control)
    {
        return Err(Failure::usage(format!(
            "--reason must say why in 1 to {MAX_REASON} bytes of printable text, like --reason 'loaded by hand after the outage'"
        ))
        .into());
    }
    let mut ledger = ledger::open(location)?;
    let head = ledger.head(&key)?;
    if let Some(head) = head
        .as_ref()
        .filter(|head| head.run.status == Status::Running)
    {
        return Err(busy(&key, head));
    }
    let who = format!("{}@{}", user(), crate::host::name());
    let run = marked_run(&key, typed, job, head.as_ref(), &who, reason);
    let mut report = ImportReport::default();
    let mut fed = false;
    ledger.import(
        &mut |sink: &mut dyn ImportSink| {
            if !fed {
                fed = true;
                sink.run(&run, true)?;
            }
            Ok(false)
        },
        &mut report,
    )?;
    if report.heads != 1 {
        // A run of the key claimed it between the read and the import.
        let head = ledger.head(&key)?;
        ledger.leave();
        return Err(match head {
            Some(head) => busy(&key, &head),
            None => Failure::new(
                exit::CONFLICT,
                format!("key {key} could not be marked; try again"),
            )
            .into(),
        });
    }
    ledger.leave();
    if !quiet {
        println!("marked {key} succeeded (by {who}: {reason})");
    }
    Ok(exit::SUCCESS)
}

/// The mark as a run: the key's job and command as its head has them (so
/// that `status` shows the job's command), no attempt.
fn marked_run(
    key: &str,
    typed: &str,
    job: Option<&str>,
    head: Option<&Head>,
    who: &str,
    reason: &str,
) -> Run {
    ledger::recorded_success(
        key.to_owned(),
        job.map(str::to_owned)
            .or_else(|| head.map(|head| head.run.job.clone()))
            .unwrap_or_else(|| typed.to_owned()),
        head.map(|head| head.run.command.clone())
            .unwrap_or_default(),
        head.is_some_and(|head| head.run.shell),
        ledger::mark_note(who, reason),
    )
}

/// The key is running (or recorded so): nothing is marked over a run
/// whose outcome is still to come.
fn busy(key: &str, head: &Head) -> anyhow::Error {
    let run = &head.run;
    let gone = head
        .owner
        .as_ref()
        .is_some_and(|owner| !owner.presumed_alive());
    let message = if gone {
        format!(
            "key {key} is recorded running but its owner is gone; nothing was marked: `idem ledger forget {key}` first, then mark it"
        )
    } else {
        format!(
            "key {key} is running (pid {} on {}); nothing was marked: mark it once that run has ended",
            run.pid,
            crate::render::printable(&run.host)
        )
    };
    Failure::new(exit::CONFLICT, message).into()
}

/// The user who marks, by name where the system knows it.
fn user() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => format!("uid {uid}"),
    }
}
