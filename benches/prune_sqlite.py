#!/usr/bin/env python3
"""`idem ledger prune` of many old runs of a SQLite ledger while clients
claim keys of the same job: how long the prune takes, and how long a run
waited meanwhile.

Makes one ledger of RUNS old runs of job `nightly` under KEYS keys (the
seed run by the first idem, the rest by SQL), then, ROUNDS times and for
each idem given (in turn, so that the machine's load falls on each alike),
prunes a fresh copy of it while CLIENTS loops run `idem run --key NEW --job
nightly -- true`, timing each run. Prints each prune's time and, of the
runs that overlapped it, how many failed and the longest and median time
of a run; then the medians over the rounds. A round with no prune (3 s)
gives the runs' own times.

    benches/prune_sqlite.py [--idem PATH]... [--runs N] [--keys N] [--clients N] [--rounds N]
"""

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def env_for(work, db):
    env = {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}
    env.update(IDEM_DB=str(db), HOME=str(work), XDG_DATA_HOME=str(work / "data"), TZ="UTC")
    return env


def make_ledger(idem, work, runs, keys):
    db = work / "template.db"
    subprocess.run([idem, "run", "--key", "seed", "--job", "nightly", "--", "true"],
                   env=env_for(work, db), check=True, stdout=subprocess.DEVNULL)
    conn = sqlite3.connect(db)
    # Run ids are UUIDv7, in start order, as idem makes them.
    conn.create_function("seq_uuid", 1, lambda i: (0x0190 << 112 | i).to_bytes(16, "big"))
    old = int((time.time() - 40 * 86400) * 1000)
    conn.executescript(f"""
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {keys})
        INSERT INTO keys (key) SELECT 'old-' || i FROM n;
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {runs})
        INSERT INTO runs (run_id, key_id, status, exit_code, attempts, started_at,
            finished_at, host, pid, command, shell, job_id)
        SELECT seq_uuid(i), (SELECT id FROM keys WHERE key = 'old-' || (i % {keys} + 1)),
            1, 0, 1, {old} + i, {old} + i + 1, 'old-host', 1, CAST('true' AS BLOB), 0,
            (SELECT id FROM jobs WHERE job = 'nightly')
        FROM n;
        INSERT INTO attempts (run, n, started_at, finished_at, exit_code)
        SELECT id, 1, started_at, finished_at, 0 FROM runs WHERE host = 'old-host';
        UPDATE keys SET head = (SELECT max(id) FROM runs r WHERE r.key_id = keys.id)
        WHERE key LIKE 'old-%';
        UPDATE jobs SET succeeded = succeeded + {runs} WHERE job = 'nightly';
        ANALYZE;
    """)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return db


class Clients:
    """CLIENTS threads, each running new keys of job `nightly` in a loop;
    each run's (start, end, exit code) kept."""

    def __init__(self, idem, env, count, tag):
        self.runs, self.stop = [], threading.Event()
        self.threads = [threading.Thread(target=self.loop, args=(idem, env, f"{tag}-{n}"))
                        for n in range(count)]
        for thread in self.threads:
            thread.start()

    def loop(self, idem, env, name):
        n = 0
        while not self.stop.is_set():
            start = time.monotonic()
            code = subprocess.run([idem, "run", "--key", f"live-{name}-{n}", "--job", "nightly",
                                   "--", "true"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL).returncode
            self.runs.append((start, time.monotonic(), code))
            n += 1

    def end(self):
        self.stop.set()
        for thread in self.threads:
            thread.join()


def round_of(idem, template, work, clients, command, tag):
    db = work / f"{tag}.db"
    shutil.copy(template, db)
    env = env_for(work, db)
    pool = Clients(idem, env, clients, tag)
    time.sleep(1)
    start = time.monotonic()
    out = subprocess.run(command(idem), env=env, capture_output=True, text=True)
    end = time.monotonic()
    time.sleep(0.5)
    pool.end()
    if out.returncode != 0:
        sys.exit(f"prune_sqlite: {tag} exited {out.returncode}: {out.stderr}")
    during = [(e - s, c) for s, e, c in pool.runs if e > start and s < end]
    times = [t for t, _ in during] or [0.0]
    for suffix in ["", "-wal", "-shm", ".lock"]:
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return end - start, len(during), sum(1 for _, c in during if c != 0), max(times), \
        statistics.median(times), out.stdout.strip().split(" that")[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--idem", action="append")
    parser.add_argument("--runs", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    idems = args.idem or [str(ROOT / "target" / "release" / "idem")]
    work = Path(tempfile.mkdtemp(prefix="idem-prune-"))
    try:
        template = make_ledger(idems[-1], work, args.runs, args.keys)
        prune = lambda idem: [idem, "ledger", "prune", "--older-than", "30d"]
        idle = lambda idem: ["sleep", "3"]
        results = {}
        for n in range(args.rounds):
            for i, idem in enumerate(idems):
                for what, command in [("no prune (sleep 3)", idle), ("prune", prune)]:
                    got = round_of(idem, template, work, args.clients, command, f"r{n}-{i}")
                    results.setdefault((idem, what), []).append(got)
                    secs, runs, failed, longest, median, said = got
                    print(f"{idem} {what}: {secs:.2f} s; {runs} runs meanwhile, {failed} failed, "
                          f"longest {longest * 1000:.0f} ms, median {median * 1000:.0f} ms; {said}",
                          flush=True)
        print("medians:")
        for (idem, what), rounds in results.items():
            med = lambda at: statistics.median(r[at] for r in rounds)
            print(f"{idem} {what}: {med(0):.2f} s; longest run {med(3) * 1000:.0f} ms, "
                  f"median run {med(4) * 1000:.0f} ms, failed {sum(r[2] for r in rounds)} "
                  f"of {sum(r[1] for r in rounds)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
