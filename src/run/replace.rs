//! `run --replace`: a run that finds its key held by another run stops
//! that run (as `idem stop` does), waits until none of it lives and it is
//! recorded over, then claims the key. The claim stays the only way to
//! run: two replacing runs that arrive together each ask the holder to
//! stop, one of them claims, and the other finds that one holding the key
//! and replaces it in turn, so never two run at once.

use std::time::Duration;

use anyhow::Result;
use nix::libc;

use super::config::Config;
use crate::control::stop::{stop_head, Found, Stopping};
use crate::ledger::{Head, Ledger};
use crate::report::Reporter;

/// The stop of the run that holds the key, while this run waits for it.
#[derive(Default)]
pub(super) struct Replacer {
    stopping: Option<Stopping>,
}

impl Replacer {
    /// How long a replacing run waits without `--wait`: a shared ledger's
    /// owner hears of the stop within a third of its lease, then has its
    /// grace to end, and must record its outcome.
    pub fn wait(config: &Config) -> Option<Duration> {
        config
            .replace
            .then(|| config.lease + config.kill_after + Duration::from_secs(5))
    }

    /// The key is held by `head`'s run: asks it to stop, once per run;
    /// a stop already asked is pressed (its processes that forked since
    /// signalled, SIGKILL once its grace is over).
    pub fn busy(
        &mut self,
        config: &Config,
        head: Option<&Head>,
        ledger: &mut dyn Ledger,
        reporter: &Reporter,
    ) -> Result<()> {
        let Some(head) = head else {
            return Ok(());
        };
        if let Some(stopping) = self
            .stopping
            .as_mut()
            .filter(|stopping| stopping.head.run.run_id == head.run.run_id)
        {
            stopping.press();
            return Ok(());
        }
        let key = &head.run.key;
        match stop_head(ledger, head.clone(), libc::SIGTERM, config.kill_after)? {
            Found::Stopping(stopping) => {
                reporter.info(crate::console::Event::Stopped, || {
                    format!(
                        "{key}: --replace: stopping run {} (pid {} on {})",
                        head.run.run_id, head.run.pid, head.run.host
                    )
                });
                self.stopping = Some(*stopping);
            }
            Found::Abandoned(_) | Found::NotRunning => {}
        }
        Ok(())
    }
}
