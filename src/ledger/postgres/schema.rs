//! The PostgreSQL schema (`idem`), changed only through numbered migrations
//! recorded in `idem.version`, beside SQLite's in `ledger/schema.rs`. A
//! schema ahead of [`LATEST`] was written by a newer idem and is refused.

/// Migration N brings the schema from version N-1 to N.
pub const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE idem.keys (
        key text PRIMARY KEY,
        -- The run that decides what the next `idem run` does, or NULL.
        head bigint,
        -- Raised by every claim; the owner's writes carry it (fencing).
        epoch bigint NOT NULL DEFAULT 0,
        -- While the head is running: who owns it, and until when.
        owner_boot text,
        owner_pid_start bigint,
        owner_pgid bigint,
        owner_pgid_start bigint,
        lease interval,
        lease_until timestamptz
    );
    CREATE TABLE idem.runs (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id uuid NOT NULL UNIQUE,
        key text NOT NULL REFERENCES idem.keys (key),
        status text NOT NULL
            CHECK (status IN ('running', 'succeeded', 'failed', 'abandoned')),
        exit_code integer,
        signal integer,
        attempts integer NOT NULL DEFAULT 0,
        started_at timestamptz NOT NULL,
        finished_at timestamptz,
        host text NOT NULL,
        pid bigint NOT NULL,
        command bytea NOT NULL,        -- argv, NUL-separated raw bytes
        shell boolean NOT NULL,
        recovered boolean NOT NULL DEFAULT false
    );
    -- Runs are listed newest first: by start time, then by id.
    CREATE INDEX runs_by_key ON idem.runs (key, started_at, id);
    CREATE INDEX runs_by_start ON idem.runs (started_at, id);
    CREATE INDEX runs_by_status ON idem.runs (status, started_at, id);
    CREATE TABLE idem.attempts (
        run bigint NOT NULL REFERENCES idem.runs (id) ON DELETE CASCADE,
        n integer NOT NULL,
        started_at timestamptz NOT NULL,
        finished_at timestamptz,
        exit_code integer,
        signal integer,
        timed_out boolean NOT NULL DEFAULT false,
        stdout_tail bytea,
        stderr_tail bytea,
        PRIMARY KEY (run, n)
    );
",
    "
    -- 2: fencing tokens. Every claim and every forget takes its key's epoch
    -- from one sequence, so a token (`IDEM_FENCE`) grows across all claims
    -- of a key, even after its row was purged and made anew.
    CREATE SEQUENCE idem.fences;
    SELECT setval('idem.fences', coalesce((SELECT max(epoch) FROM idem.keys), 0) + 1, false);
",
    "
    -- 3: jobs and named locks. Each run records its job; `jobs` keeps each
    -- job's figures, updated in the transaction of every claim and outcome,
    -- so `status` and `metrics` read one row per job. Runs of older idems
    -- belonged to no job: each key becomes its own. A named lock (`--lock`)
    -- is a row leased to the run that holds it, renewed by its heartbeat,
    -- fenced by an epoch from the same sequence as keys.
    CREATE TABLE idem.jobs (
        job text PRIMARY KEY,
        template text NOT NULL,
        zone text,
        host text,
        command bytea,
        shell boolean NOT NULL DEFAULT false,
        first_run timestamptz,
        last_run timestamptz,
        last_status text,
        last_exit integer,
        last_success timestamptz,
        failures bigint NOT NULL DEFAULT 0,
        running bigint NOT NULL DEFAULT 0,
        succeeded bigint NOT NULL DEFAULT 0,
        failed bigint NOT NULL DEFAULT 0,
        abandoned bigint NOT NULL DEFAULT 0,
        checked_at timestamptz,
        strip text NOT NULL DEFAULT '',
        ok_keys text NOT NULL DEFAULT ''
    );
    ALTER TABLE idem.runs ADD COLUMN job text;
    UPDATE idem.runs SET job = key;
    INSERT INTO idem.jobs (job, template, first_run, last_run, checked_at, running, succeeded,
        failed, abandoned, last_success)
    SELECT key, replace(replace(key, '{', '{{'), '}', '}}'), min(started_at), max(started_at),
        max(started_at), count(*) FILTER (WHERE status = 'running'),
        count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed'),
        count(*) FILTER (WHERE status = 'abandoned'),
        max(finished_at) FILTER (WHERE status = 'succeeded')
    FROM idem.runs GROUP BY key;
    UPDATE idem.jobs j SET (last_status, last_exit, host, command, shell) =
        (SELECT status, exit_code, host, command, shell FROM idem.runs r
         WHERE r.key = j.job ORDER BY started_at DESC, id DESC LIMIT 1);
    UPDATE idem.jobs j SET
        failures = (SELECT count(*) FROM idem.runs r WHERE r.key = j.job
            AND r.status IN ('failed', 'abandoned')
            AND r.started_at > coalesce((SELECT max(started_at) FROM idem.runs s
                WHERE s.key = j.job AND s.status = 'succeeded'), '-infinity')),
        ok_keys = CASE WHEN succeeded > 0 THEN job ELSE '' END;
    CREATE TABLE idem.locks (
        name text PRIMARY KEY,
        holder uuid,
        epoch bigint NOT NULL DEFAULT 0,
        lease interval,
        lease_until timestamptz
    );
