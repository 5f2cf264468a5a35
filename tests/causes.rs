//! What each attempt died of (exit N, signal N, timeout, ...) and what it
//! used (peak memory, CPU time), recorded with the attempt on either
//! ledger, shown by `ledger show` and its JSON, carried by export and
//! import, and given to hooks as `IDEM_CAUSE`.

use serde_json::Value;

use crate::util::{on_every_backend, Backend};

on_every_backend!(each_attempt_records_what_it_died_of_and_what_it_used);

/// Attempt 1 takes 64 MiB and exits 3; attempt 2 is killed by signal 9;
/// attempt 3 runs past its timeout (long enough for the first under any
/// load).
const SCRIPT: &str = r#"case $IDEM_ATTEMPT in
1) python3 -c 'import sys; x = bytearray(64 << 20); sys.exit(3)';;
2) kill -9 $$;;
*) exec sleep 60;;
esac"#;

fn each_attempt_records_what_it_died_of_and_what_it_used(backend: &Backend) {
    let env = backend.env();
    let told = env.path("cause");
    let hook = format!("printf %s \"$IDEM_CAUSE\" > '{}'", told.display());
    env.cmd(["run", "--key", "k", "--retries", "2", "--backoff", "1ms"])
        .args([
            "--timeout",
            "10s",
            "--kill-after",
            "1s",
            "--on-failure",
            &hook,
        ])
        .args(["--shell", "--", SCRIPT])
        .expect_code(124);
    let shown = env.show_json("k");
    let attempts = shown["attempts_detail"].as_array().unwrap();
    let causes: Vec<&Value> = attempts.iter().map(|attempt| &attempt["cause"]).collect();
    assert_eq!(causes, ["exit 3", "signal 9", "timeout"], "{shown}");
    let peak = attempts[0]["peak_memory_bytes"].as_i64().unwrap();
    assert!(peak >= 64 << 20, "attempt 1 used 64 MiB, not {peak} bytes");
    for attempt in attempts {
        assert!(attempt["cpu_ms"].as_i64().is_some(), "{attempt}");
        assert!(
            attempt["peak_memory_bytes"].as_i64().unwrap() > 0,
            "{attempt}"
        );
    }
    assert_eq!(std::fs::read_to_string(&told).unwrap(), "timeout");
    let text = env.cmd(["ledger", "show", "k"]).succeeds().stdout();
    assert!(
        text.contains("  attempt 3: exit 124 (timed out); "),
        "{text}"
    );
    assert!(text.contains("\n    used: peak memory "), "{text}");

    // Export and import carry them.
    let stream = crate::ledger::export(&env);
    let target = backend.env();
    crate::ledger::import(&target, &stream).succeeds();
    assert_eq!(
        target.show_json("k")["attempts_detail"],
        shown["attempts_detail"]
    );
}
