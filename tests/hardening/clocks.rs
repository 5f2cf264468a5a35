//! Clocks that lie: a success stamped in the future.

use crate::util::{sqlite, Env};

// ------------------------------------------------------------------ clocks

#[test]
fn a_success_stamped_in_the_future_is_not_fresh() {
    let env = Env::new();
    let args = ["run", "--key", "k", "--ttl", "1h", "--", "sh", "-c"];
    let count = env.count_cmd("count");
    let run = |env: &Env| {
        let mut all: Vec<&str> = args.to_vec();
        all.push(&count);
        env.cmd(all)
    };
    run(&env).succeeds();
    // As if the clock had run 30 days ahead when it succeeded.
    sqlite(
        &env.db(),
        "UPDATE runs SET started_at = started_at + 30 * 86400000,
             finished_at = finished_at + 30 * 86400000",
    );
    run(&env).succeeds();
    assert_eq!(
        env.count("count"),
        2,
        "a success from the future was skipped"
    );
    run(&env).succeeds();
    assert_eq!(env.count("count"), 2, "the success made now is fresh");
}
