//! idem's own lines in the form their reader wants: text for a person
//! (`idem: ...`), one JSON object a line for a machine (`--log-format
//! json`), or the journal's fields under systemd. The command's own output
//! never comes here: it is passed through as it is, in every form.
//!
//! The form is chosen once, at the start; the run's fields (key, job, run
//! id, attempt, exit code, cause) are noted as they become known, and only
//! when a line may carry them: in text, noting costs nothing.

mod journal;

use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// How idem's own lines are written (`--log-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// `idem: TEXT`, as a person reads it
    #[default]
    Text,
    /// One JSON object a line: time, level, event, key, job, run_id,
    /// attempt, exit_code, cause, message
    Json,
}

/// How much a line matters: the journal's priority, and the JSON `level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Error,
    Warning,
    Notice,
    Info,
    Debug,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Notice => "notice",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    /// syslog's number, which the journal's `PRIORITY` takes.
    fn priority(self) -> u8 {
        match self {
            Level::Error => 3,
            Level::Warning => 4,
            Level::Notice => 5,
            Level::Info => 6,
            Level::Debug => 7,
        }
    }
}

/// The kind of one of idem's lines: a stable name a machine may match on
/// (`event` in JSON, `IDEM_EVENT` in the journal), and its level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The key already succeeded: nothing ran.
    Skipped,
    /// Another run holds the key, a lock or a slot.
    Conflict,
    /// An attempt failed and another follows after a backoff.
    Retry,
    /// The run failed: its last attempt failed, or it could not start.
    Failed,
    /// A signal ended the run.
    Interrupted,
    /// The command exited and left processes behind, waited for.
    LeftRunning,
    /// The command ran past `--warn-after`.
    Slow,
    /// A monitor could not be told.
    PingFailed,
    /// A hook failed, hung or could not start.
    HookFailed,
    /// What a backfill did with a period, or why it stopped.
    Backfill,
    /// The last run was abandoned and runs again.
    Recovered,
    /// The run waits (a splay, an upstream, a lock).
    Waiting,
    /// The job is paused, or a stop was asked for.
    Paused,
    /// The run was stopped from outside.
    Stopped,
    /// The run's lease or lock was lost, or the ledger refused for a while.
    Ledger,
    /// How idem went about a run (`-v`).
    Detail,
    /// An error that stops idem.
    Error,
    /// Any other line of idem's.
    Message,
}

impl Event {
    pub fn name(self) -> &'static str {
        match self {
            Event::Skipped => "skipped",
            Event::Conflict => "conflict",
            Event::Retry => "retry",
            Event::Failed => "failed",
            Event::Interrupted => "interrupted",
            Event::LeftRunning => "left_running",
            Event::Slow => "slow",
            Event::PingFailed => "ping_failed",
            Event::HookFailed => "hook_failed",
            Event::Backfill => "backfill",
            Event::Recovered => "recovered",
            Event::Waiting => "waiting",
            Event::Paused => "paused",
            Event::Stopped => "stopped",
            Event::Ledger => "ledger",
            Event::Detail => "detail",
            Event::Error => "error",
            Event::Message => "message",
        }
    }

    pub fn level(self) -> Level {
        match self {
            Event::Failed | Event::Error | Event::Ledger => Level::Error,
            Event::Retry
            | Event::Interrupted
            | Event::Conflict
            | Event::LeftRunning
            | Event::Slow
            | Event::PingFailed
            | Event::HookFailed
            | Event::Stopped => Level::Warning,
            Event::Recovered | Event::Paused | Event::Backfill => Level::Notice,
            Event::Skipped | Event::Waiting | Event::Message => Level::Info,
            Event::Detail => Level::Debug,
        }
    }
}

/// What is known of the run a line is about.
#[derive(Default)]
struct Fields {
    key: Option<String>,
    job: Option<String>,
    run_id: Option<String>,
    attempt: Option<u32>,
    exit_code: Option<i32>,
    cause: Option<String>,
}

/// Where lines go, settled once by [`start`].
enum Sink {
    Text,
    Json,
    Journal(journal::Journal),
}

static SINK: OnceLock<Sink> = OnceLock::new();
static FIELDS: Mutex<Fields> = Mutex::new(Fields {
    key: None,
    job: None,
    run_id: None,
    attempt: None,
    exit_code: None,
    cause: None,
});

