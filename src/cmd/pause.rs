//! `idem pause` and `idem resume`: a job's runs held back, fleet-wide on a
//! shared ledger, until resumed or until a time.

use anyhow::Result;

use crate::cli::{PauseArgs, ResumeArgs};
use crate::control::pause::until;
use crate::exit::{self, Failure};
use crate::ledger::{self, is_glob, Location, Pause, PauseRequest};
use crate::render;
use crate::render::doctor::{Check, Level};

/// Pauses the job or the jobs a glob matches; a glob that matches none is
/// an error (1), while a job not known yet is paused before its first run.
pub fn pause(args: &PauseArgs, location: &Location, quiet: bool) -> Result<u8> {
    let until = args.until.as_deref().map(until).transpose()?;
    let request = PauseRequest {
        by: ledger::who(),
        reason: args.reason.clone(),
        until,
    };
    let paused = if is_glob(&args.target) {
        match ledger::open_existing(location)? {
            Some(mut ledger) => ledger.pause(&args.target, &request)?,
            None => Vec::new(),
        }
    } else {
        ledger::open(location)?.pause(&args.target, &request)?
    };
    if paused.is_empty() {
        return Err(no_match(&args.target));
    }
    let until = match until {
        Some(until) => format!(" until {}", render::local_with_zone(until)),
        None => "; idem resume runs it again".to_owned(),
    };
    for job in &paused {
        say(quiet, &format!("paused {}{until}", render::printable(job)));
    }
    Ok(exit::SUCCESS)
}

/// Resumes the job or the jobs a glob matches; a job that was not paused
/// is said, and is no error.
pub fn resume(args: &ResumeArgs, location: &Location, quiet: bool) -> Result<u8> {
    let (jobs, paused) = match ledger::open_existing(location)? {
        Some(mut ledger) => ledger.resume(&args.target)?,
        None if is_glob(&args.target) => (Vec::new(), Vec::new()),
        None => (vec![args.target.clone()], Vec::new()),
    };
    if jobs.is_empty() {
        return Err(no_match(&args.target));
    }
    for job in &jobs {
        let job_shown = render::printable(job);
        if paused.contains(job) {
            say(quiet, &format!("resumed {job_shown}: its next run runs"));
        } else {
            say(quiet, &format!("{job_shown} was not paused"));
        }
    }
    Ok(exit::SUCCESS)
}

fn no_match(glob: &str) -> anyhow::Error {
    Failure::new(
        exit::NOT_FOUND,
        format!(
            "no job matches {}; see `idem status` for the jobs there are",
            render::printable(glob)
        ),
    )
    .into()
}

fn say(quiet: bool, line: &str) {
    if !quiet {
        exit::say(line);
    }
}

/// `idem doctor`: the jobs paused now, a warning (a pause forgotten holds
/// a job back for good), never a failure.
pub(super) fn doctor_line(
    read: Result<Vec<Pause>, String>,
    checks: &mut Vec<Check>,
    facts: &mut serde_json::Map<String, serde_json::Value>,
) {
    let check = |level, message: String, fix: Option<&str>| Check {
        name: "paused jobs",
        level,
        message,
        fix: fix.map(str::to_owned),
    };
    let pauses = match read {
        Ok(pauses) => pauses,
        Err(why) => {
            let message = format!("cannot be read: {why}");
            return checks.push(check(Level::Problem, message, None));
        }
    };
    let jobs: Vec<&str> = pauses.iter().map(|pause| pause.job.as_str()).collect();
    facts.insert("paused_jobs".into(), serde_json::json!(jobs));
    if pauses.is_empty() {
        return checks.push(check(Level::Ok, "none".to_owned(), None));
    }
    let shown: Vec<String> = pauses
        .iter()
        .map(|pause| {
            let until = pause.until.map_or_else(String::new, |until| {
                format!(" until {}", render::local_with_zone(until))
            });
            format!("{} (by {}{until})", render::printable(&pause.job), pause.by)
        })
        .collect();
    let message = format!("{} job(s) paused: {}", pauses.len(), shown.join(", "));
    checks.push(check(
        Level::Warn,
        message,
        Some("their runs start nothing; `idem resume JOB` when they may run again"),
    ));
}
