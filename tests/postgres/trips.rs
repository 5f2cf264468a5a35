//! Round trips to a shared ledger, counted (not timed) by a proxy in front
//! of the server: a round trip is a burst from idem answered by one from
//! the server. Across a network they are most of what a run costs.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::Pg;
use crate::util::assert_code;

/// Counts round trips and connections through it, summed over every
/// connection, since the last [`Proxy::take`].
struct Proxy {
    port: u16,
    counts: Arc<Mutex<Counts>>,
}

#[derive(Default)]
struct Counts {
    trips: usize,
    connections: usize,
}

impl Proxy {
    fn start(socket: PathBuf) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(Mutex::new(Counts::default()));
        let shared = counts.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = UnixStream::connect(&socket) else {
                    return;
                };
                shared.lock().unwrap().connections += 1;
                // Which side spoke last on this connection: a burst from
                // the server after one from idem ends a round trip. Each
                // side's data is counted before it is passed on, so the
                // answer is always counted after what it answers.
                let last = Arc::new(Mutex::new(false));
                let (to_server, from_server) = (server.try_clone().unwrap(), server);
                let (from_client, to_client) = (client.try_clone().unwrap(), client);
                let (counts, spoke) = (shared.clone(), last.clone());
                std::thread::spawn(move || {
                    pass(from_client, to_server, |_| *spoke.lock().unwrap() = true)
                });
                let counts_too = counts.clone();
                std::thread::spawn(move || {
                    pass(from_server, to_client, |_| {
                        let mut client_spoke = last.lock().unwrap();
                        if *client_spoke {
                            counts_too.lock().unwrap().trips += 1;
                        }
                        *client_spoke = false;
                    })
                });
            }
        });
        Proxy { port, counts }
    }

    /// (round trips, connections) since the last call.
    fn take(&self) -> (usize, usize) {
        let mut counts = self.counts.lock().unwrap();
        let taken = (counts.trips, counts.connections);
        *counts = Counts::default();
        taken
    }
}

/// Copies `from` to `to`, calling `seen` on each chunk before passing it.
fn pass<R: Read, W: Write + Shut>(mut from: R, mut to: W, mut seen: impl FnMut(&[u8])) {
    let mut buffer = [0; 1 << 16];
    while let Ok(read @ 1..) = from.read(&mut buffer) {
        seen(&buffer[..read]);
        if to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    to.shut();
}

trait Shut {
    fn shut(&mut self);
}

impl Shut for TcpStream {
    fn shut(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl Shut for UnixStream {
    fn shut(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

#[test]
fn postgres_a_skip_takes_two_round_trips_and_a_first_run_six() {
    let Some(pg) = Pg::new("postgres_a_skip_takes_two_round_trips_and_a_first_run_six") else {
        return;
    };
    let proxy = Proxy::start(pg.server.socket_dir().join(".s.PGSQL.5432"));
    let url = format!("postgresql://postgres@127.0.0.1:{}/idem", proxy.port);
    let run = |args: &[&str]| {
        let mut command = pg.env.cmd(["run"]).db(url.clone()).command();
        command.args(args);
        let output = command.output().unwrap();
        assert_code(&output, 0);
    };
    // The schema made, the key succeeded once: what follows is a fleet's
    // everyday runs.
    run(&["--key", "k", "--", "true"]);
    run(&["--key", "first", "--", "true"]);
    proxy.take();
    for _ in 0..3 {
        run(&["--key", "k", "--", "true"]);
        assert_eq!(proxy.take(), (2, 1), "a skip: round trips, connections");
        run(&["--key", "first", "--force", "--", "true"]);
        let (trips, connections) = proxy.take();
        assert!(trips <= 6, "a first run took {trips} round trips");
        assert_eq!(connections, 1);
    }
}
