//! `idem doctor`: a healthy ledger found healthy and unchanged, each
//! problem named with its fix.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::{crash_writer, listing, run_with_db, sqlite, wait_for_line};
use crate::util::{assert_code, text, Env};

fn doctor_json(env: &Env, db: &Path) -> (i32, serde_json::Value) {
    let output = run_with_db(env, db, &["doctor", "--json"]);
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let report = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("doctor --json printed no JSON: {}", text(&output.stdout)));
    (output.status.code().unwrap(), report)
}

fn check<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["check"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))
}

#[test]
fn doctor_finds_a_healthy_ledger_healthy_and_changes_nothing() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "a", "--", "true"]), 0);
    assert_code(
        &env.run(["run", "--key", "b", "--retries", "0", "--", "false"]),
        1,
    );
    let before = fs::read(env.db()).unwrap();
    let names = listing(env.dir.path());
    let output = env.run(["doctor"]);
    assert_code(&output, 0);
    let stdout = text(&output.stdout);
    assert!(stdout.trim_end().ends_with("healthy"), "{stdout}");
    for name in [
        "schema",
        "integrity",
        "file permissions",
        "folder permissions",
        "leftover files",
        "running keys",
        "free space",
    ] {
        assert!(stdout.contains(name), "{name} missing: {stdout}");
    }
    let (code, report) = doctor_json(&env, &env.db());
    assert_eq!(code, 0);
    assert_eq!(report["healthy"], true);
    assert!(report["schema_version"].as_u64().unwrap() >= 1);
    assert!(check(&report, "schema")["message"]
        .as_str()
        .unwrap()
        .contains("(current)"));
    assert_eq!(check(&report, "integrity")["status"], "ok");
    assert!(report["free_bytes"].as_u64().unwrap() > 0);
    assert_eq!(
        fs::read(env.db()).unwrap(),
        before,
        "doctor changed the ledger"
    );
    assert_eq!(
        listing(env.dir.path()),
        names,
        "doctor created or removed files"
    );

    // A missing ledger is reported, and not created (nor its folder).
    let missing = env.path("nowhere/ledger.db");
    let (code, report) = doctor_json(&env, &missing);
    assert_eq!(code, 1);
    assert_eq!(check(&report, "file")["status"], "problem");
    assert!(!env.path("nowhere").exists());
    // A shared ledger that cannot be reached is a problem named as such.
    let url = Path::new("postgres://127.0.0.1:1/idem?connect_timeout=5");
    let output = run_with_db(&env, url, &["doctor", "--json"]);
    assert_code(&output, 1);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(check(&report, "connection")["status"], "problem");
    let help = env.run(["doctor", "--help"]);
    assert!(text(&help.stdout).contains("changes nothing"));
}

#[test]
fn doctor_names_each_problem_and_its_fix() {
    let env = Env::new();
    let folder = env.path("shared");
    fs::create_dir(&folder).unwrap();
    let db = folder.join("ledger.db");
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "ok", "--", "true"]),
        0,
    );
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "lost", "--", "true"]),
        0,
    );
    // A key whose owner died without an outcome (no such pid runs).
    sqlite(
        &db,
        "UPDATE runs SET status = 0, finished_at = NULL, exit_code = NULL, pid = 999999999
             WHERE id = (SELECT head FROM keys WHERE key = 'lost');
         UPDATE keys SET owner_boot = 'gone', owner_pid_start = 1 WHERE key = 'lost';",
    );
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o777)).unwrap();
    fs::set_permissions(&db, fs::Permissions::from_mode(0o644)).unwrap();
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["healthy"], false);
    assert_eq!(report["stuck_keys"], serde_json::json!(["lost"]));
    let running = check(&report, "running keys");
    assert_eq!(running["status"], "problem");
    assert!(running["fix"].as_str().unwrap().contains("abandoned"));
    // A folder anyone can write is refused by run, so it is a problem.
    assert_eq!(check(&report, "folder permissions")["status"], "problem");
    assert!(check(&report, "folder permissions")["fix"]
        .as_str()
        .unwrap()
        .contains("chmod 700"));
    assert_eq!(check(&report, "file permissions")["status"], "warn");
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "lost", "--", "true"]),
        125,
    );
    // Private again, the next run of the key takes it over, and the ledger
    // is healthy again.
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(&db, fs::Permissions::from_mode(0o600)).unwrap();
    assert_code(
        &run_with_db(&env, &db, &["run", "--key", "lost", "--", "true"]),
        0,
    );
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 0, "{report}");

    // A newer ledger (a version far ahead of any this idem knows).
    sqlite(&db, "PRAGMA user_version = 99;");
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 1);
    assert!(check(&report, "schema")["message"]
        .as_str()
        .unwrap()
        .contains("newer idem"));
    sqlite(&db, "PRAGMA user_version = 1;");

    // A corrupt page.
    let mut bytes = fs::read(&db).unwrap();
    let page = 4096;
    assert!(bytes.len() >= 4 * page);
    for byte in &mut bytes[2 * page + 8..3 * page] {
        *byte = 0x5a;
    }
    fs::write(&db, &bytes).unwrap();
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 1, "{report}");
    assert_eq!(fs::read(&db).unwrap(), bytes);
}

