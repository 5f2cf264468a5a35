//! A monitor on a loopback port, strict about its protocol as documented:
//! Healthchecks (a POST to `/ping/KEY`, `/start`, `/fail` or `/log` after
//! it, `rid` a UUID, a body within Healthchecks' limit), Sentry's cron
//! check-in envelopes, or Cronitor's telemetry; behind a switch that makes
//! it refuse (close at once), answer 500, or hang.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The check's secret, in every ping URL: it must never be printed.
pub const SECRET: &str = "7c1e44a0-outbox-check-uuid";

/// The most body a ping carries (what Healthchecks keeps of it).
pub const BODY_LIMIT: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ok,
    /// Closes each connection without an answer.
    Refuse,
    /// Answers 500.
    Fail,
    /// Reads the request and never answers.
    Hang,
}

/// The protocol a monitor speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Healthchecks,
    Sentry,
    Cronitor,
}

/// The Sentry project's public key, in the DSN: never printed either.
pub const SENTRY_KEY: &str = "5e27a1c0publickey";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ping {
    /// Healthchecks: `/start`, `/fail`, `/log` or `` (success); Sentry:
    /// the status; Cronitor: the state.
    pub suffix: String,
    /// Healthchecks' `rid`, Sentry's `check_in_id`, Cronitor's `series`.
    pub rid: String,
    /// The query, as sent.
    pub query: String,
    /// Healthchecks: the body; Sentry: the check-in's JSON; Cronitor: the
    /// message, decoded.
    pub body: Vec<u8>,
    /// Answered 200 (not refused, failed or hung).
    pub answered: bool,
}

pub struct Monitor {
    port: u16,
    protocol: Protocol,
    mode: Arc<Mutex<Mode>>,
    pings: Arc<Mutex<Vec<Ping>>>,
    /// Requests that broke the protocol, in words.
    wrong: Arc<Mutex<Vec<String>>>,
    /// Connections made to it, answered or not.
    connections: Arc<AtomicUsize>,
}

impl Monitor {
    pub fn start(mode: Mode) -> Monitor {
        Monitor::speaking(Protocol::Healthchecks, mode)
    }

    pub fn speaking(protocol: Protocol, mode: Mode) -> Monitor {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let monitor = Monitor {
            port,
            protocol,
            mode: Arc::new(Mutex::new(mode)),
            pings: Arc::default(),
            wrong: Arc::default(),
            connections: Arc::default(),
        };
        let (mode, pings, wrong) = (
            Arc::clone(&monitor.mode),
            Arc::clone(&monitor.pings),
            Arc::clone(&monitor.wrong),
        );
        let connections = Arc::clone(&monitor.connections);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                connections.fetch_add(1, Ordering::SeqCst);
                let protocol = protocol;
                let (mode, pings, wrong) =
                    (Arc::clone(&mode), Arc::clone(&pings), Arc::clone(&wrong));
                std::thread::spawn(move || serve(protocol, stream, &mode, &pings, &wrong));
            }
        });
        monitor
    }

    /// The `--ping` address of this monitor.
    pub fn url(&self) -> String {
        let port = self.port;
        match self.protocol {
            Protocol::Healthchecks => format!("http://127.0.0.1:{port}/ping/{SECRET}"),
            Protocol::Sentry => format!("sentry:http://{SENTRY_KEY}@127.0.0.1:{port}/42"),
            Protocol::Cronitor => format!("cronitor:http://127.0.0.1:{port}/p/{SECRET}/nightly"),
        }
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// The pings answered 200, in the order they came.
    pub fn delivered(&self) -> Vec<Ping> {
        self.check();
        let pings = self.pings.lock().unwrap();
        pings.iter().filter(|ping| ping.answered).cloned().collect()
    }

    /// The connections made to it so far, answered or not.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Fails the test on a request that broke the protocol.
    pub fn check(&self) {
        let wrong = self.wrong.lock().unwrap();
        assert!(wrong.is_empty(), "requests against the protocol: {wrong:?}");
    }
}

/// A request's headers, names in lower case.
pub type Headers = Vec<(String, String)>;

/// A request's line, headers and body.
fn read_request(stream: &TcpStream) -> Option<(String, Headers, Vec<u8>)> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut first = String::new();
    reader.read_line(&mut first).ok()?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let length = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((first.trim_end().to_owned(), headers, body))
}

/// The ping a Healthchecks request is, or what is wrong with it.
fn healthchecks(first: &str, body: Vec<u8>) -> Result<Ping, String> {
    let mut words = first.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if method != "POST" {
        return Err(format!("{first}: a ping is a POST here"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let suffix = path
        .strip_prefix(&format!("/ping/{SECRET}"))
        .ok_or_else(|| format!("{first}: not the check's path"))?;
    // A check named by slug is made when missing, if asked to.
    let suffix = match suffix.strip_prefix("/nightly-backup") {
        Some(_) if !query.split('&').any(|pair| pair == "create=1") => {
            return Err(format!("{first}: a slug without create=1"));
        }
        Some(rest) => rest,
        None => suffix,
    };
    if !["", "/start", "/fail", "/log"].contains(&suffix) {
        return Err(format!("{first}: no such ping"));
    }
    let rid = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("rid="))
        .ok_or_else(|| format!("{first}: no rid"))?;
    if rid.len() != 36 || rid.matches('-').count() != 4 {
        return Err(format!("{first}: rid is not a UUID"));
    }
    if body.len() > BODY_LIMIT {
        return Err(format!("{first}: a body of {} bytes", body.len()));
    }
    Ok(Ping {
        suffix: suffix.to_owned(),
        rid: rid.to_owned(),
        query: query.to_owned(),
        body,
        answered: false,
    })
}

fn serve(
    protocol: Protocol,
    stream: TcpStream,
    mode: &Mutex<Mode>,
    pings: &Mutex<Vec<Ping>>,
    wrong: &Mutex<Vec<String>>,
) {
    let mode = *mode.lock().unwrap();
    if mode == Mode::Refuse {
        return;
    }
    let Some((first, headers, body)) = read_request(&stream) else {
        return;
    };
    let judged = match protocol {
        Protocol::Healthchecks => healthchecks(&first, body),
        Protocol::Sentry => super::protocols::sentry(&first, &headers, &body),
        Protocol::Cronitor => super::protocols::cronitor(&first, &body),
    };
    let mut ping = match judged {
        Ok(ping) => ping,
        Err(why) => {
            wrong.lock().unwrap().push(why);
            return;
        }
    };
    let mut stream = stream;
    match mode {
        Mode::Hang => std::thread::sleep(Duration::from_secs(120)),
        Mode::Fail => {
            let _ = stream.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
        Mode::Ok | Mode::Refuse => {
            ping.answered = true;
            pings.lock().unwrap().push(ping);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK");
        }
    }
}
