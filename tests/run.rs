//! `idem run` on a SQLite ledger: skips, fingerprints, exit codes, the
//! child's environment and its streams.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use crate::util::{text, Env};

#[test]
fn runs_once_then_skips() {
    let env = Env::new();
    let count = env.count_cmd("count");
    for _ in 0..3 {
        env.cmd(["run", "--key", "backup", "--shell", "--", &count])
            .succeeds();
    }
    assert_eq!(env.count("count"), 1);
    let runs = env.list_json();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    let run = &runs[0];
    assert_eq!(run["key"], "backup");
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["exit_code"], 0);
    assert_eq!(run["attempts"], 1);
    assert_eq!(run["shell"], true);
    assert_eq!(run["command"][0], count.as_str());
    for field in [
        "run_id",
        "signal",
        "started_at",
        "finished_at",
        "duration_ms",
        "host",
        "pid",
    ] {
        assert!(run.get(field).is_some(), "missing {field}");
    }
}

#[test]
fn a_skip_is_silent_unless_verbose() {
    let env = Env::new();
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    env.cmd(["run", "--key", "k", "--", "true"])
        .succeeds()
        .stderr_is("");
    let verbose = env
        .cmd(["-v", "run", "--key", "k", "--", "true"])
        .succeeds();
    assert!(
        verbose
            .stderr()
            .starts_with("idem: skipped k: succeeded at "),
        "{}",
        verbose.stderr()
    );
    assert!(verbose.stderr().contains("--force runs it again"));
    env.cmd([
        "run",
        "--key",
        "k",
        "--skipped-exit-code",
        "3",
        "--",
        "true",
    ])
    .expect_code(3);
}

#[test]
fn failure_passes_the_exit_code_and_runs_again() {
    let env = Env::new();
    let script = format!("{}; exit 7", env.count_cmd("count"));
    env.cmd([
        "run",
        "--key",
        "f",
        "--retries",
        "0",
        "--shell",
        "--",
        &script,
    ])
    .expect_code(7);
    env.cmd([
        "run",
        "--key",
        "f",
        "--retries",
        "0",
        "--shell",
        "--",
        &script,
    ])
    .expect_code(7);
    assert_eq!(env.count("count"), 2);
    assert_eq!(env.list_json()[0]["status"], "failed");
    assert_eq!(env.list_json()[0]["exit_code"], 7);
}

#[test]
fn force_runs_a_succeeded_key_again() {
    let env = Env::new();
    let count = env.count_cmd("count");
    env.cmd(["run", "--key", "k", "--shell", "--", &count])
        .succeeds();
    env.cmd(["run", "--key", "k", "--force", "--shell", "--", &count])
        .succeeds();
    assert_eq!(env.count("count"), 2);
}

#[test]
fn a_different_command_is_refused_with_65() {
    let env = Env::new();
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    let other = env
        .cmd(["run", "--key", "k", "--", "echo", "other"])
        .expect_code(65);
    assert!(other.stdout().is_empty(), "nothing ran");
    assert!(other.stderr().contains("--force"));
    // --shell changes the fingerprint too.
    env.cmd(["run", "--key", "k", "--shell", "--", "true"])
        .expect_code(65);
    // After a failure a changed command simply runs.
    env.cmd(["run", "--key", "g", "--retries", "0", "--", "false"])
        .expect_code(1);
    env.cmd(["run", "--key", "g", "--", "true"]).succeeds();
}

#[test]
fn ttl_lets_a_success_expire() {
    let env = Env::new();
    let count = env.count_cmd("count");
    let run = |ttl: &str| env.cmd(["run", "--key", "t", "--ttl", ttl, "--shell", "--", &count]);
    run("1h").succeeds();
    run("1h").succeeds();
    assert_eq!(env.count("count"), 1);
    std::thread::sleep(std::time::Duration::from_millis(300));
    run("200ms").succeeds();
    assert_eq!(env.count("count"), 2);
}

#[test]
fn command_not_found_is_127_and_not_executable_is_126() {
    let env = Env::new();
    let missing = env
        .cmd(["run", "--key", "m", "--", "no-such-command-idem"])
        .expect_code(127);
    assert!(missing
        .stderr()
        .contains("command not found: no-such-command-idem"));
    let script = env.path("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    env.cmd(["run", "--key", "x", "--", script.to_str().unwrap()])
        .expect_code(126);
    // Neither is retried by default: one attempt each.
    let runs = env.list_json();
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .all(|run| run["attempts"] == 1),
        "{runs}"
    );
}

#[test]
fn a_signal_death_is_128_plus_n() {
    let env = Env::new();
    env.cmd([
        "run",
        "--key",
        "s",
        "--retries",
        "0",
        "--shell",
        "--",
        "kill -USR1 $$",
    ])
    .expect_code(128 + 10);
    assert_eq!(env.list_json()[0]["signal"], 10);
}

