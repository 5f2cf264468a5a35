
use builtin;
use str;

set edit:completion:arg-completer[idem] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'idem'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'idem'= {
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand run 'Run COMMAND under KEY unless KEY already succeeded'
            cand backfill 'Run the periods of a job between two times that never succeeded'
            cand ledger 'Inspect and maintain the ledger'
            cand status 'One line per job: its state, last run and success, failures in a row'
            cand pause 'Pause a job: its runs start nothing until `idem resume` or --until'
            cand resume 'Resume a paused job: its next run runs'
            cand stop 'Stop the running runs of keys, wherever they run'
            cand doctor 'Check a ledger for problems without changing anything'
            cand serve 'Serve the ledger over HTTP: a status board, each job''s runs, metrics, and buttons that pause, resume and stop'
            cand completions 'Print a shell completion script'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'idem;run'= {
            cand -k 'Idempotency key; may hold {date} {hour} {minute} {week} {month} {year} {host} (local time, TZ honoured), {minute/N} and {hour/N} (every N minutes or hours); {{ and }} for braces'
            cand --key 'Idempotency key; may hold {date} {hour} {minute} {week} {month} {year} {host} (local time, TZ honoured), {minute/N} and {hour/N} (every N minutes or hours); {{ and }} for braces'
            cand --job 'The job this run belongs to, for `idem status` and metrics [default: the key as typed, before expansion]'
            cand --retries 'Further attempts after a failed one; 0 = one attempt'
            cand --backoff 'Base delay before a retry; attempt n waits a random time in [d/2, d] with d = min(max-backoff, backoff * 2^(n-1))'
            cand --max-backoff 'Cap on one delay between attempts'
            cand --retry-on 'Retry only these exit codes, e.g. 1,3,10-20'
            cand --no-retry-on 'Never retry these exit codes'
            cand --timeout 'Per attempt: SIGTERM the command''s process group after DUR, SIGKILL after --kill-after more; counts as exit 124 and is retried'
            cand --kill-after 'Grace between SIGTERM and SIGKILL on timeout'
            cand --timeout-signal 'The signal --timeout sends first (a name like TERM, INT, HUP, or a number)'
            cand --splay 'Wait a random time in [0, DUR] before claiming (spreads a fleet''s load)'
            cand --ttl 'A success counts for DUR; after that the key runs again [default: forever]'
            cand --catch-up 'First run, oldest first, the earlier periods of the key''s template within the last N whose key never succeeded, back to the job''s first run (each its own key, IDEM_SLOT set; one still running is passed by until the next call)'
            cand --misfire 'With --catch-up: run every period due (all), or only the newest and record the older ones skipped by policy (latest)'
            cand --wait 'If the key is running elsewhere, wait up to DUR and adopt its outcome'
            cand --lock 'A named lock held while the command runs: runs of different keys sharing it never overlap; NAME:N gives it N slots, so at most N run at once (repeatable; the variable takes a list, a,b:2)'
            cand --overlap 'When a run of the same job (any key) is running: allow both, skip (a conflict), queue behind it (at most one waits per job), or replace it (stop it, as --replace does)'
            cand --on-abandoned 'What to do when the last run died without an outcome'
            cand --skipped-exit-code 'Exit code when skipped because the key succeeded'
            cand --conflict-exit-code 'Exit code when the key is running elsewhere'
            cand --paused-exit-code 'Exit code when the job is paused (`idem pause`); nothing ran'
            cand --pause-after 'Pause the job by itself at its Nth failure in a row (or a later one), an alert with IDEM_EVENT=paused; `idem resume JOB` ends it'
            cand --capture 'Bytes of the output tail kept per attempt and stream (0 = none, at most 1MiB); --capture 0 keeps secrets a command prints out of the ledger'
            cand --progress 'Spinner for waits (backoff, --wait): auto (when stderr is a terminal) or never; a bad IDEM_PROGRESS is a warning, not an error'
            cand --lease 'Shared ledger: how long a claim lives without a heartbeat (at least 1s)'
            cand --on-failure 'Run `sh -c CMD` after a failed run is recorded, when it is an alert (see --alert-after), and with IDEM_EVENT=slow for --warn-after'
            cand --on-recovery 'Run `sh -c CMD` after the first success that follows an alerted failure'
            cand --alert-after 'A failure is an alert only when it is the job''s Nth in a row or later; below that it is recorded but quiet (output held as with --quiet-success)'
            cand --trace 'Send a trace of the run over OTLP/HTTP to URL, the collector''s traces endpoint (/v1/traces included); without it, OTEL_EXPORTER_OTLP_ENDPOINT and OpenTelemetry''s other variables say where'
            cand --warn-after 'Report an attempt still running after DUR, once (a line, the slow event of --on-failure, a ping to URL/log); it keeps running'
            cand --warn-every 'With --warn-after: report the attempt again every DUR while it runs (each a line, a slow event, a ping)'
            cand --ping 'A monitor to ping (repeatable): a Healthchecks URL (URL/start at the claim, URL on success, URL/fail on an alert, URL/log otherwise), sentry:DSN (cron check-ins) or cronitor:URL (telemetry); a secret, never printed whole'
            cand --after 'Start only once the upstream key TEMPLATE has succeeded (expanded now, or at IDEM_SLOT under --catch-up); until then the run is blocked and claims nothing (repeatable; the variable takes a list, a,b)'
            cand --after-wait 'When blocked by --after, wait up to DUR for the upstream keys to succeed, and start as soon as they have'
            cand --blocked-exit-code 'Exit code when blocked by --after (nothing ran)'
            cand --contain 'What holds the run''s processes together: auto (a cgroup of the attempt''s own where cgroup v2 is writable, else the guardian; never one that changes the command''s pids), or the one named'
            cand --nice 'Run the command at nice value N, -20 (first) to 19 (last), as nice(1) does; below idem''s own takes root'
            cand --ionice 'Run the command in I/O scheduling class CLASS (idle, best-effort or realtime, this one root''s) at LEVEL 0 (first) to 7 (last), as ionice(1) does'
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand --shell 'Run the words after -- as one /bin/sh -c script'
            cand --force 'Run even though the key succeeded (or its command changed)'
            cand --replace 'If the key is running elsewhere, stop that run (as `idem stop` does), wait until none of it lives, then run this one'
            cand --quiet-success 'Hold the command''s output and print it only if the run fails'
            cand --replay 'When skipping, print the recorded output of the successful run'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;backfill'= {
            cand --from 'The first period: the one holding this time (a duration ago like 3d, a date, a date and time, RFC 3339)'
            cand --to 'The last period: the one holding this time [default: now]'
            cand --job 'The job this run belongs to, for `idem status` and metrics [default: the key as typed, before expansion]'
            cand --retries 'Further attempts after a failed one; 0 = one attempt'
            cand --backoff 'Base delay before a retry; attempt n waits a random time in [d/2, d] with d = min(max-backoff, backoff * 2^(n-1))'
            cand --max-backoff 'Cap on one delay between attempts'
            cand --retry-on 'Retry only these exit codes, e.g. 1,3,10-20'
            cand --no-retry-on 'Never retry these exit codes'
            cand --timeout 'Per attempt: SIGTERM the command''s process group after DUR, SIGKILL after --kill-after more; counts as exit 124 and is retried'
            cand --kill-after 'Grace between SIGTERM and SIGKILL on timeout'
            cand --timeout-signal 'The signal --timeout sends first (a name like TERM, INT, HUP, or a number)'
            cand --splay 'Wait a random time in [0, DUR] before claiming (spreads a fleet''s load)'
            cand --ttl 'A success counts for DUR; after that the key runs again [default: forever]'
            cand --catch-up 'First run, oldest first, the earlier periods of the key''s template within the last N whose key never succeeded, back to the job''s first run (each its own key, IDEM_SLOT set; one still running is passed by until the next call)'
            cand --misfire 'With --catch-up: run every period due (all), or only the newest and record the older ones skipped by policy (latest)'
            cand --wait 'If the key is running elsewhere, wait up to DUR and adopt its outcome'
            cand --lock 'A named lock held while the command runs: runs of different keys sharing it never overlap; NAME:N gives it N slots, so at most N run at once (repeatable; the variable takes a list, a,b:2)'
            cand --overlap 'When a run of the same job (any key) is running: allow both, skip (a conflict), queue behind it (at most one waits per job), or replace it (stop it, as --replace does)'
            cand --on-abandoned 'What to do when the last run died without an outcome'
            cand --skipped-exit-code 'Exit code when skipped because the key succeeded'
            cand --conflict-exit-code 'Exit code when the key is running elsewhere'
            cand --paused-exit-code 'Exit code when the job is paused (`idem pause`); nothing ran'
            cand --pause-after 'Pause the job by itself at its Nth failure in a row (or a later one), an alert with IDEM_EVENT=paused; `idem resume JOB` ends it'
            cand --capture 'Bytes of the output tail kept per attempt and stream (0 = none, at most 1MiB); --capture 0 keeps secrets a command prints out of the ledger'
            cand --progress 'Spinner for waits (backoff, --wait): auto (when stderr is a terminal) or never; a bad IDEM_PROGRESS is a warning, not an error'
            cand --lease 'Shared ledger: how long a claim lives without a heartbeat (at least 1s)'
            cand --on-failure 'Run `sh -c CMD` after a failed run is recorded, when it is an alert (see --alert-after), and with IDEM_EVENT=slow for --warn-after'
            cand --on-recovery 'Run `sh -c CMD` after the first success that follows an alerted failure'
            cand --alert-after 'A failure is an alert only when it is the job''s Nth in a row or later; below that it is recorded but quiet (output held as with --quiet-success)'
            cand --trace 'Send a trace of the run over OTLP/HTTP to URL, the collector''s traces endpoint (/v1/traces included); without it, OTEL_EXPORTER_OTLP_ENDPOINT and OpenTelemetry''s other variables say where'
            cand --warn-after 'Report an attempt still running after DUR, once (a line, the slow event of --on-failure, a ping to URL/log); it keeps running'
            cand --warn-every 'With --warn-after: report the attempt again every DUR while it runs (each a line, a slow event, a ping)'
            cand --ping 'A monitor to ping (repeatable): a Healthchecks URL (URL/start at the claim, URL on success, URL/fail on an alert, URL/log otherwise), sentry:DSN (cron check-ins) or cronitor:URL (telemetry); a secret, never printed whole'
            cand --after 'Start only once the upstream key TEMPLATE has succeeded (expanded now, or at IDEM_SLOT under --catch-up); until then the run is blocked and claims nothing (repeatable; the variable takes a list, a,b)'
            cand --after-wait 'When blocked by --after, wait up to DUR for the upstream keys to succeed, and start as soon as they have'
            cand --blocked-exit-code 'Exit code when blocked by --after (nothing ran)'
            cand --contain 'What holds the run''s processes together: auto (a cgroup of the attempt''s own where cgroup v2 is writable, else the guardian; never one that changes the command''s pids), or the one named'
            cand --nice 'Run the command at nice value N, -20 (first) to 19 (last), as nice(1) does; below idem''s own takes root'
            cand --ionice 'Run the command in I/O scheduling class CLASS (idle, best-effort or realtime, this one root''s) at LEVEL 0 (first) to 7 (last), as ionice(1) does'
            cand -k 'Idempotency key; may hold {date} {hour} {minute} {week} {month} {year} {host} (local time, TZ honoured), {minute/N} and {hour/N} (every N minutes or hours); {{ and }} for braces'
            cand --key 'Idempotency key; may hold {date} {hour} {minute} {week} {month} {year} {host} (local time, TZ honoured), {minute/N} and {hour/N} (every N minutes or hours); {{ and }} for braces'
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand --dry-run 'List the periods that would run, and run nothing'
            cand --all 'Every period, its success too (as --force would)'
            cand --shell 'Run the words after -- as one /bin/sh -c script'
            cand --force 'Run even though the key succeeded (or its command changed)'
            cand --replace 'If the key is running elsewhere, stop that run (as `idem stop` does), wait until none of it lives, then run this one'
            cand --quiet-success 'Hold the command''s output and print it only if the run fails'
            cand --replay 'When skipping, print the recorded output of the successful run'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;ledger'= {
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand list 'Runs, newest first'
            cand show 'A key''s state, its runs and attempts, with captured output'
            cand forget 'Make keys run again next time; history stays unless --purge'
            cand prune 'Drop old history and output; never changes what `run` decides'
            cand export 'Every run with its attempts, as JSON Lines'
            cand import 'Read an export stream from stdin into this ledger (idempotent)'
            cand mark 'Record a success that did not run (by whom, why): the key is skipped and the runs that wait for it (--after) go on; refused (75) while the key runs'
            cand path 'Print the resolved ledger location'
            cand metrics 'Per-job metrics in the Prometheus text format'
            cand deliver 'Deliver the pings and hooks still owed (run it from a timer)'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'idem;ledger;list'= {
            cand --key 'Only keys matching this glob (* ? [..])'
            cand --job 'Only runs of jobs matching this glob (* ? [..])'
            cand --status 'Only runs with this status (repeatable)'
            cand --since 'Only runs started within DUR, or since a time: 2026-12-01, "2026-12-01 08:15", or RFC 3339 (local time unless it says)'
            cand --until 'Only runs started before DUR ago, or up to a time (as --since)'
            cand --limit 'At most N runs'
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand --json 'Print a JSON array'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;ledger;show'= {
            cand --limit 'The latest N runs (their output is read one attempt at a time)'
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand --json 'Print JSON'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;ledger;forget'= {
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand --purge 'Remove the keys'' history too'
            cand --dry-run 'Say what would change, change nothing'
            cand --force 'Also forget a running key whose owner idem cannot judge (its lock file moved or deleted while it ran, or a claim of an idem too old to lock); a live run is never forgotten'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;ledger;prune'= {
            cand --older-than 'Drop runs that finished longer ago than DUR'
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand --dry-run 'Say what would be dropped, change nothing'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;ledger;export'= {
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;ledger;import'= {
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;ledger;mark'= {
            cand --reason 'Why, for the people who read `ledger show` later'
            cand --job 'The job it belongs to [default: its latest run''s, else the key as typed]'
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand --succeeded 'Mark it succeeded (the one mark there is)'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;ledger;path'= {
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;ledger;metrics'= {
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand --per-key 'Also the per-key families (idem_key_*), a series set per key'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;ledger;deliver'= {
            cand --for 'Stop taking events after DUR (an event under way finishes)'
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand --json 'Print the counts as JSON'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;ledger;help'= {
            cand list 'Runs, newest first'
            cand show 'A key''s state, its runs and attempts, with captured output'
            cand forget 'Make keys run again next time; history stays unless --purge'
            cand prune 'Drop old history and output; never changes what `run` decides'
            cand export 'Every run with its attempts, as JSON Lines'
            cand import 'Read an export stream from stdin into this ledger (idempotent)'
            cand mark 'Record a success that did not run (by whom, why): the key is skipped and the runs that wait for it (--after) go on; refused (75) while the key runs'
            cand path 'Print the resolved ledger location'
            cand metrics 'Per-job metrics in the Prometheus text format'
            cand deliver 'Deliver the pings and hooks still owed (run it from a timer)'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'idem;ledger;help;list'= {
        }
        &'idem;ledger;help;show'= {
        }
        &'idem;ledger;help;forget'= {
        }
        &'idem;ledger;help;prune'= {
        }
        &'idem;ledger;help;export'= {
        }
        &'idem;ledger;help;import'= {
        }
        &'idem;ledger;help;mark'= {
        }
        &'idem;ledger;help;path'= {
        }
        &'idem;ledger;help;metrics'= {
        }
        &'idem;ledger;help;deliver'= {
        }
        &'idem;ledger;help;help'= {
        }
        &'idem;status'= {
            cand --job 'Only jobs matching this glob (* ? [..])'
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand --json 'Print a JSON array'
            cand --wide 'Every column and the whole command, however wide the table'
            cand --after 'List each job''s upstreams (--after) and what a blocked job waits for'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;pause'= {
            cand --reason 'Why, shown by `status` and by every run it holds back'
            cand --until 'End the pause by itself: after DUR, or at a time: 2026-12-01, "2026-12-01 08:15", or RFC 3339 (local time unless it says)'
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;resume'= {
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;stop'= {
            cand --signal 'The signal the run''s processes get first; SIGKILL follows after --kill-after'
            cand --kill-after 'Grace between the signal and SIGKILL on this host''s ledger (a shared ledger''s owner uses its run''s --kill-after)'
            cand --wait 'How long to wait for the stopped runs to be recorded over'
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;doctor'= {
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand --json 'Print JSON'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;serve'= {
            cand --listen 'The address and port to listen on: 127.0.0.1:8417, [::1]:8417, localhost:8417; any address that is not loopback needs --auth-file or IDEM_SERVE_TOKEN'
            cand --auth-file 'Ask every request for a user and password (HTTP basic authentication) from FILE: one `user:bcrypt-hash` a line, as `htpasswd -nbB user password` writes them'
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;completions'= {
            cand --db 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]'
            cand --color 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never'
            cand --log-format 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way'
            cand -q 'Print none of idem''s own lines (errors that stop idem still print)'
            cand --quiet 'Print none of idem''s own lines (errors that stop idem still print)'
            cand -v 'Also print the lines idem keeps quiet under cron (skips)'
            cand --verbose 'Also print the lines idem keeps quiet under cron (skips)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'idem;help'= {
            cand run 'Run COMMAND under KEY unless KEY already succeeded'
            cand backfill 'Run the periods of a job between two times that never succeeded'
            cand ledger 'Inspect and maintain the ledger'
            cand status 'One line per job: its state, last run and success, failures in a row'
            cand pause 'Pause a job: its runs start nothing until `idem resume` or --until'
            cand resume 'Resume a paused job: its next run runs'
            cand stop 'Stop the running runs of keys, wherever they run'
            cand doctor 'Check a ledger for problems without changing anything'
            cand serve 'Serve the ledger over HTTP: a status board, each job''s runs, metrics, and buttons that pause, resume and stop'
            cand completions 'Print a shell completion script'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'idem;help;run'= {
        }
        &'idem;help;backfill'= {
        }
        &'idem;help;ledger'= {
            cand list 'Runs, newest first'
            cand show 'A key''s state, its runs and attempts, with captured output'
            cand forget 'Make keys run again next time; history stays unless --purge'
            cand prune 'Drop old history and output; never changes what `run` decides'
            cand export 'Every run with its attempts, as JSON Lines'
            cand import 'Read an export stream from stdin into this ledger (idempotent)'
            cand mark 'Record a success that did not run (by whom, why): the key is skipped and the runs that wait for it (--after) go on; refused (75) while the key runs'
            cand path 'Print the resolved ledger location'
            cand metrics 'Per-job metrics in the Prometheus text format'
            cand deliver 'Deliver the pings and hooks still owed (run it from a timer)'
        }
        &'idem;help;ledger;list'= {
        }
        &'idem;help;ledger;show'= {
        }
        &'idem;help;ledger;forget'= {
        }
        &'idem;help;ledger;prune'= {
        }
        &'idem;help;ledger;export'= {
        }
        &'idem;help;ledger;import'= {
        }
        &'idem;help;ledger;mark'= {
        }
        &'idem;help;ledger;path'= {
        }
        &'idem;help;ledger;metrics'= {
        }
        &'idem;help;ledger;deliver'= {
        }
        &'idem;help;status'= {
        }
        &'idem;help;pause'= {
        }
        &'idem;help;resume'= {
        }
        &'idem;help;stop'= {
        }
        &'idem;help;doctor'= {
        }
        &'idem;help;serve'= {
        }
        &'idem;help;completions'= {
        }
        &'idem;help;help'= {
        }
    ]
    $completions[$command]
}