",
    "
    -- 4: whether an attempt's output was longer than its kept tails.
    ALTER TABLE idem.attempts ADD COLUMN cut boolean NOT NULL DEFAULT false;
",
    "
    -- 5: the hooks that ran for a run, shown by `ledger show`.
    CREATE TABLE idem.hooks (
        run bigint NOT NULL REFERENCES idem.runs (id) ON DELETE CASCADE,
        event text NOT NULL,
        exit_code integer,
        at timestamptz NOT NULL
    );
    CREATE INDEX hooks_by_run ON idem.hooks (run);
",
    "
    -- 6: pauses: a job paused by whom, since when, why, until when, and the
    -- failed run that paused it (`--pause-after`); by job name, so that a
    -- job may be paused before its first run.
    CREATE TABLE idem.pauses (
        job text PRIMARY KEY,
        paused_by text NOT NULL,
        since timestamptz NOT NULL,
        reason text,
        until timestamptz,
        run_id uuid
    );
    ",
    "
    -- 7: stop requests (`idem stop`, `run --replace`): who asked to stop
    -- which running run, with which signal, and when its owner saw it.
    -- No serial id: a role granted rights on the tables alone may write it.
    CREATE TABLE idem.stops (
        run_id uuid NOT NULL,
        key text NOT NULL,
        by text NOT NULL,
        requested_at timestamptz NOT NULL,
        signal integer NOT NULL,
        seen_at timestamptz
    );
    CREATE INDEX stops_by_run ON idem.stops (run_id);
",
    "
    -- 8: a named lock's slots (`--lock NAME:N`): a row for each slot.
    ALTER TABLE idem.locks ADD COLUMN slot integer NOT NULL DEFAULT 0;
    ALTER TABLE idem.locks DROP CONSTRAINT locks_pkey;
    ALTER TABLE idem.locks ADD PRIMARY KEY (name, slot);
",
    "
    -- 9: jobs that wait for each other (`--after`): a job's upstream
    -- templates and the keys its latest call was blocked on (a later claim,
    -- `last_run`, outdates them); a run's note, set only on a success
    -- marked by hand (`ledger mark`).
    ALTER TABLE idem.jobs ADD COLUMN upstreams text;
    ALTER TABLE idem.jobs ADD COLUMN blocked_on text;
    ALTER TABLE idem.jobs ADD COLUMN blocked_at timestamptz;
    ALTER TABLE idem.runs ADD COLUMN note text;
",
    "
    -- 10: the outbox: each ping and hook a run owes, written with the claim
    -- or outcome that causes it, until delivered or given up. `address`
    -- (a ping URL holds its check's secret) is read only to deliver.
    CREATE TABLE idem.outbox (
        id bigserial PRIMARY KEY,
        event_id uuid NOT NULL UNIQUE,
        run_id uuid NOT NULL,
        job text NOT NULL,
        kind text NOT NULL,
        target text NOT NULL,
        address text NOT NULL,
        payload text NOT NULL,
        body bytea NOT NULL,
        created_at timestamptz NOT NULL,
        attempts integer NOT NULL DEFAULT 0,
        next_try_at timestamptz NOT NULL,
        holder uuid,
        held_until timestamptz,
        delivered_at timestamptz,
        lost boolean NOT NULL DEFAULT false,
        error text
    );
    CREATE INDEX outbox_owed ON idem.outbox (next_try_at)
        WHERE delivered_at IS NULL AND NOT lost;
    CREATE INDEX outbox_by_run ON idem.outbox (run_id);
",
    "
    -- 11: what held each attempt's processes together, recorded as it
    -- starts (`pid-namespace`, `guardian`); NULL where not recorded (an
    -- older idem's attempt).
    ALTER TABLE idem.attempts ADD COLUMN containment text;
",
    "
    -- 12: the outbox in order: each event's target (`dest`, a hash of its
    -- address) and its run's start (the order a target hears its runs
    -- in); when a sending was recorded, before it went out; superseded
    -- events; the targets that cannot be reached, said once per outage.
    ALTER TABLE idem.outbox ADD COLUMN dest text NOT NULL DEFAULT '';
    ALTER TABLE idem.outbox ADD COLUMN run_started timestamptz;
    ALTER TABLE idem.outbox ADD COLUMN sending_at timestamptz;
    ALTER TABLE idem.outbox ADD COLUMN superseded boolean NOT NULL DEFAULT false;
    UPDATE idem.outbox SET dest = target, run_started = created_at;
    ALTER TABLE idem.outbox ALTER COLUMN run_started SET NOT NULL;
    CREATE INDEX outbox_by_dest ON idem.outbox (dest, run_started);
    CREATE TABLE idem.outages (
        dest text PRIMARY KEY,
        target text NOT NULL,
        since timestamptz NOT NULL,
        said boolean NOT NULL DEFAULT false
    );
",
    "
    -- 13: what each attempt died of, where exit_code and signal do not
    -- tell it (`timeout`, `killed for memory`, `stopped: ...`), its peak
    -- memory in bytes and its CPU time in ms; NULL where not recorded.
    ALTER TABLE idem.attempts ADD COLUMN cause text;
    ALTER TABLE idem.attempts ADD COLUMN peak_memory bigint;
    ALTER TABLE idem.attempts ADD COLUMN cpu_ms bigint;
",
];

/// The schema version this idem writes.
pub const LATEST: i32 = MIGRATIONS.len() as i32;
