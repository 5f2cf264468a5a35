//! The events a run owes, made before the transaction that causes them:
//! the claim owes each ping's `start`, the outcome each ping's `success`,
//! `failure`, `recovery` or `stopped` and the hook the verdict calls for
//! (none for a stop).

use std::ffi::OsString;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{ping, Settings, Verdict};
use crate::ledger::{EventState, NewEvent};

/// What an event's delivery needs besides its address and body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Payload {
    pub key: String,
    /// The outcome's exit code; none for `start` and `slow`.
    pub exit_code: Option<i32>,
    /// What the last attempt died of (`IDEM_CAUSE`); none for `start`
    /// and `slow`, and in an older idem's events.
    #[serde(default)]
    pub cause: Option<String>,
    /// The job's failures in a row.
    pub failures: u64,
    /// A failure at or past `--alert-after` (a ping to `URL/fail`, not
    /// `URL/log`).
    pub alert: bool,
    /// The failure paused its job (`--pause-after`): its hook runs with
    /// `IDEM_EVENT=paused`.
    #[serde(default)]
    pub paused: bool,
    /// `--alert-after`, for a monitor that counts failures itself.
    #[serde(default)]
    pub alert_after: u64,
    /// From the claim to the outcome.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// `SENTRY_ENVIRONMENT` when the event was made.
    #[serde(default)]
    pub environment: Option<String>,
    /// The job's period as a crontab, its length and its time zone.
    #[serde(default)]
    pub crontab: Option<String>,
    #[serde(default)]
    pub period_secs: Option<u64>,
    #[serde(default)]
    pub zone: Option<String>,
}

impl Payload {
    pub fn read(event: &NewEvent) -> Payload {
        serde_json::from_str(&event.payload).unwrap_or_default()
    }
}

/// What people see of an address: its flag (or the ping's place among
/// the pings) and the first 8 hex digits of its SHA-256, which tell two
/// addresses apart without giving either away.
fn target(what: &str, address: &str) -> String {
    let digest = Sha256::digest(address.as_bytes());
    let short: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{what} {short}")
}

/// Whether an event goes to a hook (else to a ping URL).
pub fn is_hook(event: &NewEvent) -> bool {
    event.target.starts_with("--on-")
}

/// The flag of a hook event's target: `--on-failure`.
pub fn hook_flag(event: &NewEvent) -> &str {
    event.target.split(' ').next().unwrap_or("--on-failure")
}

/// What one run's events share.
pub struct Origin<'a> {
    pub run_id: Uuid,
    pub job: &'a str,
    pub key: &'a str,
    /// From the claim to the outcome, for an outcome's events.
    pub duration_ms: Option<u64>,
}

impl Origin<'_> {
    fn event(&self, kind: &str, target: String, address: String, payload: &Payload) -> NewEvent {
        NewEvent {
            event_id: crate::id::new(),
            run_id: self.run_id,
            job: self.job.to_owned(),
            kind: kind.to_owned(),
            target,
            dest: crate::ledger::dest(&address),
            address,
            payload: serde_json::to_string(payload).unwrap_or_default(),
            body: Vec::new(),
        }
    }

    fn payload(&self, settings: &Settings) -> Payload {
        let schedule = settings.schedule.as_ref();
        Payload {
            key: self.key.to_owned(),
            alert_after: settings.alert_after,
            duration_ms: self.duration_ms,
            environment: std::env::var("SENTRY_ENVIRONMENT")
                .ok()
                .filter(|name| !name.is_empty()),
            crontab: schedule.map(|schedule| schedule.crontab.to_owned()),
            period_secs: schedule.map(|schedule| schedule.period_secs),
            zone: schedule.and_then(|schedule| schedule.zone.clone()),
            ..Payload::default()
        }
    }

    /// Each ping's `slow` (not kept: a warning that comes late is no
    /// warning), carrying the warning's line.
    pub fn slow(&self, settings: &Settings, line: &[u8]) -> Vec<NewEvent> {
        let mut events = self.start(settings);
        for event in &mut events {
            event.kind = "slow".to_owned();
            event.body = line.to_vec();
        }
        events
    }

    /// Each ping's `start`, owed by the claim.
    pub fn start(&self, settings: &Settings) -> Vec<NewEvent> {
        let payload = self.payload(settings);
        settings
            .ping
            .iter()
            .enumerate()
            .map(|(at, url)| {
                let target = target(&format!("ping {}", at + 1), url);
                self.event("start", target, url.clone(), &payload)
            })
            .collect()
    }

    /// The events an outcome owes: the hook its verdict calls for, then
    /// each ping, carrying the output tail. `exit`: the outcome's exit
    /// code, and what its last attempt died of. `before`: the job's
    /// failures in a row that a recovery ends.
    pub fn outcome(
        &self,
        settings: &Settings,
        verdict: Verdict,
        (exit_code, cause): (i32, Option<String>),
        before: u64,
        output: &[u8],
    ) -> Vec<NewEvent> {
        let (kind, hook, failures, alert) = match verdict {
            Verdict::Success { recovery } => (
                if recovery { "recovery" } else { "success" },
                recovery
                    .then_some(settings.on_recovery.as_ref())
                    .flatten()
                    .map(|hook| ("--on-recovery", hook)),
                before,
                false,
            ),
            Verdict::Failure { alert, failures } => (
                "failure",
                alert
                    .then_some(settings.on_failure.as_ref())
                    .flatten()
                    .map(|hook| ("--on-failure", hook)),
                failures,
                alert,
            ),
            Verdict::Paused { failures } => (
                "failure",
                settings
                    .on_failure
                    .as_ref()
                    .map(|hook| ("--on-failure", hook)),
                failures,
                true,
            ),
            Verdict::Stopped => ("stopped", None, before, false),
        };
        let payload = Payload {
            exit_code: Some(exit_code),
            cause,
            failures,
            alert,
            paused: matches!(verdict, Verdict::Paused { .. }),
            ..self.payload(settings)
        };
        let mut events = Vec::new();
        if let Some((flag, command)) = hook {
            events.push(self.hook(kind, flag, command, &payload, output));
        }
        for (at, url) in settings.ping.iter().enumerate() {
            let target = target(&format!("ping {}", at + 1), url);
            let mut event = self.event(kind, target, url.clone(), &payload);
            event.body = ping::body(output).to_vec();
            events.push(event);
        }
        events
    }

    fn hook(
        &self,
        kind: &str,
        flag: &str,
        command: &OsString,
        payload: &Payload,
        output: &[u8],
    ) -> NewEvent {
        let command = command.to_string_lossy().into_owned();
        let mut event = self.event(kind, target(flag, &command), command, payload);
        event.body = output[output.len().saturating_sub(HOOK_OUTPUT)..].to_vec();
        event
    }
}

