//! What idem says is true: a reading command told of a ledger that is not
//! there, an output cut to its tail marked as such, and a status table that
//! fits the terminal it is drawn on.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::util::{strip_ansi, text, wait_for_file, Env};

// ---- a ledger that is not there is told, not read as empty ---------------

#[test]
fn a_missing_ledger_is_told_by_every_reading_command() {
    let env = Env::new();
    let missing = env.path("typo/ledger.db");
    let told = format!(
        "idem: no ledger at {}: nothing has run with it yet; check --db or IDEM_DB\n",
        missing.display()
    );
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["ledger", "list"],
        &["ledger", "list", "--json"],
        &["ledger", "show", "k"],
        &["ledger", "metrics"],
    ] {
        let ran = env.cmd(args).db(&missing).expect_code(1).stderr_is(&told);
        assert_eq!(ran.stdout(), "", "{args:?} prints no data");
    }
    assert!(!missing.exists(), "reading creates nothing");
    // `run` makes the ledger it is given, in a folder that is there; then
    // the same reads answer.
    std::fs::create_dir(env.path("typo")).unwrap();
    env.cmd(["run", "--key", "k", "--", "true"])
        .db(&missing)
        .succeeds();
    env.cmd(["status"]).db(&missing).succeeds();
    env.cmd(["ledger", "list"]).db(&missing).succeeds();
    env.cmd(["ledger", "metrics"]).db(&missing).succeeds();
}

#[test]
fn a_job_glob_that_matches_nothing_is_told() {
    let env = Env::new();
    env.cmd(["run", "--key", "backup", "--", "true"]).succeeds();
    for args in [
        &["status", "--job", "nosuch*"][..],
        &["status", "--json", "--job", "nosuch*"],
    ] {
        env.cmd(args)
            .expect_code(1)
            .stderr_starts_with("idem: no job matches nosuch*")
            .stderr_one_line()
            .stdout_is("");
    }
    env.cmd(["status", "--job", "back*"])
        .succeeds()
        .stdout_has("backup");
}

// ---- an output cut to its tail says so -----------------------------------

#[test]
fn show_marks_an_output_cut_to_its_tail() {
    let env = Env::new();
    let run = |key: &str, capture: &str, script: &str| {
        env.cmd(["run", "--key", key, "--capture", capture, "--shell", "--"])
            .arg(script)
            .succeeds();
    };
    run("long", "16", "seq 1 100; echo oops >&2");
    let shown = env.cmd(["ledger", "show", "long"]).succeeds().stdout();
    let lines: Vec<&str> = shown.lines().collect();
    let attempt = lines
        .iter()
        .position(|line| line.starts_with("  attempt 1: exit 0"))
        .unwrap_or_else(|| panic!("no attempt line in\n{shown}"));
    // After the attempt's line (and what it used, where that was
    // recorded), the mark comes just before the output.
    let stdout = lines
        .iter()
        .position(|line| *line == "    stdout:")
        .unwrap_or_else(|| panic!("no stdout in\n{shown}"));
    assert!(stdout > attempt + 1, "{shown}");
    assert_eq!(
        lines[stdout - 1],
        "    [… earlier output cut: only the last 16 B of each stream kept (--capture)]",
        "{shown}"
    );
    assert!(shown.contains("      100\n"), "{shown}");
    let json = env.show_json("long");
    assert_eq!(json["attempts_detail"][0]["output_cut"], true, "{json}");

    // Output kept whole is shown without a word; none kept says why.
    run("short", "16", "echo hi");
    env.cmd(["ledger", "show", "short"])
        .succeeds()
        .stdout_has("      hi\n")
        .stdout_lacks("cut")
        .stdout_lacks("not kept");
    assert_eq!(
        env.show_json("short")["attempts_detail"][0]["output_cut"],
        false
    );
    run("secret", "0", "echo hunter2");
    env.cmd(["ledger", "show", "secret"])
        .succeeds()
        .stdout_has("    [output not kept: --capture 0]\n")
        .stdout_lacks("stdout:");
}

// ---- `idem status` fits the terminal it is drawn on ----------------------

/// Runs `idem ARGS` of `env` in a fresh pseudo-terminal of `columns`
/// columns (set before idem starts, whatever terminal the tests run
/// from), with colour on and a `$COLUMNS` that lies; returns what the
/// terminal showed, without its carriage returns, and idem's exit code.
fn in_pty(env: &Env, columns: u16, args: &[&str]) -> (String, i32) {
    const SCRIPT: &str = r#"
import fcntl, os, pty, struct, sys, termios
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, int(sys.argv[1]), 0, 0))
    os.execv(sys.argv[2], sys.argv[2:])
