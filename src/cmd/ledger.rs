//! `idem ledger`: list, show, path (and the maintenance commands).

use std::io::Write;

use anyhow::Result;
use jiff::Timestamp;

use crate::cli::{LedgerCommand, ListArgs};
use crate::exit::{self, Failure};
use crate::ledger::{self, ListFilter, Location};
use crate::render;

pub fn run(command: &LedgerCommand, location: &Location) -> Result<u8> {
    match command {
        LedgerCommand::Path => {
            println!("{}", location.display());
            Ok(exit::SUCCESS)
        }
        LedgerCommand::List(args) => list(args, location),
        LedgerCommand::Show { key, json } => show(key, *json, location),
        _ => Err(Failure::new(exit::IDEM_FAILED, "this ledger command is not built yet").into()),
    }
}

fn list(args: &ListArgs, location: &Location) -> Result<u8> {
    let filter = ListFilter {
        key_glob: args.key.clone(),
        statuses: args.status.clone(),
        since: args.since.as_deref().map(parse_since).transpose()?,
        limit: args.limit,
    };
    let runs = match ledger::open_existing(location)? {
        Some(mut ledger) => ledger.list(&filter)?,
        None => Vec::new(),
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let array: Vec<_> = runs.iter().map(render::run_json).collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&array)?)?;
    } else if !runs.is_empty() {
        writeln!(out, "{}", render::runs_table(&runs))?;
    }
    Ok(exit::SUCCESS)
}

/// `--since 2h` (that long ago) or `--since 2026-11-29T08:00:00Z`.
fn parse_since(text: &str) -> Result<Timestamp> {
    if let Ok(duration) = humantime::parse_duration(text) {
        let ago = jiff::SignedDuration::try_from(duration).unwrap_or(jiff::SignedDuration::MAX);
        return Ok(Timestamp::now().checked_sub(ago).unwrap_or(Timestamp::MIN));
    }
    text.parse::<Timestamp>().map_err(|_| {
        Failure::usage(format!(
            "invalid --since '{text}': give a duration like 2h or an RFC 3339 time like 2026-11-29T08:00:00Z"
        ))
        .into()
    })
}

fn show(key: &str, json: bool, location: &Location) -> Result<u8> {
    let history = match ledger::open_existing(location)? {
        Some(mut ledger) => ledger.history(key)?,
        None => Vec::new(),
    };
    let Some(((latest, attempts), earlier)) = history.split_first() else {
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!("no runs of key {key} in the ledger; see `idem ledger list`"),
        )
        .into());
    };
    let mut out = std::io::stdout().lock();
    if json {
        let mut object = render::run_json(latest);
        object["attempts_detail"] = attempts.iter().map(render::attempt_json).collect();
        object["history"] = earlier
            .iter()
            .map(|(run, _)| render::run_json(run))
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&object)?)?;
        return Ok(exit::SUCCESS);
    }
    let zone = jiff::tz::TimeZone::system();
    writeln!(out, "key {key}: {}", latest.status.as_str())?;
    for (run, attempts) in &history {
        writeln!(
            out,
            "\nrun {}  {}  exit {}  started {}  took {}  on {} (pid {})",
            run.run_id,
            run.status.as_str(),
            run.exit_code.map_or("-".into(), |code| code.to_string()),
            render::local(run.started_at, &zone),
            render::human_ms(render::duration_ms(run)),
            run.host,
            run.pid,
        )?;
        writeln!(out, "  command: {}", render::short_command(run, 200))?;
        for attempt in attempts {
            writeln!(
                out,
                "  attempt {}: exit {}{}",
                attempt.number,
                attempt
                    .exit_code
                    .map_or("-".into(), |code| code.to_string()),
                if attempt.timed_out {
                    " (timed out)"
                } else {
                    ""
                }
            )?;
            for (name, tail) in [
                ("stdout", &attempt.stdout_tail),
                ("stderr", &attempt.stderr_tail),
            ] {
                if !tail.is_empty() {
                    writeln!(out, "    {name}:")?;
                    for line in String::from_utf8_lossy(tail).lines() {
                        writeln!(out, "      {line}")?;
                    }
                }
            }
        }
    }
    Ok(exit::SUCCESS)
}
