//! Hardening, each case tried as a careless operator and as a hostile local
//! user would: links and foreign files at the ledger's path, histories far
//! larger than what is printed, control characters in what was recorded,
//! clocks that lie, and idem's own lines under concurrency.
//!
//! Several cases need root (to hand a file to another user, to make a
//! device node, to run idem as `nobody`). Without it they fail, naming what
//! is missing.

mod bytes;
mod clocks;
mod files;
mod lines;
mod memory;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::{assert_code, text, Env, Idem};

/// A user id no account on a test machine has: files are handed to it.
const STRANGER: u32 = 4242;

fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), None).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn with_db(env: &Env, db: &Path, args: &[&str]) -> Idem {
    env.cmd(args).db(db)
}

/// Runs `idem` and checks that it refused with exit 125 in one line
/// holding each of `words`; returns that line.
#[track_caller]
fn refused(idem: Idem, words: &[&str]) -> String {
    let mut ran = idem.expect_code(125).stderr_one_line();
    for word in words {
        ran = ran.stderr_has(word);
    }
    ran.stderr()
}

/// [`refused`], of an idem run outside the builder (by another user, or
/// under a time limit).
#[track_caller]
fn refused_output(output: &Output, words: &[&str]) -> String {
    assert_code(output, 125);
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    for word in words {
        assert!(stderr.contains(word), "{word:?} missing from: {stderr}");
    }
    stderr
}

/// Runs `command` to its end, killing it after `limit` (a hang fails).
fn within(mut command: Command, limit: Duration) -> Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let started = Instant::now();
    let (done, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match waited.recv_timeout(limit) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("idem hung for {:?}", started.elapsed());
        }
    }
}
