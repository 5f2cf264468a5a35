//! Faults and bad input, each provoked for real, one file per concern: a
//! full disk, a read-only file system, foreign ledgers, a locked ledger,
//! bad arguments, bytes that are not text, floods of output, power loss,
//! privacy, `idem doctor`, the parsers, the world moving under a ledger,
//! a ledger moved by export and import keeping its fences, and readers of
//! another user's ledger.
//!
//! Mounting needs root; where it fails the test says so and does not run,
//! and under CI (`CI` set) it fails.

mod args;
mod bytes;
mod disk;
mod doctor;
mod fences;
mod floods;
mod foreign;
mod locking;
mod moved;
mod parsers;
mod power_loss;
mod read_only;
mod readers;
mod security;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use crate::util::{assert_code, listing, require, sqlite, text, Env};

/// A tmpfs mounted for one test, unmounted when dropped.
struct Mount {
    dir: PathBuf,
}

impl Mount {
    /// Mounts a tmpfs of `size` at `dir`, or says why not and returns None.
    fn tmpfs(dir: &Path, size: &str) -> Option<Mount> {
        fs::create_dir_all(dir).unwrap();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755")])
            .arg("tmpfs")
            .arg(dir)
            .output();
        match output {
            Ok(output) if output.status.success() => Some(Mount {
                dir: dir.to_owned(),
            }),
            Ok(output) => {
                let why = format!(
                    "a tmpfs mount (root; mount said: {})",
                    text(&output.stderr).trim()
                );
                require(false, &why);
                None
            }
            Err(error) => {
                require(false, &format!("mount ({error})"));
                None
            }
        }
    }

    fn remount(&self, options: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(status.success(), "remount {options} failed");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Writes zeros into `file` until the file system is full.
fn fill(file: &Path) {
    let mut out = fs::File::create(file).unwrap();
    let chunk = vec![0u8; 16 << 10];
    while out.write_all(&chunk).is_ok() {}
    let _ = out.flush();
    let _ = out.sync_all();
}

fn run_with_db(env: &Env, db: &Path, args: &[&str]) -> Output {
    env.idem(args).env("IDEM_DB", db).output().unwrap()
}

fn list_keys(env: &Env, db: &Path) -> serde_json::Value {
    let output = run_with_db(env, db, &["ledger", "list", "--json"]);
    assert_code(&output, 0);
    serde_json::from_slice(&output.stdout).unwrap()
}

fn status_of(runs: &serde_json::Value, key: &str) -> Option<String> {
    runs.as_array()
        .unwrap()
        .iter()
        .find(|run| run["key"] == key)
        .map(|run| run["status"].as_str().unwrap().to_owned())
}

/// Runs `sql` in a sqlite3 process and kills it before it closes the
/// ledger, leaving its -wal and -shm behind.
fn crash_writer(db: &Path, sql: &str) {
    let mut child = Command::new("sqlite3")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{sql}\nSELECT 'done';").unwrap();
    stdin.flush().unwrap();
    wait_for_line(&mut child);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Reads the child's stdout until its first line.
fn wait_for_line(child: &mut Child) {
    use std::io::Read;
    let stdout = child.stdout.as_mut().unwrap();
    let mut byte = [0u8; 1];
    while stdout.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {}
}
