#!/usr/bin/env python3
"""Whole-process benchmarks of idem, each measured side by side with its
baseline in the same run, printed as ratios against the targets.

    benches/bench.py            # the full table (a few minutes)
    benches/bench.py --quick    # a smoke test of this script (CI runs it)

Needs hyperfine, flock, sqlite3 and /usr/bin/time (Debian: hyperfine,
util-linux, sqlite3, time). Builds the release binary first. Times are
medians; the machine's noise is real, so read ratios, not single figures.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IDEM = ROOT / "target" / "release" / "idem"


def sh(*args, env=None, **kwargs):
    return subprocess.run(args, check=True, env=env, **kwargs)


def hyperfine(commands, runs, env):
    """Median seconds of each command, run by hyperfine side by side."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        sh("hyperfine", "-N", "--warmup", str(max(3, runs // 10)), "--runs", str(runs),
           "--export-json", out.name, *commands, env=env,
           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        results = json.load(open(out.name))["results"]
    return [result["median"] for result in results]


def idem_env(work, db):
    env = dict(os.environ, IDEM_DB=str(db), HOME=str(work), XDG_DATA_HOME=str(work / "data"))
    env.pop("IDEM_PROGRESS", None)
    return env


def make_big_ledger(db, env, runs, keys):
    """A ledger of `runs` runs over `keys` keys, made by idem (for the
    schema) and filled in bulk by sqlite3."""
    sh(str(IDEM), "run", "--key", "seed", "--", "true", env=env)
    sql = f"""
    PRAGMA journal_mode = WAL;
    BEGIN;
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {keys})
    INSERT INTO keys (key) SELECT 'job-' || i FROM n;
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {runs})
    INSERT INTO runs (run_id, key_id, status, exit_code, signal, attempts, started_at,
                      finished_at, host, pid, command, shell, recovered)
    SELECT randomblob(16),
           (SELECT id FROM keys WHERE key = 'job-' || (1 + i % {keys})),
           CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'succeeded' END,
           CASE WHEN i % 10 = 0 THEN 1 ELSE 0 END, NULL, 1,
           1700000000000 + i * 60000, 1700000000000 + i * 60000 + 1500,
           'bench-host', 1000 + i % 30000, CAST('/usr/local/bin/backup' || x'00' || '--all' AS BLOB),
           0, 0
    FROM n;
    INSERT INTO attempts (run, n, started_at, finished_at, exit_code)
    SELECT id, 1, started_at, finished_at, exit_code FROM runs WHERE host = 'bench-host';
    UPDATE keys SET head = (SELECT max(id) FROM runs WHERE runs.key_id = keys.id)
    WHERE key LIKE 'job-%';
    COMMIT;
    PRAGMA wal_checkpoint(TRUNCATE);
    """
    sh("sqlite3", str(db), input=sql.encode(), stdout=subprocess.DEVNULL)
    sh(str(IDEM), "run", "--key", "bench", "--", "true", env=env)


def make_jobs_ledger(db, env, runs, jobs):
    """A ledger of `runs` runs of `jobs` daily jobs (`job-N-{date}`), a key
    per job and day, with the jobs' figures as idem keeps them."""
    sh(str(IDEM), "run", "--key", "seed", "--", "true", env=env)
    sql = f"""
    PRAGMA journal_mode = WAL;
    BEGIN;
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {jobs})
    INSERT INTO jobs (id, job, template, zone, host, command, shell)
    SELECT 1000 + i, 'job-' || i || '-{{date}}', 'job-' || i || '-{{date}}', 'UTC', 'bench-host',
           CAST('/usr/local/bin/backup' || x'00' || '--all' AS BLOB), 0 FROM n;
    WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {runs} - 1)
    INSERT INTO keys (id, key)
    SELECT 1000000 + i, 'job-' || (1 + i % {jobs}) || '-' || date(1700000000 + (i / {jobs}) * 86400, 'unixepoch')
    FROM n;
    INSERT INTO runs (id, run_id, key_id, job_id, status, exit_code, signal, attempts, started_at,
                      finished_at, host, pid, command, shell, recovered)
    SELECT k.id, randomblob(16), k.id, 1000 + 1 + (k.id - 1000000) % {jobs},
           CASE WHEN k.id % 10 = 0 THEN 'failed' ELSE 'succeeded' END,
           CASE WHEN k.id % 10 = 0 THEN 1 ELSE 0 END, NULL, 1,
           (1700000000 + ((k.id - 1000000) / {jobs}) * 86400) * 1000 + 7200000,
           (1700000000 + ((k.id - 1000000) / {jobs}) * 86400) * 1000 + 7201500,
           'bench-host', 1000, CAST('/usr/local/bin/backup' || x'00' || '--all' AS BLOB), 0, 0
    FROM keys k WHERE k.id >= 1000000;
    UPDATE keys SET head = id WHERE id >= 1000000;
    UPDATE jobs SET (first_run, last_run, checked_at, succeeded, failed, last_success) =
        (SELECT min(started_at), max(started_at), max(started_at), sum(status = 'succeeded'),
                sum(status = 'failed'), max(CASE WHEN status = 'succeeded' THEN finished_at END)
         FROM runs WHERE job_id = jobs.id)
    WHERE id > 1000;
    UPDATE jobs SET last_status = 'succeeded', last_exit = 0, strip = 'sssssssssfsssssssss',
        ok_keys = '' WHERE id > 1000;
    COMMIT;
    PRAGMA wal_checkpoint(TRUNCATE);
    """
    sh("sqlite3", str(db), input=sql.encode(), stdout=subprocess.DEVNULL)


