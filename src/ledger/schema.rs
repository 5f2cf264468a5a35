//! The SQLite schema, changed only through numbered migrations keyed by
//! `PRAGMA user_version`. A ledger whose version is ahead of [`LATEST`] was
//! written by a newer idem and is refused untouched.

/// Marks a SQLite file as an idem ledger (`PRAGMA application_id`), so that
/// another program's database is never mistaken for an empty ledger.
pub const APPLICATION_ID: i32 = 0x6964_656d; // "idem"

/// Migration N brings a ledger from version N-1 to N.
pub const MIGRATIONS: &[&str] = &[
    // 1: keys, runs, attempts.
    "
    CREATE TABLE keys (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        -- The run that decides what the next `idem run` does: the latest,
        -- or NULL when the key is new or was forgotten.
        head INTEGER,
        -- While the head is running: who owns it, to tell a live owner from
        -- a dead one. Kept here, not per run, since only the head needs it.
        owner_boot TEXT,
        owner_pid_start INTEGER,
        owner_pgid INTEGER,
        owner_pgid_start INTEGER
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        run_id BLOB NOT NULL UNIQUE,
        key_id INTEGER NOT NULL REFERENCES keys(id),
        status TEXT NOT NULL
            CHECK (status IN ('running', 'succeeded', 'failed', 'abandoned')),
        exit_code INTEGER,
        signal INTEGER,
        attempts INTEGER NOT NULL DEFAULT 0,
        started_at INTEGER NOT NULL,   -- Unix milliseconds, UTC
        finished_at INTEGER,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        command BLOB NOT NULL,         -- argv, NUL-separated raw bytes
        shell INTEGER NOT NULL,
        recovered INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX runs_by_key ON runs (key_id, id);
    CREATE INDEX runs_by_status ON runs (status, id);
    CREATE TABLE attempts (
        run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        n INTEGER NOT NULL,
        started_at INTEGER NOT NULL,
        finished_at INTEGER,
        exit_code INTEGER,
        signal INTEGER,
        timed_out INTEGER NOT NULL DEFAULT 0,
        stdout_tail BLOB,
        stderr_tail BLOB,
        PRIMARY KEY (run, n)
    );
    ",
    // 2: `ledger list` orders by start time (imported runs get later row
    // ids than they deserve), and filters by status within that order.
    "
    CREATE INDEX runs_by_start ON runs (started_at);
    DROP INDEX runs_by_status;
    CREATE INDEX runs_by_status_start ON runs (status, started_at);
    ",
    // 3: smaller runs (the storage budget is 250 bytes a run). Operators
    // filter by status to find what did not succeed, and nearly every run
    // succeeds: index only the others (queries repeat the index's WHERE
    // so the planner may use it). Attempts are found by (run, n) alone, so
    // cluster them on it instead of keeping a rowid and an index beside.
    "
    DROP INDEX runs_by_status_start;
    CREATE INDEX runs_not_succeeded ON runs (status, started_at)
        WHERE status <> 'succeeded';
    CREATE TABLE attempts_by_run (
        run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        n INTEGER NOT NULL,
        started_at INTEGER NOT NULL,
        finished_at INTEGER,
        exit_code INTEGER,
        signal INTEGER,
        timed_out INTEGER NOT NULL DEFAULT 0,
        stdout_tail BLOB,
        stderr_tail BLOB,
        PRIMARY KEY (run, n)
    ) WITHOUT ROWID;
    INSERT INTO attempts_by_run SELECT run, n, started_at, finished_at, exit_code, signal,
        timed_out, stdout_tail, stderr_tail FROM attempts;
    DROP TABLE attempts;
    ALTER TABLE attempts_by_run RENAME TO attempts;
    ",
    // 4: liveness from the kernel and fencing tokens. `owner_lock` marks a
    // claim whose run holds its key's byte of the lock file (see
    // `runlock`); a running head without it was claimed by an idem that
    // did not lock, and cannot be judged. Later idems write there the
    // claim's stamp (`runlock::Hold::stamp`: the inodes of the ledger file
    // and of the lock file the run locked; 1 for an idem that locked
    // without stamping), so that a judge tells a copy of the ledger (its
    // runs over) from a lock file deleted or replaced under a run (the key
    // busy until a reboot, and named locks refused meanwhile); an older
    // idem reads any value but 0 as "locked". `fences` hands every claim
    // a token larger than any before it, which row ids cannot promise once
    // the newest runs are purged; an import raises it to at least the
    // highest fence of the ledger it came from.
    "
    ALTER TABLE keys ADD COLUMN owner_lock INTEGER;
    CREATE TABLE fences (last INTEGER NOT NULL);
    INSERT INTO fences SELECT coalesce(max(id), 0) FROM runs;
    ",
    // 5: jobs. Each run records its job; `jobs` keeps each job's figures,
    // updated in the same transaction as every claim and outcome, so that
    // `status` and `metrics` read one row per job however many runs the
    // ledger holds. A run's job is a row id (a few bytes a run). Runs of
    // older idems belonged to no job: each key becomes its own job.
    "
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        job TEXT NOT NULL UNIQUE,
        template TEXT NOT NULL,
        zone TEXT,
        host TEXT,
        command BLOB,
        shell INTEGER NOT NULL DEFAULT 0,
        first_run INTEGER,
        last_run INTEGER,
        last_status TEXT,
        last_exit INTEGER,
        last_success INTEGER,
        failures INTEGER NOT NULL DEFAULT 0,
        running INTEGER NOT NULL DEFAULT 0,
        succeeded INTEGER NOT NULL DEFAULT 0,
        failed INTEGER NOT NULL DEFAULT 0,
        abandoned INTEGER NOT NULL DEFAULT 0,
        checked_at INTEGER,
        strip TEXT NOT NULL DEFAULT '',
        ok_keys TEXT NOT NULL DEFAULT ''
    );
    ALTER TABLE runs ADD COLUMN job_id INTEGER;
    INSERT INTO jobs (job, template, first_run, last_run, checked_at, running, succeeded,
        failed, abandoned, last_success)
    SELECT k.key, replace(replace(k.key, '{', '{{'), '}', '}}'), min(r.started_at),
        max(r.started_at), max(r.started_at), sum(r.status = 'running'),
        sum(r.status = 'succeeded'), sum(r.status = 'failed'), sum(r.status = 'abandoned'),
        max(CASE WHEN r.status = 'succeeded' THEN r.finished_at END)
    FROM keys k JOIN runs r ON r.key_id = k.id GROUP BY k.id;
    UPDATE runs SET job_id = (SELECT j.id FROM jobs j JOIN keys k ON k.key = j.job
                              WHERE k.id = runs.key_id);
    UPDATE jobs SET (last_status, last_exit, host, command, shell) =
        (SELECT status, exit_code, host, command, shell FROM runs
         WHERE job_id = jobs.id ORDER BY started_at DESC, id DESC LIMIT 1);
    UPDATE jobs SET
        failures = (SELECT count(*) FROM runs r WHERE r.job_id = jobs.id
            AND r.status IN ('failed', 'abandoned')
            AND r.started_at > coalesce((SELECT max(started_at) FROM runs s
                WHERE s.job_id = jobs.id AND s.status = 'succeeded'), -1)),
        ok_keys = CASE WHEN succeeded > 0 THEN job ELSE '' END;
    ",
    // 6: whether an attempt's output was longer than its kept tails, so
    // that `run --replay` can say that what it prints lacks the start.
    "
    ALTER TABLE attempts ADD COLUMN cut INTEGER NOT NULL DEFAULT 0;
    ",
    // 7: the hooks that ran for a run (`--on-failure`, `--on-recovery`),
    // shown by `ledger show`; they go with their run.
    "
    CREATE TABLE hooks (
        run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        event TEXT NOT NULL,
        exit_code INTEGER,
        at INTEGER NOT NULL
    );
    CREATE INDEX hooks_by_run ON hooks (run);
    ",
    // 8: a run's status as a code (`StatusCode`: 0 running, 1 succeeded,
    // 2 failed, 3 abandoned). SQLite keeps 0 and 1 in the row's header
    // alone; the name took up to 9 bytes of every run, against a budget of
    // 250 a run. The table is made anew, as SQLite changes a column's type:
    // `DROP COLUMN` would rewrite every row with the old encoding of small
    // integers, a byte more for each. `jobs.last_status` keeps the name.
    // Runs with foreign keys off (see `migrate`): dropping the old table
    // must not delete its attempts and hooks.
    "
    CREATE TABLE runs_by_code (
        id INTEGER PRIMARY KEY,
        run_id BLOB NOT NULL UNIQUE,
        key_id INTEGER NOT NULL REFERENCES keys(id),
        status INTEGER NOT NULL CHECK (status IN (0, 1, 2, 3)),
        exit_code INTEGER,
        signal INTEGER,
        attempts INTEGER NOT NULL DEFAULT 0,
        started_at INTEGER NOT NULL,
        finished_at INTEGER,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        command BLOB NOT NULL,
        shell INTEGER NOT NULL,
        recovered INTEGER NOT NULL DEFAULT 0,
        job_id INTEGER
    );
    INSERT INTO runs_by_code SELECT id, run_id, key_id,
        CASE status WHEN 'running' THEN 0 WHEN 'succeeded' THEN 1 WHEN 'failed' THEN 2
            WHEN 'abandoned' THEN 3 END,
        exit_code, signal, attempts, started_at, finished_at, host, pid, command, shell,
        recovered, job_id
    FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_by_code RENAME TO runs;
    CREATE INDEX runs_by_key ON runs (key_id, id);
    CREATE INDEX runs_by_start ON runs (started_at);
    CREATE INDEX runs_not_succeeded ON runs (status, started_at) WHERE status <> 1;
    ",
    // 9: pauses: a job paused (`idem pause`, `--pause-after`) by whom, since
    // when, why, until when; the failed run that paused it. Kept by job
    // name, not job row, so that a job may be paused before its first run.
    "
    CREATE TABLE pauses (
        job TEXT PRIMARY KEY,
        paused_by TEXT NOT NULL,
        since INTEGER NOT NULL,
        reason TEXT,
        until INTEGER,
        run_id BLOB
    ) WITHOUT ROWID;
    ",
    // 10: stop requests (`idem stop`, `run --replace`): who asked to stop
    // which running run, with which signal, and when its owner saw it;
    // kept as the run's history (`ledger show`).
    "
    CREATE TABLE stops (
        id INTEGER PRIMARY KEY,
        run_id BLOB NOT NULL,
        key TEXT NOT NULL,
        by TEXT NOT NULL,              -- user@host
        requested_at INTEGER NOT NULL, -- Unix milliseconds, UTC
        signal INTEGER NOT NULL,
        seen_at INTEGER
    );
    CREATE INDEX stops_by_run ON stops (run_id);
    ",
    // 11: jobs that wait for each other (`--after`). A job keeps its
    // upstream templates, newline-separated, and the upstream keys its
    // latest call was blocked on, with when: a blocked call claims nothing,
    // so this row is all it writes, and a later claim (`last_run`) outdates
    // it. `runs.note` tells a success marked by hand (`ledger mark`) from a
    // real run; NULL, as for every ordinary run, costs a run one header byte.
    "
    ALTER TABLE jobs ADD COLUMN upstreams TEXT;
    ALTER TABLE jobs ADD COLUMN blocked_on TEXT;
    ALTER TABLE jobs ADD COLUMN blocked_at INTEGER;
    ALTER TABLE runs ADD COLUMN note TEXT;
    ",
    // 12: the outbox (see `ledger::outbox`): each ping and hook a run owes,
    // written with the claim or outcome that causes it, until delivered or
    // given up. `address` (a ping URL holds its check's secret) is read
    // only to deliver. Owed events are found by the partial index alone.
    "
    CREATE TABLE outbox (
        id INTEGER PRIMARY KEY,
        event_id BLOB NOT NULL UNIQUE,
        run_id BLOB NOT NULL,
        job TEXT NOT NULL,
        kind TEXT NOT NULL,
        target TEXT NOT NULL,
        address TEXT NOT NULL,
        payload TEXT NOT NULL,
        body BLOB NOT NULL,
        created_at INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_try_at INTEGER NOT NULL,
        holder BLOB,
        held_until INTEGER,
        delivered_at INTEGER,
        lost INTEGER NOT NULL DEFAULT 0,
        error TEXT
    );
    CREATE INDEX outbox_owed ON outbox (next_try_at) WHERE delivered_at IS NULL AND lost = 0;
    CREATE INDEX outbox_by_run ON outbox (run_id);
    ",
    // 13: what held each attempt's processes together (see
    // `process::contain`), recorded as it starts: a code (`ContainmentCode`:
    // 0 the guardian alone, 1 a PID namespace), NULL where not recorded (an
    // older idem's attempt). SQLite keeps 0, 1 and NULL in the row's header
    // alone; a name would take up to 13 bytes more of every run, against a
    // budget of 250 a run.
    "
    ALTER TABLE attempts ADD COLUMN containment INTEGER;
    ",
    // 14: the outbox in order (see `ledger::outbox`): each event's target
    // (`dest`, a hash of its address, kept once the address is dropped)
    // and its run's start (the order a target hears its runs in); when a
    // sending was recorded, before it went out; superseded events; and
    // the targets that cannot be reached, each said once per outage. An
    // older event's target is its shown one, its run's start its own.
    "
    ALTER TABLE outbox ADD COLUMN dest TEXT NOT NULL DEFAULT '';
    ALTER TABLE outbox ADD COLUMN run_started INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE outbox ADD COLUMN sending_at INTEGER;
    ALTER TABLE outbox ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;
    UPDATE outbox SET dest = target, run_started = created_at;
    CREATE INDEX outbox_by_dest ON outbox (dest, run_started);
    CREATE TABLE outages (
        dest TEXT PRIMARY KEY,
        target TEXT NOT NULL,
        since INTEGER NOT NULL,
        said INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID;
    ",
    // 15: what each attempt died of and what it used (`Attempt::cause`):
    // the cause only where exit_code and signal do not tell it (a timeout,
    // a kill for memory, a stop), so an ordinary attempt spends no byte on
    // it; its peak memory in bytes and its CPU time in ms, NULL where not
    // recorded (an older idem's attempt).
    "
    ALTER TABLE attempts ADD COLUMN cause TEXT;
    ALTER TABLE attempts ADD COLUMN peak_memory INTEGER;
    ALTER TABLE attempts ADD COLUMN cpu_ms INTEGER;
    ",
];

/// The schema version this idem writes.
pub const LATEST: i64 = MIGRATIONS.len() as i64;
