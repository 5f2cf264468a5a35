//! The wrapper is invisible: output keeps its order through `2>&1`, a
//! retry gets stdin whole, `--timeout-signal` and `--splay` do what they
//! say, and a first Ctrl-C says that a second one kills.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::util::{assert_code, text, wait_for_file, Env};

const INTERLEAVED: &str = "for i in 1 2 3 4 5; do echo out $i; echo err $i >&2; done";

fn interleaved() -> String {
    (1..=5).map(|i| format!("out {i}\nerr {i}\n")).collect()
}

/// `idem ARGS 2>&1`, as cron mail and CI logs see it: one pipe for both.
fn both_to_one_pipe(env: &Env, args: &[&str]) -> (i32, String) {
    let mut command = env.idem(args);
    let (reader, writer) = std::io::pipe().unwrap();
    command.stdout(writer.try_clone().unwrap()).stderr(writer);
    let mut child = command.spawn().unwrap();
    drop(command);
    let mut seen = String::new();
    std::io::Read::read_to_string(&mut { reader }, &mut seen).unwrap();
    let status = child.wait().unwrap();
    (status.code().unwrap(), seen)
}

#[test]
fn output_through_2_to_1_keeps_its_order() {
    let env = Env::new();
    let (code, seen) = both_to_one_pipe(&env, &["run", "--key", "a", "--shell", "--", INTERLEAVED]);
    assert_eq!(code, 0);
    assert_eq!(seen, interleaved());
    // The kept tail is the one combined stream.
    let shown = env.show_json("a");
    assert_eq!(
        shown["attempts_detail"][0]["stdout_tail"].as_str(),
        Some(interleaved().as_str())
    );

    // Held output, shown after a failure, keeps it too (idem's lines fall
    // in where they happened).
    let failing = format!("{INTERLEAVED}; exit 3");
    let (code, seen) = both_to_one_pipe(
        &env,
        &[
            "run",
            "--key",
            "b",
            "--quiet-success",
            "--retries",
            "0",
            "--shell",
            "--",
            &failing,
        ],
    );
    assert_eq!(code, 3);
    assert_eq!(
        seen,
        format!("{}idem: b failed: attempt 1/1 exited 3\n", interleaved())
    );

    // Into one file, as `>>log 2>&1` does.
    let log = env.path("log");
    let file = std::fs::File::create(&log).unwrap();
    let status = env
        .idem(["run", "--key", "c", "--shell", "--", INTERLEAVED])
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&log).unwrap(), interleaved());
}

#[test]
fn a_retry_gets_stdin_whole() {
    let env = Env::new();
    let once = env.path("once");
    let seen = env.path("seen");
    let script = format!(
        "cat >> '{seen}'; echo --- >> '{seen}'; [ -e '{once}' ] || {{ touch '{once}'; exit 1; }}",
        seen = seen.display(),
        once = once.display()
    );
    let mut child = env
        .idem([
            "run",
            "--key",
            "k",
            "--backoff",
            "10ms",
            "--shell",
            "--",
            &script,
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // More than a pipe holds, so it is read as it is fed, not in one go.
    let input: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert_code(&output, 0);
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        format!("{input}---\n{input}---\n")
    );

    // An attempt that reads only part of it leaves the rest for the next:
    // each gets it from the start.
    let firsts = env.path("firsts");
    let partial = format!("head -n1 >> '{}'; exit 1", firsts.display());
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "seq 1 100000 | '{}' run --key p --backoff 10ms --retries 2 --shell -- \"$0\"",
            env!("CARGO_BIN_EXE_idem")
        ))
        .arg(&partial)
        .env("IDEM_DB", env.db())
        .env("HOME", env.dir.path())
        .output()
        .unwrap();
    assert_code(&output, 1);
    assert_eq!(std::fs::read_to_string(&firsts).unwrap(), "1\n1\n1\n");
}

#[test]
fn timeout_signal_is_sent_first() {
    let env = Env::new();
    let script =
        "trap 'echo got INT; exit 9' INT; trap 'echo got TERM; exit 8' TERM; sleep 30 & wait";
    env.cmd([
        "run",
        "--key",
        "t",
        "--timeout",
        "300ms",
        "--timeout-signal",
        "INT",
        "--retries",
        "0",
        "--shell",
        "--",
        script,
    ])
    .expect_code(124)
    .stdout_starts_with("got INT");
    env.cmd([
        "run",
        "--key",
        "t",
        "--timeout-signal",
        "NOPE",
        "--",
        "true",
    ])
    .expect_code(2)
    .stderr_has("not a signal");
}

