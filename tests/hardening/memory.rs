//! Bounded memory: histories far larger than what is printed, and the
//! caps of an import.

use std::ffi::OsStr;
use std::fs;
use std::path::PathBuf;
use std::process::{Output, Stdio};

use crate::util::{assert_code, max_rss_kib, sqlite, text, Env};

// ------------------------------------------------------------ bounded memory

/// Peak memory in KiB of idem `args`.
fn peak_kib(env: &Env, args: &[&str]) -> (Output, u64) {
    max_rss_kib(env.idem(args), Stdio::piped())
}

const MIB: usize = 1 << 20;
const BIG: &str = "yes 0123456789abcdef | head -c 1048576";

/// A key with `runs` runs, each with 1 MiB of output kept: one made by
/// idem, the others copied from it in SQL (far faster than running them).
fn big_history(env: &Env, runs: u32) {
    let output = env
        .cmd([
            "run",
            "--key",
            "big",
            "--capture",
            "1MiB",
            "--shell",
            "--",
            BIG,
        ])
        .succeeds();
    assert_eq!(output.output.stdout.len(), MIB);
    sqlite(
        &env.db(),
        &format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {})
             INSERT INTO runs (run_id, key_id, status, exit_code, signal, attempts, started_at,
                 finished_at, host, pid, command, shell, recovered)
             SELECT randomblob(16), key_id, status, exit_code, signal, attempts,
                 started_at - i * 60000, finished_at - i * 60000, host, pid, command, shell,
                 recovered
             FROM runs, n WHERE runs.id = 1;
             INSERT INTO attempts (run, n, started_at, finished_at, exit_code, signal,
                 timed_out, stdout_tail, stderr_tail)
             SELECT r.id, 1, r.started_at, r.finished_at, 0, NULL, 0,
                 (SELECT stdout_tail FROM attempts WHERE run = 1), NULL
             FROM runs r WHERE r.id > 1;",
            runs - 1
        ),
    );
    assert_eq!(
        sqlite(&env.db(), "SELECT count(*) FROM attempts"),
        runs.to_string()
    );
}

/// What a history of 200 runs of 1 MiB kept each (200 MiB in the ledger)
/// adds to `ledger show`, `show --json` and `run --replay`, over the same
/// command on a key of one run that kept nothing, in the same ledger. A debug build's
/// own start comes near 16 MiB alone (15.0 to 15.6 MiB measured for `ledger
/// show` of a small key), so it is measured apart, as the import's test
/// does: what the history may add is the latest run's kept tails (1 MiB
/// each for stdout and stderr) and SQLite's page cache, and nothing that
/// grows with the history.
#[test]
fn show_and_replay_stay_small_whatever_the_history() {
    let env = Env::new();
    big_history(&env, 200);
    // The same command, its output kept by none.
    env.cmd([
        "run",
        "--key",
        "small",
        "--capture",
        "0",
        "--shell",
        "--",
        BIG,
    ])
    .succeeds();
    let added_kib = 4 * 1024;
    let peaks = |key: &str, command: &[&str]| {
        let mut args = command.to_vec();
        args.insert(2, key);
        let (output, peak) = peak_kib(&env, &args);
        assert_code(&output, 0);
        (output, peak)
    };
    for command in [&["ledger", "show"][..], &["ledger", "show", "--json"]] {
        let (_, start) = peaks("small", command);
        let (output, peak) = peaks("big", command);
        assert!(
            peak.saturating_sub(start) <= added_kib,
            "{command:?} took {peak} KiB, {start} KiB for a key that kept nothing"
        );
        if command.len() == 2 {
            let shown = text(&output.stdout);
            assert_eq!(shown.matches("\nrun ").count(), 10, "the latest 10 runs");
            assert!(shown.contains("--limit"), "says that more runs exist");
        }
    }
    let replay = ["run", "--key", "--replay", "--shell", "--", BIG];
    let (_, start) = peaks("small", &replay);
    let (_, peak) = peaks("big", &replay);
    assert!(
        peak.saturating_sub(start) <= added_kib,
        "run --replay took {peak} KiB, {start} KiB for a key that kept nothing"
    );
}

#[test]
fn show_prints_its_latest_runs_up_to_a_limit() {
    let env = Env::new();
    for n in 0..4 {
        let command = format!("echo output-{n}");
        let args = ["run", "--key", "k", "--force", "--shell", "--", &command];
        env.cmd(args).succeeds();
    }
    let output = env.cmd(["ledger", "show", "k", "--limit", "2"]).succeeds();
    let shown = output.stdout();
    assert_eq!(shown.matches("\nrun ").count(), 2, "{shown}");
    assert!(
        shown.contains("output-3") && shown.contains("output-2"),
        "{shown}"
    );
    assert!(!shown.contains("output-1"), "{shown}");
    assert!(shown.contains("2 earlier runs"), "{shown}");
    let object = env
        .cmd(["ledger", "show", "k", "--json", "--limit", "2"])
        .run()
        .json();
    assert_eq!(object["history"].as_array().unwrap().len(), 1);
    assert_eq!(
        object["attempts_detail"][0]["stdout_tail"], "output-3\n",
        "{object}"
    );
    // Without --limit, all four fit in the default of 10.
    let all = env.cmd(["ledger", "show", "k"]).run().stdout();
    assert_eq!(all.matches("\nrun ").count(), 4, "{all}");
    assert!(!all.contains("earlier runs"), "{all}");
}

