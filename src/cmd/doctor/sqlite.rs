//! The checks of a SQLite ledger file: its modes, its side files and free
//! space are doctor's own; the schema, its integrity and the running keys
//! are read through the ledger, opened so that nothing is created.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::json;

use super::{running, schema, Level, Report};
use crate::exit;
use crate::ledger::{self, Inspect, SqliteInspector};
use crate::render::human_bytes;

/// Less free space than this is worth a warning.
const LOW_SPACE: u64 = 64 << 20;

pub(super) fn examine(path: &Path) -> Report {
    let mut report = Report::default();
    let metadata = match fs::metadata(path) {
        Ok(metadata) if metadata.is_file() => metadata,
        Ok(_) => {
            report.push(
                "file",
                Level::Problem,
                format!("{} is not a regular file", path.display()),
                Some("point --db at a ledger file"),
            );
            return report;
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            // Judged as `run` judges it: never a promise that run refuses.
            let fix = match SqliteInspector::creation_refusal(path) {
                None => "check --db or IDEM_DB; the first `idem run` creates it".to_owned(),
                Some(refusal) => {
                    format!("check --db or IDEM_DB; `idem run` would not create it: {refusal}")
                }
            };
            report.push(
                "file",
                Level::Problem,
                format!("there is no ledger at {}", path.display()),
                Some(fix),
            );
            return report;
        }
        Err(error) => {
            report.push(
                "file",
                Level::Problem,
                format!("cannot read {}: {}", path.display(), exit::io_words(&error)),
                Some("run idem doctor as the ledger's owner"),
            );
            return report;
        }
    };
    if let Some(refusal) = SqliteInspector::refusal(path) {
        report.push(
            "file",
            Level::Problem,
            refusal,
            Some("idem run refuses this ledger until it is fixed as said"),
        );
    }
    permissions(path, &metadata, &mut report);
    side_files(path, &mut report);
    let opened = SqliteInspector::open(path);
    let moved = opened
        .as_ref()
        .map_or_else(|_| Vec::new(), |ledger| ledger.moved_lock_file());
    lock_file(path, &moved, &mut report);
    super::lock_holders::outside_runs(&ledger::side_file(path, "-lock"), &mut report);
    match opened {
        Ok(mut opened) => contents(&mut opened, &mut report),
        Err(message) => report.push(
            "open",
            Level::Problem,
            message,
            Some("check the file's owner and permissions"),
        ),
    }
    space(path, &mut report);
    report
}