#[test]
fn splay_waits_before_the_claim() {
    let env = Env::new();
    let began = Instant::now();
    env.cmd(["run", "--key", "s", "--", "true"])
        .env("IDEM_SPLAY", "300ms")
        .succeeds();
    assert!(began.elapsed() <= Duration::from_secs(5));
    // Never beyond its bound: 0s runs at once.
    env.cmd(["run", "--key", "s2", "--splay", "0s", "--", "true"])
        .succeeds();
}

#[test]
fn a_first_signal_says_that_a_second_kills() {
    let env = Env::new();
    let started = env.path("started");
    let script = format!("trap '' INT; touch '{}'; sleep 30", started.display());
    let mut child = env
        .idem(["run", "--key", "i", "--shell", "--", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30), &mut child);
    let idem = Pid::from_raw(child.id() as i32);
    kill(idem, Signal::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    kill(idem, Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("passed signal 2 on to the command; a second signal kills it"),
        "{stderr}"
    );
    // The second signal was a SIGKILL.
    assert_code(&output, 137);
}

/// Runs `idem ARGS` at a real terminal: a pseudo-terminal that is its
/// controlling terminal, idem in its foreground. Answers each prompt of
/// `script` (text seen -> bytes typed) and returns what the terminal
/// showed and idem's exit code.
fn at_a_terminal(env: &Env, args: &[&str], script: &[(&str, &[u8])]) -> (String, i32) {
    terminal_session(env.idem(args), script)
}

/// Runs `command` as the session leader of a new pseudo-terminal.
fn terminal_session(mut command: Command, script: &[(&str, &[u8])]) -> (String, i32) {
    use std::os::unix::process::CommandExt;
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = std::fs::File::from(pty.slave);
    // A terminal's session names its kind, whatever ran the tests.
    command
        .env("TERM", "xterm-256color")
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave);
    // SAFETY: setsid and ioctl are async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()?;
            if nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    drop(command);
    let mut master = std::fs::File::from(pty.master);
    nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut pending = script.iter();
    let mut next = pending.next();
    let until = Instant::now() + Duration::from_secs(20);
    let mut buffer = [0u8; 4096];
    loop {
        match std::io::Read::read(&mut master, &mut buffer) {
            Ok(0) => break,
            Ok(read) => seen.extend_from_slice(&buffer[..read]),
            // EIO: every process holding the terminal is gone.
            Err(error) if error.raw_os_error() == Some(nix::libc::EIO) => break,
            Err(_) => {
                if child.try_wait().unwrap().is_some() && Instant::now() > until {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if let Some((prompt, typed)) = next {
            if String::from_utf8_lossy(&seen).contains(prompt) {
                // As a person would: a moment after the prompt shows.
                std::thread::sleep(Duration::from_millis(200));
                master.write_all(typed).unwrap();
                next = pending.next();
            }
        }
        assert!(
            Instant::now() < until,
            "stuck: {}",
            String::from_utf8_lossy(&seen)
        );
    }
    let status = child.wait().unwrap();
    (
        String::from_utf8_lossy(&seen).into_owned(),
        status.code().unwrap_or(-1),
    )
}

#[test]
fn at_a_terminal_the_command_sees_one_and_reads_it() {
    let env = Env::new();
    let (shown, code) = at_a_terminal(
        &env,
        &[
            "run",
            "--key",
            "t",
            "--shell",
            "--",
            "test -t 1 && echo out-is-a-terminal; test -t 2 && echo err-is-a-terminal; ls --color=always -d /",
        ],
        &[],
    );
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("out-is-a-terminal"), "{shown}");
    assert!(shown.contains("err-is-a-terminal"), "{shown}");
    assert!(shown.contains("\x1b["), "no colour: {shown:?}");

    // A prompt is answered through idem.
    let (shown, code) = at_a_terminal(
        &env,
        &[
            "run",
            "--key",
            "p",
            "--shell",
            "--",
            "printf 'name? '; read name; echo \"hi $name\"",
        ],
        &[("name? ", b"bob\n")],
    );
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("hi bob"), "{shown}");

    // Ctrl-C reaches the command at once, and is the operator's: no retry.
    let (shown, code) = at_a_terminal(
        &env,
        &["run", "--key", "c", "--shell", "--", "echo ready; sleep 30"],
        &[("ready", b"\x03")],
    );
    assert_eq!(code, 130, "{shown}");
    assert!(!shown.contains("retrying"), "{shown}");
}

#[test]
fn ctrl_z_stops_the_run_and_fg_resumes_it() {
    let env = Env::new();
    // The terminal echoes the typed line: its markers are split by "" there.
    let line = format!(
        "'{}' run --key z --shell -- 'echo st\"\"arted; sleep 1; echo fin\"\"ished'\n",
        env!("CARGO_BIN_EXE_idem")
    );
    let mut bash = env.idem(["--version"]);
    let mut shell = Command::new("bash");
    shell
        .args(["--norc", "--noprofile", "-i"])
        .env("PS1", "$ ")
        .current_dir(env.dir.path());
    for (name, value) in bash.get_envs() {
        if let Some(value) = value {
            shell.env(name, value);
        }
    }
    bash = shell;
    let (shown, _) = terminal_session(
        bash,
        &[
            ("$ ", line.as_bytes()),
            ("started", b"\x1a"),
            ("Stopped", b"fg\n"),
            ("finished", b"echo r\"\"c=$?\n"),
            ("rc=", b"exit\n"),
        ],
    );
    assert!(shown.contains("Stopped"), "{shown}");
    assert!(shown.contains("finished"), "{shown}");
    assert!(shown.contains("rc=0"), "{shown}");
}

#[test]
fn signals_ignored_at_start_stay_ignored_as_under_nohup() {
    // `nohup idem run -- cmd` outlives a hangup as `nohup cmd` does, and a
    // shell without job control starts `cmd &` with SIGINT ignored: idem
    // keeps what it was started with ignored, for itself and its command.
    let env = Env::new();
    let started = env.path("started");
    let go = env.path("go");
    let script = format!(
        "grep SigIgn /proc/self/status > '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; {}",
        started.display(),
        go.display(),
        env.count_cmd("count")
    );
    let mut command = env.idem(["run", "--key", "n", "--shell", "--", &script]);
    command.stdout(Stdio::null()).stderr(Stdio::piped());
    // SAFETY: signal(2) is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            nix::libc::signal(nix::libc::SIGHUP, nix::libc::SIG_IGN);
            nix::libc::signal(nix::libc::SIGINT, nix::libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    wait_for_file(&started, Duration::from_secs(10), &mut child);
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGHUP).unwrap();
    kill(pid, Signal::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&go, "").unwrap();
    let output = child.wait_with_output().unwrap();
    assert_code(&output, 0);
    assert_eq!(env.count("count"), 1, "{}", text(&output.stderr));
    // /proc's SigIgn: bit N-1 set when signal N is ignored.
    let line = std::fs::read_to_string(&started).unwrap();
    let mask = u64::from_str_radix(line.trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
    assert_eq!(mask & 0b11, 0b11, "the command's {line}");
}

#[test]
fn idem_started_with_its_standard_descriptors_closed_keeps_its_files_apart() {
    // cron and daemons may start idem with 0, 1 and 2 closed. The files
    // idem opens then must not take those numbers, or what it prints (the
    // command's output passed through) would land in them.
    let env = Env::new();
    let script = format!("echo out; echo err >&2; {}", env.count_cmd("count"));
    let mut command = env.idem(["run", "--key", "closed", "--shell", "--", &script]);
    // SAFETY: close(2) is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            for fd in 0..3 {
                nix::libc::close(fd);
            }
            Ok(())
        });
    }
    let status = command.status().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(env.count("count"), 1);
    let show = env.show_json("closed");
    assert_eq!(show["status"], "succeeded", "{show}");
    // Both were /dev/null then, one file, so passed through as one stream.
    let tail = &show["attempts_detail"][0];
    assert_eq!(tail["stdout_tail"], "out\nerr\n", "{show}");
    assert_eq!(tail["stderr_tail"], "", "{show}");
    env.cmd(["doctor"]).succeeds();
}

