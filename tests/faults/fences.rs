//! Fences across a move: a ledger exported and imported into a fresh one,
//! on either backend or from one to the other, goes on handing out fences
//! above every fence the old one handed out, so that a downstream system
//! that refuses older fences accepts the claims made after the move.

use std::path::Path;

use crate::util::{on_every_backend, Backend, Env};

on_every_backend!(fences_go_on_growing_in_a_ledger_moved_by_export_and_import);

/// Claims `key` on `env`'s ledger (again, if it succeeded before), its
/// command noting its `IDEM_FENCE` in `notes`.
fn claim(env: &Env, key: &str, notes: &Path) {
    let note = format!("echo \"$IDEM_FENCE\" >> '{}'", notes.display());
    env.cmd(["run", "--key", key, "--force", "--shell", "--", &note])
        .succeeds();
}

/// The fences noted in `notes`, in order.
fn noted(notes: &Path) -> Vec<i64> {
    std::fs::read_to_string(notes)
        .unwrap_or_default()
        .lines()
        .map(|line| line.parse().expect("a fence"))
        .collect()
}

/// Exports `from` and imports the stream into `to`.
fn export_into(from: &Env, to: &Env) {
    let stream = from
        .cmd(["ledger", "export"])
        .succeeds()
        .into_output()
        .stdout;
    to.cmd(["ledger", "import"]).stdin(stream).succeeds();
}

/// Claims on `to` after `from` moved into it: each fence is above every
/// fence noted before.
#[track_caller]
fn claims_after_the_move_go_on(to: &Env, notes: &Path) {
    let before = *noted(notes).iter().max().expect("fences before the move");
    claim(to, "after", notes);
    let after = *noted(notes).last().unwrap();
    assert!(
        after > before,
        "fence {after} after the move, {before} before"
    );
}

fn fences_go_on_growing_in_a_ledger_moved_by_export_and_import(backend: &Backend) {
    let old = backend.env();
    let notes = old.path("fences");
    for key in ["a", "b", "a", "c"] {
        claim(&old, key, &notes);
    }
    // The newest run gone: its fence stays the ledger's highest.
    old.cmd(["ledger", "forget", "--purge", "c"]).succeeds();
    let fresh = backend.env();
    export_into(&old, &fresh);
    claims_after_the_move_go_on(&fresh, &notes);

    // A ledger whose own fences are higher keeps them: a raise never lowers.
    let busy = backend.env();
    let busy_notes = busy.path("fences");
    for _ in 0..8 {
        claim(&busy, "own", &busy_notes);
    }
    export_into(&old, &busy);
    claims_after_the_move_go_on(&busy, &busy_notes);
}

#[test]
fn fences_go_on_growing_from_sqlite_to_postgres_and_back() {
    let Some(postgres) = Backend::postgres("fences_go_on_growing_from_sqlite_to_postgres_and_back")
    else {
        return;
    };
    let sqlite = Env::new();
    let notes = sqlite.path("fences");
    for key in ["a", "b", "a"] {
        claim(&sqlite, key, &notes);
    }
    let shared = postgres.env();
    export_into(&sqlite, &shared);
    claims_after_the_move_go_on(&shared, &notes);
    for key in ["b", "c"] {
        claim(&shared, key, &notes);
    }

    let back = Env::new();
    export_into(&shared, &back);
    claims_after_the_move_go_on(&back, &notes);
}
