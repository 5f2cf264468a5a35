//! The HTML of `idem serve`, written with maud, which escapes every value
//! it is given: a command, a key or a line of output that holds markup
//! stays text. Pages need no JavaScript; they refresh themselves.
//!
//! `board` is the status board, `job` a job's runs; this file holds the
//! frame every page shares and the small pieces both show.

mod actions;
mod board;
mod job;

use jiff::Timestamp;
use maud::{html, Markup, PreEscaped, DOCTYPE};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::render;

pub use actions::Done;
pub use board::board;
pub use job::job;

/// What a page shows of fleet control: the user's form token when they
/// may press the buttons, and what the button they pressed did.
#[derive(Default)]
pub struct Controls<'a> {
    pub token: Option<&'a str>,
    /// What was done, to which job.
    pub done: Option<(Done, String)>,
}

impl Controls<'_> {
    fn notice(&self) -> Markup {
        actions::notice(self.done.as_ref().map(|(done, job)| (*done, job.as_str())))
    }
}

/// Seconds between a page's refreshes of itself.
const REFRESH_SECS: u32 = 30;

/// The style sheet, inline: a page is one request, and works offline.
const STYLE: &str = include_str!("style.css");

/// What a job's name keeps unencoded in a link.
const NAME_IN_PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The frame of every page: its title, the board's link, its body, and
/// when and from which ledger it was read.
fn frame(title: &str, ledger: &str, now: Timestamp, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta http-equiv="refresh" content=(REFRESH_SECS);
                meta name="robots" content="noindex";
                title { (title) " · idem" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header.top {
                    a.home href="/" { "idem" }
                    span.ledger { "ledger " code { (ledger) } }
                }
                main { (body) }
                footer {
                    "Read at " (local(now)) "; this page refreshes itself every "
                    (REFRESH_SECS) " seconds. "
                    a href="/metrics" { "metrics" } " · "
                    a href="/api/status" { "status as JSON" }
                }
            }
        }
    }
}

/// A page that says one thing: an unknown job, a ledger that cannot be
/// read.
pub fn message(title: &str, ledger: &str, now: Timestamp, line: &str) -> String {
    frame(
        title,
        ledger,
        now,
        html! {
            h1 { (title) }
            p.message { (line) }
            p { a href="/" { "All jobs" } }
        },
    )
    .into_string()
}

/// The link to a job's page.
pub fn job_href(job: &str) -> String {
    format!("/job/{}", utf8_percent_encode(job, NAME_IN_PATH))
}

/// A time as "3h ago", its local date and time on hover; "never".
fn when(time: Option<&str>, now: Timestamp) -> Markup {
    let Some(time) = time.and_then(|text| text.parse::<Timestamp>().ok()) else {
        return html! { span.never { "never" } };
    };
    html! {
        time datetime=(render::json::rfc3339(time)) title=(local(time)) {
            (render::status::ago(time, now))
        }
    }
}

/// Local time, as every table of idem's shows it.
fn local(time: Timestamp) -> String {
    render::local(time, &crate::host::zone())
}

/// A run's mark: a symbol and a colour, so that neither alone carries it.
fn mark(status: &str) -> Markup {
    let symbol = match status {
        "succeeded" => "+",
        "failed" => "x",
        "abandoned" => "?",
        "stopped" => "-",
        _ => ">",
    };
    html! { span class={ "mark " (status) } title=(status) { (symbol) } }
}

/// The strip of a job's latest outcomes, oldest first.
fn strip(statuses: &[&str]) -> Markup {
    html! {
        span.strip aria-label={ "latest runs, oldest first: " (statuses.join(", ")) } {
            @for status in statuses { (mark(status)) }
        }
    }
}

/// A command as a shell would take it back, with what would act on a
/// terminal escaped and every URL in it masked: a ping URL or a database
/// URL in a command is a secret, and a page is read by more people than
/// the crontab.
fn command_text(argv: &[std::ffi::OsString], shell: bool) -> String {
    mask_urls(&render::short_argv(argv, shell, usize::MAX))
}

/// `text` with each `scheme://...` in it masked as idem masks a ping URL
/// (its host alone is kept).
fn mask_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "+.-".contains(c)))
            .map_or(0, |before| before + 1);
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || "'\"`<>".contains(c))
            .map_or(rest.len(), |after| at + after);
        out.push_str(&rest[..start]);
        if start == at {
            // No scheme before it: not a URL.
            out.push_str(&rest[at..end]);
        } else {
            out.push_str(&crate::alert::mask_url(&rest[start..end]));
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A job's buttons, when the user may press them.
fn actions(
    controls: &Controls,
    status: &render::status::JobStatus,
    running: bool,
    back: &'static str,
) -> Markup {
    match controls.token {
        Some(token) => actions::buttons(&actions::Buttons {
            job: &status.job,
            token,
            paused: status.paused.is_some(),
            running,
            back,
        }),
        None => html! {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_in_a_command_keep_their_host_alone() {
        assert_eq!(
            mask_urls("curl -fsS https://hc-ping.com/0f3c1d2e-aaaa-bbbb && pg_dump 'postgres://u:pw@db/x'"),
            "curl -fsS https://hc-ping.com/*** && pg_dump 'postgres://db/***'"
        );
        assert_eq!(mask_urls("echo a :// b"), "echo a :// b");
        assert_eq!(mask_urls("plain words"), "plain words");
    }

    #[test]
    fn a_job_link_encodes_its_name() {
        assert_eq!(job_href("backup-{date}"), "/job/backup-%7Bdate%7D");
        assert_eq!(job_href("a/b c"), "/job/a%2Fb%20c");
    }
}
