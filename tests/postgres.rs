//! `idem run` and `idem ledger` on a shared PostgreSQL ledger, against a
//! real server each test starts for itself (see `pg.rs`): what only a
//! shared ledger has (leases, hosts, connections, TLS, the server's clock).
//! The ledger scenarios that hold on every backend are in `ledger.rs`.

mod claims;
mod connections;
mod database;
mod failover;
mod left_running;
mod moves;
mod prune;
mod trips;

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::pg::Server;
use crate::util::{eventually, host_prefix, wait_for_file, wrapped, Env, Idem};

/// An isolated environment whose ledger is a fresh PostgreSQL database.
/// Its [`Env`] keeps the SQLite ledger of its tempdir, for tests that
/// move one to the other.
struct Pg {
    env: Env,
    server: Server,
}

impl Pg {
    fn new(test: &str) -> Option<Pg> {
        Some(Pg {
            server: Server::start(test)?,
            env: Env::new(),
        })
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn cmd<const N: usize>(&self, args: [&str; N]) -> Idem {
        self.env.cmd(args).db(self.url())
    }

    fn idem<const N: usize>(&self, args: [&str; N]) -> Command {
        self.cmd(args).command()
    }

    fn run<const N: usize>(&self, args: [&str; N]) -> Output {
        self.cmd(args).run().into_output()
    }

    /// `idem ARGS` as if on another host: its own UTS namespace, renamed.
    /// Needs root (CI runs as root); without it the test fails, naming it.
    fn on_host<const N: usize>(&self, host: &str, args: [&str; N]) -> Option<Command> {
        Some(wrapped(&self.idem(args), &host_prefix(host)?))
    }

    /// An owner of `key` on another host (`host-a`), its lease `lease`, as
    /// the one test needs it: its command touches a file, then does `then`;
    /// returned once that file is there. `None`: the test is skipped.
    fn owner_on_another_host(
        &self,
        key: &str,
        lease: &str,
        then: &str,
        stderr: Stdio,
    ) -> Option<Child> {
        let started = self.env.path("started");
        let script = format!("touch '{}'; {then}", started.display());
        let mut owner = self
            .on_host(
                "host-a",
                [
                    "run", "--key", key, "--lease", lease, "--shell", "--", &script,
                ],
            )?
            .stderr(stderr)
            .spawn()
            .unwrap();
        wait_for_start(&started, &mut owner);
        Some(owner)
    }

    fn list_json(&self) -> serde_json::Value {
        self.cmd(["ledger", "list", "--json", "--limit", "100000"])
            .succeeds()
            .json()
    }

    fn count_cmd(&self, name: &str) -> String {
        self.env.count_cmd(name)
    }

    fn count(&self, name: &str) -> usize {
        self.env.count(name)
    }
}

/// Waits (bounded) until the owner's command has created `path`.
#[track_caller]
fn wait_for_start(path: &std::path::Path, owner: &mut Child) {
    wait_for_file(path, Duration::from_secs(60), owner);
}

/// Waits (bounded) until the latest run's first attempt is recorded.
#[track_caller]
fn wait_for_attempt(pg: &Pg) {
    eventually(
        "the attempt to be recorded",
        Duration::from_secs(60),
        || pg.list_json()[0]["attempts"] == 1,
    );
}

fn guarded(pg: &Pg, seconds: u32) -> String {
    crate::util::guarded(&pg.env, seconds)
}
