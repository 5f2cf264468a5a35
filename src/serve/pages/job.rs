//! A job's page: its figures, then its latest runs, newest first, each
//! with its attempts, their exit codes, durations and output tails.

use jiff::Timestamp;
use maud::{html, Markup};

use super::{actions, command_text, frame, local, mark, mask_urls, strip, when, Controls};
use crate::ledger::{Attempt, Status};
use crate::render;
use crate::serve::read::{AttemptShown, JobPage, RunShown, Tail, RUNS_SHOWN};

/// The job's page HTML; `ledger` is the ledger's name, masked.
pub fn job(page: &JobPage, ledger: &str, now: Timestamp, controls: &Controls) -> String {
    let status = &page.status;
    let running = page
        .runs
        .iter()
        .any(|shown| shown.run.status == Status::Running);
    let body = html! {
        p.back { a href="/" { "All jobs" } }
        h1 { (status.job) }
        (controls.notice())
        (figures(page, now))
        (actions(controls, status, running, "job"))
        h2 { "Latest runs" }
        @if page.runs.is_empty() {
            p.message { "No runs of this job are left in the ledger." }
        }
        @for run in &page.runs { (run_section(run)) }
        @if page.more {
            p.note {
                "The latest " (RUNS_SHOWN) " runs are shown; "
                code { "idem ledger list --job '" (status.job) "'" } " lists them all."
            }
        }
    };
    frame(&status.job, ledger, now, body).into_string()
}

/// The job's figures, as `idem status` judges them.
fn figures(page: &JobPage, now: Timestamp) -> Markup {
    let status = &page.status;
    let state = status.state.as_str();
    html! {
        dl.figures {
            dt { "State" } dd { span class={ "state " (state) } { (state) } }
            dt { "Last run" } dd { (when(status.last_run.as_deref(), now)) }
            dt { "Last success" } dd { (when(status.last_success.as_deref(), now)) }
            dt { "Failures in a row" } dd { (status.failures) }
            dt { "Missed periods" } dd {
                @match status.missed {
                    Some(missed) => { (missed) " of the last 10 " (periods(status.period)) }
                    None => "- (no period in its key)",
                }
            }
            dt { "Recent" } dd { (strip(&status.strip)) }
            @if let Some(paused) = &status.paused { dt { "Paused" } dd { (pause_words(paused)) } }
            @if let Some(keys) = &status.blocked_on { dt { "Blocked" } dd { "waiting for " (keys.join(", ")) } }
            @if status.owed > 0 { dt { "Owed" } dd { (status.owed) " pings and hooks not yet delivered" } }
            dt { "Key" } dd { code { (status.template) } }
            dt { "Command" } dd { code.wrap { (command_text(&status.argv, status.shell)) } }
        }
    }
}

/// "by ana@web1 since 2026-12-03 04:00 (disk full), until ...".
pub(super) fn pause_words(paused: &render::status::Paused) -> String {
    let time = |text: &str| {
        text.parse::<Timestamp>()
            .map_or_else(|_| text.to_owned(), local)
    };
    let mut words = format!("by {} since {}", paused.by, time(&paused.since));
    if let Some(reason) = &paused.reason {
        // A reason is free text: a URL in it (a ticket with a token) is
        // masked as one in a command is.
        words.push_str(&format!(" ({})", mask_urls(reason)));
    }
    match &paused.until {
        Some(until) => words.push_str(&format!(", until {}", time(until))),
        None => words.push_str(", until resumed"),
    }
    words
}

/// The periods of a job's template in words: `{date}` makes one a day.
fn periods(period: Option<&str>) -> String {
    match period {
        Some("date") => "days".to_owned(),
        Some(period) => format!("{period}s"),
        None => "periods".to_owned(),
    }
}

/// A run: open when it did not succeed, since that is what a person came
/// to read. A success marked by hand ran nothing: who marked it and why,
/// with no pid, duration or exit.
fn run_section(shown: &RunShown) -> Markup {
    let run = &shown.run;
    if let Some(note) = &run.note {
        return html! {
            article class="run succeeded marked" {
                details {
                    summary {
                        (mark("succeeded")) " " strong { "marked" } " "
                        code { (run.key) }
                        span.meta { " " (local(run.started_at)) " · " (mask_urls(note)) }
                    }
                    p.meta { "Nothing ran: the key was marked succeeded by hand (idem ledger mark) · run " code { (run.run_id) } }
                }
            }
        };
    }
    let status = run.status.as_str();
    let duration = render::human_ms(render::duration_ms(run));
    html! {
        article class={ "run " (status) } {
            details open[run.status != Status::Succeeded] {
                summary {
                    (mark(status)) " " strong { (status) } " "
                    code { (run.key) }
                    span.meta {
                        " started " (local(run.started_at)) " · " (duration)
                        " · exit " (render::exit_text(run.exit_code))
                    }
                }
                p.meta {
                    (render::count(u64::from(run.attempts), "attempt")) " · on "
                    (run.host) " (pid " (run.pid) ") · run " code { (run.run_id) }
                    @if run.recovered { " · the run before it was abandoned" }
                }
                @for attempt in &shown.attempts { (attempt_section(run.key.as_str(), attempt)) }
            }
        }
    }
}

fn attempt_section(key: &str, shown: &AttemptShown) -> Markup {
    let attempt = &shown.attempt;
    html! {
        section.attempt {
            h3 { "Attempt " (attempt.number) ": " (outcome(attempt)) }
            @if let Some(held) = attempt.containment { p.meta { "Containment: " (held.words()) } }
            (tail("stdout", &shown.stdout))
            (tail("stderr", &shown.stderr))
            @if shown.stdout.cut || shown.stderr.cut {
                p.note {
                    "Earlier output is not shown; "
                    code { "idem ledger show '" (key) "'" } " shows what the ledger kept."
                }
            }
        }
    }
}

/// "exit 1 after 2.0s", "killed by signal 9", "timed out".
fn outcome(attempt: &Attempt) -> String {
    let ended = match (attempt.exit_code, attempt.signal, attempt.timed_out) {
        (_, _, true) => "timed out".to_owned(),
        (_, Some(signal), _) => format!("killed by signal {signal}"),
        (Some(code), None, false) => format!("exit {code}"),
        (None, None, false) => "running".to_owned(),
    };
    let took = match (attempt.started_at, attempt.finished_at) {
        (Some(start), Some(end)) => {
            let ms = end.as_millisecond() - start.as_millisecond();
            format!(" after {}", render::human_ms(Some(ms)))
        }
        _ => String::new(),
    };
    ended + &took
}

/// An output tail, each line as a terminal would be kept from acting on
/// it (escapes written out), all of it escaped for HTML by maud.
fn tail(name: &str, tail: &Tail) -> Markup {
    if tail.text.is_empty() {
        return html! {};
    }
    let text: Vec<String> = tail
        .text
        .split('\n')
        .map(|line| render::printable_output(line).into_owned())
        .collect();
    html! {
        h4 { (name) }
        pre.output { (text.join("\n")) }
    }
}
