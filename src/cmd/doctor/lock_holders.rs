//! Who holds bytes of the lock file without being idem or a process of a
//! run: a descriptor of it handed on (over a Unix socket, to a daemon the
//! command talked to) keeps its keys busy after their runs ended, and the
//! run's own idem waits for it.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::json;

use super::{Level, Report};
use crate::process::holders::{names, Living};

/// Reports the processes holding bytes of the lock file at `lock` that
/// are neither idem (nor its guardian) nor started by a run (no
/// `IDEM_RUN_ID`); nothing when there are none, or no lock file.
pub(super) fn outside_runs(lock: &Path, report: &mut Report) {
    let Ok(meta) = std::fs::symlink_metadata(lock) else {
        return;
    };
    let outside: Vec<Living> = crate::process::lockers::lockers(meta.dev(), meta.ino(), None)
        .into_iter()
        .filter(|each| !is_idem(each) && crate::process::run_of(each.pid).is_none())
        .collect();
    if outside.is_empty() {
        return;
    }
    let pids: Vec<i32> = outside.iter().map(|each| each.pid).collect();
    report
        .facts
        .insert("lock_holders_outside_runs".into(), json!(pids));
    report.push(
        "lock holders",
        Level::Warn,
        format!(
            "{} hold(s) bytes of the lock file but is no idem and no process of a run (a descriptor of the lock file was handed on): the keys held stay busy, and their idem waits",
            names(&outside)
        ),
        Some("end that process, or have it close its descriptor of the lock file"),
    );
}

/// idem itself, or a run's guardian (a fork of idem): by the name of its
/// executable.
fn is_idem(process: &Living) -> bool {
    process.name.starts_with("idem")
        || std::fs::read_link(format!("/proc/{}/exe", process.pid)).is_ok_and(|exe| {
            exe.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("idem"))
        })
}
