//! Each crontab line of the docs, run as cron runs it: `/bin/sh -c LINE`
//! from HOME, in cron's environment and nothing else (`env -i`:
//! `PATH=/usr/bin:/bin`, `HOME`, `SHELL`, `LOGNAME`, then the block's own
//! `NAME=value` lines), on a scratch ledger (`IDEM_DB`).
//!
//! A line runs where it can: its one command is idem, and what idem runs
//! is a stand-in, a program in /usr/local/bin (a folder of the test stands
//! for it, in the line and in the block's PATH alike) or `./name` (in
//! HOME). A line that reaches a server (a `postgres://` IDEM_DB, a ping)
//! or runs a real program (`pg_dumpall`, `rsync`) is only parsed (mod.rs).
//!
//! The README's lines run as pasted: idem is found on the PATH its block
//! sets, so a bare `idem` without it is not found (exit 127), and a line
//! meant for several hosts stays quiet while another run holds its key.
//! The guide's lines call `idem` by name, as the .deb installs it in
//! /usr/bin, on cron's own PATH (the guide says so), so the test puts the
//! binary's path in its place.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::shell;
use crate::util::{eventually, text};

/// A scratch root: `usr/local/bin` (idem and stand-ins), `home`, the
/// ledger, and `ran`, a line per stand-in's execution.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("a tempdir");
        let scratch = Scratch { dir };
        std::fs::create_dir_all(scratch.bin()).unwrap();
        std::fs::create_dir_all(scratch.home()).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_idem"), scratch.bin().join("idem")).unwrap();
        scratch
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn bin(&self) -> PathBuf {
        self.path("usr/local/bin")
    }

    fn home(&self) -> PathBuf {
        self.path("home")
    }

    /// `/usr/local/bin` made this scratch root's.
    fn rewrite(&self, text: &str) -> String {
        text.replace("/usr/local/bin", &self.bin().display().to_string())
    }

    /// A stand-in for `program`: it notes that it ran, then waits while
    /// the `hold` file exists.
    fn stand_in(&self, program: &str) -> String {
        let name = Path::new(program)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let path = match program.strip_prefix("./") {
            Some(_) => self.home().join(&name),
            None => self.bin().join(&name),
        };
        let script = format!(
            "#!/bin/sh\necho {name} >> {ran}\nwhile [ -e {hold} ]; do sleep 0.05; done\n",
            ran = self.path("ran").display(),
            hold = self.path("hold").display(),
        );
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        name
    }

    /// How many times the stand-in `name` ran.
    fn ran(&self, name: &str) -> usize {
        std::fs::read_to_string(self.path("ran"))
            .unwrap_or_default()
            .lines()
            .filter(|line| *line == name)
            .count()
    }

    /// `/bin/sh -c LINE` as cron starts it.
    fn cron(&self, variables: &[(String, String)], line: &str) -> Command {
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(line)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.home())
            .env("SHELL", "/bin/sh")
            .env("LOGNAME", "cron");
        for (name, value) in variables {
            command.env(name, self.rewrite(value));
        }
        command
            .env("IDEM_DB", self.path("ledger.db"))
            .current_dir(self.home())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }
}

/// What a runnable line runs: its stand-in, if any, and whether `--force`
/// makes each call run it.
struct Plan {
    program: Option<String>,
    force: bool,
    waits: bool,
}

fn plan(variables: &[(String, String)], command: &str) -> Option<Plan> {
    let remote = variables.iter().any(|(name, value)| {
        (name == "IDEM_DB" && value.contains("://")) || name == "IDEM_PING_URL"
    });
    let line = shell::split(command).ok()?;
    if remote || !line.plain || line.commands.len() != 1 {
        return None;
    }
    let argv = shell::idem_argv(&line.commands[0])?;
    if argv
        .iter()
        .any(|word| ["--ping", "--db", "--shell"].contains(&word.as_str()))
    {
        return None;
    }
    let program = match argv.iter().position(|word| word == "--") {
        Some(at) => {
            let program = argv.get(at + 1)?;
            if !(program.starts_with("/usr/local/bin/") || program.starts_with("./")) {
                return None;
            }
            Some(program.clone())
        }
        None => None,
    };
    let flags = argv.iter().take_while(|word| *word != "--");
    let has = |flag: &str| flags.clone().any(|word| word == flag);
    Some(Plan {
        program,
        force: has("--force"),
        waits: has("--wait")
            || has("--after-wait")
            || variables.iter().any(|(name, _)| name == "IDEM_WAIT"),
    })
}

