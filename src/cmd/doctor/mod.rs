//! `idem doctor`: checks a ledger and says what is wrong and how to fix
//! it, creating and changing nothing: a SQLite file ([`sqlite`]) or a
//! shared PostgreSQL database ([`postgres`]).

mod cycles;
mod lock_holders;
mod postgres;
mod sqlite;
mod stops;

use anyhow::Result;
use serde_json::{json, Value};

use crate::cli::DoctorArgs;
use crate::exit;
use crate::ledger::{Inspect, Location, Owner, Schema};
use crate::render;
use crate::render::doctor::{Check, Findings, Level};

/// The checks made so far, and what they learnt of the ledger.
#[derive(Default)]
struct Report {
    checks: Vec<Check>,
    facts: serde_json::Map<String, Value>,
}

impl Report {
    fn ok(&mut self, name: &'static str, message: impl Into<String>) {
        self.push(name, Level::Ok, message, None::<String>);
    }

    fn push(
        &mut self,
        name: &'static str,
        level: Level,
        message: impl Into<String>,
        fix: Option<impl Into<String>>,
    ) {
        self.checks.push(Check {
            name,
            level,
            message: message.into(),
            fix: fix.map(Into::into),
        });
    }

    fn healthy(&self) -> bool {
        self.checks
            .iter()
            .all(|check| check.level != Level::Problem)
    }
}

pub fn run(args: &DoctorArgs, location: &Location) -> Result<u8> {
    let mut report = match location {
        Location::Sqlite(path) => sqlite::examine(path),
        Location::Postgres(url) => postgres::examine(url, &location.display()),
    };
    containment(&mut report);
    let findings = Findings {
        ledger: location.display(),
        healthy: report.healthy(),
        checks: &report.checks,
        facts: &report.facts,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        render::doctor::json(&mut out, &findings)?;
    } else {
        render::doctor::text(&mut out, &findings)?;
    }
    Ok(if report.healthy() {
        exit::SUCCESS
    } else {
        exit::NOT_FOUND
    })
}

/// What this host offers to hold a run's processes together (see
/// `process::contain`): what `--contain auto` gets, a cgroup of the run's
/// own, and a PID namespace where it is chosen.
fn containment(report: &mut Report) {
    use crate::process::{resolve, Choice, Containment};
    let namespaces = crate::process::pid_namespaces();
    let cgroup = crate::process::cgroup_base();
    let auto = resolve(Choice::Auto).unwrap_or(Containment::GuardianOnly);
    report
        .facts
        .insert("containment".into(), json!(auto.name()));
    report
        .facts
        .insert("pid_namespaces".into(), json!(namespaces));
    report.facts.insert(
        "cgroup2".into(),
        json!(cgroup.as_ref().map(|(path, writable)| json!({
            "path": path.display().to_string(),
            "writable": writable,
        }))),
    );
    let namespace = match namespaces {
        true => "a PID namespace with --contain pid-namespace",
        false => "no PID namespace",
    };
    match (auto, &cgroup) {
        (Containment::Cgroup, Some((path, _))) => report.ok(
            "containment",
            format!(
                "each attempt gets a cgroup of its own under {} ({namespace})",
                path.display()
            ),
        ),
        _ => {
            let why = match &cgroup {
                Some((path, _)) => format!("cgroup2 at {} is not writable", path.display()),
                None => "no cgroup2 of this user's".to_owned(),
            };
            report.push(
                "containment",
                Level::Warn,
                format!("the guardian alone holds a run, with the IDEM_RUN_ID look: {why} ({namespace})"),
                Some("run idem as root, or in a cgroup v2 subtree delegated to this user (systemd's user@.service), for a cgroup of each run's own"),
            );
        }
    }
}

