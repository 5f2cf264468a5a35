//! idem's own words: skip lines under CI, usage errors that help, tables
//! that fit the width, and the man pages' extra sections (completions are
//! in `completions.rs`, which shares [`have`] and [`in_pty`]).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::util::{strip_ansi, text, wait_for_file, Env};

/// Whether a tool is on PATH; a missing one fails the test.
pub(crate) fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    crate::util::require(found, tool)
}

/// Runs `argv` in a fresh pseudo-terminal of `columns` columns, typing
/// each of `keys` after `pause`; returns everything the terminal showed.
pub(crate) fn in_pty(
    argv: &[&str],
    env: &[(&str, &str)],
    keys: &[&str],
    pause: Duration,
) -> String {
    const SCRIPT: &str = r#"
import json, os, pty, select, sys, time, fcntl, termios, struct
spec = json.load(sys.stdin)
pid, fd = pty.fork()
if pid == 0:
    os.environ.update(spec["env"])
    os.execvp(spec["argv"][0], spec["argv"])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
out = b""
def drain(seconds):
    global out
    end = time.time() + seconds
    while time.time() < end:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return False
            if not data:
                return False
            out += data
    return True
alive = drain(spec["pause"])
for key in spec["keys"]:
    if not alive:
        break
    os.write(fd, key.encode())
    alive = drain(spec["pause"])
if alive:
    drain(spec["pause"])
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
os.waitpid(pid, 0)
sys.stdout.buffer.write(out)
"#;
    let spec = serde_json::json!({
        "argv": argv,
        "env": env.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        "keys": keys,
        "pause": pause.as_secs_f64(),
    });
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(spec.to_string().as_bytes())
        .unwrap();
    text(&child.wait_with_output().unwrap().stdout)
}

// ---- 1. skip lines under CI -------------------------------------------------

#[test]
fn a_skip_is_told_when_ci_is_set() {
    let env = Env::new();
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    let cron = env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    assert_eq!(cron.stderr(), "", "silent under cron");
    let ci = env
        .cmd(["run", "--key", "k", "--", "true"])
        .env("CI", "true")
        .succeeds()
        .stderr_starts_with("idem: skipped k: succeeded at ")
        .stderr_one_line();
    assert!(
        ci.stderr().trim_end().ends_with("--force runs it again"),
        "{}",
        ci.stderr()
    );
    let quiet = env
        .cmd(["-q", "run", "--key", "k", "--", "true"])
        .env("CI", "true")
        .run();
    assert_eq!(quiet.stderr(), "", "-q wins over CI");
    // A job turns CI off as CI services document it: empty, 0 or false.
    for off in ["", "0", "false", "FALSE"] {
        let skipped = env
            .cmd(["run", "--key", "k", "--", "true"])
            .env("CI", off)
            .expect_code(0);
        assert_eq!(skipped.stderr(), "", "CI={off:?} is not CI");
    }
}