#[test]
fn the_child_gets_its_environment() {
    let env = Env::new();
    let output = env
        .cmd([
            "run",
            "--key",
            "e",
            "--retries",
            "2",
            "--shell",
            "--",
            "echo $IDEM_KEY $IDEM_ATTEMPT $IDEM_MAX_ATTEMPTS ${IDEM_RECOVERED:-none} $IDEM_RUN_ID",
        ])
        .succeeds();
    let words: Vec<String> = output
        .stdout()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(words[..4], ["e", "1", "3", "none"]);
    assert_eq!(words[4], env.list_json()[0]["run_id"].as_str().unwrap());
}

#[test]
fn streams_pass_through_and_tails_are_kept() {
    let env = Env::new();
    env.cmd([
        "run",
        "--key",
        "io",
        "--capture",
        "4",
        "--shell",
        "--",
        "cat; echo to-stderr >&2",
    ])
    .stdin("from stdin\n")
    .succeeds()
    .stdout_is("from stdin\n")
    .stderr_is("to-stderr\n");
    let shown = env.show_json("io");
    assert_eq!(shown["attempts_detail"][0]["stdout_tail"], "din\n");
    assert_eq!(shown["attempts_detail"][0]["stderr_tail"], "err\n");
}

#[test]
fn key_templates_expand_in_local_time() {
    let env = Env::new();
    let output = env
        .cmd([
            "run",
            "--key",
            "r-{date}-{year}",
            "--",
            "sh",
            "-c",
            "echo $IDEM_KEY",
        ])
        .env("TZ", "Pacific/Kiritimati")
        .succeeds();
    let today = std::process::Command::new("date")
        .env("TZ", "Pacific/Kiritimati")
        .arg("+r-%Y-%m-%d-%Y")
        .output()
        .unwrap();
    assert_eq!(output.stdout(), text(&today.stdout));
}

#[test]
fn bad_input_is_a_one_line_usage_error() {
    let env = Env::new();
    let cases: &[&[&str]] = &[
        &["run", "--key", "{nope}", "--", "true"],
        &["run", "--key", "", "--", "true"],
        &["run", "--key", "a\u{7}b", "--", "true"],
        &["run", "--key", &"k".repeat(513), "--", "true"],
        &["run", "--key", "k", "--backoff", "soon", "--", "true"],
        &["run", "--key", "k", "--retries", "-1", "--", "true"],
        &["run", "--key", "k", "--retry-on", "1,x", "--", "true"],
        &["run", "--key", "k"],
        &["run", "--", "true"],
    ];
    for args in cases {
        let output = env.cmd(*args).expect_code(2);
        let stderr = output.stderr();
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("idem: "), "{stderr}");
    }
    assert!(!env.db().exists(), "no ledger is created for bad input");
}

#[test]
fn ledger_is_private() {
    let env = Env::new();
    // The default location, the one folder idem makes.
    let db = env.path("data/idem/ledger.db");
    env.cmd(["run", "--key", "k", "--", "true"])
        .env_remove("IDEM_DB")
        .succeeds();
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(db.parent().unwrap()), 0o700);
}

#[test]
fn default_ledger_lives_in_the_data_dir() {
    let env = Env::new();
    let output = env.cmd(["ledger", "path"]).env_remove("IDEM_DB").succeeds();
    assert_eq!(
        output.stdout().trim(),
        env.path("data/idem/ledger.db").to_str().unwrap()
    );
}