/// Reports the state of a ledger's schema as it was `read`; true when it
/// is idem's and current enough to check further. Each backend words the
/// rest: `unreadable`, what a failure to read it means and its fix, and
/// `empty`, a ledger with no schema yet.
fn schema(
    read: Result<Schema, String>,
    unreadable: (&str, String),
    report: &mut Report,
    empty: impl FnOnce(&mut Report),
) -> bool {
    let state = match read {
        Ok(state) => state,
        Err(why) => {
            let (cannot, fix) = unreadable;
            report.push(
                "schema",
                Level::Problem,
                format!("{cannot}: {why}"),
                Some(fix),
            );
            return false;
        }
    };
    let (version, latest) = match state {
        Schema::NotADatabase => {
            report.push(
                "schema",
                Level::Problem,
                "the file is not a SQLite database",
                Some("move the file aside or point --db elsewhere"),
            );
            return false;
        }
        Schema::None => {
            report.facts.insert("schema_version".into(), 0.into());
            empty(report);
            return false;
        }
        Schema::Foreign { version } => {
            report.facts.insert("schema_version".into(), version.into());
            report.push(
                "schema",
                Level::Problem,
                "not an idem ledger: another program's SQLite database",
                Some("move it aside or point --db elsewhere"),
            );
            return false;
        }
        Schema::Idem { version, latest } => (version, latest),
    };
    report.facts.insert("schema_version".into(), version.into());
    match version.cmp(&latest) {
        std::cmp::Ordering::Greater => {
            report.push(
                "schema",
                Level::Problem,
                format!("version {version}, written by a newer idem (this one knows {latest})"),
                Some("upgrade idem"),
            );
            return false;
        }
        std::cmp::Ordering::Less => report.push(
            "schema",
            Level::Warn,
            format!("version {version}, older than this idem's {latest}"),
            Some("the next `idem run` migrates it"),
        ),
        std::cmp::Ordering::Equal => report.ok("schema", format!("version {version} (current)")),
    }
    true
}

/// Reports the keys whose head is `running`, as the ledger judges their
/// owners.
fn running(ledger: &mut dyn Inspect, report: &mut Report) {
    match ledger.running() {
        Ok(rows) => running_keys(rows, report),
        Err(why) => report.push(
            "running keys",
            Level::Problem,
            format!("cannot be read: {why}"),
            None::<String>,
        ),
    }
    super::pause::doctor_line(ledger.pauses(), &mut report.checks, &mut report.facts);
    stops::pending(ledger, report);
    let owed = ledger.owed_events();
    crate::alert::doctor_outbox(owed, ledger.lost_events(), &mut |level, message, fix| {
        report.push("notifications", level, message, fix);
    });
}

/// A running key and who holds it: its run's processes that still live
/// here once its idem is gone (see `process::holders`).
fn held(key: &str, owner: &Owner) -> String {
    let holder = crate::process::holders::describe(owner);
    format!("{key} ({holder} on {})", owner.host)
}

/// Reports the keys whose head is `running`: stuck when the owner is gone
/// (the next `idem run` of such a key marks it abandoned and runs it again).
fn running_keys(rows: Vec<(String, Owner)>, report: &mut Report) {
    let (unjudged, rows): (Vec<_>, Vec<_>) = rows
        .into_iter()
        .partition(|(_, owner)| owner.alive.is_none());
    let (live, dead): (Vec<_>, Vec<_>) = rows
        .into_iter()
        .partition(|(_, owner)| owner.presumed_alive());
    if !unjudged.is_empty() {
        let keys: Vec<String> = unjudged
            .iter()
            .map(|(key, owner)| {
                let holder = crate::process::holders::describe(owner);
                let why = owner.judged.unjudged_words();
                format!("{key} ({holder} on {}: {why})", owner.host)
            })
            .collect();
        report.push(
            "running keys",
            Level::Problem,
            format!(
                "{} key(s) running under an owner idem cannot judge: {}",
                keys.len(),
                keys.join(", ")
            ),
            Some("check that nothing of the run lives, then `idem ledger forget --force KEY`"),
        );
    }
    let dead_keys: Vec<&str> = dead.iter().map(|(key, _)| key.as_str()).collect();
    report.facts.insert("stuck_keys".into(), json!(dead_keys));
    report
        .facts
        .insert("running_keys".into(), live.len().into());
    if dead.is_empty() {
        report.ok(
            "running keys",
            format!("{} running, none stuck", live.len()),
        );
        return;
    }
    let shown: Vec<String> = dead
        .iter()
        .take(5)
        .map(|(key, owner)| held(key, owner))
        .collect();
    report.push(
        "running keys",
        Level::Problem,
        format!(
            "{} key(s) stuck in running, their owner gone: {}{}",
            dead.len(),
            shown.join(", "),
            if dead.len() > 5 { ", ..." } else { "" }
        ),
        Some("the outcome is unknown; the next `idem run` of such a key marks it abandoned and runs it again with IDEM_RECOVERED=1"),
    );
}
