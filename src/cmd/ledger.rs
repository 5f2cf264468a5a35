//! `idem ledger`: list, show, forget, prune, export, import, path, metrics.

use std::io::{BufRead, BufReader, BufWriter, IsTerminal, Write};
use std::path::Path;

use anyhow::Result;
use jiff::Timestamp;

use crate::cli::{ColorChoice, LedgerCommand, ListArgs};
use crate::exit::{self, Failure};
use crate::ledger::{self, Attempt, ListFilter, Location, Owner, Status};
use crate::process::holders;
use crate::render;
use crate::when::{parse_time, When};

/// Runs `import` writes per transaction: few commits, bounded memory...
const IMPORT_BATCH: usize = 1000;

/// ...and the output they may hold, since a run may hold megabytes.
const IMPORT_BATCH_BYTES: usize = 8 << 20;

/// `quiet` (`-q`) silences the summaries of forget, prune and import, which
/// are idem's own lines; data (list, show, export, metrics) always prints.
pub fn run(
    command: &LedgerCommand,
    location: &Location,
    quiet: bool,
    colour: ColorChoice,
) -> Result<u8> {
    match command {
        LedgerCommand::Path => {
            println!("{}", location.display());
            Ok(exit::SUCCESS)
        }
        LedgerCommand::List(args) => list(args, location, colour, quiet),
        LedgerCommand::Show { key, json, limit } => show(key, *json, *limit, location),
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
        LedgerCommand::Metrics { per_key } => metrics(location, *per_key),
        LedgerCommand::Mark {
            key, reason, job, ..
        } => super::mark::mark(key, reason, job.as_deref(), location, quiet),
        LedgerCommand::Deliver(args) => super::deliver::run(args, location, quiet),
    }
}

fn list(args: &ListArgs, location: &Location, colour: ColorChoice, quiet: bool) -> Result<u8> {
    let since = args
        .since
        .as_deref()
        .map(|text| parse_time("--since", text, false))
        .transpose()?;
    let until = args
        .until
        .as_deref()
        .map(|text| parse_time("--until", text, true))
        .transpose()?;
    let mut ledger = open_to_read(location)?;
    // "2h" ago by the clock that stamped the runs.
    let now = ledger.now()?;
    let filter = ListFilter {
        key_glob: args.key.clone(),
        job_glob: args.job.clone(),
        statuses: args.status.iter().copied().map(Status::from).collect(),
        since: since.map(|when| when.at(now)),
        until: until.map(|when| when.at(now)),
        // One more than shown, to tell whether more match.
        limit: args.limit.saturating_add(1),
    };
    let mut runs = ledger.list(&filter)?;
    let more = runs.len() > args.limit as usize;
    runs.truncate(args.limit as usize);
    if more && !quiet {
        crate::exit::say(&format!(
            "more runs match than the {} shown; --limit N shows more, --since/--until narrow them",
            args.limit
        ));
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let array: Vec<_> = runs.iter().map(render::json::RunJson::from).collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&array)?)?;
    } else if !runs.is_empty() {
        let table = render::runs_table(&runs, render::Style::for_stdout(colour));
        writeln!(out, "{}", render::table_text(&table))?;
    }
    Ok(exit::SUCCESS)
}

/// The ledger that list, show, metrics and `status` read. One that does
/// not exist is an error (exit 1), not an empty answer: a monitor pointed
/// at the wrong path must not read it as all being well. Reading creates
/// nothing; only `idem run` (and `import`) make a ledger.
pub fn open_to_read(location: &Location) -> Result<Box<dyn ledger::Ledger>> {
    ledger::open_to_read(location)?.ok_or_else(|| {
        Failure::new(
            exit::NOT_FOUND,
            format!(
                "no ledger at {}: nothing has run with it yet; check --db or IDEM_DB",
                render::printable(&location.display())
            ),
        )
        .into()
    })
}

