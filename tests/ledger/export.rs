//! `idem ledger export` and `import`: round trips, order, what an import
//! honours and refuses, and a closed pipe.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;

use serde_json::Value;

use crate::util::{assert_code, on_every_backend, text, Backend, Env};

use super::{export, import, keys_of, sh, start_sleeper};

on_every_backend!(
    export_then_import_round_trips_into_a_fresh_ledger,
    a_long_export_comes_whole_and_in_order,
    an_imported_success_is_honoured_by_run,
    an_import_never_overrides_a_newer_run,
    import_refuses_a_bad_line_with_its_number,
    a_run_exported_while_running_takes_its_outcome_on_a_later_import,
    export_into_a_closed_pipe_is_the_readers_choice,
);

fn export_then_import_round_trips_into_a_fresh_ledger(backend: &Backend) {
    let source = backend.env();
    // Non-UTF-8 argv and output, a retried failure, a forgotten key.
    source
        .cmd(["run", "--key", "bin", "--", "printf"])
        .arg(OsStr::from_bytes(b"\xff\xfe-out\n"))
        .succeeds();
    source
        .cmd([
            "run",
            "--key",
            "flaky",
            "--retries",
            "1",
            "--backoff",
            "1ms",
            "--shell",
            "--",
            "echo try >&2; exit 3",
        ])
        .expect_code(3);
    sh(&source, "done", "echo done").succeeds();
    sh(&source, "dropped", "true").succeeds();
    source.cmd(["ledger", "forget", "dropped"]).succeeds();

    let stream = export(&source);
    let lines: Vec<Value> = stream
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 4);
    let bin = lines.iter().find(|line| line["key"] == "bin").unwrap();
    assert!(bin.get("command_base64").is_some(), "{bin}");
    assert!(bin["attempts_detail"][0]
        .get("stdout_tail_base64")
        .is_some());
    assert_eq!(bin["head"], true);
    let flaky = lines.iter().find(|line| line["key"] == "flaky").unwrap();
    assert_eq!(flaky["attempts_detail"].as_array().unwrap().len(), 2);
    let dropped = lines.iter().find(|line| line["key"] == "dropped").unwrap();
    assert_eq!(dropped["head"], false);

    let target = backend.env();
    import(&target, &stream).succeeds().stdout_is(
        "imported 4 runs (0 updated, 0 already here); 3 became their keys' deciding runs\n",
    );
    assert_eq!(export(&target), stream, "the round trip is lossless");
    assert_eq!(target.list_json(), source.list_json());
    assert_eq!(target.show_json("bin"), source.show_json("bin"));

    import(&target, &stream).succeeds().stdout_is(
        "imported 0 runs (0 updated, 4 already here); 0 became their keys' deciding runs\n",
    );
    assert_eq!(export(&target), stream, "importing twice changes nothing");

    // Through stdin too.
    let piped = backend.env();
    piped
        .cmd(["ledger", "import"])
        .stdin(stream.clone())
        .succeeds();
    assert_eq!(export(&piped), stream);
}

/// More runs and attempts than the export reads at a time, with the
/// attempts' batches falling out of step with the runs'.
fn a_long_export_comes_whole_and_in_order(backend: &Backend) {
    const RUNS: usize = 700;
    let mut stream = String::new();
    for n in 0..RUNS {
        let attempts: Vec<Value> = (1..=n % 3)
            .map(|attempt| {
                serde_json::json!({
                    "attempt": attempt, "exit_code": 1, "signal": null, "timed_out": false,
                    "output_cut": false,
                    "started_at": format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
                    "finished_at": format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
                    "stdout_tail": format!("run {n} attempt {attempt}\n"), "stderr_tail": "",
                })
            })
            .collect();
        let line = serde_json::json!({
            "key": format!("k{}", n % 40), "job": format!("k{}", n % 40), "head": false,
            "run_id": format!("00000000-0000-7000-8000-{n:012}"),
            "status": "failed", "exit_code": 1, "signal": null, "attempts": n % 3,
            "started_at": format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
            "finished_at": format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
            "host": "h", "pid": 1, "command": ["true"], "shell": false, "recovered": false,
            "attempts_detail": attempts,
        });
        stream.push_str(&line.to_string());
        stream.push('\n');
    }
    let first = backend.env();
    import(&first, stream.as_bytes()).succeeds();
    let exported = export(&first);
    let lines: Vec<Value> = exported
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), RUNS);
    for (n, line) in lines.iter().enumerate() {
        assert_eq!(line["run_id"], format!("00000000-0000-7000-8000-{n:012}"));
        let attempts = line["attempts_detail"].as_array().unwrap();
        assert_eq!(attempts.len(), n % 3, "{line}");
        for (at, attempt) in attempts.iter().enumerate() {
            assert_eq!(
                attempt["stdout_tail"],
                format!("run {n} attempt {}\n", at + 1)
            );
        }
    }
    let second = backend.env();
    import(&second, &exported).succeeds();
    assert_eq!(export(&second), exported, "the round trip is lossless");
}

