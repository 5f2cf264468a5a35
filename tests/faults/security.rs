//! Privacy: the ledger's modes, no shell without the flag, and no
//! secret from the environment in the ledger.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::util::{assert_code, Env};

#[test]
fn the_ledger_is_private_under_a_permissive_umask() {
    let env = Env::new();
    // The default location, the one folder idem makes.
    let db = env.path("deep/er/idem/ledger.db");
    let modes = env.path("modes");
    let script = format!(
        "stat -c '%a' '{db}' '{db}-wal' '{db}-shm' > '{modes}'",
        db = db.display(),
        modes = modes.display()
    );
    let output = Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_idem"))
        .args(["run", "--key", "k", "--shell", "--", &script])
        .env_remove("IDEM_DB")
        .env("XDG_DATA_HOME", env.path("deep/er"))
        .env("HOME", env.dir.path())
        .output()
        .unwrap();
    assert_code(&output, 0);
    let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(db.parent().unwrap()), 0o700);
    assert_eq!(mode(&env.path("deep")), 0o700);
    // The log and index SQLite made while the command ran were private too.
    assert_eq!(fs::read_to_string(&modes).unwrap(), "600\n600\n600\n");
}

#[test]
fn no_shell_without_the_flag() {
    let env = Env::new();
    env.cmd(["run", "--key", "a", "--", "touch pwned; echo $HOME"])
        .expect_code(127);
    env.cmd([
        "run",
        "--key",
        "b",
        "--",
        "echo",
        "$(touch pwned)",
        ";",
        "touch",
        "pwned",
        "|",
        "&&",
    ])
    .succeeds()
    .stdout_is("$(touch pwned) ; touch pwned | &&\n");
    assert!(!env.path("pwned").exists());
    env.cmd(["run", "--key", "c", "--shell", "--", "touch", "pwned"])
        .succeeds();
    assert!(env.path("pwned").exists(), "--shell runs a shell");
}

/// All the bytes of the ledger's files, to look for a secret.
fn ledger_bytes(db: &Path) -> Vec<u8> {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| fs::read(format!("{}{suffix}", db.display())).ok())
        .flatten()
        .collect()
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[test]
fn secrets_in_the_environment_are_never_recorded() {
    let env = Env::new();
    let secret = "hunter2-7f3a9c1e-env-secret";
    let run = |key: &str, extra: &[&str]| {
        let mut args = vec!["run", "--key", key];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--shell", "--", "echo \"token=$IDEM_TEST_SECRET\""]);
        env.cmd(args).env("IDEM_TEST_SECRET", secret)
    };
    run("capture-0", &["--capture", "0"])
        .succeeds()
        // The output still passes through.
        .stdout_is(&format!("token={secret}\n"));
    assert!(
        !holds(&ledger_bytes(&env.db()), secret),
        "a secret reached the ledger"
    );
    assert_eq!(
        env.show_json("capture-0")["attempts_detail"][0]["stdout_tail"],
        ""
    );
    // Without --capture 0 the output is kept, which is why the flag exists.
    run("captured", &[]).succeeds();
    assert!(holds(&ledger_bytes(&env.db()), secret));
}