#[test]
fn doctor_tells_leftover_files_from_files_in_use() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "a", "--", "true"]), 0);
    let db = env.db();
    // A live reader holds the ledger open.
    let mut reader = Command::new("sqlite3")
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = reader.stdin.take().unwrap();
    writeln!(stdin, "SELECT count(*) FROM keys;").unwrap();
    stdin.flush().unwrap();
    wait_for_line(&mut reader);
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 0, "{report}");
    let leftover = check(&report, "side files");
    assert_eq!(leftover["status"], "ok", "{report}");
    assert!(leftover["message"]
        .as_str()
        .unwrap()
        .contains("in use by process"));
    drop(stdin);
    reader.wait().unwrap();

    // A writer killed with its log and index on disk: harmless, the next
    // reader folds the log in.
    crash_writer(&db, "INSERT INTO keys (key) VALUES ('from-the-log');");
    let names = listing(env.dir.path());
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 0, "{report}");
    assert_eq!(check(&report, "leftover files")["status"], "ok");
    // Only the log left: doctor reads a copy rather than create the index.
    fs::remove_file(format!("{}-shm", db.display())).unwrap();
    let names_without_shm = listing(env.dir.path());
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 0, "{report}");
    assert_eq!(check(&report, "integrity")["status"], "ok");
    assert_eq!(listing(env.dir.path()), names_without_shm);
    assert_ne!(names, names_without_shm);
    // The log is intact: whoever opens the ledger next folds it in.
    let keys = Command::new("sqlite3")
        .arg(&db)
        .arg("SELECT key FROM keys ORDER BY key")
        .output()
        .unwrap();
    assert_eq!(text(&keys.stdout), "a\nfrom-the-log\n");
}

#[test]
fn doctor_warns_of_a_wal_that_checkpoints_do_not_drain() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "a", "--", "true"]), 0);
    let db = env.db();
    crash_writer(
        &db,
        "CREATE TABLE pad (x); INSERT INTO pad VALUES (zeroblob(20000000));",
    );
    let (code, report) = doctor_json(&env, &db);
    assert_eq!(code, 0, "{report}");
    let side = check(&report, "leftover files");
    assert_eq!(side["status"], "warn", "{report}");
    assert!(
        side["message"].as_str().unwrap().contains("MiB"),
        "{report}"
    );
}

#[test]
fn doctor_judges_a_running_owner_by_the_ledgers_own_rule() {
    use std::os::unix::process::CommandExt;
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "done", "--", "true"]), 0);
    let mut owner = env
        .idem(["run", "--key", "live", "--", "sleep", "600"])
        .process_group(0)
        .spawn()
        .unwrap();
    crate::util::eventually(
        "the attempt to be recorded",
        std::time::Duration::from_secs(60),
        || {
            let latest = &env.list_json()[0];
            latest["key"] == "live" && latest["attempts"] == 1
        },
    );
    // Alive by the kernel lock its run holds: running, not stuck.
    let (code, report) = doctor_json(&env, &env.db());
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["running_keys"], 1, "{report}");
    assert_eq!(report["stuck_keys"], serde_json::json!([]), "{report}");
    assert_eq!(check(&report, "running keys")["status"], "ok");
    // Killed with its command, nothing of the run holds the lock: stuck,
    // as the next `idem run` of the key would judge it.
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(owner.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    owner.wait().unwrap();
    let before = fs::read(env.db()).unwrap();
    let names = listing(env.dir.path());
    // idem is reaped, but its guardian, killed with it, may still be
    // exiting, and the kernel lock goes only with its last holder.
    crate::util::eventually(
        "the killed run's guardian to be gone",
        std::time::Duration::from_secs(30),
        || doctor_json(&env, &env.db()).0 == 1,
    );
    let (code, report) = doctor_json(&env, &env.db());
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        report["stuck_keys"],
        serde_json::json!(["live"]),
        "{report}"
    );
    assert_eq!(report["running_keys"], 0, "{report}");
    assert_eq!(fs::read(env.db()).unwrap(), before, "doctor wrote");
    assert_eq!(listing(env.dir.path()), names, "doctor made files");
    assert_eq!(env.list_json()[0]["status"], "running", "doctor changed it");
}

