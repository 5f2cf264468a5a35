//! What the pages ask of the ledger, read the way `idem status` and
//! `idem ledger` read it: the ledger is opened for each request and closed
//! after it, so the server holds no connection (and no snapshot that could
//! keep a writer's checkpoint waiting) between requests.

use std::collections::HashMap;
use std::sync::Mutex;

use anyhow::Result;
use jiff::Timestamp;

use crate::ledger::{self, Attempt, Ledger, ListFilter, Location, Run};
use crate::render::status::JobStatus;

/// Runs a job's page shows, newest first.
pub const RUNS_SHOWN: u32 = 20;

/// The bytes of each output tail a job's page shows: a page of 20 runs
/// stays well under a megabyte however much output the ledger keeps.
pub const TAIL_SHOWN: usize = 4096;

/// Opens the ledger for each read, one read at a time.
pub struct Reader {
    location: Location,
    /// One read at a time: a second SQLite connection to the same file in
    /// this process would share its POSIX locks, which closing either
    /// connection's descriptors drops for both; and a board is read by few.
    one: Mutex<()>,
}

impl Reader {
    pub fn new(location: Location) -> Reader {
        Reader {
            location,
            one: Mutex::new(()),
        }
    }

    /// `read` with the ledger opened, or `None` when no ledger is there
    /// yet (a SQLite file nothing has run under).
    pub fn with<T>(&self, read: impl FnOnce(Option<&mut dyn Ledger>) -> Result<T>) -> Result<T> {
        let _one = self
            .one
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Dropped at the end, not left: a server goes on, and must close
        // what it opened.
        let mut ledger = ledger::open_to_read(&self.location)?;
        match ledger.as_deref_mut() {
            Some(ledger) => read(Some(ledger)),
            None => read(None),
        }
    }
}

impl Reader {
    /// `write` with the ledger opened as `idem pause` opens it, under the
    /// same one-at-a-time lock as the reads; a button's press is one short
    /// transaction, and no page is rendered while it holds the ledger.
    pub fn write<T>(&self, write: impl FnOnce(&mut dyn Ledger) -> Result<T>) -> Result<T> {
        let _one = self
            .one
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match ledger::open_existing(&self.location)? {
            Some(mut ledger) => write(ledger.as_mut()),
            None => Err(anyhow::anyhow!(
                "no ledger at {} yet: nothing has run under it (check --db or IDEM_DB)",
                self.location.display()
            )),
        }
    }
}

/// Every job as `idem status` judges it, the jobs that need a person
/// first, as `status` orders them.
pub fn statuses(ledger: Option<&mut dyn Ledger>, now: Timestamp) -> Result<Vec<JobStatus>> {
    let Some(ledger) = ledger else {
        return Ok(Vec::new());
    };
    crate::jobs::read(ledger, None, now)
}

/// A job's page: its figures and its latest runs.
pub struct JobPage {
    pub status: JobStatus,
    /// Its latest runs, newest first.
    pub runs: Vec<RunShown>,
    /// More runs of the job than are shown.
    pub more: bool,
}

/// A run with its attempts and the end of their output.
pub struct RunShown {
    pub run: Run,
    pub attempts: Vec<AttemptShown>,
}

pub struct AttemptShown {
    pub attempt: Attempt,
    pub stdout: Tail,
    pub stderr: Tail,
}

/// The end of an output tail, as much as a page shows.
#[derive(Default)]
pub struct Tail {
    pub text: String,
    /// The output is longer than what is shown.
    pub cut: bool,
}

impl Tail {
    fn of(bytes: &[u8], cut: bool) -> Tail {
        let from = bytes.len().saturating_sub(TAIL_SHOWN);
        Tail {
            text: String::from_utf8_lossy(&bytes[from..]).into_owned(),
            cut: cut || from > 0,
        }
    }
}

/// The job's page, or `None` for a job the ledger does not know.
pub fn job_page(ledger: &mut dyn Ledger, job: &str, now: Timestamp) -> Result<Option<JobPage>> {
    let Some(status) = crate::jobs::one(ledger, job, now)? else {
        return Ok(None);
    };
    let filter = ListFilter {
        job_glob: Some(crate::ledger::glob_literal(job)),
        // One more than shown, to tell whether more are there.
        limit: RUNS_SHOWN + 1,
        ..ListFilter::default()
    };
    let mut runs = ledger.list(&filter)?;
    let more = runs.len() > RUNS_SHOWN as usize;
    runs.truncate(RUNS_SHOWN as usize);
    let attempts = attempts_of(ledger, &runs)?;
    let mut shown = Vec::with_capacity(runs.len());
    for run in runs {
        let mut with_output = Vec::new();
        for attempt in attempts.get(&run.run_id).cloned().unwrap_or_default() {
            // One attempt's output at a time, cut to what the page shows.
            let tails = ledger
                .output(run.run_id, Some(attempt.number))?
                .unwrap_or_default();
            with_output.push(AttemptShown {
                stdout: Tail::of(&tails.stdout, tails.cut),
                stderr: Tail::of(&tails.stderr, tails.cut),
                attempt,
            });
        }
        shown.push(RunShown {
            run,
            attempts: with_output,
        });
    }
    Ok(Some(JobPage {
        status,
        runs: shown,
        more,
    }))
}

/// The attempts of `runs`, by run: each key's latest runs are read with
/// their attempts once, as many as the key has among `runs` (they are
/// its newest, since `runs` are the job's newest).
fn attempts_of(ledger: &mut dyn Ledger, runs: &[Run]) -> Result<HashMap<uuid::Uuid, Vec<Attempt>>> {
    let mut per_key: HashMap<&str, u32> = HashMap::new();
    for run in runs {
        *per_key.entry(run.key.as_str()).or_default() += 1;
    }
    let mut attempts = HashMap::new();
    for (key, count) in per_key {
        for (run, its) in ledger.history(key, count)?.0 {
            attempts.insert(run.run_id, its);
        }
    }
    Ok(attempts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_keeps_its_end() {
        let long = vec![b'x'; TAIL_SHOWN + 10];
        let tail = Tail::of(&long, false);
        assert_eq!(tail.text.len(), TAIL_SHOWN);
        assert!(tail.cut);
        let short = Tail::of(b"done\n", false);
        assert_eq!((short.text.as_str(), short.cut), ("done\n", false));
    }
}