/// Asserts that a call exited 0 and printed nothing: cron mails nothing.
#[track_caller]
fn assert_quiet(output: &Output, place: &str, line: &str) {
    assert!(
        output.status.code() == Some(0) && output.stdout.is_empty() && output.stderr.is_empty(),
        "{place}: under cron, {line}\nexited {:?}; cron would mail:\n{}{}",
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr),
    );
}

/// Another host's run of the line holds its key (on one machine, another
/// run): this call must exit 0 and say nothing, and run nothing.
fn while_held(variables: &[(String, String)], line: &str, name: &str, place: &str) {
    let scratch = Scratch::new();
    scratch.stand_in(name_path(line, name).as_str());
    let line = scratch.rewrite(line);
    std::fs::write(scratch.path("hold"), "").unwrap();
    let mut first: Child = scratch.cron(variables, &line).spawn().expect("sh starts");
    eventually(
        "the first run's command to start",
        Duration::from_secs(60),
        || scratch.ran(name) == 1 || first.try_wait().unwrap().is_some(),
    );
    assert_eq!(
        scratch.ran(name),
        1,
        "{place}: the first call did not run its command"
    );
    let second = scratch.cron(variables, &line).output().expect("sh runs");
    assert_quiet(
        &second,
        place,
        &format!("{line} (while another run holds its key)"),
    );
    assert_eq!(scratch.ran(name), 1, "{place}: two runs of one key at once");
    std::fs::remove_file(scratch.path("hold")).unwrap();
    let first = first.wait_with_output().expect("the first call ends");
    assert_quiet(&first, place, &line);
}

/// The program of `line` whose stand-in is `name`.
fn name_path(line: &str, name: &str) -> String {
    line.split_whitespace()
        .find(|word| Path::new(word).file_name().is_some_and(|file| file == name))
        .unwrap_or(name)
        .to_owned()
}

#[test]
fn each_crontab_line_runs_under_crons_environment() {
    let (mut ran, mut readme_lines) = (0, 0);
    for path in super::markdown_files() {
        let readme = path == super::root().join("README.md");
        let file = std::fs::read_to_string(&path).unwrap();
        for block in super::blocks(&file)
            .into_iter()
            .filter(|block| block.lang == "crontab")
        {
            let scratch = Scratch::new();
            let mut variables: Vec<(String, String)> = Vec::new();
            for (number, raw) in &block.lines {
                let raw = raw.trim();
                if let Some((name, value)) = super::assignment(raw) {
                    variables.push((name.to_owned(), value.to_owned()));
                    continue;
                }
                let Some(command) = super::cron_command(raw) else {
                    continue;
                };
                let place = format!(
                    "{}:{number}",
                    path.strip_prefix(super::root()).unwrap().display()
                );
                readme_lines += usize::from(readme);
                let Some(plan) = plan(&variables, command) else {
                    assert!(
                        !readme,
                        "{place}: the README's crontab line cannot run here: {command}"
                    );
                    continue;
                };
                let name = plan
                    .program
                    .as_deref()
                    .map(|program| scratch.stand_in(program));
                let mut line = scratch.rewrite(command);
                if !readme {
                    if let Some(rest) = line.strip_prefix("idem ") {
                        line = format!("{} {rest}", env!("CARGO_BIN_EXE_idem"));
                    }
                }
                let count = || name.as_deref().map_or(0, |name| scratch.ran(name));
                let before = count();
                let first = scratch.cron(&variables, &line).output().expect("sh runs");
                assert_quiet(&first, &place, command);
                let expected = before + usize::from(name.is_some());
                assert_eq!(
                    count(),
                    expected,
                    "{place}: the command did not run once: {command}"
                );
                let again = scratch.cron(&variables, &line).output().expect("sh runs");
                assert_quiet(&again, &place, command);
                let expected = expected + usize::from(name.is_some() && plan.force);
                assert_eq!(count(), expected, "{place}: the second call: {command}");
                if readme && !plan.waits {
                    if let Some(name) = &name {
                        while_held(&variables, command, name, &place);
                    }
                }
                ran += 1;
            }
        }
    }
    assert!(readme_lines > 0, "no crontab line in the README");
    // The docs hold thirteen runnable lines; far fewer means the search broke.
    assert!(ran >= 10, "only {ran} crontab lines of the docs ran");
}
