//! `ledger show`: a key's state and its latest runs, for people and for
//! scripts. Each attempt's output is read from the ledger as it is written
//! out, so memory holds one attempt's output whatever the history holds.

use std::cell::RefCell;
use std::io::Write;

use anyhow::Result;
use jiff::tz::TimeZone;
use serde::Serialize;

use super::json::{rfc3339, AttemptJson, HookJson, RunJson};
use super::{exit_text, local, printable, printable_output};
use crate::ledger::{Attempt, Head, HookRun, Ledger, Run, RunAttempts, Status, Tails};

/// What `show` prints of a key.
pub struct Shown<'a> {
    /// The key as expanded.
    pub key: &'a str,
    /// Its deciding run, if it has one.
    pub head: Option<&'a Head>,
    /// Its latest run, with its attempts (their output is read as written).
    pub latest: &'a RunAttempts,
    /// The runs before it, newest first, as many as `--limit` lets through.
    pub earlier: &'a [RunAttempts],
    /// How many runs the key has in all.
    pub total: u64,
}

/// `show` for people: the key's state, then each run with its attempts,
/// their output and the hooks that ran.
pub fn text(out: &mut dyn Write, shown: &Shown, ledger: &mut dyn Ledger) -> Result<()> {
    let zone = crate::host::zone();
    writeln!(
        out,
        "key {}: {}",
        printable(shown.key),
        state(shown.head, &zone)
    )?;
    for (run, attempts) in std::iter::once(shown.latest).chain(shown.earlier) {
        run_text(out, run, &zone)?;
        for attempt in attempts {
            let tails = ledger.output(run.run_id, Some(attempt.number))?;
            attempt_text(out, attempt, &tails.unwrap_or_default())?;
        }
        for hook in ledger.hooks(run.run_id)? {
            writeln!(out, "  {}", hook_text(&hook, &zone))?;
        }
        if let Some(stop) = ledger.stop_of(run.run_id)? {
            writeln!(out, "  {}", stop.words(run.status, &zone))?;
        }
        // A ledger an older idem made has no outbox: no events to show.
        for event in ledger.events(run.run_id).unwrap_or_default() {
            writeln!(out, "  {}", crate::alert::event_text(&event, &zone))?;
        }
    }
    let shown_runs = 1 + shown.earlier.len() as u64;
    let hidden = shown.total.saturating_sub(shown_runs);
    if hidden > 0 {
        let runs = super::count(hidden, "earlier run");
        writeln!(out, "\n{runs} not shown (--limit N shows more)")?;
    }
    Ok(())
}

/// What the key's deciding run means for its next run.
fn state(head: Option<&Head>, zone: &TimeZone) -> String {
    let Some(Head { run, .. }) = head else {
        return "forgotten: the next run runs it".to_owned();
    };
    match run.status {
        Status::Succeeded if run.note.is_some() => format!(
            "marked succeeded at {}: the next run skips it (--force runs it)",
            local(run.finished_at.unwrap_or(run.started_at), zone)
        ),
        Status::Succeeded => format!(
            "succeeded at {}: the next run skips it (--force runs it again)",
            local(run.finished_at.unwrap_or(run.started_at), zone)
        ),
        Status::Failed => format!(
            "failed with exit {}: the next run runs it again",
            exit_text(run.exit_code)
        ),
        Status::Running => format!(
            "running since {} (pid {} on {})",
            local(run.started_at, zone),
            run.pid,
            printable(&run.host)
        ),
        Status::Abandoned => "abandoned: the next run reruns it with IDEM_RECOVERED=1".to_owned(),
    }
}

fn run_text(out: &mut dyn Write, run: &Run, zone: &TimeZone) -> Result<()> {
    writeln!(
        out,
        "\nrun {}  {}  exit {}  started {}  took {}  on {} (pid {})",
        run.run_id,
        super::status_text(run),
        exit_text(run.exit_code),
        local(run.started_at, zone),
        super::human_ms(super::duration_ms(run)),
        printable(&run.host),
        run.pid,
    )?;
    match &run.note {
        Some(note) => writeln!(out, "  {}", printable(note))?,
        None => writeln!(out, "  command: {}", super::short_command(run, 200))?,
    }
    Ok(())
}

/// `peak memory 1.5 MiB, cpu 20 ms`, as far as the attempt's figures were
/// recorded.
fn usage_text(attempt: &Attempt) -> Option<String> {
    let memory = attempt
        .peak_memory
        .and_then(|bytes| u64::try_from(bytes).ok())
        .map(|bytes| format!("peak memory {}", super::human_bytes(bytes)));
    let cpu = attempt.cpu_ms.map(|ms| format!("cpu {ms} ms"));
    let used: Vec<String> = [memory, cpu].into_iter().flatten().collect();
    (!used.is_empty()).then(|| used.join(", "))
}

