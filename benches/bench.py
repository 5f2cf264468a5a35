#!/usr/bin/env python3
"""Whole-process benchmarks of idem, each measured side by side with its
baseline in the same run, printed as one table of ratios against the goals.

    benches/bench.py            # the full table (many minutes)
    benches/bench.py --quick    # a smoke test of this script (CI runs it)

Baselines: `floor` (benches/floor.c, built here with cc: the syscalls a
durable first run cannot avoid), `guarded` (benches/guarded.c: the floor
plus the guardian process and output pipes idem's liveness promise needs,
to tell the design's cost from idem's own), `flock LOCKFILE true`, bkt's cache hit and
miss (installed under target/ by `cargo install bkt --locked` when missing),
`psql -c 'SELECT 1'` through the same delaying proxy as idem's PostgreSQL
rows, and the same idem command on a ten-run ledger (on a sixty-run one
for `ledger list --limit 50`, which then lists fifty runs too).

Needs hyperfine, flock, sqlite3, cc and /usr/bin/time (Debian: hyperfine,
util-linux, sqlite3, gcc, time); the PostgreSQL rows need the server's
binaries (Debian: postgresql) and, run as root, its `postgres` user and
runuser; the fleet rows (benches/fleet.py) pgbench too. Builds the static release binary the packages ship first. Times
are hyperfine medians; the machine's noise is real, so read the ratios. A goal not met is printed as
NOT MET and the script still exits 0: it fails only when it is broken.
"""

import argparse
import json
import os
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from budget import installed_build, table as budget_table

ROOT = Path(__file__).resolve().parent.parent
# The binary the packages ship (scripts/dist): glibc linked in, static-pie.
# It skips the dynamic loader's relocations, a fifth of a skip's
# instructions, so it is the one people run and the one measured here.
TARGET = "x86_64-unknown-linux-gnu"
BUILT = ROOT / "target" / TARGET / "release" / "idem"
# What is measured: a copy, as a package or `cargo install` writes it. The
# linker's output, written piecemeal, sits in the page cache in small
# pieces: every run of it took 20 more page faults (of some 180 for a
# skip) and up to a fifth more time than the same bytes copied.
IDEM = ROOT / "target" / "bench" / "idem"
TOOLS = ROOT / "target" / "bench-tools"


def sh(*args, env=None, **kwargs):
    return subprocess.run([str(arg) for arg in args], check=True, env=env, **kwargs)


# Rounds each hyperfine measurement is split into, the commands taking
# turns: on a shared machine whose speed drifts over minutes, a slow spell
# then falls on every command alike rather than on whichever ran in it.
ROUNDS = 5


