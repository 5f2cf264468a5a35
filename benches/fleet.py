"""The fleet rows of bench.py: runs per second of many idem processes at
once, each its own key, against one local PostgreSQL server, next to
pgbench running idem's own statements for one run on the same server at
the same client counts.

pgbench's script is what one `idem run --key K -- true` asks of the
server, statement for statement in the same transactions: the session's
settings and the schema's version; the claim (the key's row made or
locked, its head read, then the job's row, the run and the key's new epoch
and lease, committed); the attempt's start; the outcome (the key locked,
the attempt, the run, the key released and the job's figures, committed).
It connects anew for each run (`-C`), as each idem process does. What it
leaves out is idem's own work: the process, its parsing, the command.
"""

import re
import subprocess
import tempfile
import time
from pathlib import Path

KEY = "('pgb-' || :client_id || '-' || :n)"

SCRIPT = f"""\\set n random(1, 1000000000000)
SET lock_timeout = '10000ms';
SET idle_in_transaction_session_timeout = '60000ms';
SELECT version FROM idem.version;
BEGIN ISOLATION LEVEL READ COMMITTED;
INSERT INTO idem.keys (key) VALUES {KEY} ON CONFLICT (key) DO UPDATE SET epoch = idem.keys.epoch WHERE false;
SELECT r.id, r.status, r.finished_at FROM idem.keys k LEFT JOIN idem.runs r ON r.id = k.head WHERE k.key = {KEY};
WITH job AS (INSERT INTO idem.jobs (job, template, host, command, shell, first_run, last_run, last_status, checked_at, running) VALUES ({KEY}, {KEY}, 'bench', '\\x74727565'::bytea, false, now(), now(), 'running', now(), 1) ON CONFLICT (job) DO UPDATE SET last_run = now(), last_status = 'running', running = idem.jobs.running + 1), run AS (INSERT INTO idem.runs (run_id, key, status, started_at, host, pid, command, shell, recovered, job) VALUES (gen_random_uuid(), {KEY}, 'running', now(), 'bench', 1, '\\x74727565'::bytea, false, false, {KEY}) RETURNING id) UPDATE idem.keys SET head = run.id, epoch = nextval('idem.fences'), owner_pgid = NULL, lease = '60 s', lease_until = clock_timestamp() + interval '60 s' FROM run WHERE idem.keys.key = {KEY} RETURNING idem.keys.epoch;
COMMIT;
WITH k AS (UPDATE idem.keys SET owner_pgid = 1 WHERE key = {KEY} RETURNING head), r AS (UPDATE idem.runs SET attempts = 1 WHERE id = (SELECT head FROM k) AND status = 'running' RETURNING id) INSERT INTO idem.attempts (run, n, started_at) SELECT id, 1, now() FROM r ON CONFLICT (run, n) DO NOTHING;
BEGIN ISOLATION LEVEL READ COMMITTED;
WITH k AS (SELECT head FROM idem.keys WHERE key = {KEY} FOR UPDATE), a AS (UPDATE idem.attempts SET finished_at = now(), exit_code = 0 WHERE run = (SELECT head FROM k) AND n = 1), r AS (UPDATE idem.runs SET status = 'succeeded', exit_code = 0, finished_at = now() WHERE id = (SELECT head FROM k) AND status = 'running' RETURNING id), o AS (UPDATE idem.keys SET owner_pgid = NULL, lease_until = NULL WHERE key = {KEY}) SELECT * FROM idem.jobs WHERE job = {KEY} FOR UPDATE;
UPDATE idem.jobs SET running = running - 1, succeeded = succeeded + 1, last_status = 'succeeded', last_exit = 0, last_success = now(), failures = 0 WHERE job = {KEY};
COMMIT;
"""


def idem_rate(idem, env, clients, per_client, work):
    """Runs per second of `clients` shell loops, each running idem
    `per_client` times in a row on keys of its own: `clients` idem
    processes at any moment."""
    logs = work / f"fleet-{clients}"
    logs.mkdir(parents=True, exist_ok=True)
    loop = (f'for i in $(seq {per_client}); do "$0" run --key "fleet-$1-$i" -- true >/dev/null '
            f'|| echo "run $i exited $?" >&2; done')
    started = time.monotonic()
    children = [subprocess.Popen(["sh", "-c", loop, str(idem), f"{clients}-{c}"], env=env,
                                 stderr=open(logs / str(c), "w")) for c in range(clients)]
    for child in children:
        child.wait()
    seconds = time.monotonic() - started
    failed = [path.read_text() for path in logs.iterdir() if path.read_text()]
    if failed:
        raise SystemExit(f"bench: idem failed in the fleet rows: {failed[0]}")
    return clients * per_client / seconds


def pgbench_rate(pgbench, socket_dir, clients, seconds):
    """pgbench's runs per second of SCRIPT with `clients` clients."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(SCRIPT)
    done = subprocess.run([pgbench, "-n", "-C", "-c", str(clients), "-j", "2", "-T", str(seconds),
                           "-f", script.name, "-h", str(socket_dir), "-U", "postgres", "idem"],
                          capture_output=True, text=True)
    Path(script.name).unlink()
    if done.returncode != 0:
        raise SystemExit(f"bench: pgbench failed: {done.stderr}{done.stdout}")
    found = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", done.stdout)
    found = found or re.search(r"tps = ([0-9.]+)", done.stdout)
    return float(found.group(1))


def fleet_rows(table, server, env, idem, pgbench, quick):
    """The rows: at 16 clients (--quick), else 16, 64 and 256; the goal of
    0.7 of pgbench's rate holds at 64."""
    # The schema made before anything is timed.
    subprocess.run([str(idem), "run", "--key", "fleet-schema", "--", "true"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    work = Path(tempfile.mkdtemp(prefix="idem-bench-fleet-"))
    for clients in [16] if quick else [16, 64, 256]:
        per_client = 2 if quick else max(4, 1024 // clients)
        ours = idem_rate(idem, env, clients, per_client, work)
        theirs = pgbench_rate(pgbench, server.dir, clients, 1 if quick else 10)
        goal = "—" if clients != 64 else ">= 0.70x"
        ok = None if clients != 64 else ours / theirs >= 0.7
        table.add(f"PostgreSQL on a Unix socket, {clients} concurrent runs of distinct keys",
                  f"{ours:.0f} runs/s", f"pgbench -C of idem's statements for one run: {theirs:.0f} runs/s",
                  f"{ours / theirs:.2f}x", goal, ok)
