#!/usr/bin/env python3
"""`idem ledger prune` of many old runs while clients claim keys of the
same job on PostgreSQL: how long a claim is held up.

Starts a throwaway server (bench.py's), inserts RUNS old runs of job
`nightly` under KEYS keys with generate_series, starts CLIENTS loops of
`idem run --key NEW --job nightly -- true`, and prunes. It measures twice:
`prune --dry-run`, then the real, batched prune. An idem older than the
read-only dry run (`--idem PATH`) did the whole prune in one transaction
there and rolled it back, as every prune did before prune went in
batches: the figure of one transaction. For each it prints the prune's time and, of the runs that
started while it ran, how many failed and the longest and median time of
a run, the longest claim statement, the lock waits, and how long the
prune held the job's row each time (the server logs the prune's every
statement, with its duration).

    benches/prune_load.py [--idem PATH] [--runs N] [--keys N] [--clients N] [--client-nice N]

On one machine the clients' idem processes and their commands share the
CPUs with the server; in a fleet they run on hosts of their own. With
`--client-nice 19` they run at the lowest priority, so that the server's
processes (the prune's and the clients' sessions alike) get the CPUs
first, as a server of its own would: what is then left of a hold is the
server's work and its waits, not the scheduler's queue.
"""

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

CLAIM = re.compile(r"duration: ([0-9.]+) ms\s+(?:execute|statement)[^:]*: WITH (?:ok|job) AS \(")
LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) UTC \[(\d+)\] LOG:  duration: ([0-9.]+) ms  [^:]*: (.*)$")
# With log_lock_waits and a deadlock_timeout of 10 ms, every wait for a
# lock longer than that is logged when it ends.
WAITED = re.compile(r"acquired \w+ on [^\n]* after ([0-9.]+) ms")


def old_runs_sql(runs, keys):
    return f"""
        INSERT INTO idem.keys (key) SELECT 'old-' || k FROM generate_series(1, {keys}) k;
        INSERT INTO idem.runs (run_id, key, status, exit_code, attempts, started_at,
            finished_at, host, pid, command, shell, job)
        SELECT gen_random_uuid(), 'old-' || (n % {keys} + 1), 'succeeded', 0, 1,
            now() - interval '40 days' + n * interval '1 ms',
            now() - interval '40 days' + n * interval '1 ms', 'old-host', 1, 'true', false,
            'nightly'
        FROM generate_series(1, {runs}) n;
        INSERT INTO idem.attempts (run, n, started_at, finished_at, exit_code)
        SELECT id, 1, started_at, finished_at, 0 FROM idem.runs WHERE key LIKE 'old-%';
        UPDATE idem.keys k SET head = (SELECT max(id) FROM idem.runs r WHERE r.key = k.key)
        WHERE key LIKE 'old-%';
        UPDATE idem.jobs SET succeeded = succeeded + {runs} WHERE job = 'nightly';
        ANALYZE;
    """


