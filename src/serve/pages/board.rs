//! The status board: every job as `idem status` shows it, the jobs that
//! need a person first.

use jiff::Timestamp;
use maud::{html, Markup};

use super::{actions, command_text, frame, job_href, strip, when, Controls};
use crate::render::status::{JobStatus, State};

/// The board's HTML; `ledger` is the ledger's name, masked.
pub fn board(statuses: &[JobStatus], ledger: &str, now: Timestamp, controls: &Controls) -> String {
    let buttons = controls.token.is_some();
    let body = html! {
        h1 { "Jobs" }
        (controls.notice())
        p.summary { (summary(statuses)) }
        @if statuses.is_empty() {
            p.message { "No jobs yet: nothing has run under this ledger." }
        } @else {
            div.scroll {
                table.board {
                    thead {
                        tr {
                            th { "Job" } th { "State" } th { "Last run" }
                            th { "Last success" } th.num { "Fails" } th.num { "Missed" }
                            th { "Recent" } th { "Command" }
                            @if buttons { th { "Actions" } }
                        }
                    }
                    tbody {
                        @for job in statuses { (row(job, now, controls)) }
                    }
                }
            }
            (notes(statuses))
            p.legend {
                "Recent: the latest runs, oldest first: "
                span.mark.succeeded { "+" } " succeeded, "
                span.mark.failed { "x" } " failed, "
                span.mark.abandoned { "?" } " abandoned, "
                span.mark.stopped { "-" } " stopped, "
                span.mark.running { ">" } " running."
            }
        }
    };
    frame("Jobs", ledger, now, body).into_string()
}

/// Under the table, as `idem status` says under its own: why each paused
/// job is paused, what each blocked job waits for, and the events owed.
fn notes(statuses: &[JobStatus]) -> Markup {
    let owed: Vec<String> = statuses
        .iter()
        .filter(|job| job.owed > 0)
        .map(|job| format!("{} {}", job.job, job.owed))
        .collect();
    html! {
        ul.notes {
            @for job in statuses {
                @if let Some(paused) = &job.paused {
                    li.paused { (job.job) " paused " (super::job::pause_words(paused)) }
                }
                @if let Some(keys) = &job.blocked_on {
                    li.blocked { (job.job) " is blocked: waiting for " (keys.join(", ")) }
                }
            }
            @if !owed.is_empty() {
                li.owed {
                    "Owed (pings and hooks not yet delivered): " (owed.join(", "))
                    "; " code { "idem ledger deliver" } " sends them."
                }
            }
        }
    }
}

/// "4 jobs: 1 failing, 3 ok".
fn summary(statuses: &[JobStatus]) -> String {
    let mut counts: Vec<(State, usize)> = Vec::new();
    for job in statuses {
        match counts.iter_mut().find(|(state, _)| *state == job.state) {
            Some((_, count)) => *count += 1,
            None => counts.push((job.state, 1)),
        }
    }
    let parts: Vec<String> = counts
        .iter()
        .map(|(state, count)| format!("{count} {}", state.as_str()))
        .collect();
    let jobs = crate::render::count(statuses.len() as u64, "job");
    if parts.is_empty() {
        jobs
    } else {
        format!("{jobs}: {}", parts.join(", "))
    }
}

/// A job's row; each cell names its column for the narrow layout, where
/// a row is a card.
fn row(job: &JobStatus, now: Timestamp, controls: &Controls) -> Markup {
    let state = job.state.as_str();
    let command = command_text(&job.argv, job.shell);
    html! {
        tr class=(state) {
            td.job data-label="Job" { a href=(job_href(&job.job)) { (job.job) } }
            td data-label="State" { span class={ "state " (state) } { (state) } }
            td data-label="Last run" { (when(job.last_run.as_deref(), now)) }
            td data-label="Last success" { (when(job.last_success.as_deref(), now)) }
            td.num data-label="Fails" { (job.failures) }
            td.num data-label="Missed" {
                @match job.missed { Some(missed) => (missed), None => "-" }
            }
            td data-label="Recent" { (strip(&job.strip)) }
            td.command data-label="Command" title=(command) { code { (command) } }
            @if controls.token.is_some() {
                td data-label="Actions" {
                    (actions(controls, job, job.strip.contains(&"running"), "board"))
                }
            }
        }
    }
}