fn mode_text(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// `run` refuses a ledger that is not its user's own or that others can
/// write, in a folder that others could swap it out of (see the ledger's
/// opening); doctor names the same refusals as problems, and a ledger that
/// cannot be written, where `run` can skip but never record.
fn permissions(path: &Path, metadata: &fs::Metadata, report: &mut Report) {
    file_permissions(path, metadata, report);
    folder_permissions(path, report);
    let mode = metadata.permissions().mode();
    report
        .facts
        .insert("file_mode".into(), mode_text(mode).into());
}

fn file_permissions(path: &Path, metadata: &fs::Metadata, report: &mut Report) {
    let mode = metadata.permissions().mode();
    let me = nix::unistd::geteuid().as_raw();
    if metadata.uid() != me {
        report.push(
            "file permissions",
            Level::Problem,
            format!(
                "the ledger belongs to uid {}, not to uid {me}: idem refuses to use it",
                metadata.uid()
            ),
            Some("run idem as the ledger's owner, or set --db to a ledger of your own"),
        );
    } else if mode & 0o022 != 0 {
        report.push(
            "file permissions",
            Level::Problem,
            format!(
                "the ledger is {}: other users can write it, so idem refuses to use it",
                mode_text(mode)
            ),
            Some(format!("chmod 600 {}", path.display())),
        );
    } else if !writable(path) {
        report.push(
            "file permissions",
            Level::Problem,
            format!(
                "idem cannot write the ledger ({}{}): `run` skips keys that succeeded but cannot record a run",
                mode_text(mode),
                if read_only_file_system(path) {
                    ", on a read-only file system"
                } else {
                    ""
                }
            ),
            Some(if read_only_file_system(path) {
                "mount the file system read-write, or set --db to a ledger elsewhere".to_owned()
            } else {
                format!("chmod 600 {}", path.display())
            }),
        );
    } else if mode & 0o077 == 0 {
        report.ok("file permissions", format!("{} (private)", mode_text(mode)));
    } else {
        report.push(
            "file permissions",
            Level::Warn,
            format!(
                "the ledger is {}: others can read the commands and output it holds",
                mode_text(mode)
            ),
            Some(format!("chmod 600 {}", path.display())),
        );
    }
}

/// The folder's part of what `run` refuses: others may not replace the
/// ledger in it.
fn folder_permissions(path: &Path, report: &mut Report) {
    let me = nix::unistd::geteuid().as_raw();
    let folder = ledger::folder_of(path);
    match fs::metadata(folder) {
        Ok(folder_meta) => {
            let mode = folder_meta.permissions().mode();
            let sticky = mode & 0o1000 != 0;
            if mode & 0o022 != 0 && !sticky {
                report.push(
                    "folder permissions",
                    Level::Problem,
                    format!(
                        "folder {} is {}: others can write it, and so replace or remove the ledger; idem refuses it",
                        folder.display(),
                        mode_text(mode)
                    ),
                    Some(format!(
                        "chmod 700 {}, or move the ledger to a private folder",
                        folder.display()
                    )),
                );
            } else if folder_meta.uid() != me && folder_meta.uid() != 0 {
                report.push(
                    "folder permissions",
                    Level::Problem,
                    format!(
                        "folder {} belongs to uid {}, not to uid {me}: that user can replace the ledger; idem refuses it",
                        folder.display(),
                        folder_meta.uid(),
                    ),
                    Some("keep the ledger in a folder of the user that runs idem"),
                );
            } else {
                report.ok("folder permissions", mode_text(mode));
            }
            report
                .facts
                .insert("folder_mode".into(), mode_text(mode).into());
        }
        Err(error) => report.push(
            "folder permissions",
            Level::Warn,
            format!(
                "cannot read folder {}: {}",
                folder.display(),
                exit::io_words(&error)
            ),
            None::<String>,
        ),
    }
}

/// Whether this user may write the ledger (asked of the kernel, which
/// also knows a read-only mount); opening it would change nothing either,
/// but asking is enough.
fn writable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok()
}

fn read_only_file_system(path: &Path) -> bool {
    nix::sys::statvfs::statvfs(path).is_ok_and(|stats| {
        stats
            .flags()
            .contains(nix::sys::statvfs::FsFlags::ST_RDONLY)
    })
}

/// A WAL this large means checkpoints are not keeping up (idem checkpoints
/// every 64 pages): something holds a read transaction open for long.
const LARGE_WAL: u64 = 16 << 20;

/// The -wal and -shm files are part of the ledger, kept between runs on
/// purpose (starting without them is most of a short run's cost): the -wal
/// holds every commit since the last checkpoint, so deleting it forgets
/// successes and their keys run again. A -journal means the ledger was
/// caught mid-write outside WAL mode; a large -wal that checkpoints are
/// stuck. Each is judged as `run` judges them: no link, none of another's.
fn side_files(path: &Path, report: &mut Report) {
    let wal = ledger::side_file(path, "-wal");
    let shm = ledger::side_file(path, "-shm");
    let journal = ledger::side_file(path, "-journal");
    let present: Vec<String> = [&wal, &shm, &journal]
        .iter()
        .filter(|side| fs::symlink_metadata(side).is_ok())
        .map(|side| file_name(side))
        .collect();
    report.facts.insert("side_files".into(), json!(present));
    if refused_side_file(&[&wal, &shm, &journal], report) {
        return;
    }
    wal_and_journal(&wal, &shm, &journal, report);
}

