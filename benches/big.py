#!/usr/bin/env python3
"""A big ledger: bench.py's rows on a million runs, and, run alone, the
reads of a fleet's ledger at ten million runs on both backends.

    benches/big.py [--runs 10000000] [--jobs 1000] [--backend sqlite|postgres|both] [--idem PATH]

Each backend gets a ledger of RUNS runs of JOBS daily jobs (a key per job
and day, one run in ten failed), and `idem status`, `idem ledger metrics`,
`idem ledger list --limit 50` and a skip are timed on it by hyperfine,
side by side with the same commands on a ten-run ledger (a sixty-run one
for `list`, which then lists fifty too).

On SQLite the whole history goes through `idem ledger import`. On
PostgreSQL, where an import makes a round trip per statement, the last
TAIL_DAYS days go through `ledger import` (so each job's row, strip and
figures are idem's own) and the days before are written by `HISTORY_SQL`
in the shape import gives them: a run, its one attempt and its key, the
jobs' counts raised by what was added. The server then runs VACUUM ANALYZE,
as autovacuum would on a ledger that old.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

# The first day of the made-up history (2023-11-14).
DAY0 = 1_700_000_000
# Days of PostgreSQL's history imported by idem itself, the newest.
TAIL_DAYS = 20
# `/usr/local/bin/backup --all` as idem stores a command: NUL-separated.
COMMAND_HEX = b"/usr/local/bin/backup\0--all".hex()

HISTORY_SQL = """
SET timezone = 'UTC';
SET session_replication_role = replica; -- the runs go in before their keys
CREATE TEMP TABLE mark AS SELECT coalesce(max(id), 0) AS id FROM idem.runs;
INSERT INTO idem.runs (run_id, key, status, exit_code, attempts, started_at, finished_at, host, pid,
    command, shell, recovered, job)
SELECT gen_random_uuid(), 'job-' || j || '-' || to_char(day, 'YYYY-MM-DD'),
    CASE WHEN (d * {jobs} + j - 1) % 10 = 9 THEN 'failed' ELSE 'succeeded' END,
    CASE WHEN (d * {jobs} + j - 1) % 10 = 9 THEN 1 ELSE 0 END, 1,
    day + interval '2 hours', day + interval '2 hours 1.5 seconds', 'bench-host', 1000,
    decode('{command}', 'hex'), false, false, 'job-' || j || '-{{date}}'
FROM generate_series(0, {days} - 1) d, generate_series(1, {jobs}) j,
    LATERAL (SELECT date_trunc('day', to_timestamp({day0} + d::bigint * 86400)) AS day) t
ORDER BY d, j;
INSERT INTO idem.attempts (run, n, started_at, finished_at, exit_code, stdout_tail, stderr_tail)
SELECT id, 1, started_at, finished_at, exit_code, '', '' FROM idem.runs WHERE id > (SELECT id FROM mark);
INSERT INTO idem.keys (key, head) SELECT key, id FROM idem.runs WHERE id > (SELECT id FROM mark);
UPDATE idem.jobs j SET succeeded = j.succeeded + s.ok, failed = j.failed + s.bad,
    first_run = least(j.first_run, s.first)
FROM (SELECT job, count(*) FILTER (WHERE status = 'succeeded') AS ok,
        count(*) FILTER (WHERE status = 'failed') AS bad, min(started_at) AS first
      FROM idem.runs WHERE id > (SELECT id FROM mark) GROUP BY job) s