def hyperfine(commands, runs, env, ignore_failure=False):
    """Each command's median, and mean user and system seconds, measured by
    hyperfine side by side (no shell: `-N`), in [`ROUNDS`] turns."""
    per_round = max(1, runs // ROUNDS)
    rounds = []
    for _ in range(ROUNDS):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            sh("hyperfine", "-N", "--warmup", max(3, per_round // 10), "--runs", per_round,
               "--export-json", out.name, *(["--ignore-failure"] if ignore_failure else []),
               *commands, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            rounds.append(json.load(open(out.name))["results"])
    return [Timing(results) for results in zip(*rounds)]


class Timing:
    def __init__(self, results):
        self.median = statistics.median(time for result in results for time in result["times"])
        self.user = statistics.mean(result["user"] for result in results)
        self.system = statistics.mean(result["system"] for result in results)

    def __str__(self):
        return f"{self.median * 1e3:.2f} ms"

    def detail(self):
        return f"{self} (user {self.user * 1e3:.2f}, sys {self.system * 1e3:.2f})"


def peak_rss(args, env):
    """Peak resident set size in KiB of `args` (the largest process of its
    tree), by /usr/bin/time."""
    measured = subprocess.run(["/usr/bin/time", "-v", *map(str, args)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    if measured.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, args))} failed:\n{measured.stderr}")
    return next(int(line.split()[-1]) for line in measured.stderr.splitlines() if "Maximum resident" in line)


def idem_env(work, db):
    if "://" not in str(db):  # a file: idem makes no folder but its default one
        Path(db).parent.mkdir(parents=True, exist_ok=True)
    env = {name: value for name, value in os.environ.items() if not name.startswith("IDEM_")}
    return dict(env, IDEM_DB=str(db), HOME=str(work), XDG_DATA_HOME=str(work / "data"))


def build_floors():
    """benches/floor.c and benches/guarded.c, built with cc, and
    benches/sqlite_floor.c with the SQLite idem bundles, built as idem's
    build makes it: static, at -O3, with the options of .cargo/config.toml."""
    built = []
    for name in ["floor", "guarded"]:
        program = ROOT / "target" / "bench" / name
        program.parent.mkdir(parents=True, exist_ok=True)
        sh("cc", "-O2", "-o", program, ROOT / "benches" / f"{name}.c")
        built.append(program)
    metadata = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--locked"], cwd=ROOT,
                                         check=True, capture_output=True, text=True).stdout)
    sqlite = next(Path(package["manifest_path"]).parent / "sqlite3" for package in metadata["packages"]
                  if package["name"] == "libsqlite3-sys")
    config = (ROOT / ".cargo" / "config.toml").read_text()
    flags = next(line.split("=", 1)[1].strip().strip('"') for line in config.splitlines()
                 if line.startswith("LIBSQLITE3_FLAGS")).split()
    program = ROOT / "target" / "bench" / "sqlite_floor"
    # Built once: SQLite takes a minute to compile.
    if not program.exists() or program.stat().st_mtime < (ROOT / "benches" / "sqlite_floor.c").stat().st_mtime:
        sh("cc", "-O3", "-static-pie", "-fPIE", f"-I{sqlite}", *flags, "-DSQLITE_OMIT_LOAD_EXTENSION", "-o",
           program, ROOT / "benches" / "sqlite_floor.c", sqlite / "sqlite3.c", "-lm")
    built.append(program)
    return built


def find_bkt(quick):
    """bkt on PATH or under target/, installed there when missing; None
    (with the reason printed) only in --quick."""
    found = shutil.which("bkt") or shutil.which("bkt", path=str(TOOLS / "bin"))
    if found:
        return found
    if quick:
        print("bkt rows left out: bkt is not installed and --quick does not build it "
              "(a full run installs it under target/bench-tools)", flush=True)
        return None
    print("installing bkt under target/bench-tools (cargo install bkt --locked)", flush=True)
    sh("cargo", "install", "bkt", "--locked", "--quiet", "--root", TOOLS)
    return str(TOOLS / "bin" / "bkt")


def ledger_bytes(db):
    """Bytes the ledger holds, WAL folded in."""
    sh("sqlite3", db, "PRAGMA wal_checkpoint(TRUNCATE);", stdout=subprocess.DEVNULL)
    return sum(path.stat().st_size for path in db.parent.glob(db.name + "*"))


def race(commands, env, logs):
    """Starts every command at once, by posix_spawn (so that the starter is
    cheap next to what it starts), stdout to /dev/null and each stderr to a
    file in `logs`; returns (seconds, [(exit code, stderr)])."""
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    pids = []
    for i, command in enumerate(commands):
        actions = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 2, str(logs / str(i)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)]
        pids.append(os.posix_spawn(str(command[0]), [str(arg) for arg in command], env, file_actions=actions))
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    seconds = time.monotonic() - started
    return seconds, [(code, (logs / str(i)).read_text()) for i, code in enumerate(codes)]


