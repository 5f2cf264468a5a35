//! `ledger metrics`: the ledger's figures in the Prometheus text
//! exposition format, per job and (`--per-key`) per key.

use std::fmt::Write as _;

use jiff::Timestamp;

use std::collections::HashMap;

use crate::ledger::{JobState, KeyMetrics, Status};
use crate::render::status::{JobStatus, State};

/// A label value escaped per the exposition format: `\`, `"` and newline.
pub fn label_value(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// Unix seconds with milliseconds, as the format's float.
fn seconds(time: Timestamp) -> String {
    let ms = time.as_millisecond();
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

/// What every family says of one job or one key: the figures a job's row
/// and a key's latest run have in common.
struct Figures<'a> {
    /// The job's or the key's name, the value of its label.
    name: &'a str,
    last_success: Option<Timestamp>,
    last_run: Option<Timestamp>,
    last_status: Option<Status>,
    last_exit: Option<i32>,
    failures: u64,
    /// Runs by status, in the order of [`Status::ALL`].
    runs: [u64; 4],
}

/// A sample of a family: its `status` label, if it has one, and its value.
type Sample = (Option<Status>, String);

/// One family of gauges, for jobs (`idem_NAME{job=..}`) and for keys
/// (`idem_key_NAME{key=..}`).
struct Family {
    name: &'static str,
    job_help: &'static str,
    key_help: &'static str,
    samples: fn(&Figures) -> Vec<Sample>,
}

/// A time's one sample, when there is a time.
fn time_sample(time: Option<Timestamp>) -> Vec<Sample> {
    time.map(|time| (None, seconds(time))).into_iter().collect()
}

/// The families, in the order they are written.
const FAMILIES: [Family; 6] = [
    Family {
        name: "last_success_timestamp_seconds",
        job_help: "When the job's latest successful run finished, in Unix seconds.",
        key_help: "When the key's latest successful run finished, in Unix seconds.",
        samples: |figures| time_sample(figures.last_success),
    },
    Family {
        name: "last_run_status",
        job_help: "The status of the job's latest run: 1 for that status, 0 for the others.",
        key_help: "The status of the key's latest run: 1 for that status, 0 for the others.",
        samples: |figures| match figures.last_status {
            Some(last) => Status::ALL
                .iter()
                .map(|&status| (Some(status), u8::from(last == status).to_string()))
                .collect(),
            None => Vec::new(),
        },
    },
    Family {
        name: "last_run_timestamp_seconds",
        job_help: "When the job's latest run started, in Unix seconds.",
        key_help: "When the key's latest run started, in Unix seconds.",
        samples: |figures| time_sample(figures.last_run),
    },
    Family {
        name: "last_run_exit_code",
        job_help: "The exit code of the job's latest finished run.",
        key_help: "The exit code of the key's latest finished run.",
        samples: |figures| {
            let code = figures.last_exit;
            code.map(|code| (None, code.to_string())).into_iter().collect()
        },
    },
    Family {
        name: "consecutive_failures",
        job_help: "Failed and abandoned runs of the job in a row, across its keys, since its latest success.",
        key_help: "Failed and abandoned runs of the key since its latest success.",
        samples: |figures| vec![(None, figures.failures.to_string())],
    },
    Family {
        name: "runs",
        job_help: "Runs of the job in the ledger, by status (ledger prune lowers it).",
        key_help: "Runs of the key in the ledger, by status (ledger prune lowers it).",
        samples: |figures| {
            let counts = Status::ALL.iter().zip(figures.runs);
            counts
                .map(|(&status, count)| (Some(status), count.to_string()))
                .collect()
        },
    },
];

/// Per-job metrics for node_exporter's textfile collector: bounded by the
/// number of jobs, not of periods, so a `{date}` key adds no series.
pub fn job_metrics_text(jobs: &[JobState]) -> String {
    let figures: Vec<Figures> = jobs
        .iter()
        .map(|job| Figures {
            name: &job.job,
            last_success: job.last_success,
            last_run: job.last_run,
            last_status: job.last_status,
            last_exit: job.last_exit,
            failures: job.failures,
            runs: job.runs,
        })
        .collect();
    exposition(false, &figures)
}

/// Per-key metrics (`metrics --per-key`): a series set per key, so a
/// `{date}` key adds series every day.
pub fn metrics_text(keys: &[KeyMetrics]) -> String {
    let figures: Vec<Figures> = keys
        .iter()
        .map(|metric| Figures {
            name: &metric.key,
            last_success: metric.last_success,
            last_run: metric.last_run.as_ref().map(|run| run.started_at),
            last_status: metric.last_run.as_ref().map(|run| run.status),
            last_exit: metric.last_run.as_ref().and_then(|run| run.exit_code),
            failures: metric.consecutive_failures,
            runs: metric.runs,
        })
        .collect();
    exposition(true, &figures)
}

/// Every family, each with its help, its type and its samples, of jobs or
/// (`per_key`) of keys.
fn exposition(per_key: bool, subjects: &[Figures]) -> String {
    let (prefix, label) = if per_key {
        ("idem_key_", "key")
    } else {
        ("idem_", "job")
    };
    let mut out = String::new();
    for family in &FAMILIES {
        let name = format!("{prefix}{}", family.name);
        let help = if per_key {
            family.key_help
        } else {
            family.job_help
        };
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for figures in subjects {
            let subject = label_value(figures.name);
            for (status, value) in (family.samples)(figures) {
                let status = status.map_or(String::new(), |status| {
                    format!(",status=\"{}\"", status.as_str())
                });
                let _ = writeln!(out, "{name}{{{label}=\"{subject}\"{status}}} {value}");
            }
        }
    }
    out
}

/// The families the one judge of a job gives (see `jobs`), per job: its
/// state (1 for it, 0 for the others), the events it owes and those given
/// up (`lost`, by job). Bounded by the number of jobs, as the others are.
pub fn judged_metrics_text(statuses: &[JobStatus], lost: &HashMap<String, u64>) -> String {
    let mut out = String::new();
    let families: [(&str, &str); 3] = [
        ("idem_job_state", "The job's state as idem status judges it: 1 for that state, 0 for the others."),
        ("idem_events_owed", "The job's pings and hooks not yet delivered."),
        ("idem_events_lost", "The job's pings and hooks given up, a day old and never delivered (until ledger prune)."),
    ];
    for (name, help) in families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for job in statuses {
            let subject = label_value(&job.job);
            match name {
                "idem_job_state" => {
                    for state in State::ALL {
                        let (label, on) = (state.as_str(), u8::from(state == job.state));
                        let _ = writeln!(out, "{name}{{job=\"{subject}\",state=\"{label}\"}} {on}");
                    }
                }
                "idem_events_owed" => {
                    let _ = writeln!(out, "{name}{{job=\"{subject}\"}} {}", job.owed);
                }
                _ => {
                    let count = lost.get(&job.job).copied().unwrap_or(0);
                    let _ = writeln!(out, "{name}{{job=\"{subject}\"}} {count}");
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_label_values() {
        assert_eq!(label_value(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(label_value("x\ny"), "x\\ny");
    }
}
