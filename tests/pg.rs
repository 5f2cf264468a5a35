//! A throwaway PostgreSQL server for one test: `initdb` into a tempdir,
//! listening only on a Unix socket there, stopped when dropped (also when
//! the test fails). The server refuses to run as root, so under root it
//! runs as the `postgres` user that the Debian package creates.
//!
//! Where no server binaries are installed, [`Server::start`] fails the test,
//! naming the package (`scripts/test` installs it).

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Server {
    bin: PathBuf,
    dir: tempfile::TempDir,
    as_postgres: bool,
    running: bool,
    /// Server options beyond the Unix socket (TCP and TLS).
    extra: String,
    /// The TCP port, when the server listens on 127.0.0.1 too.
    pub port: Option<u16>,
}

/// The superuser's password on a server started by [`Server::start_tcp`].
pub const PASSWORD: &str = "pw-s3cret";

/// The directory holding `initdb`, `pg_ctl` and `postgres`: the newest
/// under /usr/lib/postgresql, else the one on PATH.
fn binaries() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| bin.join("initdb").exists() && bin.join("pg_ctl").exists())
        .collect();
    found.sort_by_key(|bin| {
        bin.parent()
            .and_then(|version| version.file_name())
            .and_then(|name| name.to_str())
            .and_then(|name| name.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(bin) = found.pop() {
        return Some(bin);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .find(|dir| dir.join("initdb").exists() && dir.join("pg_ctl").exists())
    })
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

impl Server {
    /// Starts a server with an empty database `idem`, or says why the
    /// calling test is skipped.
    pub fn start(test: &str) -> Option<Server> {
        Server::start_with(test, false)
    }

    /// Like [`Server::start`], also listening on 127.0.0.1 with TLS (a
    /// certificate for `localhost` signed by the CA in [`Server::ca`]) and
    /// asking TCP clients for the password [`PASSWORD`].
    pub fn start_tcp(test: &str) -> Option<Server> {
        Server::start_with(test, true)
    }

    /// The CA that signed a TCP server's certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    fn start_with(test: &str, tcp: bool) -> Option<Server> {
        let Some(bin) = binaries() else {
            crate::util::require(
                false,
                &format!(
                    "{test}: PostgreSQL's server binaries (initdb, pg_ctl; the postgresql package)"
                ),
            );
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("idem-pg")
            .tempdir()
            .expect("a tempdir for the server");
        let as_postgres = is_root();
        if as_postgres {
            chown_to_postgres(dir.path());
        }
        let mut server = Server {
            bin,
            dir,
            as_postgres,
            running: false,
            extra: String::new(),
            port: None,
        };
        let data = server.data();
        server.tool(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--auth-host=scram-sha-256",
            ],
        );
        if tcp {
            server.tls_files();
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
                .port();
            let dir = server.dir.path().display().to_string();
            server.extra = format!(
                "-c listen_addresses=127.0.0.1 -p {port} -c ssl=on \
                 -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key"
            );
            server.port = Some(port);
        }
        server.pg_ctl("start");
        server.running = true;
        server.sql("postgres", "CREATE DATABASE idem");
        server.sql(
            "postgres",
            &format!("ALTER USER postgres PASSWORD '{PASSWORD}'"),
        );
        Some(server)
    }

    /// `pg_ctl start` or `restart`, listening only on a Unix socket in the
    /// tempdir, with no TCP at all.
    fn pg_ctl(&self, action: &str) {
        let options = format!(
            "-k {} -c listen_addresses= -c max_connections=200 -c fsync=off {}",
            self.dir.path().display(),
            self.extra
        );
        let data = self.data();
        // A log file, also so that the server does not hold our pipes open.
        let log = self.dir.path().join("server.log");
        self.tool(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &options,
                "-l",
                log.to_str().unwrap(),
                "-m",
                "fast",
                "-w",
                action,
            ],
        );
    }

    /// A CA, and a certificate for `localhost` it signed, made by openssl.
    fn tls_files(&self) {
        let dir = self.dir.path();
        let openssl = |args: &[&str]| openssl(dir, args);
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=idem test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ]);
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ]);
        let key = dir.join("server.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        if self.as_postgres {
            chown_to_postgres(&key);
            chown_to_postgres(&dir.join("server.crt"));
        }
    }

    /// Makes the server listen on `address` too (trusting clients on its
    /// subnets),
    /// restarting it; returns the port.
    pub fn listen_on(&mut self, address: &str) -> u16 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let hba = self.data().join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba).unwrap();
        rules.push_str("host all all samenet trust\n");
        std::fs::write(&hba, rules).unwrap();
        self.extra = format!("-c listen_addresses={address} -p {port}");
        // The Unix socket takes the port's number too.
        self.port = Some(port);
        self.restart();
        port
    }

    /// Restarts the server, cutting every connection.
    pub fn restart(&self) {
        self.pg_ctl("restart");
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The socket folder, percent-encoded for a URL's host.
    fn host(&self) -> String {
        self.dir
            .path()
            .to_str()
            .unwrap()
            .replace('%', "%25")
            .replace('/', "%2F")
    }

    /// The folder of the server's Unix socket (what `PGHOST` names).
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// A URL of database `db` on this server.
    pub fn url_of(&self, db: &str) -> String {
        let port = self.port.map_or(String::new(), |port| format!(":{port}"));
        format!("postgresql://postgres@{}{port}/{db}", self.host())
    }

    /// The URL of the test's database.
    pub fn url(&self) -> String {
        self.url_of("idem")
    }

    /// Runs `sql` in database `db` as the superuser.
    pub fn sql(&self, db: &str, sql: &str) {
        let mut client = postgres::Client::connect(&self.url_of(db), postgres::NoTls)
            .expect("connect to the test server");
        client.batch_execute(sql).expect("the test's SQL runs");
    }

    /// Stops the server at once, dropping its connections.
    pub fn stop(&mut self) {
        if self.running {
            self.running = false;
            let data = self.data();
            self.try_tool(
                "pg_ctl",
                &[
                    "-D",
                    data.to_str().unwrap(),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
            );
        }
    }

    /// A hot standby of this server, streaming from it (`pg_basebackup
    /// -R`), on a socket folder of its own; it replicates asynchronously
    /// until the primary is told otherwise (see [`Server::synchronous`]).
    pub fn standby(&self) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("idem-pg")
            .tempdir()
            .expect("a tempdir for the standby");
        if self.as_postgres {
            chown_to_postgres(dir.path());
        }
        let mut standby = Server {
            bin: self.bin.clone(),
            dir,
            as_postgres: self.as_postgres,
            running: false,
            extra: String::new(),
            port: None,
        };
        let data = standby.data();
        let conninfo = format!(
            "host={} user=postgres application_name=standby",
            self.dir.path().display()
        );
        self.tool(
            "pg_basebackup",
            &[
                "-D",
                data.to_str().unwrap(),
                "-d",
                &conninfo,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
        );
        standby.start_again();
        standby
    }

    /// Makes every commit wait until the standby named `standby` has it
    /// on disk, and waits until the standby streams as synchronous.
    pub fn synchronous(&self) {
        // One statement each: ALTER SYSTEM refuses a transaction block.
        for sql in [
            "ALTER SYSTEM SET synchronous_standby_names = 'standby'",
            "ALTER SYSTEM SET synchronous_commit = 'on'",
            "SELECT pg_reload_conf()",
        ] {
            self.sql("postgres", sql);
        }
        crate::util::eventually(
            "the standby to stream synchronously",
            std::time::Duration::from_secs(30),
            || {
                self.value(
                    "SELECT count(*)::text FROM pg_stat_replication WHERE sync_state = 'sync'",
                ) == "1"
            },
        );
    }

    /// Promotes a standby to a primary, waiting until it accepts writes.
    pub fn promote(&self) {
        let data = self.data();
        self.tool("pg_ctl", &["-D", data.to_str().unwrap(), "-w", "promote"]);
    }

    /// Starts the server (again, after [`Server::stop`]).
    pub fn start_again(&mut self) {
        self.pg_ctl("start");
        self.running = true;
    }

    /// The first column of the first row of `sql` in database `idem`, as
    /// text.
    pub fn value(&self, sql: &str) -> String {
        let mut client = postgres::Client::connect(&self.url(), postgres::NoTls)
            .expect("connect to the test server");
        client
            .query_one(sql, &[])
            .expect("the test's query runs")
            .get(0)
    }

    fn tool(&self, name: &str, args: &[&str]) {
        let output = self.try_tool(name, args);
        assert!(
            output.status.success(),
            "{name} failed: {}{}",
            String::from_utf8_lossy(&output.stderr),
            std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
        );
    }

    fn try_tool(&self, name: &str, args: &[&str]) -> Output {
        let program = self.bin.join(name);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        command
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|error| panic!("could not run {name}: {error}"))
    }
}

/// `openssl ARGS` in `dir`, which must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (install the openssl package)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn chown_to_postgres(path: &Path) {
    let user = nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .expect("a postgres user to run the server as (the postgresql package creates it)");
    nix::unistd::chown(path, Some(user.uid), Some(user.gid)).expect("chown the server's tempdir");
}
