//! The help texts: exit codes, environment, files and examples, shown by
//! `--help` and in the man pages.

/// The exit-code table, shown by `--help` and in the man pages.
macro_rules! exit_codes_help {
    () => {
        "\
Exit codes:
  0        the command succeeded, or the key had already succeeded (skipped), its job is
           paused, or an --after upstream had not (blocked; --blocked-exit-code changes it);
           nothing was claimed
  N        the command's own exit code on its final attempt
  2        usage error: bad flag, duration, key or template
  65       the key succeeded with a different command; nothing ran (--force runs it)
  69       the last run was abandoned and --on-abandoned fail was given
  75       the key is running elsewhere (and --wait ran out or was not given)
  124      the final attempt timed out
  125      idem itself failed (ledger unreadable, unwritable, corrupt, full or newer)
  126/127  the command could not be executed / was not found
  128+N    the command was killed by signal N

Environment:
  IDEM_DB        the ledger, as --db
  IDEM_<OPTION>  a run option's default: IDEM_RETRIES=5, IDEM_QUIET_SUCCESS=1; a flag wins
  IDEM_PROGRESS  auto or never: the spinner of waits (a bad value is a warning)
  CI             when set, skips are told as at a terminal (a CI log says why a step did nothing)
  TZ             time zone of key templates (unset: the zone /etc/localtime links to)
  NO_COLOR       no colour in tables
  TERM           dumb: no colour
  PGHOST, PGPORT, PGUSER, PGDATABASE  what a postgres:// URL leaves out
  PGPASSWORD, PGPASSFILE, PGSSLROOTCERT  a shared ledger's password and TLS roots
The command gets IDEM_KEY, IDEM_JOB, IDEM_RUN_ID, IDEM_ATTEMPT, IDEM_MAX_ATTEMPTS,
IDEM_FENCE, IDEM_SLOT (with --catch-up), and IDEM_RECOVERED=1 when the previous
run of its key was abandoned."
    };
}
pub const EXIT_CODES_HELP: &str = exit_codes_help!();

/// Where the ledger lives, for the man pages.
macro_rules! files_help {
    () => {
        "\
Files:
  ~/.local/share/idem/ledger.db       the ledger: <data dir>/idem/ledger.db, or --db, or IDEM_DB
  ~/.local/share/idem/ledger.db-wal   its write-ahead log, while a connection is open
  ~/.local/share/idem/ledger.db-shm   the log's index, beside it
  ~/.local/share/idem/ledger.db-lock  the runs' kernel locks: a run holds its key's byte while it lives"
    };
}
pub const FILES_HELP: &str = files_help!();

/// Related manual pages.
macro_rules! see_also_help {
    () => {
        "\
See also:
flock(1), timeout(1), chronic(1), crontab(5), systemd.timer(5)"
    };
}
pub const SEE_ALSO_HELP: &str = see_also_help!();

/// The exit codes of `idem status`, shown by `--help` and in the man pages.
pub const STATUS_EXIT_CODES_HELP: &str = "\
Columns:
  JOB           the job: --job, else the key as typed (backup-{date})
  STATE         failing, overdue, paused, blocked, stopped, running or ok (above); a paused
                job's pause is told under the table (by whom, since when, until when, why),
                and what a blocked job waits for
  LAST RUN      when its latest run started
  LAST SUCCESS  when its latest success was recorded (never: none yet)
  FAILS         failed and abandoned runs in a row, across its keys, in the order they finished
  MISSED        of its last 10 finished periods (back to its first run), those with no success;
                - for a job without a period ({date}, {hour}, ... in its key)
  RECENT        its latest 10 outcomes, oldest first: + succeeded, x failed, ? abandoned,
                - stopped, > running; at a colour terminal dots of the same order (green
                succeeded, red failed, magenta abandoned, blue stopped, yellow running)
  COMMAND       what it runs: the program's base name and its last arguments where the width
                is short (backup.sh … --daily)

Width:
The table fits the terminal (else $COLUMNS): the command shrinks first, then LAST SUCCESS,
MISSED and LAST RUN give way, RECENT keeps its latest 6, then FAILS and RECENT give way.
--wide shows every column and the whole command.

Examples:
  idem status                       every job, those that need a person first
  idem status --job 'backup-*'      the backup jobs only
  idem status --json | jq '.[] | select(.state != \"ok\")'
  idem status >/dev/null || echo 'a job needs a person'   a check for a monitor

Exit codes:
  0    every job is ok, paused, blocked, stopped or running (or there are none)
  1    a job is failing or overdue; or no ledger at --db (nothing has run with it yet), or no
       job matches --job
  2    usage error: bad flag or glob
  125  idem itself failed (ledger unreadable, corrupt or newer)

Environment:
  IDEM_DB   the ledger, as --db
  TZ        time zone of the times shown
  NO_COLOR  no colour in the strip of latest runs
  COLUMNS   the width of the table when stdout is not a terminal

See also:
idem-run(1), idem-ledger(1), idem-doctor(1), crontab(5)";