WHERE j.job = s.job;
RESET session_replication_role;
"""


def write_export(path, runs, jobs):
    with open(path, "w") as out:
        export_lines(out, runs, jobs)


def export_lines(out, runs, jobs, first_day=0):
    """An `idem ledger export` of `runs` runs of `jobs` daily jobs
    (`job-N-{date}`, a key per job and day, one in ten failed), then the
    succeeded key `bench` whose command is `true`; from day `first_day` on
    (the days before are left to `HISTORY_SQL`)."""
    days = -(-runs // jobs)
    for day in range(first_day, days):
        date = time.strftime("%Y-%m-%d", time.gmtime(DAY0 + day * 86400))
        started, finished = f"{date}T02:00:00.000Z", f"{date}T02:00:01.500Z"
        for job in range(1, jobs + 1):
            i = day * jobs + job - 1
            if i >= runs:
                break
            status, code = ("failed", 1) if i % 10 == 9 else ("succeeded", 0)
            out.write(
                f'{{"key":"job-{job}-{date}","job":"job-{job}-{{date}}","head":true,'
                f'"run_id":"00000000-0000-7000-8000-{i:012x}","status":"{status}","exit_code":{code},'
                f'"signal":null,"attempts":1,"started_at":"{started}","finished_at":"{finished}",'
                f'"duration_ms":1500,"host":"bench-host","pid":1000,'
                f'"command":["/usr/local/bin/backup","--all"],"shell":false,"recovered":false,'
                f'"attempts_detail":[{{"attempt":1,"exit_code":{code},"signal":null,"timed_out":false,'
                f'"output_cut":false,"started_at":"{started}","finished_at":"{finished}",'
                f'"stdout_tail":"","stderr_tail":""}}]}}\n')
    out.write(
        '{"key":"bench","job":"bench","head":true,"run_id":"00000000-0000-7000-9000-000000000000",'
        '"status":"succeeded","exit_code":0,"signal":null,"attempts":1,'
        '"started_at":"2025-01-01T00:00:00.000Z","finished_at":"2025-01-01T00:00:00.010Z",'
        '"duration_ms":10,"host":"bench-host","pid":1000,"command":["true"],"shell":false,'
        '"recovered":false,"attempts_detail":[]}\n')



def big_ledger_rows(table, runs, work, env, small, sixty, big_runs, jobs):
    """A ledger of `big_runs` runs made by `ledger import`, measured right
    after the import, before anything checkpoints its write-ahead log.
    `ledger list --limit 50` is held against a ledger that lists 50 runs
    too (`sixty`), so that the ratio is the history's cost alone; against
    the ten-run ledger, which lists ten, it is a reference."""
    big = work / "big" / "ledger.db"
    big.parent.mkdir()
    export = work / "export.jsonl"
    write_export(export, big_runs, jobs)
    big_env = bench.idem_env(work, big)
    started = time.monotonic()
    import_kib = bench.peak_rss([bench.IDEM, "ledger", "import", "--quiet", export], big_env)
    print(f"  imported {big_runs:,} runs in {time.monotonic() - started:.1f} s", flush=True)
    export.unlink()
    size = f"{big_runs:,} runs"
    skip_small, skip_big, list_small, list_sixty, list_big = bench.hyperfine(
        [f"{bench.IDEM} --db {small} run --key bench -- true", f"{bench.IDEM} --db {big} run --key bench -- true",
         f"{bench.IDEM} --db {small} ledger list --limit 50", f"{bench.IDEM} --db {sixty} ledger list --limit 50",
         f"{bench.IDEM} --db {big} ledger list --limit 50"], runs, env)
    for what, a, b, baseline in [("skip", skip_big, skip_small, "10 runs"),
                                 ("`ledger list --limit 50`", list_big, list_sixty, "60 runs (50 listed)")]:
        table.add(f"{what}, {size} right after `ledger import` / {baseline}", str(a), f"{baseline} {b}",
                  bench.ratio(a.median, b.median), "<= 1.1x", a.median <= 1.1 * b.median)
    table.add(f"reference: `ledger list --limit 50`, {size} / 10 runs (10 listed)", str(list_big),
              f"10 runs {list_small}", bench.ratio(list_big.median, list_small.median), "—", None)
    status_small, status_big, metrics_small, metrics_big = bench.hyperfine(
        [f"{bench.IDEM} --db {small} status", f"{bench.IDEM} --db {big} status",
         f"{bench.IDEM} --db {small} ledger metrics", f"{bench.IDEM} --db {big} ledger metrics"],
        runs, env, ignore_failure=True)
    for what, a, b in [("`idem status`", status_big, status_small),
                       ("`idem ledger metrics`", metrics_big, metrics_small)]:
        table.add(f"{what}, {size} of {jobs:,} daily jobs", str(a), f"10 runs {b}", bench.ratio(a.median, b.median),
                  "<= 50 ms", a.median <= 0.05)
    serve_rows(table, env, small, big, size, jobs, runs)
    # Last: these write. A key per job and day makes as many keys as runs.
    first_small, first_big = bench.hyperfine(
        [f"{bench.IDEM} --db {small} run --key fresh --force -- true",
         f"{bench.IDEM} --db {big} run --key fresh --force -- true"], runs, env)
    table.add(f"reference: first run (`--force -- true`), {size} under as many keys / 10 runs", str(first_big),
              f"10 runs {first_small}", bench.ratio(first_big.median, first_small.median), "—", None)
    return import_kib, size


def page_times(db, paths, env, requests):
    """The median time of `requests` GETs of each of `paths` (after three
    unmeasured), one after another on loopback, from one `idem serve` of
    `db`: the server opens the ledger for every request, so each is timed
    whole, open to close."""
    server = subprocess.Popen([str(bench.IDEM), "--db", str(db), "serve", "--listen", "127.0.0.1:0"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        url = next((word for word in line.split() if word.startswith("http://")), None)
        if url is None:
            sys.exit(f"bench: idem serve did not start: {line}")
        medians = []
        for path in paths:
            times = []
            for i in range(requests + 3):
                started = time.perf_counter()
                with urllib.request.urlopen(url.rstrip("/") + path) as response:
                    response.read()
                if i >= 3:
                    times.append(time.perf_counter() - started)
            medians.append(statistics.median(times))
        return medians
    finally:
        server.terminate()
        server.wait()


def serve_rows(table, env, small, big, size, jobs, requests):
    """`idem serve`'s board (every job judged, as `status` does) and a job's
    page (its latest 20 runs with their attempts and output), on the big
    ledger and on the ten-run one."""
    board_small, job_small = page_times(small, ["/", "/job/bench"], env, requests)
    board_big, job_big = page_times(big, ["/", "/job/job-1-%7Bdate%7D"], env, requests)
    for what, a, b in [(f"`idem serve` board `/`, {size} of {jobs:,} daily jobs", board_big, board_small),
                       (f"`idem serve` job page `/job/JOB`, {size}", job_big, job_small)]:
        table.add(what, f"{a * 1e3:.2f} ms", f"10 runs {b * 1e3:.2f} ms", bench.ratio(a, b), "<= 100 ms", a <= 0.1)



# ---- run alone: ten million runs on each backend --------------------------------


def import_stream(idem, env, runs, jobs, first_day=0):
    """`idem ledger import` of `export_lines` through a pipe; its seconds."""
    started = time.monotonic()
    child = subprocess.Popen([str(idem), "ledger", "import", "--quiet"], env=env, stdin=subprocess.PIPE,
                             text=True)
    export_lines(child.stdin, runs, jobs, first_day)
    child.stdin.close()
    if child.wait() != 0:
        sys.exit("big: ledger import failed")
    return time.monotonic() - started


def fill_small(idem, env, ten, sixty):
    """The ten-run ledger (`bench` and nine more keys) and the sixty-run one."""
    for db, keys in [(ten, ["bench", *(f"job-{i}" for i in range(9))]), (sixty, [f"job-{i}" for i in range(60)])]:
        for key in keys:
            bench.sh(idem, "--db", db, "run", "--key", key, "--", "true", env=env, stdout=subprocess.DEVNULL)


def reads(table, backend, idem, big, ten, sixty, env, size, runs):
    """The reads timed side by side on the big ledger and the small ones."""
    timed = bench.hyperfine(
        [f"{idem} --db {db} {command}" for command in ["status", "ledger metrics"] for db in [ten, big]]
        + [f"{idem} --db {db} ledger list --limit 50" for db in [sixty, big]]
        + [f"{idem} --db {db} run --key bench -- true" for db in [ten, big]], runs, env, ignore_failure=True)
    status_ten, status_big, metrics_ten, metrics_big, list_sixty, list_big, skip_ten, skip_big = timed
    for what, a, b in [("`idem status`", status_big, status_ten), ("`idem ledger metrics`", metrics_big, metrics_ten)]:
        table.add(f"{backend}: {what}, {size}", str(a), f"10 runs {b}", bench.ratio(a.median, b.median),
                  "<= 50 ms", a.median <= 0.05)
    for what, a, b, baseline in [("`ledger list --limit 50`", list_big, list_sixty, "60 runs (50 listed)"),
                                 ("skip", skip_big, skip_ten, "10 runs")]:
        table.add(f"{backend}: {what}, {size} / {baseline}", str(a), f"{baseline} {b}",
                  bench.ratio(a.median, b.median), "<= 1.1x", a.median <= 1.1 * b.median)


def on_sqlite(table, idem, work, runs, jobs, repeat):
    env = bench.idem_env(work, work / "unused.db")
    ten, sixty, big = (work / name / "ledger.db" for name in ["ten", "sixty", "big"])
    for db in [ten, sixty, big]:
        db.parent.mkdir()
    fill_small(idem, env, ten, sixty)
    print(f"sqlite: importing {runs:,} runs", flush=True)
    seconds = import_stream(idem, bench.idem_env(work, big), runs, jobs)
    print(f"  {seconds:.0f} s; the ledger is {bench.ledger_bytes(big) / 2**30:.2f} GiB", flush=True)
    reads(table, "SQLite", idem, big, ten, sixty, env, f"{runs:,} runs", repeat)


def on_postgres(table, idem, work, runs, jobs, repeat):
    bin = bench.pg_binaries()
    if bin is None:
        sys.exit("big: no PostgreSQL server binaries (initdb, pg_ctl); install the postgresql package")
    server = bench.Postgres(bin)
    try:
        psql = [bin / "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", server.dir, "-U", "postgres"]
        for name in ["ten", "sixty"]:
            bench.sh(*psql, "-d", "idem", "-c", f"CREATE DATABASE {name}")
        folder = str(server.dir).replace("%", "%25").replace("/", "%2F")
        ten, sixty, big = (f"postgresql://postgres@{folder}/{name}" for name in ["ten", "sixty", "idem"])
        env = bench.idem_env(work, big)
        fill_small(idem, env, ten, sixty)
        days = -(-runs // jobs)
        tail = max(0, days - TAIL_DAYS)
        print(f"postgres: importing the last {days - tail} days, then {tail * jobs:,} runs by SQL", flush=True)
        started = time.monotonic()
        import_stream(idem, env, runs, jobs, first_day=tail)
        sql = HISTORY_SQL.format(jobs=jobs, days=tail, day0=DAY0, command=COMMAND_HEX)
        bench.sh(*psql, "-d", "idem", "-c", sql)
        bench.sh(*psql, "-d", "idem", "-c", "VACUUM ANALYZE")
        counted = subprocess.run([*map(str, psql), "-d", "idem", "-At", "-c", "SELECT count(*) FROM idem.runs"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        print(f"  {time.monotonic() - started:.0f} s; {int(counted):,} runs", flush=True)
        reads(table, "PostgreSQL", idem, big, ten, sixty, env, f"{int(counted):,} runs", repeat)
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000_000)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--idem", default=str(bench.IDEM), help="the binary (default: bench.py's copy)")
    parser.add_argument("--repeat", type=int, default=100, help="hyperfine runs of each command")
    args = parser.parse_args()
    if not Path(args.idem).exists():
        sys.exit(f"big: {args.idem} is missing; run benches/bench.py once, or give --idem")
    table = bench.Table()
    with tempfile.TemporaryDirectory(prefix="idem-big-") as tmp:
        if args.backend in ["sqlite", "both"]:
            (Path(tmp) / "sqlite").mkdir()
            on_sqlite(table, args.idem, Path(tmp) / "sqlite", args.runs, args.jobs, args.repeat)
        if args.backend in ["postgres", "both"]:
            (Path(tmp) / "postgres").mkdir()
            on_postgres(table, args.idem, Path(tmp) / "postgres", args.runs, args.jobs, args.repeat)
    print()
    print(table.markdown())
    print(f"\nhyperfine -N medians of {args.repeat} runs")


if __name__ == "__main__":
    main()
