//! What a run says while an attempt runs: processes left running, a
//! signal passed on, how the attempt is contained.

use super::execute::Run;
use crate::console::Event;
use crate::process::Notice;

impl Run<'_> {
    /// Says what happens during an attempt (see [`Notice`]); under
    /// `--quiet-success` only where a skip would be said.
    pub(super) fn tell(&self, notice: Notice<'_>) {
        let key = &self.claim.key;
        let (event, line) = match notice {
            Notice::LeftRunning {
                count,
                pids,
                ending,
            } => {
                let pids: Vec<String> = pids.iter().map(i32::to_string).collect();
                let more = if count as usize > pids.len() {
                    ", ..."
                } else {
                    ""
                };
                let what = if ending {
                    "of the attempt to end"
                } else {
                    "it left running"
                };
                let line = format!(
                    "{key}: the command exited; waiting for {count} process(es) {what}: pid {}{more}",
                    pids.join(", ")
                );
                (Event::LeftRunning, line)
            }
            Notice::Interrupted(signal) => (
                Event::Interrupted,
                format!(
                    "{key}: passed signal {signal} on to the command; a second signal kills it"
                ),
            ),
            Notice::Contained(contained) => {
                let words = contained.words();
                let line = || format!("{key}: containment: {words}");
                return self.reporter.detail(Event::Detail, line);
            }
        };
        if self.config.quiet_success {
            self.reporter.info(event, || line);
        } else {
            self.reporter.notice(&mut std::io::stderr(), event, &line);
        }
    }
}
