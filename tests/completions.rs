//! Shell completions: bash, zsh and fish hand the words after `--` to the
//! wrapped command and complete keys from the ledger, and the key helper
//! behind them answers fast.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::{text, Env};
use crate::wrapper_ux::{have, in_pty};

/// Whether the bash-completion package is here (a test needs it).
fn have_bash_completion() -> bool {
    let found = Path::new("/usr/share/bash-completion/bash_completion").exists();
    crate::util::require(found, "bash-completion")
}

/// The folder of the idem under test, for a PATH that finds it.
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_idem"))
        .parent()
        .unwrap()
        .to_owned()
}

/// An interactive bash with bash-completion and idem's script loaded.
fn bash_completes(env: &Env, typed: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let rc = env.path("bashrc");
    std::fs::write(
        &rc,
        format!(
            "PS1='$ '\nsource /usr/share/bash-completion/bash_completion\n\
             source {root}/completions/idem.bash\nbind 'set show-all-if-ambiguous on'\n\
             bind 'set completion-query-items 0'\nbind 'set page-completions off'\n"
        ),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let db = env.db();
    in_pty(
        &[
            "bash",
            "--noprofile",
            "--rcfile",
            rc.to_str().unwrap(),
            "-i",
        ],
        &[
            ("PATH", &path),
            ("IDEM_DB", db.to_str().unwrap()),
            ("TERM", "dumb"),
            ("HOME", env.dir.path().to_str().unwrap()),
        ],
        &[typed, "\t", "\t"],
        Duration::from_millis(1500),
    )
}

#[test]
fn bash_hands_the_words_after_double_dash_to_the_command() {
    if !have("bash") || !have("git") || !have("python3") {
        return;
    }
    if !have_bash_completion() {
        return;
    }
    let env = Env::new();
    let shown = bash_completes(&env, "idem run --key k -- git ch");
    assert!(
        shown.contains("checkout") && shown.contains("cherry-pick"),
        "{shown}"
    );
    let shown = bash_completes(&env, "idem run --key k -- ech");
    assert!(shown.contains("idem run --key k -- echo "), "{shown}");
}

#[test]
fn bash_completes_keys_from_the_ledger() {
    if !have("bash") || !have("python3") {
        return;
    }
    if !have_bash_completion() {
        return;
    }
    let env = Env::new();
    for key in ["backup-2026-12-01", "backup-2026-12-02", "report"] {
        env.cmd(["run", "--key", key, "--", "true"]).succeeds();
    }
    let shown = bash_completes(&env, "idem ledger show back");
    assert!(
        shown.contains("backup-2026-12-01") && shown.contains("backup-2026-12-02"),
        "{shown}"
    );
    assert!(!shown.contains("report"), "{shown}");
    let shown = bash_completes(&env, "idem ledger forget rep");
    assert!(shown.contains("idem ledger forget report "), "{shown}");
    let shown = bash_completes(&env, "idem run --key rep");
    assert!(shown.contains("idem run --key report "), "{shown}");
}

/// Keys of `{hour}` and `{minute}` templates hold a colon, where bash
/// splits words (COMP_WORDBREAKS): completion goes on past it.
#[test]
fn bash_completes_keys_past_a_colon() {
    if !have("bash") || !have("python3") || !have_bash_completion() {
        return;
    }
    let env = Env::new();
    for key in ["backup-2026-12-02T16:00", "backup-2026-12-02T17:00"] {
        env.cmd(["run", "--key", key, "--", "true"]).succeeds();
    }
    for (typed, completed) in [
        (
            "idem ledger show backup-2026-12-02T16:",
            "idem ledger show backup-2026-12-02T16:00 ",
        ),
        (
            "idem ledger forget backup-2026-12-02T17:0",
            "idem ledger forget backup-2026-12-02T17:00 ",
        ),
        (
            "idem run --key backup-2026-12-02T16:",
            "idem run --key backup-2026-12-02T16:00 ",
        ),
    ] {
        let shown = bash_completes(&env, typed);
        assert!(shown.contains(completed), "{typed}: {shown}");
    }
    // Both keys offered whole, before the colon and after it.
    for typed in [
        "idem ledger show backup-2026-12-02T1",
        "idem run --key backup-2026-12-02T1",
    ] {
        let shown = bash_completes(&env, typed);
        assert!(
            shown.contains("backup-2026-12-02T16:00") && shown.contains("backup-2026-12-02T17:00"),
            "{typed}: {shown}"
        );
    }
}

#[test]
fn the_key_helper_answers_fast_at_a_million_runs() {
    if !have("sqlite3") {
        return;
    }
    let env = Env::new();
    env.cmd(["run", "--key", "seed", "--", "true"]).succeeds();
    crate::util::sqlite(
        &env.db(),
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000) \
         INSERT INTO keys (key) SELECT printf('job-%07d', i) FROM n;",
    );
    let ask = |prefix: &str| env.cmd(["__complete", "keys", prefix]);
    let keys: Vec<String> = ask("job-000012")
        .succeeds()
        .stdout()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(keys.len(), 10, "{keys:?}");
    assert_eq!(keys[0], "job-0000120");
    ask("se").succeeds().stdout_is("seed\n");
    ask("nothing").succeeds().stdout_is("");
    let fastest = (0..5)
        .map(|_| {
            let start = Instant::now();
            ask("job-09").succeeds();
            start.elapsed()
        })
        .min()
        .unwrap();
    assert!(fastest < Duration::from_millis(50), "took {fastest:?}");
    // No ledger yet: nothing, quietly.
    let empty = Env::new();
    empty
        .cmd(["__complete", "keys", ""])
        .succeeds()
        .stdout_is("");
    assert!(!empty.db().exists(), "completing creates no ledger");
}

