//! `idem ledger`: list, show, forget, prune, export, import, path, metrics.

use std::io::{BufRead, BufReader, BufWriter, IsTerminal, Write};
use std::path::Path;

use anyhow::{Context, Result};
use jiff::Timestamp;

use crate::cli::{LedgerCommand, ListArgs};
use crate::exit::{self, Failure};
use crate::ledger::{self, ForgottenKey, ListFilter, Location, Status};
use crate::render;

/// Runs `import` writes per transaction: few commits, bounded memory.
const IMPORT_BATCH: usize = 1000;

/// `quiet` (`-q`) silences the summaries of forget, prune and import, which
/// are idem's own lines; data (list, show, export, metrics) always prints.
pub fn run(command: &LedgerCommand, location: &Location, quiet: bool) -> Result<u8> {
    match command {
        LedgerCommand::Path => {
            println!("{}", location.display());
            Ok(exit::SUCCESS)
        }
        LedgerCommand::List(args) => list(args, location),
        LedgerCommand::Show { key, json } => show(key, *json, location),
        LedgerCommand::Forget {
            keys,
            purge,
            dry_run,
            force,
        } => forget(keys, *purge, *dry_run, *force, location, quiet),
        LedgerCommand::Prune {
            older_than,
            dry_run,
        } => prune(older_than, *dry_run, location, quiet),
        LedgerCommand::Export => export(location),
        LedgerCommand::Import { file } => import(file.as_deref(), location, quiet),
        LedgerCommand::Metrics => metrics(location),
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
        let table = render::runs_table(&runs, render::Style::for_stdout());
        writeln!(out, "{}", render::table_text(&table))?;
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
    let (head, history) = match ledger::open_existing(location)? {
        Some(mut ledger) => (ledger.head(key)?, ledger.history(key)?),
        None => (None, Vec::new()),
    };
    let Some(((latest, attempts), earlier)) = history.split_first() else {
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!("no runs of key {key} in the ledger; see `idem ledger list`"),
        )
        .into());
    };
    let zone = jiff::tz::TimeZone::system();
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
    let state = match &head {
        None => "forgotten: the next run runs it".to_owned(),
        Some(head) => {
            let run = &head.run;
            match run.status {
                Status::Succeeded => format!(
                    "succeeded at {}: the next run skips it (--force runs it again)",
                    render::local(run.finished_at.unwrap_or(run.started_at), &zone)
                ),
                Status::Failed => format!(
                    "failed with exit {}: the next run runs it again",
                    run.exit_code.map_or("-".into(), |code| code.to_string())
                ),
                Status::Running => format!(
                    "running since {} (pid {} on {})",
                    render::local(run.started_at, &zone),
                    run.pid,
                    run.host
                ),
                Status::Abandoned => {
                    "abandoned: the next run reruns it with IDEM_RECOVERED=1".to_owned()
                }
            }
        }
    };
    writeln!(out, "key {key}: {state}")?;
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

fn forget(
    keys: &[String],
    purge: bool,
    dry_run: bool,
    force: bool,
    location: &Location,
    quiet: bool,
) -> Result<u8> {
    let Some(mut ledger) = ledger::open_existing(location)? else {
        return unknown_keys(keys.iter().map(String::as_str));
    };
    let report = ledger.forget(keys, purge, dry_run, force)?;
    if let Some(busy) = report.busy().next() {
        let Some(owner) = &busy.busy else {
            return Err(Failure::new(exit::CONFLICT, "a key is running").into());
        };
        let at = format!(" (pid {} on {})", owner.pid, owner.host);
        let message = if owner.alive.is_none() {
            format!(
                "key {} is running{at} under an owner idem cannot judge (claimed by an older idem); nothing was forgotten (check that it is gone, then add --force)",
                busy.key
            )
        } else {
            format!(
                "key {} is running{at}; nothing was forgotten (wait for it, or stop it first)",
                busy.key
            )
        };
        return Err(Failure::new(exit::CONFLICT, message).into());
    }
    let mut out = summary(quiet);
    let verb = match (dry_run, purge) {
        (true, true) => "would purge",
        (true, false) => "would forget",
        (false, true) => "purged",
        (false, false) => "forgot",
    };
    for key in report.keys.iter().filter(|key| key.known) {
        writeln!(out, "{verb} {}: {}", key.key, forget_words(key, purge))?;
    }
    unknown_keys(
        report
            .keys
            .iter()
            .filter(|key| !key.known)
            .map(|key| key.key.as_str()),
    )
}

fn forget_words(key: &ForgottenKey, purge: bool) -> String {
    let runs = match key.runs {
        1 => "1 run".to_owned(),
        n => format!("{n} runs"),
    };
    let was = match (key.head, key.abandoned) {
        (_, true) => "was running, its owner gone: marked abandoned".to_owned(),
        (Some(status), false) => format!("was {}", status.as_str()),
        (None, false) => "was forgotten already".to_owned(),
    };
    if purge {
        format!("{was}; {runs} removed; it runs next time")
    } else {
        format!("{was}; it runs next time ({runs} kept)")
    }
}