fn attempt_text(out: &mut dyn Write, attempt: &Attempt, tails: &Tails) -> Result<()> {
    // What it died of, where its exit code does not say it.
    let timed_out = match (&attempt.cause, attempt.timed_out) {
        (_, true) => " (timed out)".to_owned(),
        (Some(cause), false) => format!(" ({})", printable(cause)),
        (None, false) => String::new(),
    };
    let code = exit_text(attempt.exit_code);
    // The words of `idem -v run`; an older idem's attempt recorded none.
    let held = attempt
        .containment
        .map_or("not recorded", |held| held.words());
    writeln!(
        out,
        "  attempt {}: exit {code}{timed_out}; containment: {held}",
        attempt.number
    )?;
    if let Some(used) = usage_text(attempt) {
        writeln!(out, "    used: {used}")?;
    }
    if tails.cut {
        writeln!(out, "    {}", cut_note(tails))?;
    }
    for (name, tail) in [("stdout", &tails.stdout), ("stderr", &tails.stderr)] {
        if !tail.is_empty() {
            writeln!(out, "    {name}:")?;
            for line in String::from_utf8_lossy(tail).lines() {
                writeln!(out, "      {}", printable_output(line))?;
            }
        }
    }
    Ok(())
}

/// The line that says an attempt's output lacks its start. The ledger
/// keeps one flag for both streams, and a stream that was cut kept exactly
/// `--capture` bytes, so the longer tail is that limit: what is said holds
/// of either stream.
fn cut_note(tails: &Tails) -> String {
    let kept = tails.stdout.len().max(tails.stderr.len()) as u64;
    if kept == 0 {
        return "[output not kept: --capture 0]".to_owned();
    }
    format!(
        "[… earlier output cut: only the last {} of each stream kept (--capture)]",
        super::human_bytes(kept)
    )
}

/// A hook that ran: `hook --on-failure (IDEM_EVENT=failure): exited 0 at
/// ...`, its flag and the event it was told, so that a failure hook that
/// did its work does not read as a hook that failed.
fn hook_text(hook: &HookRun, zone: &TimeZone) -> String {
    let flag = if hook.event == "recovery" {
        "--on-recovery"
    } else {
        "--on-failure"
    };
    let ended = hook
        .exit_code
        .map_or("could not start".into(), |code| format!("exited {code}"));
    format!(
        "hook {flag} (IDEM_EVENT={}): {ended} at {}",
        hook.event,
        local(hook.at, zone)
    )
}

/// `show --json`: the latest run's fields, its attempts with their output,
/// the hooks that ran for it, and the earlier runs' fields.
pub fn json(out: &mut dyn Write, shown: &Shown, ledger: &mut dyn Ledger) -> Result<()> {
    let (latest, attempts) = shown.latest;
    let hooks = ledger.hooks(latest.run_id)?;
    let stop = ledger.stop_of(latest.run_id)?;
    let events = ledger.events(latest.run_id).unwrap_or_default();
    let object = ShowJson {
        run: RunJson::from(latest),
        attempts_detail: AttemptsDetail {
            ledger: RefCell::new(ledger),
            run_id: latest.run_id,
            attempts,
        },
        hooks: hooks.iter().map(HookJson::from).collect(),
        stop: stop.as_ref().map(|stop| StopJson {
            by: &stop.by,
            at: rfc3339(stop.requested_at),
            signal: stop.signal,
            seen_at: stop.seen_at.map(rfc3339),
        }),
        events: events.iter().map(crate::alert::EventJson::from).collect(),
        history: shown.earlier.iter().map(|(run, _)| run.into()).collect(),
    };
    serde_json::to_writer_pretty(&mut *out, &object)?;
    writeln!(out)?;
    Ok(())
}

/// What `show --json` prints: the latest run, then its attempts and hooks,
/// then the key's earlier runs.
#[derive(Serialize)]
struct ShowJson<'a> {
    /// The latest run's fields.
    #[serde(flatten)]
    run: RunJson<'a>,
    /// Its attempts, with their output.
    attempts_detail: AttemptsDetail<'a>,
    /// The hooks that ran for the latest run.
    hooks: Vec<HookJson<'a>>,
    /// Who asked to stop the latest run (`idem stop`), if anyone did.
    stop: Option<StopJson<'a>>,
    /// The latest run's pings and hooks, each with its deliveries.
    events: Vec<crate::alert::EventJson>,
    /// The earlier runs, newest first, as many as `--limit` lets through.
    history: Vec<RunJson<'a>>,
}

/// A request to stop a run, as `show --json` prints it.
#[derive(Serialize)]
struct StopJson<'a> {
    /// `user@host`.
    by: &'a str,
    /// When it was asked (RFC 3339 UTC).
    at: String,
    /// The signal sent first.
    signal: i32,
    /// When the run's owner saw it; null: not yet.
    seen_at: Option<String>,
}

/// Attempts whose output is read from the ledger as each is written out.
struct AttemptsDetail<'a> {
    ledger: RefCell<&'a mut dyn Ledger>,
    run_id: uuid::Uuid,
    attempts: &'a [Attempt],
}

impl Serialize for AttemptsDetail<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut seq = serializer.serialize_seq(Some(self.attempts.len()))?;
        for attempt in self.attempts {
            let Tails {
                stdout: stdout_tail,
                stderr: stderr_tail,
                cut,
            } = self
                .ledger
                .borrow_mut()
                .output(self.run_id, Some(attempt.number))
                .map_err(|error| S::Error::custom(format!("{error:#}")))?
                .unwrap_or_default();
            let attempt = Attempt {
                stdout_tail,
                stderr_tail,
                cut,
                ..attempt.clone()
            };
            seq.serialize_element(&AttemptJson::from(&attempt))?;
        }
        seq.end()
    }
}