#[test]
fn zsh_and_fish_scripts_hand_over_and_complete_keys() {
    let root = env!("CARGO_MANIFEST_DIR");
    let zsh = std::fs::read_to_string(format!("{root}/completions/_idem")).unwrap();
    assert!(zsh.contains("_normal"), "zsh hands over with _normal");
    assert!(zsh.contains("__complete keys"), "zsh completes keys");
    let fish = std::fs::read_to_string(format!("{root}/completions/idem.fish")).unwrap();
    assert!(fish.contains("__fish_complete_subcommand"));
    assert!(fish.contains("__complete keys"));
    if have("zsh") {
        let check = Command::new("zsh")
            .args(["-n", &format!("{root}/completions/_idem")])
            .output()
            .unwrap();
        assert!(check.status.success(), "{}", text(&check.stderr));
    }
    if have("fish") {
        let env = Env::new();
        env.cmd(["run", "--key", "report", "--", "true"]).succeeds();
        let path = format!(
            "{}:{}",
            bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let complete = |line: &str| {
            let output = Command::new("fish")
                .args([
                    "--no-config",
                    "-c",
                    &format!("source {root}/completions/idem.fish; complete -C '{line}'"),
                ])
                .env("PATH", &path)
                .env("IDEM_DB", env.db())
                .env("HOME", env.dir.path())
                .output()
                .unwrap();
            text(&output.stdout)
        };
        let keys = complete("idem ledger show rep");
        assert!(
            keys.lines().any(|line| line.starts_with("report")),
            "{keys}"
        );
        let commands = complete("idem run --key k -- ech");
        assert!(
            commands.lines().any(|line| line.starts_with("echo")),
            "{commands}"
        );
    }
}

/// An interactive zsh with compinit and idem's script on its fpath.
fn zsh_completes(env: &Env, typed: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let home = env.dir.path().to_str().unwrap();
    std::fs::write(
        env.path(".zshrc"),
        format!(
            "PS1='$ '\nfpath=({root}/completions $fpath)\n\
             autoload -Uz compinit && compinit -u -d {home}/.zcompdump\n"
        ),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let db = env.db();
    in_pty(
        &["zsh", "-i"],
        &[
            ("PATH", &path),
            ("IDEM_DB", db.to_str().unwrap()),
            ("TERM", "dumb"),
            ("HOME", home),
            ("ZDOTDIR", home),
        ],
        &[typed, "\t"],
        Duration::from_millis(1500),
    )
}

/// zsh and fish complete the keys of `run --key`, `ledger show` and
/// `ledger forget`, a colon ({hour}, {minute}) included.
#[test]
fn zsh_and_fish_complete_keys_past_a_colon() {
    if !have("zsh") || !have("fish") || !have("python3") {
        return;
    }
    let env = Env::new();
    for key in ["backup-2026-12-02T16:00", "backup-2026-12-02T17:00"] {
        env.cmd(["run", "--key", key, "--", "true"]).succeeds();
    }
    let lines = [
        (
            "idem ledger show backup-2026-12-02T16:",
            "backup-2026-12-02T16:00",
        ),
        (
            "idem ledger forget backup-2026-12-02T17:0",
            "backup-2026-12-02T17:00",
        ),
        (
            "idem run --key backup-2026-12-02T16:",
            "backup-2026-12-02T16:00",
        ),
    ];
    for (typed, key) in lines {
        let shown = zsh_completes(&env, typed);
        let completed = format!("{} {key} ", typed.rsplit_once(' ').unwrap().0);
        assert!(shown.contains(&completed), "zsh: {typed}: {shown:?}");
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (typed, key) in lines {
        let output = Command::new("fish")
            .args([
                "--no-config",
                "-c",
                &format!("source {root}/completions/idem.fish; complete -C '{typed}'"),
            ])
            .env("PATH", &path)
            .env("IDEM_DB", env.db())
            .env("HOME", env.dir.path())
            .output()
            .unwrap();
        let shown = text(&output.stdout);
        assert!(
            shown.lines().any(|line| line == key),
            "fish: {typed}: {shown}"
        );
    }
}
