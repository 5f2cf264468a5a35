//! `idem status`: one line per job, the jobs that need a person first, as
//! the one judge of a job (`jobs`) has them.

use std::io::Write;

use anyhow::Result;
use jiff::Timestamp;

use crate::cli::StatusArgs;
use crate::exit::{self, Failure};
use crate::ledger::Location;
use crate::render;

/// Judges every job (or those `--job` matches) and prints them; exit 1
/// when one needs a person.
pub fn run(args: &StatusArgs, location: &Location, colour: crate::cli::ColorChoice) -> Result<u8> {
    let mut ledger = super::ledger::open_to_read(location)?;
    let now = Timestamp::now();
    let statuses = crate::jobs::read(ledger.as_mut(), args.job.as_deref(), now)?;
    if let (true, Some(glob)) = (statuses.is_empty(), &args.job) {
        // A check of a job that is not there is not a job that is fine.
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!(
                "no job matches {}; see `idem status` for the jobs there are",
                render::printable(glob)
            ),
        )
        .into());
    }
    let mut out = std::io::stdout().lock();
    let style = render::Style::for_stdout(colour);
    if args.json {
        render::status::json(&mut out, &statuses)?;
    } else if statuses.is_empty() {
        writeln!(out, "{}", render::status::NO_JOBS)?;
    } else if args.after {
        super::upstreams::text(&mut out, &statuses, style)?;
    } else {
        render::status::text(&mut out, &statuses, now, style, args.wide)?;
        super::upstreams::blocked_lines(&mut out, &statuses)?;
    }
    Ok(if statuses.iter().any(|job| job.state.needs_a_person()) {
        exit::NOT_FOUND
    } else {
        exit::SUCCESS
    })
}