class Table:
    def __init__(self):
        self.rows = []

    def add(self, what, measured, baseline, ratio, goal, ok):
        """`ok` None marks a reference row, which has no goal of its own."""
        met = "—" if ok is None else "yes" if ok else "NO"
        self.rows.append((what, measured, baseline, ratio, goal, met))
        verdict = "" if ok is None else " met" if ok else " NOT MET"
        print(f"  {what}: {measured} against {baseline}: {ratio} (goal {goal}){verdict}", flush=True)

    def markdown(self):
        lines = ["| what | measured | baseline | ratio | goal | met |", "|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)


def ratio(a, b):
    return f"{a / b:.2f}x"


# ---- PostgreSQL: a throwaway server and a proxy that delays and counts ----


def pg_binaries():
    found = [path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    found.sort(key=lambda bin: int(bin.parent.name) if bin.parent.name.isdigit() else 0)
    if found:
        return found[-1]
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class Postgres:
    """A server in a fresh folder, listening only on a Unix socket there,
    as tests/pg.rs starts one; under root it runs as the `postgres` user."""

    def __init__(self, bin, max_connections=200):
        self.bin = bin
        self.as_postgres = os.geteuid() == 0
        self.dir = Path(tempfile.mkdtemp(prefix="idem-bench-pg-"))
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self.data = self.dir / "data"
        self.tool("initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C",
                  "--no-sync")
        self.tool("pg_ctl", "-D", self.data, "-o", f"-k {self.dir} -c listen_addresses= -c max_connections={max_connections}",
                  "-l", self.dir / "server.log", "-w", "start")
        self.socket = self.dir / ".s.PGSQL.5432"
        sh(self.bin / "psql", "-X", "-q", "-h", self.dir, "-U", "postgres", "-d", "postgres",
           "-c", "CREATE DATABASE idem", stdout=subprocess.DEVNULL)

    def tool(self, name, *args):
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        done = subprocess.run([*prefix, str(self.bin / name), *map(str, args)], cwd=self.dir,
                              capture_output=True, text=True)
        if done.returncode != 0:
            log = self.dir / "server.log"
            sys.exit(f"bench: {name} failed: {done.stderr}{log.read_text() if log.exists() else ''}")

    def stop(self):
        self.tool("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


class Proxy:
    """Listens on 127.0.0.1 and forwards each connection to a Unix socket,
    holding every chunk `delay` seconds each way (a link of 2·delay round
    trip). A round trip is a burst from the client followed by one from the
    server; the counts are summed over every connection."""

    def __init__(self, upstream, delay):
        self.upstream = str(upstream)
        self.delay = delay
        self.lock = threading.Lock()
        self.round_trips = 0
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def counts(self):
        """(round trips, connections) since the last call."""
        with self.lock:
            counts = (self.round_trips, self.connections)
            self.round_trips = self.connections = 0
        return counts

    def accept(self):
        while True:
            client, _ = self.listener.accept()
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            server = socket.socket(socket.AF_UNIX)
            server.connect(self.upstream)
            link = {"last": None, "open": 2}
            with self.lock:
                self.connections += 1
            for source, sink, side in [(client, server, "client"), (server, client, "server")]:
                chunks = queue.Queue()
                threading.Thread(target=self.read, args=(source, chunks, side, link), daemon=True).start()
                threading.Thread(target=self.write, args=(sink, chunks, link, (client, server)),
                                 daemon=True).start()

    def read(self, source, chunks, side, link):
        while True:
            try:
                data = source.recv(1 << 16)
            except OSError:
                data = b""
            with self.lock:
                if data and side == "server" and link["last"] == "client":
                    self.round_trips += 1
                if data:
                    link["last"] = side
            chunks.put((time.monotonic() + self.delay, data))
            if not data:
                return

    def write(self, sink, chunks, link, ends):
        while True:
            deadline, data = chunks.get()
            pause = deadline - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            try:
                if data:
                    sink.sendall(data)
                    continue
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            break
        with self.lock:
            link["open"] -= 1
            last = link["open"] == 0
        if last:
            for end in ends:
                end.close()


def postgres_rows(table, runs, work, quick):
    bin = pg_binaries()
    why = None
    if bin is None:
        why = "no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin or on PATH"
    elif os.geteuid() == 0 and not shutil.which("runuser"):
        why = "run as root, the server needs runuser (util-linux) to run as the postgres user"
    if why:
        if quick:
            print(f"PostgreSQL rows left out: {why}", flush=True)
            return
        sys.exit(f"bench: {why}; install the postgresql package (run as root, or as a user initdb accepts)")
    server = Postgres(bin)
    try:
        proxy = Proxy(server.socket, 0.001)
        url = f"postgresql://postgres@127.0.0.1:{proxy.port}/idem"
        env = idem_env(work, url)
        skip = [IDEM, "run", "--key", "bench", "--", "true"]
        first = [IDEM, "run", "--key", "first", "--force", "--", "true"]
        psql = [bin / "psql", "-X", "-q", "-d",
                f"host=127.0.0.1 port={proxy.port} user=postgres dbname=idem sslmode=disable", "-c", "SELECT 1"]
        sh(*skip, env=env, stdout=subprocess.DEVNULL)
        sh(*first, env=env, stdout=subprocess.DEVNULL)

        def round_trips(command):
            counts = []
            for _ in range(5):
                proxy.counts()
                sh(*command, env=env, stdout=subprocess.DEVNULL)
                counts.append(proxy.counts())
            trips = sorted(count[0] for count in counts)
            connections = statistics.median_low(count[1] for count in counts)
            spread = "" if trips[0] == trips[-1] else f" ({trips[0]}-{trips[-1]})"
            return trips[len(trips) // 2], f"{trips[len(trips) // 2]}{spread}", connections

        base_trips, base_text, _ = round_trips(psql)
        skip_trips, skip_text, skip_connections = round_trips(skip)
        first_trips, first_text, first_connections = round_trips(first)
        print("  timing the PostgreSQL rows", flush=True)
        base, skip_time, first_time = hyperfine(
            [" ".join(f"'{arg}'" if " " in str(arg) else str(arg) for arg in psql),
             " ".join(map(str, skip)), " ".join(map(str, first))], 10 if quick else runs, env)
        link = "PostgreSQL through a 2 ms round-trip proxy"
        baseline = f"psql -c 'SELECT 1': {base_text} round trips, {base}"
        for what, trips, text, connections, timing, goal in [
                ("skip", skip_trips, skip_text, skip_connections, skip_time, 3),
                ("first run (`--force -- true`)", first_trips, first_text, first_connections, first_time, 6)]:
            table.add(f"{link}: {what}",
                      f"{text} round trips over {connections} connection{'s' * (connections != 1)}, {timing}",
                      baseline, f"{trips / base_trips:.1f}x the round trips, {ratio(timing.median, base.median)} "
                      "the time", f"<= {goal} round trips", trips <= goal)
    finally:
        server.stop()


def fleet(table, work, quick):
    """The fleet rows (benches/fleet.py) on a server of their own, with
    room for 256 clients."""
    bin = pg_binaries()
    pgbench = bin / "pgbench" if bin and (bin / "pgbench").exists() else shutil.which("pgbench")
    if bin is None or pgbench is None:
        print("fleet rows left out: no PostgreSQL server binaries or no pgbench", flush=True)
        return
    from fleet import fleet_rows
    server = Postgres(bin, max_connections=300)
    try:
        folder = str(server.dir).replace("%", "%25").replace("/", "%2F")
        (work / "fleet").mkdir(parents=True, exist_ok=True)
        env = idem_env(work / "fleet", f"postgresql://postgres@{folder}/idem")
        fleet_rows(table, server, env, IDEM, pgbench, quick)
    finally:
        server.stop()


# ---- the rows -----------------------------------------------------------------


def process_rows(table, runs, work, env, floor, guarded, sqlite_floor, bkt):
    """The single-process paths, measured in one hyperfine run. Returns the
    timings of a first run and of SQLite's first-run floor."""
    lock = work / "lock"
    lock.touch()
    sh(IDEM, "run", "--key", "bench", "--", "true", env=env)
    sh(IDEM, "run", "--key", "bench-{date}", "--", "true", env=env)
    # SQLite's skip floor reads idem's own ledger (it writes nothing), so
    # that both skips find the WAL as idem's first runs leave it; its
    # first-run floor writes a copy of it, its WAL as it is.
    ledger = Path(env["IDEM_DB"])
    copy = work / "sqlite-floor" / "ledger.db"
    copy.parent.mkdir()
    for suffix in ["", "-wal"]:
        shutil.copy2(f"{ledger}{suffix}", f"{copy}{suffix}")
    commands = {
        "floor": f"{floor} {work / 'floor-record'} true",
        "guarded": f"{guarded} {work / 'guarded-record'} true",
        "sqlite skip": f"{sqlite_floor} skip {ledger} bench",
        "sqlite first": f"{sqlite_floor} first {copy} true",
        "flock": f"flock {lock} true",
        "skip": f"{IDEM} run --key bench -- true",
        "dated skip": f"{IDEM} run --key bench-{{date}} -- true",
        "first": f"{IDEM} run --key first --force -- true",
    }
    if bkt:
        cache = work / "bkt"
        sh(bkt, "--ttl", "1h", "--cache-dir", cache, "--", "true", env=env)
        commands["bkt hit"] = f"{bkt} --ttl 1h --cache-dir {cache} -- true"
        commands["bkt miss"] = f"{bkt} --ttl 1h --cache-dir {cache} --force -- true"
    timings = dict(zip(commands, hyperfine(list(commands.values()), runs, env)))
    floor_time, flock_time, skip, first = (timings[name] for name in ["floor", "flock", "skip", "first"])
    table.add("first run: `idem run --key K --force -- true` / floor", first.detail(),
              f"floor {floor_time.detail()}", ratio(first.median, floor_time.median), "<= 1.3x",
              first.median <= 1.3 * floor_time.median)
    guarded_time = timings["guarded"]
    table.add("reference: the guarded floor (benches/guarded.c: a guardian process, output through pipes) / floor",
              guarded_time.detail(), f"floor {floor_time}", ratio(guarded_time.median, floor_time.median), "—", None)
    table.add("reference: first run / the guarded floor", str(first), f"guarded {guarded_time}",
              ratio(first.median, guarded_time.median), "—", None)
    sqlite_skip, sqlite_first = timings["sqlite skip"], timings["sqlite first"]
    table.add("reference: SQLite's first-run floor (benches/sqlite_floor.c: the floor on idem's ledger, its two "
              "commits synced by SQLite) / floor", sqlite_first.detail(), f"floor {floor_time}",
              ratio(sqlite_first.median, floor_time.median), "—", None)
    table.add("reference: first run / SQLite's first-run floor", str(first), f"SQLite's floor {sqlite_first}",
              ratio(first.median, sqlite_first.median), "—", None)
    table.add("skip: `idem run --key K -- true`, K succeeded / `flock L true`", skip.detail(),
              f"flock {flock_time.detail()}", ratio(skip.median, flock_time.median), "<= 0.7x",
              skip.median <= 0.7 * flock_time.median)
    dated = timings["dated skip"]
    table.add("reference: skip of a key with `{date}` (a crontab line's) / skip", str(dated), f"skip {skip}",
              ratio(dated.median, skip.median), "—", None)
    table.add("reference: skip / SQLite's skip floor (benches/sqlite_floor.c: open the ledger, read the key's head)",
              str(skip), f"SQLite's floor {sqlite_skip.detail()}", ratio(skip.median, sqlite_skip.median), "—", None)
    if bkt:
        hit, miss = timings["bkt hit"], timings["bkt miss"]
        table.add("skip / bkt's cache hit", str(skip), f"bkt hit {hit.detail()}", ratio(skip.median, hit.median),
                  "<= 1.0x", skip.median <= hit.median)
        table.add("reference: SQLite's skip floor / bkt's cache hit", str(sqlite_skip), f"bkt hit {hit}",
                  ratio(sqlite_skip.median, hit.median), "—", None)
        table.add("reference: bkt's cache hit / flock", str(hit), f"flock {flock_time}",
                  ratio(hit.median, flock_time.median), "—", None)
        table.add("reference: bkt's cache miss (`--force`) / floor", miss.detail(), f"floor {floor_time}",
                  ratio(miss.median, floor_time.median), "—", None)
    return {"one first run": first, "SQLite's first-run floor": sqlite_first}


def race_rows(table, work, floor, cpu_of, rounds, trials):
    """200 runs of distinct keys started at once, against 200 floors; and
    the CPU a first run and SQLite's first-run floor take (`cpu_of`, all
    their processes) against what the goal's rate leaves a run on this
    machine's cores."""
    rates, floor_rates, errors = [], [], 0
    for round in range(rounds):
        fresh = idem_env(work, work / f"race-{round}" / "ledger.db")
        seconds, outputs = race([[IDEM, "run", "--key", f"k{i}", "--", "true"] for i in range(200)], fresh,
                                work / f"race-{round}" / "stderr")
        rates.append(200 / seconds)
        errors += sum(1 for code, stderr in outputs if code != 0 or stderr)
        seconds, _ = race([[floor, work / f"race-floor-{round}", "true"] for _ in range(200)], fresh,
                          work / f"race-floor-{round}-stderr")
        floor_rates.append(200 / seconds)
    rate, floor_rate = statistics.median(rates), statistics.median(floor_rates)
    table.add(f"200 concurrent first runs of distinct keys, fresh ledger (median of {rounds})",
              f"{rate:.0f} runs/s, {errors} errors", f"200 floors at once: {floor_rate:.0f} runs/s",
              f"{rate / floor_rate:.2f}x", ">= 800 runs/s, 0 errors", rate >= 800 and errors == 0)
    budget = os.cpu_count() / 800
    for what, timing in cpu_of.items():
        cpu = timing.user + timing.system
        table.add(f"reference: CPU of {what}, all its processes (user + system) / the CPU a run may take at "
                  f"800 runs/s on {os.cpu_count()} cores", f"{cpu * 1000:.2f} ms", f"{budget * 1000:.2f} ms",
                  ratio(cpu, budget), "—", None)

    good = 0
    for trial in range(trials):
        count = work / f"count-{trial}"
        one = idem_env(work, work / f"one-{trial}" / "ledger.db")
        _, outputs = race([[IDEM, "run", "--key", "one", "--shell", "--", f"echo x >> {count}; sleep 0.05"]] * 200,
                          one, work / f"one-{trial}" / "stderr")
        executions = len(count.read_text().splitlines()) if count.exists() else 0
        good += executions == 1 and all(code in (0, 75) for code, _ in outputs)
    table.add("200 concurrent runs of one key", f"one execution in {good} of {trials} trials", "—", "—",
              f"{trials} of {trials}", good == trials)


def storage_rows(table, work, n):
    # A key per run (as with {date} keys) carries its key's row too; a
    # key run again and again (--ttl, --force, a failing job) does not.
    # Both belong to one job, as the runs of a {date} key do.
    for label, key_of in [("a new key each run", lambda i: f"nightly-backup-{i}"),
                          ("one key run again", lambda i: "nightly-backup")]:
        real = work / f"real-{len(label)}" / "ledger.db"
        real_env = idem_env(work, real)
        sh(IDEM, "run", "--key", "warm", "--", "true", env=real_env)
        before = ledger_bytes(real)
        for i in range(n):
            sh(IDEM, "run", "--key", key_of(i), "--job", "nightly-backup", "--force", "--capture", "0", "--",
               "true", "/usr/local/bin/backup", "--all", env=real_env)
        per_run = (ledger_bytes(real) - before) / n
        table.add(f"storage per run without output, {label}", f"{per_run:.0f} bytes", "—", "—", "<= 250 bytes",
                  per_run <= 250)


def output_rows(table, work, env, floor, size, import_kib, history):
    produce = f"head -c {size} /dev/zero"
    pipe_base, pipe_idem = hyperfine([
        f"sh -c '{produce} | cat > /dev/null'",
        f"sh -c '{IDEM} run --key out --force -- {produce} > /dev/null'",
    ], 3 if size < (1 << 30) else 10, env)
    delivered = subprocess.run(f"{IDEM} run --key out-count --force -- {produce} | wc -c", shell=True,
                               env=env, capture_output=True, text=True).stdout.strip()
    amount = f"{size >> 20} MiB" if size < (1 << 30) else f"{size >> 30} GiB"
    table.add(f"{amount} of output through `idem run` / through `cat`",
              f"{pipe_idem}, {delivered} bytes delivered", f"cat {pipe_base}",
              f"{pipe_base.median / pipe_idem.median:.2f}x the throughput", ">= 0.8x, every byte",
              pipe_base.median >= 0.8 * pipe_idem.median and delivered == str(size))
    if not Path("/usr/bin/time").exists():
        print("  peak memory rows left out: /usr/bin/time is missing (Debian: apt-get install time)")
        return
    floor_kib = peak_rss([floor, work / "rss-record", "true"], env)
    baseline = f"floor {floor_kib / 1024:.1f} MiB"
    for what, args in [(f"`idem run` with {amount} of output", []),
                       (f"`idem run --capture 1MiB` with {amount} of output", ["--capture", "1MiB"])]:
        kib = peak_rss([IDEM, "run", "--key", "mem", "--force", *args, "--", "head", "-c", size, "/dev/zero"],
                       env)
        table.add(f"peak RSS of {what}", f"{kib / 1024:.1f} MiB", baseline, ratio(kib, floor_kib), "<= 16 MiB",
                  kib <= 16 * 1024)
    table.add(f"peak RSS of `ledger import` of {history}", f"{import_kib / 1024:.1f} MiB", baseline,
              ratio(import_kib, floor_kib), "<= 16 MiB", import_kib <= 16 * 1024)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that the script works")
    quick = parser.parse_args().quick
    for tool, package in [("hyperfine", "hyperfine"), ("flock", "util-linux"), ("sqlite3", "sqlite3"),
                          ("cc", "gcc")]:
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} is missing; install it (Debian: apt-get install {package})")
    # Built where BUILT points, whatever CARGO_TARGET_DIR says, with the
    # flags of scripts/dist (an explicit --target keeps them off proc macros).
    rustflags = (os.environ.get("RUSTFLAGS", "") + " -C target-feature=+crt-static").strip()
    sh("cargo", "build", "--release", "--locked", "--quiet", "--target", TARGET, cwd=ROOT,
       env=dict(os.environ, CARGO_TARGET_DIR=str(ROOT / "target"), RUSTFLAGS=rustflags))
    IDEM.parent.mkdir(parents=True, exist_ok=True)
    IDEM.unlink(missing_ok=True)
    shutil.copy2(BUILT, IDEM)
    floor, guarded, sqlite_floor = build_floors()
    bkt = find_bkt(quick)
    runs = 30 if quick else 300
    big_runs = 20_000 if quick else 1_000_000
    jobs = 20 if quick else 1000
    table = Table()

    with tempfile.TemporaryDirectory(prefix="idem-bench-") as tmp:
        work = Path(tmp)
        env = idem_env(work, work / "process" / "ledger.db")
        # The ten-run ledger the big one is held against: `bench` and nine more keys, run once each.
        small = work / "ten" / "ledger.db"
        for key in ["bench", *(f"job-{i}" for i in range(9))]:
            sh(IDEM, "run", "--key", key, "--", "true", env=idem_env(work, small))
        sixty = work / "sixty" / "ledger.db"
        for key in range(60):
            sh(IDEM, "run", "--key", f"job-{key}", "--", "true", env=idem_env(work, sixty))

        print("floor, flock, bkt and idem's skip and first run", flush=True)
        cpu_of = process_rows(table, runs, work, env, floor, guarded, sqlite_floor, bkt)
        print(f"ledger import of {big_runs:,} runs, then the same commands on it and on 10 runs", flush=True)
        from big import big_ledger_rows
        import_kib, history = big_ledger_rows(table, runs, work, env, small, sixty, big_runs, jobs)
        print("200 concurrent runs", flush=True)
        race_rows(table, work, floor, cpu_of, 1 if quick else 5, 2 if quick else 20)
        print("PostgreSQL through a proxy adding 1 ms each way", flush=True)
        postgres_rows(table, runs, work, quick)
        print("16 (--quick) / 64 / 256 concurrent runs on one PostgreSQL server, and pgbench", flush=True)
        fleet(table, work, quick)
        print("instructions and system calls of each path, against its budget", flush=True)
        budget = budget_table([IDEM] if quick else [IDEM, installed_build()], big_runs, jobs)
        print("storage per run", flush=True)
        storage_rows(table, work, 200 if quick else 2000)
        print("output throughput and memory", flush=True)
        output_rows(table, work, env, floor, (64 << 20) if quick else (1 << 30), import_kib, history)

    print()
    print(table.markdown() + "\n\n" + "\n".join(budget))
    machine = subprocess.run(["uname", "-srm"], capture_output=True, text=True).stdout.strip()
    print(f"\n{os.cpu_count()} cores, {machine}; hyperfine -N medians of {runs} runs"
          f"{' (--quick: small sizes, not figures to quote)' if quick else ''}")


if __name__ == "__main__":
    main()