class Clients:
    """CLIENTS threads, each running new keys of job `nightly` in a loop;
    each run's (start, end, exit code) kept."""

    def __init__(self, idem, env, count, nice=0):
        self.idem, self.env = ([] if nice == 0 else ["nice", "-n", str(nice)]) + [idem], env
        self.stop = threading.Event()
        self.runs = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.loop, args=(n,)) for n in range(count)]
        for thread in self.threads:
            thread.start()

    def loop(self, client):
        turn = 0
        while not self.stop.is_set():
            key = f"live-{client}-{turn}-{time.monotonic_ns()}"
            start = time.monotonic()
            done = subprocess.run([*self.idem, "run", "--key", key, "--job", "nightly", "--", "true"],
                                  env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            with self.lock:
                self.runs.append((start, time.monotonic(), done.returncode))
            turn += 1

    def between(self, start, end):
        with self.lock:
            return [run for run in self.runs if start <= run[0] and run[0] < end]

    def end(self):
        self.stop.set()
        for thread in self.threads:
            thread.join()


def logged(log, since, until, pattern):
    with open(log, "rb") as file:
        file.seek(since)
        text = file.read(until - since).decode(errors="replace")
    return sorted(float(ms) for ms in pattern.findall(text))


def measure(what, args, clients, env, log):
    mark = log.stat().st_size
    start = time.monotonic()
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    end = time.monotonic()
    # The clients go on logging: read the log only up to the prune's end.
    until = log.stat().st_size
    if done.returncode != 0:
        sys.exit(f"prune_load: {' '.join(map(str, args))} failed: {done.stderr}")
    runs = clients.between(start, end)
    failed = sum(1 for run in runs if run[2] != 0)
    times = sorted((run[1] - run[0]) * 1000 for run in runs)
    claims = logged(log, mark, until, CLAIM)
    waits = logged(log, mark, until, WAITED)
    print(f"{what}: {end - start:.1f} s; {done.stdout.strip()}")
    if times:
        print(f"  {len(runs)} runs started during it, {failed} failed; a run took median "
              f"{statistics.median(times):.0f} ms, longest {times[-1]:.0f} ms")
    if claims:
        print(f"  claim statements (the run written, the job's row taken) over 20 ms: {len(claims)}, "
              f"longest {claims[-1]:.1f} ms")
    print(f"  lock waits over 10 ms (any, most between clients on the job's row): {len(waits)}"
          + (f", longest {waits[-1]:.1f} ms" if waits else ""))
    holds = job_row_holds(log, mark, until)
    if holds:
        print(f"  the prune held the job's row (once it had it) {len(holds)} times: median {statistics.median(holds):.1f} ms, "
              f"longest {max(holds):.1f} ms", flush=True)


def job_row_holds(log, since, until):
    """How long each of the prune's transactions held the jobs' rows: from
    the start of its first statement that writes them to the end of its
    COMMIT or ROLLBACK (the prune's session logs every statement), less
    the time that statement waited for the rows (its lock waits over 10 ms,
    logged)."""
    from datetime import datetime
    acquired = re.compile(r"^\S+ \S+ UTC \[(\d+)\] LOG:  process \d+ acquired .* after ([0-9.]+) ms")
    holds, taken, waited = [], {}, {}
    with open(log, "rb") as file:
        file.seek(since)
        for raw in file:
            if file.tell() > until + len(raw):
                break
            line = raw.decode(errors="replace").rstrip("\n")
            wait = acquired.match(line)
            if wait:
                waited[wait[1]] = waited.get(wait[1], 0.0) + float(wait[2])
                continue
            match = LINE.match(line)
            if not match:
                continue
            at = datetime.fromisoformat(match[1]).timestamp() * 1000
            pid, took, text = match[2], float(match[3]), match[4]
            # The batch's first statement on the jobs' rows: the lock in
            # name order (an idem before that lock: the update itself).
            if text.startswith(("SELECT j.job FROM idem.jobs j", "UPDATE idem.jobs j SET running")) \
                    and pid not in taken:
                taken[pid] = at - took + waited.pop(pid, 0.0)
            elif text.startswith(("COMMIT", "ROLLBACK")):
                waited.pop(pid, None)
                if pid in taken:
                    holds.append(at - taken.pop(pid))
    return holds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--idem", default=str(bench.ROOT / "target" / "debug" / "idem"))
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--client-nice", type=int, default=0, help="the clients' niceness (0 to 19)")
    parser.add_argument("--keep-log", help="copy the server's log there at the end")
    args = parser.parse_args()
    bin = bench.pg_binaries()
    if bin is None:
        sys.exit("prune_load: no PostgreSQL server binaries (initdb, pg_ctl); install the postgresql package")
    server = bench.Postgres(bin)
    work = Path(tempfile.mkdtemp(prefix="idem-prune-"))
    try:
        url = f"postgresql://postgres@{'%2F'.join(str(server.dir).split('/'))}/idem"
        env = bench.idem_env(work, url)
        bench.sh(args.idem, "run", "--key", "seed", "--job", "nightly", "--", "true", env=env,
                 stdout=subprocess.DEVNULL)
        psql = [bin / "psql", "-X", "-q", "-h", server.dir, "-U", "postgres", "-d", "idem"]
        print(f"inserting {args.runs} old runs under {args.keys} keys", flush=True)
        bench.sh(*psql, "-c", old_runs_sql(args.runs, args.keys))
        for setting in ["log_min_duration_statement = 20", "log_lock_waits = on", "deadlock_timeout = '10ms'"]:
            bench.sh(*psql, "-c", f"ALTER DATABASE idem SET {setting}")
        clients = Clients(args.idem, env, args.clients, args.client_nice)
        try:
            time.sleep(5)
            measure("no prune (sleep 3)", ["sleep", "3"], clients, env, server.dir / "server.log")
            prune = [args.idem, "ledger", "prune", "--older-than", "30d"]
            # The prune's own statements are all logged, with their times.
            logged_env = bench.idem_env(work, url + "?options=-c%20log_min_duration_statement%3D0")
            measure("prune --dry-run", [*prune, "--dry-run"], clients, logged_env,
                    server.dir / "server.log")
            measure("in batches (prune)", prune, clients, logged_env, server.dir / "server.log")
        finally:
            clients.end()
            if args.keep_log:
                bench.shutil.copy(server.dir / "server.log", args.keep_log)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