/// A line of `ledger export` with a stdout tail of `tail` bytes of `byte`.
fn export_line(run_id: &str, key: &str, tail: usize, finished: bool) -> String {
    let finished_at = if finished {
        "\"2026-01-01T00:00:01Z\""
    } else {
        "null"
    };
    format!(
        "{{\"key\":\"{key}\",\"run_id\":\"{run_id}\",\"status\":\"succeeded\",\"exit_code\":0,\
         \"attempts\":1,\"started_at\":\"2026-01-01T00:00:00Z\",\"finished_at\":{finished_at},\
         \"host\":\"h\",\"pid\":1,\"command\":[\"true\"],\"shell\":false,\"head\":true,\
         \"attempts_detail\":[{{\"attempt\":1,\"exit_code\":0,\
         \"started_at\":\"2026-01-01T00:00:00Z\",\"finished_at\":\"2026-01-01T00:00:01Z\",\
         \"stdout_tail\":\"{}\",\"stderr_tail\":\"\"}}]}}\n",
        "x".repeat(tail).replacen('x', "s", 1)
    )
}

fn import_file(env: &Env, lines: &[Vec<u8>]) -> PathBuf {
    let path = env.path("import.jsonl");
    fs::write(&path, lines.concat()).unwrap();
    path
}

#[test]
fn import_caps_a_line_and_the_tails_it_keeps() {
    let env = Env::new();
    // A tail three times the largest --capture: kept, but only its end.
    let long = export_line(
        "018f0000-0000-7000-8000-000000000001",
        "long",
        3 * MIB,
        true,
    );
    let file = import_file(&env, &[long.into_bytes()]);
    env.cmd([OsStr::new("ledger"), "import".as_ref(), file.as_os_str()])
        .succeeds();
    assert_eq!(
        sqlite(&env.db(), "SELECT length(stdout_tail) FROM attempts"),
        MIB.to_string()
    );
    assert_eq!(
        sqlite(
            &env.db(),
            "SELECT hex(substr(stdout_tail, 1, 1)) FROM attempts"
        ),
        "78",
        "the end of the tail is kept, not its start"
    );

    // A line far past the cap: refused by number, in bounded memory.
    let ok = export_line("018f0000-0000-7000-8000-000000000002", "ok", 10, true);
    let huge = export_line(
        "018f0000-0000-7000-8000-000000000003",
        "huge",
        150 * MIB,
        true,
    );
    let file = import_file(&env, &[ok.into_bytes(), huge.into_bytes()]);
    let (output, peak) = peak_kib(&env, &["ledger", "import", &file.display().to_string()]);
    assert_code(&output, 2);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("longer than"), "{stderr}");
    assert!(peak < 64 * 1024, "import of a 150 MiB line took {peak} KiB");
    let keys = sqlite(&env.db(), "SELECT group_concat(key) FROM keys");
    assert!(keys.contains("ok") && !keys.contains("huge"), "{keys}");
}

#[test]
fn import_refuses_a_line_that_is_not_utf8_by_its_number() {
    let env = Env::new();
    let ok = export_line("018f0000-0000-7000-8000-000000000001", "ok", 10, true);
    let mut bad = export_line("018f0000-0000-7000-8000-000000000002", "bad", 10, true).into_bytes();
    let at = bad.iter().position(|byte| *byte == b's').unwrap();
    bad[at] = 0xff;
    let file = import_file(&env, &[ok.into_bytes(), bad]);
    env.cmd([OsStr::new("ledger"), "import".as_ref(), file.as_os_str()])
        .expect_code(2)
        .stderr_has("line 2")
        .stderr_has("UTF-8");
}

// ------------------------------------------------------------------ clocks

#[test]
fn import_refuses_a_success_without_its_finish_time() {
    let env = Env::new();
    let ok = export_line("018f0000-0000-7000-8000-000000000001", "ok", 10, true);
    let endless = export_line("018f0000-0000-7000-8000-000000000002", "endless", 10, false);
    let file = import_file(&env, &[ok.into_bytes(), endless.into_bytes()]);
    env.cmd([OsStr::new("ledger"), "import".as_ref(), file.as_os_str()])
        .expect_code(2)
        .stderr_has("line 2")
        .stderr_has("finished_at");
}