/// `ledger show`: the key's latest `limit` runs, as text or JSON (see
/// [`render::show`]).
fn show(key: &str, json: bool, limit: u32, location: &Location) -> Result<u8> {
    let unknown = |key: &str| -> anyhow::Error {
        Failure::new(
            exit::NOT_FOUND,
            format!("no runs of key {key} in the ledger; see `idem ledger list`"),
        )
        .into()
    };
    let mut ledger = open_to_read(location)?;
    // A template (`daily-{date}`) names the key it makes now, unless the
    // ledger holds a key spelled so (made with `{{` `}}`).
    let expanded = match crate::key::Template::parse(key) {
        Ok(template) if key.contains(['{', '}']) && ledger.history(key, 1)?.1 == 0 => {
            template.expand_now()?
        }
        _ => key.to_owned(),
    };
    let key = expanded.as_str();
    let head = ledger.head(key)?;
    // At least the latest run: it is what `show` is about.
    let (history, total) = ledger.history(key, limit.max(1))?;
    let Some((latest, earlier)) = history.split_first() else {
        return Err(unknown(key));
    };
    let shown = render::show::Shown {
        key,
        head: head.as_ref(),
        latest,
        earlier,
        total,
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    if json {
        render::show::json(&mut out, &shown, ledger.as_mut())?;
    } else {
        render::show::text(&mut out, &shown, ledger.as_mut())?;
    }
    out.flush()?;
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
    // A glob that matches no key is reported like an unknown key. All the
    // keys are forgotten in one transaction: none when any is running.
    let keys = &expand_globs(ledger.as_mut(), keys)?;
    let report = ledger.forget(keys, purge, dry_run, force)?;
    if let Some(busy) = report.busy().next() {
        let Some(owner) = &busy.busy else {
            return Err(Failure::new(exit::CONFLICT, "a key is running").into());
        };
        let at = format!(" ({} on {})", holders::describe(owner), owner.host);
        let message = if owner.alive.is_none() {
            format!(
                "key {} is running{at} under an owner idem cannot judge ({}); nothing was forgotten (check that it is gone, then add --force)",
                busy.key,
                owner.judged.unjudged_words()
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
    for key in report.keys.iter().filter(|key| key.known) {
        writeln!(out, "{}", render::summary::forgotten(key, purge, dry_run))?;
        if let Some(line) = key
            .left
            .as_ref()
            .and_then(|owner| left_running(&key.key, owner))
        {
            exit::say(&line);
        }
    }
    unknown_keys(
        report
            .keys
            .iter()
            .filter(|key| !key.known)
            .map(|key| key.key.as_str()),
    )
}

/// What `forget` leaves running of a key's run, said: its processes that
/// still live on this host (forgetting a key stops nothing).
fn left_running(key: &str, owner: &Owner) -> Option<String> {
    let living = holders::living(owner);
    (!living.is_empty()).then(|| {
        format!(
            "key {}: its run still has processes running, which forget does not stop: {} (stop them with kill if they must not go on)",
            render::printable(key),
            holders::names(&living)
        )
    })
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
    let mut before = Timestamp::now().checked_sub(age).unwrap_or(Timestamp::MIN);
    let report = match ledger::open_existing(location)? {
        Some(mut ledger) => {
            // Older than DUR by the clock that stamped the runs.
            before = When::Ago(age).at(ledger.now()?);
            let report = ledger.prune(before, dry_run)?;
            (report, ledger.prune_events(before, dry_run)?)
        }
        None => (ledger::PruneReport::default(), 0),
    };
    let (report, events) = report;
    let line = render::summary::pruned(&report, before, dry_run);
    writeln!(summary(quiet), "{line}")?;
    if events > 0 {
        let verb = if dry_run { "would drop" } else { "dropped" };
        writeln!(
            summary(quiet),
            "{verb} {} delivered or lost",
            render::count(events, "notification event")
        )?;
    }
    Ok(exit::SUCCESS)
}

fn export(location: &Location) -> Result<u8> {
    let Some(mut ledger) = ledger::open_existing(location)? else {
        return Ok(exit::SUCCESS);
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    ledger.export(&mut |run| {
        // Serialised first, so a closed pipe surfaces as an I/O error.
        out.write_all(&ledger::line::export_line(&run)?)?;
        Ok(())
    })?;
    out.flush()?;
    Ok(exit::SUCCESS)
}

fn import(file: Option<&Path>, location: &Location, quiet: bool) -> Result<u8> {
    let (mut input, name) = import_input(file)?;
    let mut ledger = ledger::open(location)?;
    let mut total = ledger::ImportReport::default();
    let mut lines = ledger::line::Lines::new(input.as_mut(), &name);
    let mut done = false;
    while !done {
        // A transaction per batch of runs: few commits, and a WAL that
        // stays small however long the stream.
        let (mut runs, mut bytes) = (0, 0);
        let mut feed = |sink: &mut dyn ledger::ImportSink| -> Result<bool> {
            let mut counted = Counted { sink, bytes: 0 };
            done = !lines.next(&mut counted)?;
            runs += 1;
            bytes += counted.bytes;
            Ok(!done && runs < IMPORT_BATCH && bytes < IMPORT_BATCH_BYTES)
        };
        if let Err(error) = ledger.import(&mut feed, &mut total) {
            return Err(match error.downcast::<ledger::line::BadLine>() {
                Ok(bad) => Failure::usage(format!(
                    "{name} line {}: {:#}; give lines written by `idem ledger export` ({} runs before it imported)",
                    bad.number,
                    bad.error,
                    total.added + total.updated
                ))
                .into(),
                Err(error) => error,
            });
        }
    }
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

/// What `import` reads, and its name for messages.
fn import_input(file: Option<&Path>) -> Result<(Box<dyn BufRead>, String)> {
    match file {
        Some(path) => {
            let opened = std::fs::File::open(path).map_err(|error| {
                Failure::usage(format!(
                    "could not open {}: {}; give the file `idem ledger export` wrote",
                    path.display(),
                    exit::io_words(&error)
                ))
            })?;
            Ok((Box::new(BufReader::new(opened)), path.display().to_string()))
        }
        None if std::io::stdin().is_terminal() => Err(Failure::usage(
            "idem ledger import reads an export from stdin, which is a terminal; pipe one in or give a FILE",
        )
        .into()),
        None => Ok((Box::new(std::io::stdin().lock()), "stdin".to_owned())),
    }
}

/// A sink that counts the output it passes on, for the size of a batch.
struct Counted<'a> {
    sink: &'a mut dyn ledger::ImportSink,
    bytes: usize,
}

impl ledger::ImportSink for Counted<'_> {
    fn ledger_fence(&mut self, fence: i64) -> Result<()> {
        self.sink.ledger_fence(fence)
    }

    fn run(&mut self, run: &ledger::Run, head: bool) -> Result<()> {
        self.sink.run(run, head)
    }

    fn attempt(&mut self, attempt: &Attempt) -> Result<()> {
        self.bytes += attempt.stdout_tail.len() + attempt.stderr_tail.len();
        self.sink.attempt(attempt)
    }
}

/// Where a command's summary goes: stdout, or nowhere under `-q`.
fn summary(quiet: bool) -> Box<dyn Write> {
    if quiet {
        Box::new(std::io::sink())
    } else {
        Box::new(std::io::stdout().lock())
    }
}

fn metrics(location: &Location, per_key: bool) -> Result<u8> {
    let mut ledger = open_to_read(location)?;
    let jobs = ledger.jobs(None)?;
    let keys = if per_key {
        ledger.metrics()?
    } else {
        Vec::new()
    };
    let mut text = render::metrics::job_metrics_text(&jobs);
    let statuses = crate::jobs::read(ledger.as_mut(), None, Timestamp::now())?;
    let lost = crate::jobs::lost(ledger.as_mut());
    text.push_str(&render::metrics::judged_metrics_text(&statuses, &lost));
    if per_key {
        text.push_str(&render::metrics::metrics_text(&keys));
    }
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(exit::SUCCESS)
}

/// Globs become the keys they match (a glob that matches none stays as
/// it is, a key the ledger does not know).
pub(super) fn expand_globs(
    ledger: &mut dyn crate::ledger::Ledger,
    keys: &[String],
) -> Result<Vec<String>> {
    let mut expanded: Vec<String> = Vec::new();
    for key in keys {
        let matched = if crate::ledger::is_glob(key) {
            ledger.keys_matching(key)?
        } else {
            Vec::new()
        };
        if matched.is_empty() {
            expanded.push(key.clone());
        } else {
            expanded.extend(matched);
        }
    }
    expanded.dedup();
    Ok(expanded)
}