#[test]
fn a_conflict_made_a_skip_is_told_under_ci_and_names_the_holder() {
    let env = Env::new();
    let pgid_file = env.path("pgid");
    let script = format!(
        // The guardian's pid as `/proc` names it (`$PPID` is the
        // namespace's, in a run's PID namespace).
        "read -r _ _ _ ppid _ < /proc/self/stat; echo $ppid > '{}.tmp'; mv '{0}.tmp' '{0}'; sleep 5",
        pgid_file.display()
    );
    let mut holder = env
        .idem(["run", "--key", "busy", "--shell", "--", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&pgid_file, Duration::from_secs(10), &mut holder);
    let pgid = std::fs::read_to_string(&pgid_file).unwrap();
    let pgid = pgid.trim();
    env.cmd([
        "run",
        "--key",
        "busy",
        "--conflict-exit-code",
        "0",
        "--",
        "true",
    ])
    .succeeds()
    .stderr_is("");
    let stderr = env
        .cmd([
            "run",
            "--key",
            "busy",
            "--conflict-exit-code",
            "0",
            "--",
            "true",
        ])
        .env("CI", "1")
        .succeeds()
        .stderr_has("busy is running elsewhere")
        .stderr();
    // The process group of the run's guardian (the command's parent, which
    // holds every process of the run), not idem's pid, holds the key.
    assert!(
        stderr.contains(&format!("process group {pgid}")),
        "{stderr} (pgid {pgid}, idem {})",
        holder.id()
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    holder.wait().unwrap();
}

#[test]
fn recovering_an_abandoned_run_is_told_with_verbose() {
    use std::os::unix::process::CommandExt;
    let env = Env::new();
    let started = env.path("started");
    let script = format!("echo x > '{}'; exec sleep 30", started.display());
    let mut first = env
        .idem(["run", "--key", "a", "--shell", "--", &script])
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut first);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    first.wait().unwrap();
    env.cmd(["-v", "run", "--key", "a", "--wait", "10s", "--", "true"])
        .succeeds()
        .stderr_has("idem: a: the last run was abandoned")
        .stderr_has("IDEM_RECOVERED=1");
}

// ---- 2. usage errors that help ---------------------------------------------

/// The one line of a usage error (exit 2).
fn usage_line(env: &Env, args: &[&str]) -> String {
    let stderr = env
        .cmd(args)
        .expect_code(2)
        .stderr_one_line()
        .stderr_starts_with("idem: ")
        .stderr();
    let first = stderr.trim_start_matches("idem: ").chars().next().unwrap();
    assert!(!first.is_uppercase(), "lowercase: {stderr}");
    stderr
}

#[test]
fn a_missing_double_dash_is_named_with_the_corrected_line() {
    let env = Env::new();
    let line = usage_line(&env, &["run", "--key", "k", "echo", "hi"]);
    assert!(line.contains("put -- before the command"), "{line}");
    assert!(line.contains("idem run --key k -- echo hi"), "{line}");
    assert!(line.contains("idem run --help"), "{line}");
    assert!(!line.contains("(see idem --help)"), "{line}");
}

#[test]
fn suggestions_match_what_was_meant() {
    let env = Env::new();
    let line = usage_line(&env, &["run", "--key", "k", "--retry", "3", "--", "true"]);
    assert!(line.contains("--retries"), "{line}");
    assert!(!line.contains("--retry-on"), "{line}");
    assert!(line.contains("idem run --help"), "{line}");
    let line = usage_line(&env, &["ledger", "list", "--limt", "3"]);
    assert!(line.contains("--limit"), "{line}");
    assert!(line.contains("idem ledger list --help"), "{line}");
    let line = usage_line(
        &env,
        &["run", "--key", "k", "--timeout", "soon", "--", "true"],
    );
    assert!(line.contains("idem run --help"), "{line}");
}

#[test]
fn a_bad_idem_progress_is_a_warning_not_a_failed_job() {
    let env = Env::new();
    env.cmd(["run", "--key", "k", "--", "echo", "ran"])
        .env("IDEM_PROGRESS", "sometimes")
        .succeeds()
        .stdout_is("ran\n")
        .stderr_starts_with("idem: warning: ")
        .stderr_has("IDEM_PROGRESS")
        .stderr_has("auto")
        .stderr_has("never")
        .stderr_one_line();
    env.cmd(["run", "--help"])
        .succeeds()
        .stdout_has("IDEM_PROGRESS")
        .stdout_has("--progress");
}

// ---- 4. tables that fit ----------------------------------------------------

fn table_env() -> Env {
    let env = Env::new();
    let long = "echo a-long-command-line-that-would-never-fit-in-a-narrow-terminal-at-all";
    for key in ["nightly-backup-2026-12-01", "k"] {
        env.cmd(["run", "--key", key, "--shell", "--", long])
            .succeeds();
    }
    env
}

#[test]
fn the_list_table_fits_the_width_and_never_splits_a_header() {
    let env = table_env();
    for columns in [40usize, 60, 100, 200] {
        let output = env
            .cmd(["ledger", "list", "--color", "always"])
            .env("COLUMNS", columns.to_string())
            .succeeds();
        let table = strip_ansi(&output.stdout());
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines.len(),
            3,
            "a header and two rows at {columns}:\n{table}"
        );
        for line in &lines {
            assert!(
                line.chars().count() <= columns,
                "{} > {columns}:\n{table}",
                line.chars().count()
            );
        }
        let header: Vec<&str> = lines[0].split_whitespace().collect();
        for word in &header {
            assert!(
                ["KEY", "STATUS", "EXIT", "ATTEMPTS", "STARTED", "DURATION", "HOST", "COMMAND"]
                    .contains(word),
                "a split header {word:?} at {columns}:\n{table}"
            );
        }
        assert!(header.contains(&"KEY") && header.contains(&"STATUS"));
        if columns >= 100 {
            assert_eq!(header.len(), 8, "every column at {columns}:\n{table}");
            // The command shrinks first: the key is whole.
            assert!(lines[2].contains("nightly-backup-2026-12-01"), "{table}");
        }
        if columns == 200 {
            assert!(table.contains("narrow-terminal-at-all"), "{table}");
        }
    }
}

