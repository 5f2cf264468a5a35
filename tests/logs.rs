//! idem's own lines as structured logs: `--log-format json` writes one
//! JSON object a line for every kind of line idem says, and under systemd
//! (`JOURNAL_STREAM` naming stderr) the lines go to the journal with their
//! fields, over the journal's native protocol, to a socket of the test's
//! own. The command's own output is passed through untouched either way.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::util::{text, wait_for_file, Env};

/// Every line of idem's stderr that is not the command's, parsed; the
/// command's lines are returned apart, as written.
fn split(stderr: &str) -> (Vec<Value>, Vec<String>) {
    let (mut idem, mut command) = (Vec::new(), Vec::new());
    for line in stderr.lines() {
        match serde_json::from_str::<Value>(line) {
            Ok(object) if object.get("event").is_some() => idem.push(object),
            _ => command.push(line.to_owned()),
        }
    }
    (idem, command)
}

/// The fields every JSON line has, checked; the line's `event`.
fn checked(line: &Value) -> &str {
    let time = line["time"].as_str().expect("a time");
    assert!(
        time.ends_with('Z') && time.parse::<jiff::Timestamp>().is_ok(),
        "RFC 3339 in UTC: {line}"
    );
    assert!(
        line["level"].is_string() && line["message"].is_string(),
        "{line}"
    );
    line["event"].as_str().expect("an event")
}

#[test]
fn a_retry_and_a_failure_are_json_lines_with_the_run_s_fields() {
    let env = Env::new();
    let ran = env
        .cmd([
            "run",
            "--key",
            "nightly:1",
            "--job",
            "nightly",
            "--log-format",
            "json",
            "--retries",
            "1",
            "--backoff",
            "10ms",
            "--shell",
            "--",
            "echo out; echo '{\"from\": \"the command\"}' >&2; exit 3",
        ])
        .expect_code(3);
    let (idem, command) = split(&ran.stderr());
    assert_eq!(ran.stdout(), "out\nout\n", "stdout untouched");
    assert_eq!(
        command,
        vec!["{\"from\": \"the command\"}"; 2],
        "{}",
        ran.stderr()
    );
    let events: Vec<&str> = idem.iter().map(checked).collect();
    assert_eq!(events, ["retry", "failed"], "{}", ran.stderr());
    let run_id = env.show_json("nightly:1")["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    for (line, attempt) in idem.iter().zip([1, 2]) {
        assert_eq!(line["key"], "nightly:1");
        assert_eq!(line["job"], "nightly");
        assert_eq!(line["run_id"], run_id.as_str());
        assert_eq!(line["attempt"], attempt);
        assert_eq!(line["exit_code"], 3);
        assert_eq!(line["cause"], "exit 3");
    }
    assert_eq!(idem[0]["level"], "warning");
    assert_eq!(idem[1]["level"], "error");
    assert!(
        idem[1]["message"]
            .as_str()
            .unwrap()
            .starts_with("nightly:1 failed: attempt 2/2 exited 3"),
        "the text line as it is said in text: {}",
        idem[1]
    );
}

#[test]
fn a_skip_with_verbose_and_an_error_are_json_lines() {
    let env = Env::new();
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    let skip = env
        .cmd([
            "-v",
            "run",
            "--key",
            "k",
            "--log-format",
            "json",
            "--",
            "true",
        ])
        .succeeds();
    let (idem, command) = split(&skip.stderr());
    assert!(command.is_empty(), "{}", skip.stderr());
    assert_eq!(idem.len(), 1, "{}", skip.stderr());
    assert_eq!(checked(&idem[0]), "skipped");
    assert_eq!(
        (&idem[0]["key"], &idem[0]["level"]),
        (&"k".into(), &"info".into())
    );
    // The env twin; an error that stops idem is a line of its own kind.
    let bad = env
        .cmd(["ledger", "show", "no-such-key"])
        .env("IDEM_LOG_FORMAT", "json")
        .run();
    let (idem, _) = split(&bad.stderr());
    assert_eq!(idem.len(), 1, "{}", bad.stderr());
    assert_eq!(checked(&idem[0]), "error");
    // Text stays as it was.
    env.cmd(["-v", "run", "--key", "k", "--", "true"])
        .succeeds()
        .stderr_starts_with("idem: skipped k: succeeded at ");
}

#[test]
fn a_conflict_is_a_json_line() {
    let env = Env::new();
    let started = env.path("started");
    let script = format!("touch '{}'; exec sleep 30", started.display());
    let mut owner = env
        .idem(["run", "--key", "c", "--shell", "--", &script])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut owner);
    let ran = env
        .cmd(["run", "--key", "c", "--log-format", "json", "--", "true"])
        .expect_code(75);
    kill(Pid::from_raw(owner.id() as i32), Signal::SIGTERM).unwrap();
    owner.wait().unwrap();
    let (idem, _) = split(&ran.stderr());
    assert_eq!(idem.len(), 1, "{}", ran.stderr());
    assert_eq!(checked(&idem[0]), "conflict");
    assert_eq!(idem[0]["key"], "c");
    assert!(idem[0]["message"].as_str().unwrap().contains("--wait"));
}

