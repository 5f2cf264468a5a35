//! The ledger's rules and its row layer, as both backends keep them: a
//! stored value that cannot be read is an error naming the ledger, and
//! `import` streams in bounded memory.

use crate::pg::Server;
use crate::util::{assert_code, text, Env};

#[test]
fn postgres_an_unknown_status_is_an_error_naming_the_ledger() {
    let Some(server) = Server::start("postgres_an_unknown_status_is_an_error_naming_the_ledger")
    else {
        return;
    };
    let env = Env::new();
    let url = server.url();
    let idem = |args: &[&str]| {
        let mut command = env.idem(args);
        command.env("IDEM_DB", &url);
        command.output().expect("idem runs")
    };
    assert_code(&idem(&["run", "--key", "k", "--", "true"]), 0);
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
        let output = idem(args);
        assert_code(&output, 125);
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains("ledger postgresql://"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("a stored value cannot be read (unknown run status \"paused\")"),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
}

#[test]
fn sqlite_an_unknown_status_is_an_error_naming_the_ledger() {
    let env = Env::new();
    assert_code(&env.run(["run", "--key", "k", "--", "true"]), 0);
    // SQLite cannot drop a CHECK constraint; writing the schema's text
    // without it is what a hand-edited ledger looks like.
    let edited = std::process::Command::new("sqlite3")
        .arg(env.db())
        .arg(
            "PRAGMA writable_schema = ON;
             UPDATE sqlite_schema SET sql = replace(sql,
                 'CHECK (status IN (''running'', ''succeeded'', ''failed'', ''abandoned''))', '')
             WHERE name = 'runs';
             PRAGMA writable_schema = OFF;",
        )
        .status()
        .expect("sqlite3 is installed (.ci/run installs it)");
    assert!(edited.success());
    let edited = std::process::Command::new("sqlite3")
        .arg(env.db())
        .arg("UPDATE runs SET status = 'paused';")
        .status()
        .expect("sqlite3 runs");
    assert!(edited.success());
    let output = env.run(["ledger", "list"]);
    assert_code(&output, 125);
    let stderr = text(&output.stderr);
    assert!(stderr.contains(&env.db().display().to_string()), "{stderr}");
    assert!(
        stderr.contains("a stored value cannot be read (unknown run status \"paused\")"),
        "{stderr}"
    );
}