#[test]
fn doctor_reads_an_older_schema_and_migrates_nothing() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "a", "--", "true"]), 0);
    let (code, report) = doctor_json(&env, &env.db());
    assert_eq!(code, 0, "{report}");
    let latest = report["schema_version"].as_i64().unwrap();
    let older = latest - 1;
    sqlite(&env.db(), &format!("PRAGMA user_version = {older};"));
    let before = fs::read(env.db()).unwrap();
    let names = listing(env.dir.path());
    let (code, report) = doctor_json(&env, &env.db());
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["schema_version"], older, "{report}");
    let schema = check(&report, "schema");
    assert_eq!(schema["status"], "warn", "{report}");
    assert!(
        schema["message"]
            .as_str()
            .unwrap()
            .contains(&format!("older than this idem's {latest}")),
        "{report}"
    );
    assert_eq!(check(&report, "integrity")["status"], "ok");
    assert_eq!(fs::read(env.db()).unwrap(), before, "doctor migrated");
    assert_eq!(listing(env.dir.path()), names, "doctor made files");
}

/// The fix doctor gives for a missing ledger at `db`, checked to be a
/// problem.
fn missing_ledger_fix(report: &serde_json::Value) -> String {
    let file = check(report, "file");
    assert_eq!(file["status"], "problem", "{file}");
    file["fix"].as_str().unwrap().to_owned()
}

#[test]
fn doctor_promises_a_new_ledger_only_where_run_would_create_it() {
    let env = Env::new();
    if !crate::util::require(nix::unistd::geteuid().is_root(), "root (to chown)") {
        return;
    }
    let open = env.path("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let theirs = env.path("theirs");
    fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
    for (folder, refused) in [
        (&open, "other users can replace the ledger"),
        (&theirs, "belongs to nobody"),
    ] {
        let db = folder.join("ledger.db");
        let (code, report) = doctor_json(&env, &db);
        assert_eq!(code, 1, "{report}");
        let fix = missing_ledger_fix(&report);
        assert!(!fix.contains("creates it"), "{fix}");
        // `run` refuses it, in the words doctor gives.
        let output = run_with_db(&env, &db, &["run", "--key", "k", "--", "true"]);
        assert_code(&output, 125);
        let said = text(&output.stderr);
        assert!(said.contains(refused), "{said}");
        assert!(
            fix.contains(said.trim().trim_start_matches("idem: ")),
            "{fix}"
        );
        assert!(!db.exists());
    }

    // A missing folder is not made for a --db: refused by both, with the
    // mkdir to run; once made, promised, and kept.
    let fresh = env.path("new/sub/ledger.db");
    let (_, report) = doctor_json(&env, &fresh);
    let mkdir = format!("mkdir -p {}", env.path("new/sub").display());
    assert!(missing_ledger_fix(&report).contains(&mkdir), "{report}");
    let output = run_with_db(&env, &fresh, &["run", "--key", "k", "--", "true"]);
    assert_code(&output, 125);
    assert!(text(&output.stderr).contains(&mkdir));
    assert!(!env.path("new").exists());
    fs::create_dir_all(env.path("new/sub")).unwrap();
    let (_, report) = doctor_json(&env, &fresh);
    assert!(missing_ledger_fix(&report).contains("the first `idem run` creates it"));
    assert_code(
        &run_with_db(&env, &fresh, &["run", "--key", "k", "--", "true"]),
        0,
    );
    assert!(fresh.exists());

    // One nobody cannot make, under root's folder: no promise to nobody.
    let Some(output) = crate::util::as_nobody(&env, &env.path("x/ledger.db"), &["doctor"]) else {
        return;
    };
    assert_code(&output, 1);
    let said = text(&output.stdout);
    assert!(!said.contains("creates it"), "{said}");
    assert!(said.contains("would not create it"), "{said}");
    let output = crate::util::as_nobody(
        &env,
        &env.path("x/ledger.db"),
        &["run", "--key", "k", "--", "true"],
    )
    .unwrap();
    assert_code(&output, 125);
}