out = b""
while True:
    try:
        data = os.read(fd, 65536)
    except OSError:
        break
    if not data:
        break
    out += data
_, status = os.waitpid(pid, 0)
sys.stdout.buffer.write(out)
sys.exit(os.waitstatus_to_exitcode(status))
"#;
    let idem = env.idem(args);
    let mut python = Command::new("python3");
    for (name, value) in idem.get_envs() {
        match value {
            Some(value) => python.env(name, value),
            None => python.env_remove(name),
        };
    }
    let output = python
        .env("TERM", "xterm-256color")
        .env("COLUMNS", "500")
        .env_remove("NO_COLOR")
        .arg("-c")
        .arg(SCRIPT)
        .arg(columns.to_string())
        .arg(idem.get_program())
        .args(idem.get_args())
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    let shown = text(&output.stdout).replace('\r', "");
    (shown, output.status.code().unwrap_or(-1))
}

/// An idem run stopped (SIGTERM, which it passes to its command) when the
/// test ends, passed or failed.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

#[test]
fn status_fits_a_colour_terminal_of_80_120_and_200_columns() {
    let env = Env::new();
    let program = env.path("usr/local/bin/backup.sh");
    std::fs::create_dir_all(program.parent().unwrap()).unwrap();
    std::fs::write(
        &program,
        "#!/bin/sh\n[ -z \"$HOLD\" ] || { : > \"$HOLD\"; sleep 30; }\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let program = program.display().to_string();
    let backup = |key: &str| {
        let mut args = vec![
            "run",
            "--job",
            "backup-nightly",
            "--retries",
            "0",
            "--key",
            key,
            "--",
        ];
        args.extend([program.as_str(), "--target", "/srv/data", "--daily"]);
        env.idem(args)
    };
    for key in ["backup-1", "backup-2", "backup-3"] {
        assert_eq!(backup(key).output().unwrap().status.code(), Some(3));
    }
    // One run goes on while the next fails: the runs overlap.
    let held = env.path("held");
    let mut long = Stopped(
        backup("backup-long")
            .env("HOLD", &held)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_file(&held, Duration::from_secs(10), &mut long.0);
    assert_eq!(backup("backup-4").output().unwrap().status.code(), Some(3));
    env.cmd(["run", "--key", "tick-{minute}", "--", "true"])
        .succeeds();
    let whole = format!("{program} --target /srv/data --daily");

    for columns in [80, 120, 200] {
        let (shown, code) = in_pty(&env, columns, &["status"]);
        assert_eq!(code, 1, "a job is failing:\n{shown}");
        assert!(shown.contains("\x1b["), "coloured at a terminal:\n{shown}");
        let lines: Vec<String> = shown.lines().map(strip_ansi).collect();
        assert_eq!(lines.len(), 3, "{shown}");
        for line in &lines {
            assert!(
                line.chars().count() <= usize::from(columns),
                "{} characters at {columns} columns:\n{}",
                line.chars().count(),
                lines.join("\n")
            );
        }
        let header = &lines[0];
        for column in ["JOB", "STATE", "RECENT", "COMMAND"] {
            assert!(header.contains(column), "{column} at {columns}: {header}");
        }
        let row = &lines[1];
        assert!(row.starts_with("backup-nightly  failing"), "{row}");
        // The strip: three failures, the one that goes on, the last failure.
        assert!(row.contains("●●●●●"), "{row}");
        // The command by what identifies it: its base name and last words.
        if columns == 200 {
            assert!(row.ends_with(&whole), "{row}");
            assert!(header.contains("LAST SUCCESS") && header.contains("MISSED"));
        } else {
            assert!(
                row.contains("  backup.sh ") && row.ends_with(" --daily"),
                "{row}"
            );
        }
    }
    // --wide: every column and the whole command, however narrow.
    let (shown, _) = in_pty(&env, 80, &["status", "--wide"]);
    let lines: Vec<String> = shown.lines().map(strip_ansi).collect();
    assert!(
        lines[0].contains("LAST SUCCESS") && lines[0].contains("MISSED"),
        "{shown}"
    );
    assert!(lines[1].ends_with(&whole), "{shown}");
}