/// Reports the first side file `run` would refuse; whether there is one.
fn refused_side_file(sides: &[&PathBuf], report: &mut Report) -> bool {
    for side in sides {
        let Ok(meta) = fs::symlink_metadata(side) else {
            continue;
        };
        if let Some(wrong) = side_file_fault(&meta, false) {
            report.push(
                "side files",
                Level::Problem,
                format!("{} {wrong}", file_name(side)),
                Some("find out who put it there; idem's own is a private regular file"),
            );
            return true;
        }
    }
    false
}

/// What `run` refuses in a file beside the ledger, in words after its name;
/// of the lock file (`lock`), root may be the owner too.
fn side_file_fault(meta: &fs::Metadata, lock: bool) -> Option<String> {
    let me = nix::unistd::geteuid().as_raw();
    if meta.file_type().is_symlink() {
        Some("is a symbolic link, which idem refuses to follow".to_owned())
    } else if !meta.is_file() {
        Some("is not a regular file".to_owned())
    } else if meta.uid() != me && !(lock && meta.uid() == 0) {
        Some(format!("belongs to uid {}: idem refuses it", meta.uid()))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!(
            "is {}: others can write it; idem refuses it",
            mode_text(meta.mode())
        ))
    } else {
        None
    }
}

/// The lock file whose bytes say which runs live, judged as `run` judges
/// it, and which file it is: a claim records that, and the runs of the keys
/// `moved`, whose lock file was deleted or replaced since, are presumed
/// alive.
fn lock_file(path: &Path, moved: &[String], report: &mut Report) {
    let lock = ledger::side_file(path, "-lock");
    let name = file_name(&lock);
    if !moved.is_empty() {
        report.push(
            "lock file",
            Level::Problem,
            format!(
                "{name} was deleted or replaced while {} key(s) ran: {}; idem cannot tell whether those runs live, so their keys stay busy",
                moved.len(),
                moved.join(", ")
            ),
            Some("check that nothing of those runs lives, then `idem ledger forget --force KEY`"),
        );
    }
    let meta = match fs::symlink_metadata(&lock) {
        Ok(meta) => meta,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if moved.is_empty() {
                report.ok("lock file", format!("none yet: the first run makes {name}"));
            }
            return;
        }
        Err(error) => {
            let why = exit::io_words(&error);
            let fix = Some("run idem doctor as the ledger's owner");
            report.push(
                "lock file",
                Level::Problem,
                format!("cannot read {name}: {why}"),
                fix,
            );
            return;
        }
    };
    let device = nix::sys::stat::major(meta.dev());
    let device = format!("{device}:{}", nix::sys::stat::minor(meta.dev()));
    report.facts.insert(
        "lock_file".into(),
        json!({"uid": meta.uid(), "mode": mode_text(meta.mode()), "device": device, "inode": meta.ino()}),
    );
    match side_file_fault(&meta, true) {
        Some(wrong) => report.push(
            "lock file",
            Level::Problem,
            format!("{name} {wrong}"),
            Some("find out who put it there, then remove it: idem makes its own, private"),
        ),
        None if !moved.is_empty() => {}
        None => report.ok(
            "lock file",
            format!(
                "{name} {}, owner uid {}, inode {} on device {device}",
                mode_text(meta.mode()),
                meta.uid(),
                meta.ino()
            ),
        ),
    }
}