#[test]
fn colour_follows_color_term_and_no_color() {
    let env = table_env();
    let list = |args: &[&str], vars: &[(&str, &str)]| {
        vars.iter()
            .fold(env.cmd(args), |idem, (name, value)| idem.env(name, value))
            .succeeds()
            .stdout()
    };
    assert!(list(&["ledger", "list", "--color", "always"], &[]).contains('\x1b'));
    assert!(list(&["--color", "always", "ledger", "list"], &[]).contains('\x1b'));
    assert!(!list(&["ledger", "list", "--color", "never"], &[]).contains('\x1b'));
    assert!(
        !list(&["ledger", "list"], &[]).contains('\x1b'),
        "not a terminal"
    );
    env.cmd(["ledger", "list", "--color", "sometimes"])
        .expect_code(2);
    if !have("python3") {
        return;
    }
    let idem = env!("CARGO_BIN_EXE_idem");
    let db = env.db();
    let db = db.to_str().unwrap();
    let at_terminal = |term: &str, no_color: &str| {
        let mut vars = vec![("IDEM_DB", db), ("TERM", term), ("TZ", "UTC")];
        if !no_color.is_empty() {
            vars.push(("NO_COLOR", no_color));
        }
        in_pty(
            &[idem, "ledger", "list"],
            &vars,
            &[],
            Duration::from_millis(500),
        )
    };
    assert!(
        at_terminal("xterm", "").contains("\x1b["),
        "colour at a terminal"
    );
    assert!(
        !at_terminal("dumb", "").contains("\x1b["),
        "none for TERM=dumb"
    );
    assert!(
        !at_terminal("xterm", "1").contains("\x1b["),
        "none with NO_COLOR"
    );
}

// ---- 5. small things ---------------------------------------------------------

#[test]
fn an_unreachable_postgres_names_the_host_port_or_socket_tried() {
    let env = Env::new();
    env.cmd(["--db", "postgres:///x", "ledger", "list"])
        .env("PGHOST", "/nonexistent/pg")
        .env_remove("PGPORT")
        .expect_code(125)
        .stderr_has("/nonexistent/pg/.s.PGSQL.5432");
    env.cmd(["--db", "postgres:///x", "ledger", "list"])
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", "1")
        .expect_code(125)
        .stderr_has("127.0.0.1 port 1");
}

#[test]
fn the_wait_spinner_is_cleared_when_the_wait_ends() {
    if !have("python3") {
        return;
    }
    let env = Env::new();
    let started = env.path("started");
    let script = format!("echo x > '{}'; sleep 1.5", started.display());
    let mut holder = env
        .idem(["run", "--key", "w", "--shell", "--", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut holder);
    let idem = env!("CARGO_BIN_EXE_idem");
    let db = env.db();
    let shown = in_pty(
        &[
            idem, "run", "--key", "w", "--wait", "10s", "--shell", "--", &script,
        ],
        &[("IDEM_DB", db.to_str().unwrap()), ("TERM", "xterm")],
        &[],
        Duration::from_secs(3),
    );
    holder.wait().unwrap();
    let last = shown.rfind("waiting for w").expect("the spinner showed");
    // One line that fits the terminal (no cursor moves between lines),
    // erased after its last frame, before idem's next line.
    assert!(!shown.contains("\x1b[1B"), "the spinner wrapped: {shown:?}");
    let after = &shown[last..];
    let skipped = after.find("idem: skipped w").expect("the skip line");
    assert!(after[..skipped].contains("\r\x1b[2K"), "{shown:?}");
}
// ---- 6. man pages ------------------------------------------------------------

#[test]
fn the_run_man_page_has_examples_files_see_also_and_formats() {
    let root = env!("CARGO_MANIFEST_DIR");
    let page = std::fs::read_to_string(format!("{root}/man/idem-run.1")).unwrap();
    for needed in [
        ".SH EXAMPLES",
        ".SH FILES",
        ".SH \"SEE ALSO\"",
        "ledger.db\\-wal",
        "ledger.db\\-shm",
        "ledger.db\\-lock",
        "flock(1)",
        "timeout(1)",
        "chronic(1)",
        "crontab(5)",
        "systemd.timer(5)",
        "2026\\-12\\-01T08",
        "2026\\-W49",
        "IDEM_PROGRESS",
        "\\fIKEY\\fR",
    ] {
        assert!(page.contains(needed), "idem-run.1 lacks {needed}");
    }
    let synopsis = page
        .split(".SH SYNOPSIS")
        .nth(1)
        .and_then(|rest| rest.split(".SH").next())
        .unwrap();
    assert!(synopsis.contains("\\fIDUR\\fR"), "{synopsis}");
    assert!(synopsis.contains("\\fIN\\fR"), "{synopsis}");
    assert!(synopsis.contains("\\-\\-"), "{synopsis}");
    let top = std::fs::read_to_string(format!("{root}/man/idem.1")).unwrap();
    for needed in [".SH EXAMPLES", ".SH FILES", ".SH \"SEE ALSO\""] {
        assert!(top.contains(needed), "idem.1 lacks {needed}");
    }
}