def ledger_bytes(db):
    """Bytes the ledger holds, WAL folded in."""
    sh("sqlite3", str(db), "PRAGMA wal_checkpoint(TRUNCATE);", stdout=subprocess.DEVNULL)
    return sum(path.stat().st_size for path in db.parent.glob(db.name + "*"))


def race(env, racers, args):
    """Starts `racers` idem processes at once; returns (seconds, outputs)."""
    started = time.monotonic()
    children = [subprocess.Popen([str(IDEM), *args], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE) for _ in range(racers)]
    outputs = [(child.wait(), child.stdout.read(), child.stderr.read()) for child in children]
    return time.monotonic() - started, outputs


class Table:
    def __init__(self):
        self.rows = []

    def add(self, what, measured, target, ok):
        self.rows.append((what, measured, target, "yes" if ok else "NO"))
        print(f"  {what}: {measured} (target {target}) {'met' if ok else 'NOT MET'}", flush=True)

    def markdown(self):
        lines = ["| what | measured | target | met |", "|---|---|---|---|"]
        lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in self.rows]
        return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that the script works")
    options = parser.parse_args()
    quick = options.quick
    for tool in ["hyperfine", "flock", "sqlite3"]:
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} is missing; install it (Debian: apt-get install hyperfine util-linux sqlite3)")
    sh("cargo", "build", "--release", "--locked", "--quiet", cwd=ROOT)
    runs = 30 if quick else 300
    big_runs = 20_000 if quick else 1_000_000
    trials = 2 if quick else 20
    output_bytes = (64 << 20) if quick else (1 << 30)
    table = Table()

    with tempfile.TemporaryDirectory(prefix="idem-bench-") as tmp:
        work = Path(tmp)
        lock = work / "lock"
        lock.touch()
        small = work / "small" / "ledger.db"
        env = idem_env(work, small)
        for i in range(10):
            sh(str(IDEM), "run", "--key", f"job-{i}", "--", "true", env=env)
        sh(str(IDEM), "run", "--key", "bench", "--", "true", env=env)
        flock = f"flock {lock} true"

        print("skip and first-run paths", flush=True)
        base, skip, first = hyperfine(
            [flock, f"{IDEM} run --key bench -- true", f"{IDEM} run --key bench --force -- true"], runs, env)
        table.add("skip path / flock", f"{skip / base:.2f}x ({skip * 1e3:.2f} ms / {base * 1e3:.2f} ms)",
                  "<= 1.0x", skip <= base)
        table.add("first-run path / flock", f"{first / base:.2f}x ({first * 1e3:.2f} ms / {base * 1e3:.2f} ms)",
                  "<= 1.6x", first <= 1.6 * base)

        print("200 concurrent runs of distinct keys on a fresh ledger", flush=True)
        fresh = idem_env(work, work / "fresh" / "ledger.db")
        started = time.monotonic()
        children = [subprocess.Popen([str(IDEM), "run", "--key", f"k{i}", "--", "true"], env=fresh,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(200)]
        results = [(child.wait(), child.stderr.read()) for child in children]
        seconds = time.monotonic() - started
        errors = sum(1 for code, stderr in results if code != 0 or stderr)
        rate = 200 / seconds
        table.add("200 concurrent distinct keys", f"{rate:.0f} runs/s, {errors} errors", ">= 400 runs/s, 0 errors",
                  rate >= 400 and errors == 0)

        print("200 concurrent runs of one key", flush=True)
        good = 0
        for trial in range(trials):
            count = work / f"count-{trial}"
            one = idem_env(work, work / f"one-{trial}" / "ledger.db")
            _, outputs = race(one, 200, ["run", "--key", "one", "--shell", "--",
                                         f"echo x >> {count}; sleep 0.05"])
            executions = len(count.read_text().splitlines()) if count.exists() else 0
            codes_ok = all(code in (0, 75) for code, _, _ in outputs)
            good += executions == 1 and codes_ok
        table.add("200 concurrent runs of one key", f"one execution in {good} of {trials} trials",
                  f"{trials} of {trials}", good == trials)

        print(f"ledger of {big_runs} runs against one of 10", flush=True)
        big = work / "big" / "ledger.db"
        big_env = idem_env(work, big)
        make_big_ledger(big, big_env, big_runs, max(10, big_runs // 100))
        skip_small, skip_big = hyperfine([f"{IDEM} --db {small} run --key bench -- true",
                                          f"{IDEM} --db {big} run --key bench -- true"], runs, env)
        table.add(f"skip path, {big_runs} runs / 10 runs", f"{skip_big / skip_small:.2f}x", "<= 1.1x",
                  skip_big <= 1.1 * skip_small)
        list_small, list_big = hyperfine([f"{IDEM} --db {small} ledger list --limit 50",
                                          f"{IDEM} --db {big} ledger list --limit 50"], runs, env)
        table.add(f"ledger list --limit 50, {big_runs} runs / 10 runs", f"{list_big / list_small:.2f}x",
                  "<= 1.2x", list_big <= 1.2 * list_small)

        jobs = 20 if quick else 1000
        print(f"status and metrics, {big_runs} runs of {jobs} daily jobs", flush=True)
        by_job = work / "jobs" / "ledger.db"
        make_jobs_ledger(by_job, idem_env(work, by_job), big_runs, jobs)
        status, metrics = hyperfine([f"sh -c '{IDEM} --db {by_job} status > /dev/null; true'",
                                     f"{IDEM} --db {by_job} ledger metrics"], max(10, runs // 10), env)
        table.add(f"idem status, {big_runs} runs of {jobs} jobs", f"{status * 1e3:.1f} ms", "< 50 ms",
                  status < 0.05)
        table.add(f"ledger metrics, {big_runs} runs of {jobs} jobs", f"{metrics * 1e3:.1f} ms", "< 50 ms",
                  metrics < 0.05)

        print("storage per run", flush=True)
        n = 200 if quick else 2000
        # A key per run (as with {date} keys) carries its key's row too; a
        # key run again and again (--ttl, --force, a failing job) does not.
        for label, key_of in [("a new key each run", lambda i: f"nightly-backup-{i}"),
                              ("one key run again", lambda i: "nightly-backup")]:
            real = work / f"real-{len(label)}" / "ledger.db"
            real_env = idem_env(work, real)
            sh(str(IDEM), "run", "--key", "warm", "--", "true", env=real_env)
            before = ledger_bytes(real)
            for i in range(n):
                sh(str(IDEM), "run", "--key", key_of(i), "--force", "--capture", "0", "--",
                   "true", "/usr/local/bin/backup", "--all", env=real_env)
            per_run = (ledger_bytes(real) - before) / n
            table.add(f"storage per run, {label}", f"{per_run:.0f} bytes", "<= 250 bytes", per_run <= 250)

        print("output throughput and memory", flush=True)
        size = output_bytes
        produce = f"head -c {size} /dev/zero"
        pipe_base, pipe_idem = hyperfine([
            f"sh -c '{produce} | cat > /dev/null'",
            f"sh -c '{IDEM} run --key out --force -- {produce} > /dev/null'",
        ], 3 if quick else 10, env)
        delivered = subprocess.run(f"{IDEM} run --key out-count --force -- {produce} | wc -c", shell=True,
                                   env=env, capture_output=True, text=True).stdout.strip()
        ratio = pipe_base / pipe_idem
        table.add(f"{size >> 20} MiB through idem / through cat", f"{ratio:.2f}x throughput, {delivered} bytes delivered",
                  ">= 0.8x, every byte", ratio >= 0.8 and delivered == str(size))
        if Path("/usr/bin/time").exists():
            measured = subprocess.run(["/usr/bin/time", "-v", str(IDEM), "run", "--key", "mem", "--force", "--",
                                       "head", "-c", str(size), "/dev/zero"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).stderr
            kib = next(int(line.split()[-1]) for line in measured.splitlines() if "Maximum resident" in line)
            table.add("peak memory of idem run", f"{kib / 1024:.1f} MiB", "<= 16 MiB", kib <= 16 * 1024)
        else:
            print("  peak memory: skipped, /usr/bin/time is missing (Debian: apt-get install time)")

    print()
    print(table.markdown())
    machine = subprocess.run(["uname", "-srm"], capture_output=True, text=True).stdout.strip()
    print(f"\n{os.cpu_count()} cores, {machine}; medians of hyperfine runs")


if __name__ == "__main__":
    main()