/// A socket of the test's own that speaks the journal's native protocol:
/// each datagram read back as its fields.
struct Journal {
    socket: UnixDatagram,
    path: std::path::PathBuf,
}

impl Journal {
    fn new(env: &Env) -> Journal {
        let path = env.path("journal.socket");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket.set_nonblocking(true).unwrap();
        Journal { socket, path }
    }

    /// The entries sent so far (idem has exited: all of them).
    fn entries(&self) -> Vec<HashMap<String, String>> {
        let mut entries = Vec::new();
        let mut buffer = vec![0u8; 65536];
        while let Ok(length) = self.socket.recv(&mut buffer) {
            entries.push(fields(&buffer[..length]));
        }
        entries
    }
}

/// The native protocol read back: `NAME=value\n`, or `NAME\n`, a 64-bit
/// little-endian length, the value and `\n`.
fn fields(mut datagram: &[u8]) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    while !datagram.is_empty() {
        let end = datagram.iter().position(|&b| b == b'\n').unwrap();
        let line = &datagram[..end];
        if let Some(equals) = line.iter().position(|&b| b == b'=') {
            fields.insert(text(&line[..equals]), text(&line[equals + 1..]));
            datagram = &datagram[end + 1..];
        } else {
            let rest = &datagram[end + 1..];
            let length = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
            fields.insert(text(line), text(&rest[8..8 + length]));
            assert_eq!(rest[8 + length], b'\n');
            datagram = &rest[9 + length..];
        }
    }
    fields
}

#[test]
fn under_systemd_lines_go_to_the_journal_with_their_fields() {
    let env = Env::new();
    let journal = Journal::new(&env);
    let log = env.path("stderr");
    let file = std::fs::File::create(&log).unwrap();
    let meta = file.metadata().unwrap();
    let stream = format!("{}:{}", meta.dev(), meta.ino());
    let ran = env
        .idem([
            "run",
            "--key",
            "backup:1",
            "--job",
            "backup",
            "--retries",
            "1",
            "--backoff",
            "10ms",
            "--shell",
            "--",
            "echo said >&2; exit 4",
        ])
        .env("JOURNAL_STREAM", &stream)
        .env("IDEM_JOURNAL_SOCKET", &journal.path)
        .stderr(file)
        .output()
        .unwrap();
    assert_eq!(ran.status.code(), Some(4));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "said\nsaid\n",
        "only the command's"
    );
    let entries = journal.entries();
    let run_id = env.show_json("backup:1")["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events: Vec<&str> = entries.iter().map(|e| e["IDEM_EVENT"].as_str()).collect();
    assert_eq!(events, ["retry", "failed"]);
    for (entry, priority) in entries.iter().zip(["4", "3"]) {
        assert_eq!(entry["SYSLOG_IDENTIFIER"], "idem");
        assert_eq!(entry["PRIORITY"], priority);
        assert_eq!(entry["IDEM_KEY"], "backup:1");
        assert_eq!(entry["IDEM_JOB"], "backup");
        assert_eq!(entry["IDEM_RUN_ID"], run_id);
        assert!(entry["MESSAGE"].starts_with("backup:1"), "{entry:?}");
    }
    assert!(entries[1]["MESSAGE"].starts_with("backup:1 failed: attempt 2/2 exited 4"));
}

#[test]
fn without_the_journal_s_socket_lines_stay_on_stderr() {
    let env = Env::new();
    let log = env.path("stderr");
    let file = std::fs::File::create(&log).unwrap();
    let meta = file.metadata().unwrap();
    let ran = env
        .idem(["run", "--key", "k", "--retries", "0", "--", "false"])
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .env("IDEM_JOURNAL_SOCKET", env.path("no-such.socket"))
        .stderr(file)
        .output()
        .unwrap();
    assert_eq!(ran.status.code(), Some(1));
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.starts_with("idem: k failed: attempt 1/1 exited 1"),
        "{said}"
    );
}

#[test]
fn a_journal_stream_of_another_file_is_not_stderr() {
    let env = Env::new();
    let journal = Journal::new(&env);
    // A service's stderr passed on to a file: the variable names the
    // journal's stream, which stderr no longer is.
    let other = std::fs::File::create(env.path("other"))
        .unwrap()
        .metadata()
        .unwrap();
    env.cmd(["run", "--key", "k", "--retries", "0", "--", "false"])
        .env("JOURNAL_STREAM", format!("{}:{}", other.dev(), other.ino()))
        .env("IDEM_JOURNAL_SOCKET", &journal.path)
        .expect_code(1)
        .stderr_starts_with("idem: k failed");
    assert!(journal.entries().is_empty());
}