/// The pages, exit codes and environment of `idem serve`, shown by
/// `--help` and in the man pages.
pub const SERVE_EXIT_CODES_HELP: &str = "\
Pages:
  /             the status board: every job, those that need a person first
  /job/JOB      the job's latest runs, newest first, with attempts and output tails
  /metrics      what `idem ledger metrics` prints (Prometheus text format)
  /api/status   what `idem status --json` prints
  /healthz      200 \"ok\" when the ledger can be read, 503 and why otherwise
  POST /job/JOB/pause, /resume, /stop
                the buttons, with --auth-file or IDEM_SERVE_TOKEN alone; 403 without
                credentials, without the page's form token, or from another site

Examples:
  idem serve                                         the board on http://127.0.0.1:8417/
  idem serve --listen 0.0.0.0:8417 --auth-file FILE  for the network, each user with a password
  IDEM_SERVE_TOKEN=... idem serve --listen [::]:8417  for the network, one token for scripts

Exit codes:
  0    stopped by SIGTERM or SIGINT
  2    usage error: a bad --listen or auth file; an address that is not loopback without --auth-file or IDEM_SERVE_TOKEN
  125  idem itself failed: the address is in use, or cannot be listened on

Environment:
  IDEM_DB               the ledger, as --db
  IDEM_SERVE_LISTEN     as --listen
  IDEM_SERVE_AUTH_FILE  as --auth-file
  IDEM_SERVE_TOKEN      a bearer token every request must carry (Authorization: Bearer TOKEN)
  TZ                    time zone of the times shown

See also:
idem-status(1), idem-ledger(1)";

/// The exit codes and environment of `idem ledger`, shown by `--help` and
/// in the man pages.
pub const LEDGER_EXIT_CODES_HELP: &str = "\
Exit codes:
  0    done
  1    list, show, metrics: no ledger at --db (nothing has run with it yet); show: the key is
       not in the ledger; forget: a key is not (the others are forgotten)
  2    usage error: bad flag, duration, time, or a line import cannot read
  75   forget: a key is running under a live owner; nothing was forgotten; mark: the key is
       running; nothing was marked
  125  idem itself failed (ledger unreadable, unwritable, corrupt, full or newer)

Environment:
  IDEM_DB   the ledger, as --db
  TZ        time zone of the times shown
  NO_COLOR  no colour in tables
  TERM      dumb: no colour
  COLUMNS   the width of tables when stdout is not a terminal
  PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD  as for idem run

Files:
  ~/.local/share/idem/ledger.db  the ledger, unless --db or IDEM_DB names another (and its -wal, -shm and -lock)

See also:
idem-run(1), flock(1), crontab(5), systemd.timer(5)";

/// `idem ledger deliver --help` and its man page: its own exit codes
/// (1 says an event is still owed), and the ledger's environment.
pub const DELIVER_EXIT_CODES_HELP: &str = "\
Exit codes:
  0    every event tried was delivered (or nothing was owed)
  1    an event could not be delivered (it stays owed, and is tried again after its backoff)
  2    usage error: bad flag or duration
  125  idem itself failed (ledger unreadable, unwritable, corrupt, full or newer)

Environment:
  IDEM_DB   the ledger, as --db
  PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD  as for idem run

Files:
  ~/.local/share/idem/ledger.db  the ledger, unless --db or IDEM_DB names another

See also:
idem-run(1), idem-ledger(1), systemd.timer(5)";

/// `idem run --help` and the man pages of idem and idem run: the exit
/// codes, the environment, the key templates' formats, examples, files.
pub const RUN_NOTES: &str = concat!(
    "\
Key templates:
In local time (TZ honoured), as they read on 1 December 2026 at 08:30:
  {date}    2026-12-01
  {hour}    2026-12-01T08
  {minute}  2026-12-01T08:30
  {minute/20}  2026-12-01T08:20 (every N minutes, N dividing an hour)
  {hour/6}  2026-12-01T06 (every N hours, N dividing a day)
  {week}    2026-W49 (the ISO week and its year)
  {month}   2026-12
  {year}    2026
  {host}    the host's name
  {{ }}     a literal { or }

",
    exit_codes_help!(),
    "

Examples:
A crontab line: the backup runs once a day, however often cron calls it; a
failure is retried, and cron mails only what went wrong.
    0 * * * * idem run --key backup-{date} --quiet-success -- /usr/local/bin/backup
A CI step that a rerun of the pipeline skips once it succeeded (the skip is
told in the log, since CI is set):
    idem run --key deploy-$CI_COMMIT_SHA --retries 2 -- ./deploy.sh
A fleet on a shared ledger: one host of many runs the report each hour, the
others skip or wait for its outcome.
    idem --db postgres://idem@db.example/idem run --key report-{hour} --wait 10m -- ./report
Catching up: called every hour, a daily job whose day was missed (the host
was down at 03:00) runs at the first call that finds its key unfinished.
    0 * * * * idem run --key rotate-{date} -- /usr/local/bin/rotate
See what ran, and make a key run again:
    idem ledger list --since 1d
    idem ledger forget backup-2026-12-01

",
    files_help!(),
    "

",
    see_also_help!(),
);
