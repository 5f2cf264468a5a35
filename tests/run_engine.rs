//! The run's flags are checked as a whole before anything is opened, in
//! one order: each case below adds one more bad flag in front of the
//! ones after it, and the first check that fails is the one reported.

use crate::util::Env;

#[test]
fn bad_flags_are_reported_in_order_and_nothing_is_opened() {
    let env = Env::new();
    // Each case: the flags it adds (in front of those of the cases after
    // it), and the start of the error the whole line gives. The second
    // case's flaw is the command itself: empty for it and the first.
    let cases: &[(&[&str], &str)] = &[
        (
            &["--key", "{nope}"],
            "idem: invalid --key: unknown placeholder {nope}",
        ),
        (&[], "idem: the command after -- is empty"),
        (&["--timeout", "0"], "idem: --timeout 0"),
        (&["--lock", ""], "idem: --lock is empty"),
        (
            &["--ping", "ftp://example.org/x"],
            "idem: --ping needs an http",
        ),
        (&["--lease", "500ms"], "idem: --lease 500ms is too short"),
        (&["--job", ""], "idem: invalid --job"),
        (
            &["--catch-up", "3"],
            "idem: --catch-up needs a key template",
        ),
    ];
    for first in 0..cases.len() {
        let mut args = vec!["run"];
        if first > 0 {
            args.extend(["--key", "plain"]);
        }
        for (flags, _) in &cases[first..] {
            args.extend(flags.iter());
        }
        args.extend([
            "--quiet-success",
            "--",
            if first <= 1 { "" } else { "true" },
        ]);
        let output = env.cmd(&args).expect_code(2);
        let stderr = output.stderr();
        let expected = cases[first].1;
        assert!(stderr.starts_with(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    assert!(!env.db().exists(), "no ledger is created for bad flags");
}