/// The write-ahead log and its index, kept on purpose, and what a
/// journal or a large log says.
fn wal_and_journal(wal: &Path, shm: &Path, journal: &Path, report: &mut Report) {
    let wal_bytes = fs::metadata(wal).map_or(0, |meta| meta.len());
    let in_wal: Vec<String> = [wal, shm]
        .iter()
        .filter(|side| side.exists())
        .map(|side| file_name(side))
        .collect();
    if !in_wal.is_empty() {
        let user = match shm_holder(shm) {
            Some(pid) => format!("in use by process {pid}"),
            None => "kept between runs in WAL mode".to_owned(),
        };
        report.ok(
            "side files",
            format!(
                "{} ({user}) are part of the ledger: never delete them, or the runs recorded since the last checkpoint are lost",
                in_wal.join(", ")
            ),
        );
    }
    if journal.exists() {
        report.push(
            "leftover files",
            Level::Warn,
            format!(
                "{} is a rollback journal left by an interrupted write",
                file_name(journal)
            ),
            Some("the next idem command rolls it back; do not delete it"),
        );
    } else if wal_bytes > LARGE_WAL {
        report.push(
            "leftover files",
            Level::Warn,
            format!(
                "{} holds {} MiB: checkpoints are not keeping up",
                file_name(wal),
                wal_bytes >> 20
            ),
            Some("look for a process holding the ledger open (fuser LEDGER), then run any idem command"),
        );
    } else {
        report.ok("leftover files", "none");
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// The pid of a process that has the ledger open: every SQLite connection
/// in WAL mode holds a shared lock on the "DMS" byte (128) of the -shm file.
/// Asking (F_GETLK) changes nothing.
fn shm_holder(shm: &Path) -> Option<i32> {
    use nix::fcntl::{fcntl, FcntlArg};
    use nix::libc;
    let file = fs::File::open(shm).ok()?;
    let mut lock = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 128,
        l_len: 1,
        l_pid: 0,
    };
    fcntl(&file, FcntlArg::F_GETLK(&mut lock)).ok()?;
    (lock.l_type != libc::F_UNLCK as libc::c_short).then_some(lock.l_pid)
}

fn contents(ledger: &mut SqliteInspector, report: &mut Report) {
    let unreadable = (
        "cannot read the schema",
        "move the file aside or point --db elsewhere".to_owned(),
    );
    let empty = |report: &mut Report| {
        report.push(
            "schema",
            Level::Warn,
            "the file is empty; the next `idem run` makes it a ledger",
            None::<String>,
        );
    };
    if !schema(ledger.schema(), unreadable, report, empty) {
        return;
    }
    integrity(ledger, report);
    running(ledger, report);
    super::cycles::check(ledger, report);
}

fn integrity(ledger: &mut SqliteInspector, report: &mut Report) {
    match ledger.integrity() {
        Ok(lines) if lines == ["ok"] => report.ok("integrity", "ok"),
        Ok(rows) => {
            // A row may hold several lines, under a "*** in database ***" title.
            let lines: Vec<&str> = rows
                .iter()
                .flat_map(|row| row.lines())
                .filter(|line| !line.starts_with("***"))
                .collect();
            let shown: Vec<&str> = lines.iter().take(3).copied().collect();
            report.push(
                "integrity",
                Level::Problem,
                format!(
                    "{} error(s), e.g. {}",
                    lines.len(),
                    shown.join("; ").to_lowercase()
                ),
                Some("save what is readable (`sqlite3 LEDGER .recover`), then move the file aside"),
            );
        }
        Err(why) => report.push(
            "integrity",
            Level::Problem,
            format!("cannot be checked: {why}"),
            Some("save what is readable (`sqlite3 LEDGER .recover`), then move the file aside"),
        ),
    }
}

fn space(path: &Path, report: &mut Report) {
    let folder: PathBuf = ledger::folder_of(path).to_owned();
    let Some(free) = ledger::free_bytes(path) else {
        report.push(
            "free space",
            Level::Warn,
            format!("cannot be measured on {}", folder.display()),
            None::<String>,
        );
        return;
    };
    report.facts.insert("free_bytes".into(), free.into());
    let words = format!("{} free", human_bytes(free));
    let fix = format!("free some space on the file system of {}", folder.display());
    if ledger::disk_full(path) {
        report.push(
            "free space",
            Level::Problem,
            format!("{words}: the disk is full and idem cannot record runs"),
            Some(fix),
        );
    } else if free < LOW_SPACE {
        report.push(
            "free space",
            Level::Warn,
            format!("only {words}"),
            Some(fix),
        );
    } else {
        report.ok("free space", words);
    }
}