/// The most output a hook event keeps for `IDEM_OUTPUT`: the tail a
/// person reads first, bounded so that an outbox stays small.
const HOOK_OUTPUT: usize = 64 * 1024;

/// An event as `ledger show --json` prints it (never its address).
#[derive(Debug, Serialize)]
pub struct EventJson {
    pub event_id: String,
    /// `start`, `success`, `failure`, `recovery`, `slow` or `paused`.
    pub kind: String,
    /// Where it goes, as people see it: `ping 1 3fa2c1d0`.
    pub target: String,
    pub created_at: String,
    /// Deliveries tried.
    pub attempts: u32,
    /// When it went out; null while owed, and once lost or superseded.
    pub delivered_at: Option<String>,
    /// Given up: a day old and never delivered.
    pub lost: bool,
    /// Overtaken by a newer run's outcome to the same target: never sent,
    /// and not lost (the monitor holds a newer state).
    pub superseded: bool,
    /// When it was handed to its target, while that is not settled:
    /// being sent, or (`unconfirmed`) sent by an idem that could not
    /// record how it went.
    pub sending_at: Option<String>,
    /// Sent, maybe: its sending was recorded, never its result. It is
    /// never sent again.
    pub unconfirmed: bool,
    /// The last failed delivery's words, masked.
    pub error: Option<String>,
}

impl From<&EventState> for EventJson {
    fn from(event: &EventState) -> EventJson {
        EventJson {
            event_id: event.event_id.to_string(),
            kind: event.kind.clone(),
            target: event.target.clone(),
            created_at: crate::render::json::rfc3339(event.created_at),
            attempts: event.attempts,
            delivered_at: event.delivered_at.map(crate::render::json::rfc3339),
            lost: event.lost,
            superseded: event.superseded,
            sending_at: event.sending_at.map(crate::render::json::rfc3339),
            unconfirmed: event.unconfirmed,
            error: event.error.clone(),
        }
    }
}

/// An event as `ledger show` prints it: `event success to ping 1
/// 3fa2c1d0: delivered at ... (1 try)`.
pub fn event_text(event: &EventState, zone: &jiff::tz::TimeZone) -> String {
    let tries = match event.attempts {
        1 => "1 try".to_owned(),
        n => format!("{n} tries"),
    };
    let at = |time| crate::render::local(time, zone);
    let state = match (event.delivered_at, event.sending_at) {
        (Some(time), _) => format!("delivered at {} ({tries})", at(time)),
        _ if event.superseded => {
            "superseded: a newer run's outcome reached its target first; not sent".to_owned()
        }
        (None, Some(time)) if event.unconfirmed => format!(
            "sent at {}, not confirmed (idem could not record how it went); never sent again",
            at(time)
        ),
        (None, Some(time)) => format!("being sent since {}", at(time)),
        _ if event.lost => format!("lost, never delivered ({tries})"),
        _ => format!("owed ({tries})"),
    };
    let error = match (&event.error, event.delivered_at) {
        (Some(error), None) => format!("; last: {}", crate::render::printable(error)),
        _ => String::new(),
    };
    format!("event {} to {}: {state}{error}", event.kind, event.target)
}

/// Makes a run's failure events, already written, its job's pause's: the
/// outcome that paused the job is known once recorded (only one host's
/// outcome writes the pause), so the events this run delivers itself say
/// `paused` and ping `/fail`. An event left to the outbox is delivered as
/// it was written: a failure.
pub fn pausing(owed: &mut [NewEvent]) {
    for event in owed.iter_mut().filter(|event| event.kind == "failure") {
        let mut payload = Payload::read(event);
        payload.alert = true;
        payload.paused = true;
        if let Ok(json) = serde_json::to_string(&payload) {
            event.payload = json;
        }
    }
}