/// Says which keys the ledger does not know: exit 1 when there are any.
fn unknown_keys<'a>(keys: impl Iterator<Item = &'a str>) -> Result<u8> {
    let unknown: Vec<&str> = keys.collect();
    if unknown.is_empty() {
        return Ok(exit::SUCCESS);
    }
    Err(Failure::new(
        exit::NOT_FOUND,
        format!(
            "no key {} in the ledger; nothing to forget there (see `idem ledger list`)",
            unknown.join(", ")
        ),
    )
    .into())
}

fn prune(
    older_than: &humantime::Duration,
    dry_run: bool,
    location: &Location,
    quiet: bool,
) -> Result<u8> {
    let age = jiff::SignedDuration::try_from(**older_than).unwrap_or(jiff::SignedDuration::MAX);
    let before = Timestamp::now().checked_sub(age).unwrap_or(Timestamp::MIN);
    let report = match ledger::open_existing(location)? {
        Some(mut ledger) => ledger.prune(before, dry_run)?,
        None => ledger::PruneReport::default(),
    };
    let zone = jiff::tz::TimeZone::system();
    writeln!(
        summary(quiet),
        "{} {} run{} ({} attempt{}, {} of output{}) that finished before {}; every key's deciding run stays",
        if dry_run { "would prune" } else { "pruned" },
        report.runs,
        if report.runs == 1 { "" } else { "s" },
        report.attempts,
        if report.attempts == 1 { "" } else { "s" },
        render::human_bytes(report.output_bytes),
        match report.keys {
            0 => String::new(),
            1 => ", 1 forgotten key".to_owned(),
            n => format!(", {n} forgotten keys"),
        },
        render::local(before, &zone),
    )?;
    Ok(exit::SUCCESS)
}

fn export(location: &Location) -> Result<u8> {
    let Some(mut ledger) = ledger::open_existing(location)? else {
        return Ok(exit::SUCCESS);
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    ledger.export(&mut |run| {
        // Serialised first, so a closed pipe surfaces as an I/O error.
        let mut line = serde_json::to_vec(&render::export_json(&run))?;
        line.push(b'\n');
        out.write_all(&line)?;
        Ok(())
    })?;
    out.flush()?;
    Ok(exit::SUCCESS)
}

fn import(file: Option<&Path>, location: &Location, quiet: bool) -> Result<u8> {
    let (input, name): (Box<dyn BufRead>, String) = match file {
        Some(path) => {
            let opened = std::fs::File::open(path).map_err(|error| {
                Failure::usage(format!(
                    "could not open {}: {}; give the file `idem ledger export` wrote",
                    path.display(),
                    exit::io_words(&error)
                ))
            })?;
            (Box::new(BufReader::new(opened)), path.display().to_string())
        }
        None if std::io::stdin().is_terminal() => {
            return Err(Failure::usage(
                "idem ledger import reads an export from stdin, which is a terminal; pipe one in or give a FILE",
            )
            .into())
        }
        None => (Box::new(std::io::stdin().lock()), "stdin".to_owned()),
    };
    let mut ledger = ledger::open(location)?;
    let mut total = ledger::ImportReport::default();
    let mut batch = Vec::with_capacity(IMPORT_BATCH);
    let mut flush = |batch: &mut Vec<ledger::ExportedRun>| -> Result<()> {
        let report = ledger.import(batch)?;
        total.added += report.added;
        total.updated += report.updated;
        total.unchanged += report.unchanged;
        total.heads += report.heads;
        batch.clear();
        Ok(())
    };
    for (index, line) in input.lines().enumerate() {
        let line = line.with_context(|| format!("could not read {name}"))?;
        if line.trim().is_empty() {
            continue;
        }
        match render::parse_export(&line) {
            Ok(run) => batch.push(run),
            Err(error) => {
                flush(&mut batch)?;
                return Err(Failure::usage(format!(
                    "{name} line {}: {error:#}; give lines written by `idem ledger export` ({} runs before it imported)",
                    index + 1,
                    total.added + total.updated
                ))
                .into());
            }
        }
        if batch.len() == IMPORT_BATCH {
            flush(&mut batch)?;
        }
    }
    flush(&mut batch)?;
    writeln!(
        summary(quiet),
        "imported {} run{} ({} updated, {} already here); {} became {}",
        total.added,
        if total.added == 1 { "" } else { "s" },
        total.updated,
        total.unchanged,
        total.heads,
        if total.heads == 1 {
            "its key's deciding run"
        } else {
            "their keys' deciding runs"
        },
    )?;
    Ok(exit::SUCCESS)
}

/// Where a command's summary goes: stdout, or nowhere under `-q`.
fn summary(quiet: bool) -> Box<dyn Write> {
    if quiet {
        Box::new(std::io::sink())
    } else {
        Box::new(std::io::stdout().lock())
    }
}

fn metrics(location: &Location) -> Result<u8> {
    let keys = match ledger::open_existing(location)? {
        Some(mut ledger) => ledger.metrics()?,
        None => Vec::new(),
    };
    std::io::stdout()
        .lock()
        .write_all(render::metrics_text(&keys).as_bytes())?;
    Ok(exit::SUCCESS)
}