#[test]
fn sigpipe_reaches_the_command_as_idem_got_it() {
    // As from a shell: `trap '' PIPE; cmd` runs cmd with SIGPIPE ignored,
    // and cmd alone gets the default. idem itself ignores it either way.
    for ignored in [false, true] {
        let env = Env::new();
        let seen = env.path("seen");
        let script = format!("grep SigIgn /proc/self/status > '{}'", seen.display());
        let mut command = env.idem(["run", "--key", "p", "--shell", "--", &script]);
        command.stdout(Stdio::null());
        if ignored {
            // SAFETY: signal(2) is async-signal-safe.
            unsafe {
                use std::os::unix::process::CommandExt;
                command.pre_exec(|| {
                    nix::libc::signal(nix::libc::SIGPIPE, nix::libc::SIG_IGN);
                    Ok(())
                });
            }
        }
        let output = command.output().unwrap();
        assert_code(&output, 0);
        // /proc's SigIgn: bit N-1 set when signal N is ignored.
        let line = std::fs::read_to_string(&seen).unwrap();
        let mask =
            u64::from_str_radix(line.trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
        let bit = 1 << (nix::libc::SIGPIPE - 1);
        assert_eq!(
            mask & bit != 0,
            ignored,
            "started ignored: {ignored}; the command's {line}"
        );
    }
}
