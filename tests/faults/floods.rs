//! Floods of output: memory and the ledger stay small.

use std::fs;
use std::process::Stdio;

use crate::util::{max_rss_kib, text, Env};

#[test]
fn a_flood_of_output_keeps_memory_and_the_ledger_small() {
    let env = Env::new();
    // 256 MiB on stdout and 256 MiB on stderr at once.
    let script = "head -c 268435456 /dev/zero & head -c 268435456 /dev/zero >&2; wait";
    let command = env.idem([
        "run",
        "--key",
        "flood",
        "--retries",
        "0",
        "--shell",
        "--",
        script,
    ]);
    let (output, rss) = max_rss_kib(command, Stdio::null());
    let status_line = text(&output.stderr);
    assert!(
        status_line.contains("Exit status: 0"),
        "{}",
        status_line.lines().last().unwrap_or("")
    );
    println!("flood: 512 MiB through idem, max RSS {rss} KiB");
    assert!(rss <= 16 * 1024, "idem used {rss} KiB for a flood");
    let shown = env.show_json("flood");
    assert_eq!(
        shown["attempts_detail"][0]["stdout_tail"]
            .as_str()
            .unwrap()
            .len(),
        64 << 10
    );
    let ledger_bytes: u64 = ["", "-wal"]
        .iter()
        .filter_map(|suffix| fs::metadata(format!("{}{suffix}", env.db().display())).ok())
        .map(|meta| meta.len())
        .sum();
    assert!(
        ledger_bytes < 1 << 20,
        "the ledger holds {ledger_bytes} bytes"
    );

    // The largest capture (1MiB a stream) still bounds memory.
    let command = env.idem([
        "run",
        "--key",
        "flood-1m",
        "--retries",
        "0",
        "--capture",
        "1MiB",
        "--shell",
        "--",
        script,
    ]);
    let (_, rss) = max_rss_kib(command, Stdio::null());
    println!("flood with --capture 1MiB: max RSS {rss} KiB");
    // A debug build carries more than a release one (benches/ measures that).
    assert!(rss <= 24 * 1024, "idem used {rss} KiB with --capture 1MiB");
}
