//! The command's streams: its output passed through or held (`--quiet-success`,
//! `--alert-after`), and stdin as it is or kept for retries.

use std::fs::File;
use std::io::IsTerminal;

use anyhow::Result;

use super::config::Config;
use crate::process::{self, Sink, Spool};

/// What a run prepares before its claim.
pub(super) struct Streams {
    /// The held output, until [`Streams::output`] hands it on.
    held: Option<Output>,
    /// idem's stdout and stderr are one file (see `Spec::merged`).
    pub merged: bool,
    /// stdin kept for retries.
    pub spool: Option<Spool>,
}

impl Streams {
    /// Made before the claim: a claim whose output cannot be held would be
    /// left `running` with nothing run.
    pub fn prepare(config: &Config) -> Result<Streams> {
        let merged = process::same_file(&std::io::stdout(), &std::io::stderr());
        let held = if config.holds_output() {
            Some(Output::held(merged)?)
        } else {
            None
        };
        // stdin that is not a terminal is kept, so that a retry gets it whole;
        // /dev/null (cron's and systemd's usual stdin) is whole every time.
        let spool =
            if config.retry.attempts() > 1 && !std::io::stdin().is_terminal() && stdin_is_kept() {
                Some(Spool::new()?)
            } else {
                None
            };
        Ok(Streams {
            held,
            merged,
            spool,
        })
    }

    /// The held output, else idem's own stdout and stderr (opened only
    /// once the key is claimed: a skip needs neither).
    pub fn output(&mut self) -> Result<Output> {
        match self.held.take() {
            Some(held) => Ok(held),
            None => Ok(Output {
                stdout: Sink::live(std::io::stdout())?,
                stderr: Sink::live(std::io::stderr())?,
            }),
        }
    }
}

/// Where the command's stdout and stderr go, and idem's own lines with them.
pub(super) struct Output {
    pub stdout: Sink,
    pub stderr: Sink,
}

impl Output {
    fn held(merged: bool) -> Result<Output> {
        let stdout = Sink::held()?;
        // One file for both when idem's two are one, so the order is kept.
        let stderr = if merged {
            stdout.alias()?
        } else {
            Sink::held()?
        };
        Ok(Output { stdout, stderr })
    }

    /// Where idem's lines about the run go: stderr, or held with the
    /// command's output.
    pub fn lines(&mut self) -> &mut File {
        self.stderr.writer()
    }

    /// Shows what was held, after a run that a person should hear of.
    pub fn show_held(&mut self) {
        let _ = self.stdout.release(&mut std::io::stdout());
        let _ = self.stderr.release(&mut std::io::stderr());
    }
}

/// Whether idem runs in the foreground of the terminal that is its stdin
/// and its output, as a command typed at a shell does.
pub(super) fn at_the_terminal() -> bool {
    let stdin = std::io::stdin();
    stdin.is_terminal()
        && std::io::stdout().is_terminal()
        && nix::unistd::tcgetpgrp(&stdin).is_ok_and(|group| group == nix::unistd::getpgrp())
}

/// Whether idem's stdin needs keeping for a retry: not when there is none
/// (a closed descriptor 0 is left to the command as it is), nor when it is
/// the null device, which every attempt can read from the start itself.
/// Keeping it costs a temporary file and two threads a run.
fn stdin_is_kept() -> bool {
    const NULL_DEVICE: u64 = nix::sys::stat::makedev(1, 3);
    match nix::sys::stat::fstat(std::io::stdin()) {
        Ok(stat) => {
            use nix::sys::stat::SFlag;
            let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
            !(kind == SFlag::S_IFCHR && stat.st_rdev == NULL_DEVICE)
        }
        Err(_) => false,
    }
}
