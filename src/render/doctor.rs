//! `idem doctor` for people (a line a check) and for scripts (JSON): its
//! checks and what they learnt of the ledger.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

/// How a check stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Problem,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Problem => "problem",
        }
    }
}

/// One finding: what was checked, how it stands, and what to do; as
/// `doctor --json` prints it.
#[derive(Serialize)]
pub struct Check {
    /// What was checked (`schema`, `running keys`...).
    #[serde(rename = "check")]
    pub name: &'static str,
    /// `ok`, `warn` or `problem`.
    #[serde(rename = "status")]
    pub level: Level,
    /// How it stands, in words.
    pub message: String,
    /// What to do about it; null when nothing is to be done.
    pub fix: Option<String>,
}

/// What doctor found of a ledger; as `doctor --json` prints it.
#[derive(Serialize)]
pub struct Findings<'a> {
    /// The ledger checked, as `ledger path` prints it.
    pub ledger: String,
    /// No check found a problem.
    pub healthy: bool,
    /// Every check, in the order it was made.
    pub checks: &'a [Check],
    /// What the checks learnt of the ledger on the way (`schema_version`,
    /// `stuck_keys`, `role`...), each as its own field.
    #[serde(flatten)]
    pub facts: &'a serde_json::Map<String, Value>,
}

/// `doctor --json`.
pub fn json(out: &mut dyn Write, findings: &Findings) -> Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(findings)?)?;
    Ok(())
}

/// `doctor` for people: the ledger, a line a check, then the verdict.
pub fn text(out: &mut dyn Write, findings: &Findings) -> Result<()> {
    writeln!(out, "ledger {}", findings.ledger)?;
    for check in findings.checks {
        let fix = check
            .fix
            .as_ref()
            .map_or(String::new(), |fix| format!("; {fix}"));
        writeln!(
            out,
            "  {:<8} {}: {}{fix}",
            check.level.as_str(),
            check.name,
            check.message
        )?;
    }
    let problems = findings
        .checks
        .iter()
        .filter(|check| check.level == Level::Problem)
        .count();
    match problems {
        0 => writeln!(out, "healthy")?,
        1 => writeln!(out, "1 problem")?,
        n => writeln!(out, "{n} problems")?,
    }
    Ok(())
}
