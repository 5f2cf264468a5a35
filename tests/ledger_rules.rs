//! The ledger's rules and its row layer, as both backends keep them: a
//! stored value that cannot be read is an error naming the ledger, and
//! `import` streams in bounded memory.

use crate::pg::Server;
use crate::util::{assert_code, Env};

#[test]
fn postgres_an_unknown_status_is_an_error_naming_the_ledger() {
    let Some(server) = Server::start("postgres_an_unknown_status_is_an_error_naming_the_ledger")
    else {
        return;
    };
    let env = Env::new();
    let url = server.url();
    let idem = |args: &[&str]| env.cmd(args).db(&url);
    idem(&["run", "--key", "k", "--", "true"]).succeeds();
    // The schema's CHECK keeps an unknown status out; a ledger changed by
    // hand (or by a newer idem) may hold one all the same.
    server.sql(
        "idem",
        "ALTER TABLE idem.runs DROP CONSTRAINT runs_status_check;
         UPDATE idem.runs SET status = 'paused';",
    );
    for args in [
        &["ledger", "list"][..],
        &["ledger", "show", "k"],
        &["run", "--key", "k", "--", "true"],
    ] {
        idem(args)
            .expect_code(125)
            .stderr_has("ledger postgresql://")
            .stderr_has("a stored value cannot be read (unknown run status \"paused\")")
            .stderr_one_line();
    }
}

#[test]
fn sqlite_an_unknown_status_is_an_error_naming_the_ledger() {
    let env = Env::new();
    env.cmd(["run", "--key", "k", "--", "true"]).succeeds();
    // SQLite cannot drop a CHECK constraint; writing the schema's text
    // without it is what a hand-edited ledger looks like.
    crate::util::sqlite(
        &env.db(),
        "PRAGMA writable_schema = ON;
         UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (status IN (0, 1, 2, 3))', '')
         WHERE name = 'runs';
         PRAGMA writable_schema = OFF;",
    );
    // A code no idem wrote, and a name where the ledger keeps codes.
    for (stored, shown) in [("7", "7"), ("'paused'", "\"paused\"")] {
        crate::util::sqlite(&env.db(), &format!("UPDATE runs SET status = {stored};"));
        env.cmd(["ledger", "list"])
            .expect_code(125)
            .stderr_has(&env.db().display().to_string())
            .stderr_has(&format!(
                "a stored value cannot be read (unknown run status {shown})"
            ));
    }
}

/// Maximum resident set size in KiB of `idem ledger import FILE`, by GNU
/// time (as tests/hardening/memory.rs measures it).
fn import_peak_kib(env: &Env, file: &std::path::Path) -> (std::process::Output, u64) {
    let mut import = env.idem(["ledger", "import"]);
    import.arg(file);
    crate::util::max_rss_kib(import, std::process::Stdio::piped())
}

#[test]
fn import_of_a_16_mib_line_stays_within_16_mib() {
    const MIB: usize = 1 << 20;
    let env = Env::new();
    let head = "{\"key\":\"long\",\"run_id\":\"018f0000-0000-7000-8000-000000000001\",\
        \"status\":\"succeeded\",\"exit_code\":0,\"attempts\":1,\
        \"started_at\":\"2026-01-01T00:00:00Z\",\"finished_at\":\"2026-01-01T00:00:01Z\",\
        \"host\":\"h\",\"pid\":1,\"command\":[\"true\"],\"shell\":false,\"head\":true,\
        \"attempts_detail\":[{\"attempt\":1,\"exit_code\":0,\
        \"started_at\":\"2026-01-01T00:00:00Z\",\"finished_at\":\"2026-01-01T00:00:01Z\",\
        \"stderr_tail\":\"\",\"stdout_tail\":\"s";
    let end = "\"}]}";
    // As long as a line may be: one tail of (nearly) 16 MiB.
    let mut line = head.as_bytes().to_vec();
    line.resize(16 * MIB - end.len(), b'x');
    line.extend_from_slice(end.as_bytes());
    line.push(b'\n');
    let file = env.path("import.jsonl");
    std::fs::write(&file, &line).unwrap();
    // What the line adds, over the same import of a line of a few bytes:
    // idem's own start (its code pages, the ledger's schema) is measured
    // apart, since a debug build's alone comes near 16 MiB. The long line
    // may add its kept tail (1 MiB and a third as read), the copy SQLite
    // binds and the allocator's slack, and nothing that grows with the
    // line: measured, 3.6 to 4.1 MiB with this round's idem and with the
    // one before it (/usr/bin/time, three imports each), so the bound is 5
    // MiB, where a line held whole would add 16.
    let small = env.path("small.jsonl");
    let short =
        head.replacen("\"long\"", "\"short\"", 1)
            .replacen("-000000000001", "-000000000002", 1);
    let short = format!("{short}x{end}\n");
    std::fs::write(&small, short).unwrap();
    let (output, start) = import_peak_kib(&env, &small);
    assert_code(&output, 0);
    let (output, peak) = import_peak_kib(&env, &file);
    assert_code(&output, 0);
    assert!(
        peak.saturating_sub(start) <= 5 * 1024,
        "import of a 16 MiB line took {peak} KiB, {start} KiB for a short one"
    );
    let shown = env.show_json("long");
    let tail = shown["attempts_detail"][0]["stdout_tail"].as_str().unwrap();
    assert_eq!(tail.len(), MIB, "the tail's last 1 MiB is kept");
    assert!(tail.bytes().all(|byte| byte == b'x'));
}
