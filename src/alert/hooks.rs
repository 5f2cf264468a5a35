//! `--on-failure` and `--on-recovery`: a person's command, run by
//! `/bin/sh -c` after the outcome is durable, in a process group of its own
//! so that one that hangs is killed whole at [`HOOK_LIMIT`].

use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::report::Reporter;

/// The longest a hook runs before its process group is killed: a hook
/// that hangs (a webhook that never answers) must not hold cron's slot.
pub const HOOK_LIMIT: Duration = Duration::from_secs(30);

/// How often idem looks whether a hook has exited.
const POLL: Duration = Duration::from_millis(20);

/// What a hook is told, in its environment.
pub struct Event<'a> {
    /// `IDEM_EVENT`: `failure`, `recovery` or `slow`.
    pub name: &'a str,
    pub job: &'a str,
    pub key: &'a str,
    pub run_id: &'a str,
    /// `IDEM_EXIT_CODE`; none for `slow`, whose attempt still runs.
    pub exit_code: Option<i32>,
    /// `IDEM_CAUSE`: what the last attempt died of (`exit N`, `signal N`,
    /// `timeout`, `killed for memory`, `stopped: WHY`); none for `slow`.
    pub cause: Option<&'a str>,
    /// `IDEM_FAILURES`: the job's failures in a row.
    pub failures: u64,
    /// The output tail, for `IDEM_OUTPUT`.
    pub output: &'a [u8],
}

/// Runs hook `command` (given as `flag`) for `event`, and returns how it
/// ended, for the ledger: its exit code, 128+N for signal N, `None` when it
/// could not start. Whatever the hook does, the run's outcome stands: a
/// hook that fails, hangs or cannot start is one line on stderr.
pub fn run(flag: &str, command: &OsStr, event: &Event, reporter: &Reporter) -> Option<i32> {
    let key = event.key;
    let (code, failed) = try_run(command, event);
    if let Err(what) = failed {
        reporter.notice(
            &mut std::io::stderr(),
            crate::console::Event::HookFailed,
            &format!("{key}: the {flag} hook {what}; the run's outcome stands"),
        );
    }
    code
}

fn try_run(command: &OsStr, event: &Event) -> (Option<i32>, Result<(), String>) {
    match start_and_wait(command, event) {
        Ok((code, outcome)) => (Some(code), outcome),
        Err(what) => (None, Err(what)),
    }
}

/// The hook's exit code (128+N when killed by signal N), and whether it
/// succeeded; an error when it could not be started.
fn start_and_wait(command: &OsStr, event: &Event) -> Result<(i32, Result<(), String>), String> {
    let output = output_file(event.output)
        .map_err(|error| format!("got no output file ({error}; check TMPDIR)"))?;
    let mut child = hook_command(command, event, output.path())
        .spawn()
        .map_err(|error| format!("could not start /bin/sh ({error})"))?;
    let until = Instant::now() + HOOK_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < until => std::thread::sleep(POLL),
            Ok(None) | Err(_) => {
                // Its group: whatever the hook started (a curl) goes too.
                if let Ok(pid) = i32::try_from(child.id()) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.wait();
                let killed = 128 + nix::libc::SIGKILL;
                return Ok((
                    killed,
                    Err(format!("ran past {}s and was killed", HOOK_LIMIT.as_secs())),
                ));
            }
        }
    };
    Ok(judge(status))
}

/// The output tail for `IDEM_OUTPUT`. tempfile makes it 0600 in TMPDIR:
/// the tail may hold what the command printed of a secret. It is removed
/// when the hook is done.
fn output_file(output: &[u8]) -> std::io::Result<tempfile::NamedTempFile> {
    let mut file = tempfile::Builder::new().prefix("idem-output-").tempfile()?;
    file.write_all(output)?;
    file.flush()?;
    Ok(file)
}

/// `/bin/sh -c command` in a process group of its own, told `event`.
fn hook_command(command: &OsStr, event: &Event, output: &Path) -> Command {
    // The hook's output goes to idem's stderr: stdout is the command's.
    let to_stderr = || {
        std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_or_else(|_| Stdio::null(), Stdio::from)
    };
    let mut hook = Command::new("/bin/sh");
    hook.arg("-c")
        .arg(command)
        .env("IDEM_EVENT", event.name)
        .env("IDEM_JOB", event.job)
        .env("IDEM_KEY", event.key)
        .env("IDEM_RUN_ID", event.run_id)
        .env("IDEM_FAILURES", event.failures.to_string())
        .env("IDEM_OUTPUT", output)
        .env_remove("IDEM_ATTEMPT")
        .env_remove("IDEM_MAX_ATTEMPTS")
        .env_remove("IDEM_FENCE")
        .stdin(Stdio::null())
        .stdout(to_stderr())
        .stderr(to_stderr())
        .process_group(0);
    match event.exit_code {
        Some(code) => hook.env("IDEM_EXIT_CODE", code.to_string()),
        None => hook.env_remove("IDEM_EXIT_CODE"),
    };
    match event.cause {
        Some(cause) => hook.env("IDEM_CAUSE", cause),
        None => hook.env_remove("IDEM_CAUSE"),
    };
    hook
}

/// How a hook that exited did: its code (128+N for signal N), and what
/// went wrong, if anything.
fn judge(status: std::process::ExitStatus) -> (i32, Result<(), String>) {
    match (status.code(), status.signal()) {
        (Some(0), _) => (0, Ok(())),
        (Some(127), _) => (
            127,
            Err("exited 127 (is its command installed and on PATH?)".to_owned()),
        ),
        (Some(code), _) => (code, Err(format!("exited {code}"))),
        (None, Some(signal)) => (128 + signal, Err(format!("was killed by signal {signal}"))),
        (None, None) => (-1, Err("ended without an exit code".to_owned())),
    }
}