fn an_imported_success_is_honoured_by_run(backend: &Backend) {
    let source = backend.env();
    let count = source.count_cmd("count");
    let run = |env: &Env| env.cmd(["run", "--key", "k", "--shell", "--", &count]);
    run(&source).succeeds();
    let target = backend.env();
    import(&target, &export(&source)).succeeds();
    // The same command line (the fingerprint covers argv): skipped.
    run(&target).succeeds();
    assert_eq!(source.count("count"), 1);
    // A forgotten key stays forgotten through export and import.
    source.cmd(["ledger", "forget", "k"]).succeeds();
    let again = backend.env();
    import(&again, &export(&source)).succeeds();
    run(&again).succeeds();
    assert_eq!(source.count("count"), 2);
}

fn an_import_never_overrides_a_newer_run(backend: &Backend) {
    let older = backend.env();
    sh(&older, "k", "exit 1").expect_code(1);
    let stream = export(&older);
    let target = backend.env();
    sh(&target, "k", "echo newer").succeeds();
    import(&target, &stream).succeeds().stdout_has("0 became");
    let shown = target.show_json("k");
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["history"][0]["status"], "failed");
    // The newer success still decides.
    sh(&target, "k", "echo newer").succeeds();
    assert_eq!(target.list_json().as_array().unwrap().len(), 2);
}

fn import_refuses_a_bad_line_with_its_number(backend: &Backend) {
    let source = backend.env();
    sh(&source, "a", "true").succeeds();
    let mut stream = export(&source);
    stream.extend_from_slice(b"{\"key\": \"b\"}\n");
    let target = backend.env();
    import(&target, &stream)
        .expect_code(2)
        .stderr_one_line()
        .stderr_has("line 2")
        .stderr_has("run_id");
    // The good line before it is in, so a fixed stream can be imported again.
    assert_eq!(keys_of(&target.list_json()), ["a"]);

    for bad in [
        "not json",
        "[]",
        r#"{"key":"","run_id":"01a22687-a584-7676-8edf-694d9a9fe33c"}"#,
    ] {
        import(&backend.env(), bad.as_bytes())
            .expect_code(2)
            .stderr_has("line 1");
    }
    backend
        .env()
        .cmd(["ledger", "import", "no-such-file"])
        .expect_code(2)
        .stderr_has("no-such-file");
}

fn a_run_exported_while_running_takes_its_outcome_on_a_later_import(backend: &Backend) {
    let source = backend.env();
    let sleeper = start_sleeper(backend, &source, "slow");
    let during = export(&source);
    let target = backend.env();
    import(&target, &during).succeeds().stdout_has("0 became");
    assert_eq!(target.list_json()[0]["status"], "running");
    // Its owner is not in this ledger, so it decides nothing here.
    target
        .cmd(["ledger", "show", "slow"])
        .run()
        .stdout_has("forgotten");

    // SIGTERM: idem passes it on and records the run as failed.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sleeper.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_code(&sleeper.wait_with_output().unwrap(), 143);
    import(&target, &export(&source)).succeeds().stdout_is(
        "imported 0 runs (1 updated, 0 already here); 1 became its key's deciding run\n",
    );
    assert_eq!(export(&target), export(&source));
}

fn export_into_a_closed_pipe_is_the_readers_choice(backend: &Backend) {
    let source = backend.env();
    sh(&source, "seed", "true").succeeds();
    let line = String::from_utf8(export(&source)).unwrap();
    let template: Value = serde_json::from_str(line.trim()).unwrap();
    // Enough runs that the export outgrows any pipe buffer.
    let mut stream = String::new();
    for n in 0..3000u32 {
        let mut run = template.clone();
        run["run_id"] = format!("01a22687-a584-7676-8edf-{n:012}").into();
        run["key"] = format!("key-{n}").into();
        run["attempts_detail"][0]["stdout_tail"] = "x".repeat(200).into();
        stream.push_str(&run.to_string());
        stream.push('\n');
    }
    let env = backend.env();
    import(&env, stream.as_bytes()).succeeds();
    let mut child = env
        .idem(["ledger", "export"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 100];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert_code(&output, 0);
    assert_eq!(text(&output.stderr), "");
}

// What only a SQLite file can show: its path, and its bytes edited by hand.