/// Settles the form of idem's lines: the journal when systemd connected
/// stderr to it (`JOURNAL_STREAM` names stderr), else `format` on stderr.
/// Lines said before this are text.
pub fn start(format: Format) {
    let sink = match journal::Journal::for_stderr() {
        Some(journal) => Sink::Journal(journal),
        None if format == Format::Json => Sink::Json,
        None => Sink::Text,
    };
    let _ = SINK.set(sink);
}

/// Whether lines carry fields: noting them is work only then.
fn structured() -> bool {
    !matches!(SINK.get(), None | Some(Sink::Text))
}

/// Notes the run's fields; what a later line is about.
fn note(with: impl FnOnce(&mut Fields)) {
    if structured() {
        if let Ok(mut fields) = FIELDS.lock() {
            with(&mut fields);
        }
    }
}

/// A run of `key` for `job` begins: what an earlier run noted is dropped.
pub fn run_of(key: &str, job: &str) {
    note(|fields| {
        *fields = Fields {
            key: Some(key.to_owned()),
            job: Some(job.to_owned()),
            ..Fields::default()
        }
    });
}

/// The run claimed its key as `run_id`.
pub fn claimed(run_id: &dyn std::fmt::Display) {
    note(|fields| fields.run_id = Some(run_id.to_string()));
}

/// Attempt `number` starts: its end is not known yet.
pub fn attempt(number: u32) {
    note(|fields| {
        fields.attempt = Some(number);
        fields.exit_code = None;
        fields.cause = None;
    });
}

/// How the attempt ended: its exit code and what it died of.
pub fn ended(exit_code: i32, cause: &dyn Fn() -> String) {
    note(|fields| {
        fields.exit_code = Some(exit_code);
        fields.cause = Some(cause());
    });
}

/// Writes one of idem's lines of kind `event` to `to` (stderr, or the
/// held stream under `--quiet-success`), whole, in one write.
pub fn say_to(to: &mut dyn Write, event: Event, text: &str) {
    match SINK.get() {
        None | Some(Sink::Text) => {
            let _ = to.write_all(crate::exit::owed_line(text).as_bytes());
        }
        Some(Sink::Json) => {
            let line = json_line(event, text);
            let _ = to.write_all(owed(line).as_bytes());
        }
        Some(Sink::Journal(journal)) => {
            let sent = FIELDS
                .lock()
                .map(|fields| journal.send(event, text, &fields))
                .unwrap_or(false);
            if !sent {
                let _ = to.write_all(crate::exit::owed_line(text).as_bytes());
            }
        }
    }
}

/// [`say_to`] stderr.
pub fn say(event: Event, text: &str) {
    say_to(&mut std::io::stderr(), event, text);
}

/// A newline first when the command's output stopped mid-line.
fn owed(line: String) -> String {
    match crate::process::line_owed() {
        true => format!("\n{line}"),
        false => line,
    }
}

/// One JSON object and its newline.
fn json_line(event: Event, text: &str) -> String {
    let mut object = serde_json::Map::new();
    // RFC 3339 in UTC, to the microsecond.
    let time = format!("{:.6}", jiff::Timestamp::now());
    object.insert("time".into(), time.into());
    object.insert("level".into(), event.level().name().into());
    object.insert("event".into(), event.name().into());
    if let Ok(fields) = FIELDS.lock() {
        let put =
            |object: &mut serde_json::Map<_, _>, name: &str, value: Option<serde_json::Value>| {
                if let Some(value) = value {
                    object.insert(name.to_owned(), value);
                }
            };
        put(&mut object, "key", fields.key.clone().map(Into::into));
        put(&mut object, "job", fields.job.clone().map(Into::into));
        put(&mut object, "run_id", fields.run_id.clone().map(Into::into));
        put(&mut object, "attempt", fields.attempt.map(Into::into));
        put(&mut object, "exit_code", fields.exit_code.map(Into::into));
        put(&mut object, "cause", fields.cause.clone().map(Into::into));
    }
    object.insert("message".into(), text.into());
    let mut line = serde_json::Value::Object(object).to_string();
    line.push('\n');
    line
}