#[test]
fn foreign_and_newer_ledgers_are_refused_untouched() {
    let env = Env::new();
    let garbage = env.path("garbage.db");
    std::fs::write(&garbage, vec![b'x'; 5000]).unwrap();
    let foreign = env.path("foreign.db");
    let made = std::process::Command::new("sqlite3")
        .arg(&foreign)
        .arg("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .status();
    let newer = env.path("newer.db");
    env.cmd(["run", "--key", "k", "--", "true"])
        .db(&newer)
        .succeeds();
    if made.is_ok() {
        std::process::Command::new("sqlite3")
            .arg(&newer)
            .arg("PRAGMA user_version = 99;")
            .status()
            .unwrap();
    }
    for db in [&garbage, &foreign, &newer] {
        if !db.exists() {
            continue;
        }
        let before = std::fs::read(db).unwrap();
        let count = env.count_cmd("count");
        env.cmd(["run", "--key", "k2", "--shell", "--", &count])
            .db(db)
            .expect_code(125);
        assert_eq!(
            std::fs::read(db).unwrap(),
            before,
            "{} was modified",
            db.display()
        );
        assert_eq!(env.count("count"), 0, "nothing ran");
    }
}

#[test]
fn a_dated_key_reads_the_hosts_zone_without_listing_every_zone() {
    // A crontab line's key has {date}: every run reads the local time
    // zone. /etc/localtime names it; listing the whole time zone database
    // to look the name up cost such a run two thirds of its instructions.
    let zone_linked = std::fs::read_link("/etc/localtime")
        .is_ok_and(|target| target.to_string_lossy().contains("zoneinfo/"));
    if !crate::util::require(
        zone_linked,
        "/etc/localtime linked into zoneinfo (Debian: tzdata)",
    ) {
        return;
    }
    dated_run_reads_one_zone(None, "\"/etc/localtime\"");
}

#[test]
fn a_dated_key_under_tz_reads_that_zone_alone() {
    // UTC+14 all year: a key's hour there is never UTC's.
    let zone = "Pacific/Kiritimati";
    let file = format!("/usr/share/zoneinfo/{zone}");
    if !crate::util::require(
        std::path::Path::new(&file).exists(),
        &format!("{file} (Debian: tzdata)"),
    ) {
        return;
    }
    dated_run_reads_one_zone(Some(zone), &format!("\"{file}\""));
}

/// Runs a key with {hour} under strace, with `TZ` set to `tz` (else
/// unset): the zone database is not listed, `zone_file` is read, and the
/// key's hour is the one `date` tells in that zone.
fn dated_run_reads_one_zone(tz: Option<&str>, zone_file: &str) {
    let env = Env::new();
    let trace = env.path("trace");
    let hour = || {
        let mut date = std::process::Command::new("date");
        date.arg("+%Y-%m-%dT%H");
        match tz {
            Some(tz) => date.env("TZ", tz),
            None => date.env_remove("TZ"),
        };
        text(&date.output().unwrap().stdout).trim().to_owned()
    };
    let mut command = std::process::Command::new("strace");
    command
        .args(["-f", "-y", "-qq", "-e", "trace=openat,getdents64", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_idem"))
        .args([
            "run",
            "--key",
            "at-{hour}",
            "--",
            "sh",
            "-c",
            "echo $IDEM_KEY",
        ])
        .env("IDEM_DB", env.db())
        .env("HOME", env.dir.path())
        .env_remove("TZDIR")
        .stdin(Stdio::null());
    match tz {
        Some(tz) => command.env("TZ", tz),
        None => command.env_remove("TZ"),
    };
    let before = hour();
    let traced = command.output();
    let after = hour();
    let ran = traced.as_ref().is_ok_and(|output| output.status.success());
    if !crate::util::require(ran, &format!("tracing idem with strace ({traced:?})")) {
        return;
    }
    let key = text(&traced.unwrap().stdout).trim().to_owned();
    assert!(
        [format!("at-{before}"), format!("at-{after}")].contains(&key),
        "key {key}, date said {before} then {after} (TZ {tz:?})"
    );
    let trace = std::fs::read_to_string(trace).unwrap();
    let zone_lines: Vec<&str> = trace
        .lines()
        .filter(|line| line.contains("zoneinfo"))
        .collect();
    assert!(
        !zone_lines.iter().any(|line| line.contains("getdents64(")),
        "the zone database was listed:\n{}",
        zone_lines.join("\n")
    );
    assert!(
        trace.contains(zone_file),
        "{zone_file} was not read:\n{trace}"
    );
}

#[test]
fn a_first_run_reads_no_more_of_a_ledger_of_many_keys_than_of_one() {
    // Every statement of a run finds its rows through an index, so a
    // first run on a ledger of 20,000 keys (a crontab's dated keys over
    // the years) reads about as many pages as on a ledger of one. Pages
    // are counted as the reads (pread64) of idem and its guardian.
    let one = Env::new();
    one.cmd(["run", "--key", "old", "--", "true"]).succeeds();
    let many = Env::new();
    let stream: String = (0..20_000)
        .map(|n| {
            format!(
                concat!(
                    r#"{{"key":"job-{n}","job":"job-{n}","head":true,"#,
                    r#""run_id":"00000000-0000-7000-8000-{n:012}","status":"succeeded","#,
                    r#""exit_code":0,"signal":null,"attempts":0,"#,
                    r#""started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z","#,
                    r#""host":"h","pid":1,"command":["true"],"shell":false,"recovered":false,"#,
                    r#""attempts_detail":[]}}"#,
                    "\n"
                ),
                n = n
            )
        })
        .collect();
    let file = many.path("import.jsonl");
    std::fs::write(&file, stream).unwrap();
    many.cmd(["ledger", "import"]).arg(&file).succeeds();
    let reads = |env: &Env| -> Option<usize> {
        let trace = env.path("trace");
        let traced = std::process::Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=pread64", "-o"])
            .arg(&trace)
            .arg(env!("CARGO_BIN_EXE_idem"))
            .args(["run", "--key", "new", "--force", "--", "true"])
            .env("IDEM_DB", env.db())
            .env("HOME", env.dir.path())
            .stdin(Stdio::null())
            .output();
        let ran = traced.as_ref().is_ok_and(|output| output.status.success());
        if !crate::util::require(ran, &format!("tracing idem with strace ({traced:?})")) {
            return None;
        }
        let trace = std::fs::read_to_string(trace).unwrap();
        Some(
            trace
                .lines()
                .filter(|line| line.contains("pread64("))
                .count(),
        )
    };
    let (Some(small), Some(big)) = (reads(&one), reads(&many)) else {
        return;
    };
    assert!(
        big <= small + 30,
        "a first run read {big} pages of a ledger of 20,000 keys, {small} of one"
    );
}
