//! idem's own lines on stderr, kept apart from the command's output.
//!
//! Silence is golden under cron, which mails any output: a skip is told only
//! at a terminal, when `CI` is set (a CI log should say why a step did
//! nothing) or with `-v`; failures, retries and refusals always are (unless
//! `-q`). Waits show a spinner at a terminal, else nothing.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::console::{self, Event};
use crate::ledger::Owner;

#[derive(Clone)]
pub struct Reporter {
    quiet: bool,
    verbose: bool,
    terminal: bool,
    ci: bool,
}

impl Reporter {
    /// `spinners`: whether waits may show a spinner when stderr is a
    /// terminal (`--progress auto`), rather than plain lines only.
    pub fn new(quiet: bool, verbose: bool, spinners: bool) -> Reporter {
        let terminal = spinners && std::io::stderr().is_terminal();
        Reporter {
            quiet,
            verbose,
            terminal,
            ci: under_ci(),
        }
    }

    /// A line that always prints (unless `-q`): failures, retries, refusals.
    /// `to` is stderr, or the held stream under `--quiet-success`: an
    /// unbuffered file, so the whole line goes out in one `write(2)` and
    /// never interleaves mid-line with another run's on a shared stderr.
    pub fn notice(&self, to: &mut dyn Write, event: Event, text: &str) {
        if !self.quiet {
            console::say_to(to, event, text);
        }
    }

    /// A line that prints only at a terminal, under CI or with `-v`:
    /// skips, and conflicts made skips. Made only when shown, since it may
    /// need the time-zone database.
    pub fn info(&self, event: Event, text: impl FnOnce() -> String) {
        if !self.quiet && (self.terminal || self.ci || self.verbose) {
            console::say(event, &text());
        }
    }

    /// A line for a person watching, at a terminal or with `-v` only:
    /// recovering an abandoned run, which the ledger records anyway.
    pub fn aside(&self, event: Event, text: impl FnOnce() -> String) {
        if !self.quiet && (self.terminal || self.verbose) {
            console::say(event, &text());
        }
    }

    /// A line for `-v` only: how idem went about a run (what held its
    /// processes together), which nobody else needs to read.
    pub fn detail(&self, event: Event, text: impl FnOnce() -> String) {
        if !self.quiet && self.verbose {
            console::say(event, &text());
        }
    }

    /// A spinner for a wait, at a terminal only; it erases itself when
    /// dropped, so the line idem prints next starts on a clean line.
    pub fn spinner(&self) -> Option<Spinner> {
        if self.quiet || !self.terminal {
            return None;
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        // `wide_msg` cuts the message to the terminal's width: a line that
        // wrapped would leave its first half behind at each redraw.
        if let Ok(style) = ProgressStyle::with_template("{spinner} idem: {wide_msg}") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(100));
        Some(Spinner(bar))
    }
}

impl Reporter {
    /// A bar of `len` steps, at a terminal only (`idem backfill`); drawn
    /// when told, never on a tick, so it stays out of the command's output.
    pub fn bar(&self, len: u64) -> Option<Spinner> {
        if self.quiet || !self.terminal {
            return None;
        }
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("idem: [{bar:30}] {pos}/{len} {wide_msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        Some(Spinner(bar))
    }
}

/// A wait's spinner, cleared from the screen when the wait ends.
pub struct Spinner(ProgressBar);

impl std::ops::Deref for Spinner {
    type Target = ProgressBar;

    fn deref(&self) -> &ProgressBar {
        &self.0
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// Who holds a running key, for a conflict's line: the process group of
/// the command's attempt when it is not idem's own pid (idem may be gone
/// while the command it started still runs), else idem's pid.
pub fn holder(owner: &Owner) -> String {
    match owner.pgid {
        Some(pgid) if pgid != owner.pid => {
            format!("process group {pgid} (started by idem pid {})", owner.pid)
        }
        _ => format!("pid {}", owner.pid),
    }
}

pub use crate::render::human_duration as short;

/// Whether idem runs under CI: CI services set `CI` (to `true`, or `1`),
/// and a job turns it off with an empty value, `0` or `false`.
fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| {
        let value = value.trim();
        !(value.is_empty() || value == "0" || value.eq_ignore_ascii_case("false"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_under_a_second_are_in_milliseconds() {
        assert_eq!(short(Duration::from_millis(250)), "250ms");
        assert_eq!(short(Duration::from_micros(400)), "0ms");
        assert_eq!(short(Duration::from_millis(999)), "999ms");
        assert_eq!(short(Duration::from_millis(1000)), "1.0s");
        assert_eq!(short(Duration::from_millis(3140)), "3.1s");
        assert_eq!(short(Duration::from_secs(125)), "2m05s");
    }
}
