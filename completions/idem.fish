# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_idem_global_optspecs
    string join \n db= q/quiet v/verbose color= log-format= h/help V/version
end

function __fish_idem_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_idem_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_idem_using_subcommand
    set -l cmd (__fish_idem_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c idem -n "__fish_idem_needs_command" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_needs_command" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_needs_command" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_needs_command" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_needs_command" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_needs_command" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_needs_command" -f -a "run" -d 'Run COMMAND under KEY unless KEY already succeeded'
complete -c idem -n "__fish_idem_needs_command" -f -a "backfill" -d 'Run the periods of a job between two times that never succeeded'
complete -c idem -n "__fish_idem_needs_command" -f -a "ledger" -d 'Inspect and maintain the ledger'
complete -c idem -n "__fish_idem_needs_command" -f -a "status" -d 'One line per job: its state, last run and success, failures in a row'
complete -c idem -n "__fish_idem_needs_command" -f -a "pause" -d 'Pause a job: its runs start nothing until `idem resume` or --until'
complete -c idem -n "__fish_idem_needs_command" -f -a "resume" -d 'Resume a paused job: its next run runs'
complete -c idem -n "__fish_idem_needs_command" -f -a "stop" -d 'Stop the running runs of keys, wherever they run'
complete -c idem -n "__fish_idem_needs_command" -f -a "doctor" -d 'Check a ledger for problems without changing anything'
complete -c idem -n "__fish_idem_needs_command" -f -a "serve" -d 'Serve the ledger over HTTP: a status board, each job\'s runs, metrics, and buttons that pause, resume and stop'
complete -c idem -n "__fish_idem_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c idem -n "__fish_idem_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c idem -n "__fish_idem_using_subcommand run" -s k -l key -d 'Idempotency key; may hold {date} {hour} {minute} {week} {month} {year} {host} (local time, TZ honoured), {minute/N} and {hour/N} (every N minutes or hours); {{ and }} for braces' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l job -d 'The job this run belongs to, for `idem status` and metrics [default: the key as typed, before expansion]' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l retries -d 'Further attempts after a failed one; 0 = one attempt' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l backoff -d 'Base delay before a retry; attempt n waits a random time in [d/2, d] with d = min(max-backoff, backoff * 2^(n-1))' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l max-backoff -d 'Cap on one delay between attempts' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l retry-on -d 'Retry only these exit codes, e.g. 1,3,10-20' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l no-retry-on -d 'Never retry these exit codes' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l timeout -d 'Per attempt: SIGTERM the command\'s process group after DUR, SIGKILL after --kill-after more; counts as exit 124 and is retried' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l kill-after -d 'Grace between SIGTERM and SIGKILL on timeout' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l timeout-signal -d 'The signal --timeout sends first (a name like TERM, INT, HUP, or a number)' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l splay -d 'Wait a random time in [0, DUR] before claiming (spreads a fleet\'s load)' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l ttl -d 'A success counts for DUR; after that the key runs again [default: forever]' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l catch-up -d 'First run, oldest first, the earlier periods of the key\'s template within the last N whose key never succeeded, back to the job\'s first run (each its own key, IDEM_SLOT set; one still running is passed by until the next call)' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l misfire -d 'With --catch-up: run every period due (all), or only the newest and record the older ones skipped by policy (latest)' -r -f -a "all\t'Every missed period, oldest first, then the current one'
latest\t'The newest period due only; the older ones are recorded skipped'"
complete -c idem -n "__fish_idem_using_subcommand run" -l wait -d 'If the key is running elsewhere, wait up to DUR and adopt its outcome' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l lock -d 'A named lock held while the command runs: runs of different keys sharing it never overlap; NAME:N gives it N slots, so at most N run at once (repeatable; the variable takes a list, a,b:2)' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l overlap -d 'When a run of the same job (any key) is running: allow both, skip (a conflict), queue behind it (at most one waits per job), or replace it (stop it, as --replace does)' -r -f -a "allow\t'Runs of the job\'s keys may overlap (each key still runs once)'
skip\t'Exit --conflict-exit-code while a run of the job is running'
queue\t'Wait for it, then run; a later arrival while one waits exits as a conflict'
replace\t'Stop it (as idem stop does), wait until it is gone, then run'"
complete -c idem -n "__fish_idem_using_subcommand run" -l on-abandoned -d 'What to do when the last run died without an outcome' -r -f -a "rerun\t'Run again, with IDEM_RECOVERED=1 in the command\'s environment'
fail\t'Exit 69 and leave the key for a person'"
complete -c idem -n "__fish_idem_using_subcommand run" -l skipped-exit-code -d 'Exit code when skipped because the key succeeded' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l conflict-exit-code -d 'Exit code when the key is running elsewhere' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l paused-exit-code -d 'Exit code when the job is paused (`idem pause`); nothing ran' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l pause-after -d 'Pause the job by itself at its Nth failure in a row (or a later one), an alert with IDEM_EVENT=paused; `idem resume JOB` ends it' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l capture -d 'Bytes of the output tail kept per attempt and stream (0 = none, at most 1MiB); --capture 0 keeps secrets a command prints out of the ledger' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l progress -d 'Spinner for waits (backoff, --wait): auto (when stderr is a terminal) or never; a bad IDEM_PROGRESS is a warning, not an error' -r -f -a "auto\t'A spinner when stderr is a terminal'
never\t'Plain lines only'"
complete -c idem -n "__fish_idem_using_subcommand run" -l lease -d 'Shared ledger: how long a claim lives without a heartbeat (at least 1s)' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l on-failure -d 'Run `sh -c CMD` after a failed run is recorded, when it is an alert (see --alert-after), and with IDEM_EVENT=slow for --warn-after' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l on-recovery -d 'Run `sh -c CMD` after the first success that follows an alerted failure' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l alert-after -d 'A failure is an alert only when it is the job\'s Nth in a row or later; below that it is recorded but quiet (output held as with --quiet-success)' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l trace -d 'Send a trace of the run over OTLP/HTTP to URL, the collector\'s traces endpoint (/v1/traces included); without it, OTEL_EXPORTER_OTLP_ENDPOINT and OpenTelemetry\'s other variables say where' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l warn-after -d 'Report an attempt still running after DUR, once (a line, the slow event of --on-failure, a ping to URL/log); it keeps running' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l warn-every -d 'With --warn-after: report the attempt again every DUR while it runs (each a line, a slow event, a ping)' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l ping -d 'A monitor to ping (repeatable): a Healthchecks URL (URL/start at the claim, URL on success, URL/fail on an alert, URL/log otherwise), sentry:DSN (cron check-ins) or cronitor:URL (telemetry); a secret, never printed whole' -r -f
complete -c idem -n "__fish_idem_using_subcommand run" -l after -d 'Start only once the upstream key TEMPLATE has succeeded (expanded now, or at IDEM_SLOT under --catch-up); until then the run is blocked and claims nothing (repeatable; the variable takes a list, a,b)' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l after-wait -d 'When blocked by --after, wait up to DUR for the upstream keys to succeed, and start as soon as they have' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l blocked-exit-code -d 'Exit code when blocked by --after (nothing ran)' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l contain -d 'What holds the run\'s processes together: auto (a cgroup of the attempt\'s own where cgroup v2 is writable, else the guardian; never one that changes the command\'s pids), or the one named' -r -f -a "auto\t'A cgroup where cgroup v2 is writable, else the guardian'
cgroup\t'A cgroup of the attempt\'s own, or refuse to run'
pid-namespace\t'A PID namespace: the command\'s pid and its parent\'s are not the host\'s'
guardian\t'The guardian alone: a subreaper, and the IDEM_RUN_ID look'"
complete -c idem -n "__fish_idem_using_subcommand run" -l nice -d 'Run the command at nice value N, -20 (first) to 19 (last), as nice(1) does; below idem\'s own takes root' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l ionice -d 'Run the command in I/O scheduling class CLASS (idle, best-effort or realtime, this one root\'s) at LEVEL 0 (first) to 7 (last), as ionice(1) does' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand run" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand run" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand run" -l shell -d 'Run the words after -- as one /bin/sh -c script'
complete -c idem -n "__fish_idem_using_subcommand run" -l force -d 'Run even though the key succeeded (or its command changed)'
complete -c idem -n "__fish_idem_using_subcommand run" -l replace -d 'If the key is running elsewhere, stop that run (as `idem stop` does), wait until none of it lives, then run this one'
complete -c idem -n "__fish_idem_using_subcommand run" -l quiet-success -d 'Hold the command\'s output and print it only if the run fails'
complete -c idem -n "__fish_idem_using_subcommand run" -l replay -d 'When skipping, print the recorded output of the successful run'
complete -c idem -n "__fish_idem_using_subcommand run" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand run" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand run" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand backfill" -l from -d 'The first period: the one holding this time (a duration ago like 3d, a date, a date and time, RFC 3339)' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l to -d 'The last period: the one holding this time [default: now]' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l job -d 'The job this run belongs to, for `idem status` and metrics [default: the key as typed, before expansion]' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l retries -d 'Further attempts after a failed one; 0 = one attempt' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l backoff -d 'Base delay before a retry; attempt n waits a random time in [d/2, d] with d = min(max-backoff, backoff * 2^(n-1))' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l max-backoff -d 'Cap on one delay between attempts' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l retry-on -d 'Retry only these exit codes, e.g. 1,3,10-20' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l no-retry-on -d 'Never retry these exit codes' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l timeout -d 'Per attempt: SIGTERM the command\'s process group after DUR, SIGKILL after --kill-after more; counts as exit 124 and is retried' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l kill-after -d 'Grace between SIGTERM and SIGKILL on timeout' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l timeout-signal -d 'The signal --timeout sends first (a name like TERM, INT, HUP, or a number)' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l splay -d 'Wait a random time in [0, DUR] before claiming (spreads a fleet\'s load)' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l ttl -d 'A success counts for DUR; after that the key runs again [default: forever]' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l catch-up -d 'First run, oldest first, the earlier periods of the key\'s template within the last N whose key never succeeded, back to the job\'s first run (each its own key, IDEM_SLOT set; one still running is passed by until the next call)' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l misfire -d 'With --catch-up: run every period due (all), or only the newest and record the older ones skipped by policy (latest)' -r -f -a "all\t'Every missed period, oldest first, then the current one'
latest\t'The newest period due only; the older ones are recorded skipped'"
complete -c idem -n "__fish_idem_using_subcommand backfill" -l wait -d 'If the key is running elsewhere, wait up to DUR and adopt its outcome' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l lock -d 'A named lock held while the command runs: runs of different keys sharing it never overlap; NAME:N gives it N slots, so at most N run at once (repeatable; the variable takes a list, a,b:2)' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l overlap -d 'When a run of the same job (any key) is running: allow both, skip (a conflict), queue behind it (at most one waits per job), or replace it (stop it, as --replace does)' -r -f -a "allow\t'Runs of the job\'s keys may overlap (each key still runs once)'
skip\t'Exit --conflict-exit-code while a run of the job is running'
queue\t'Wait for it, then run; a later arrival while one waits exits as a conflict'
replace\t'Stop it (as idem stop does), wait until it is gone, then run'"
complete -c idem -n "__fish_idem_using_subcommand backfill" -l on-abandoned -d 'What to do when the last run died without an outcome' -r -f -a "rerun\t'Run again, with IDEM_RECOVERED=1 in the command\'s environment'
fail\t'Exit 69 and leave the key for a person'"
complete -c idem -n "__fish_idem_using_subcommand backfill" -l skipped-exit-code -d 'Exit code when skipped because the key succeeded' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l conflict-exit-code -d 'Exit code when the key is running elsewhere' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l paused-exit-code -d 'Exit code when the job is paused (`idem pause`); nothing ran' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l pause-after -d 'Pause the job by itself at its Nth failure in a row (or a later one), an alert with IDEM_EVENT=paused; `idem resume JOB` ends it' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l capture -d 'Bytes of the output tail kept per attempt and stream (0 = none, at most 1MiB); --capture 0 keeps secrets a command prints out of the ledger' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l progress -d 'Spinner for waits (backoff, --wait): auto (when stderr is a terminal) or never; a bad IDEM_PROGRESS is a warning, not an error' -r -f -a "auto\t'A spinner when stderr is a terminal'
never\t'Plain lines only'"
complete -c idem -n "__fish_idem_using_subcommand backfill" -l lease -d 'Shared ledger: how long a claim lives without a heartbeat (at least 1s)' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l on-failure -d 'Run `sh -c CMD` after a failed run is recorded, when it is an alert (see --alert-after), and with IDEM_EVENT=slow for --warn-after' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l on-recovery -d 'Run `sh -c CMD` after the first success that follows an alerted failure' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l alert-after -d 'A failure is an alert only when it is the job\'s Nth in a row or later; below that it is recorded but quiet (output held as with --quiet-success)' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l trace -d 'Send a trace of the run over OTLP/HTTP to URL, the collector\'s traces endpoint (/v1/traces included); without it, OTEL_EXPORTER_OTLP_ENDPOINT and OpenTelemetry\'s other variables say where' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l warn-after -d 'Report an attempt still running after DUR, once (a line, the slow event of --on-failure, a ping to URL/log); it keeps running' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l warn-every -d 'With --warn-after: report the attempt again every DUR while it runs (each a line, a slow event, a ping)' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l ping -d 'A monitor to ping (repeatable): a Healthchecks URL (URL/start at the claim, URL on success, URL/fail on an alert, URL/log otherwise), sentry:DSN (cron check-ins) or cronitor:URL (telemetry); a secret, never printed whole' -r -f
complete -c idem -n "__fish_idem_using_subcommand backfill" -l after -d 'Start only once the upstream key TEMPLATE has succeeded (expanded now, or at IDEM_SLOT under --catch-up); until then the run is blocked and claims nothing (repeatable; the variable takes a list, a,b)' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l after-wait -d 'When blocked by --after, wait up to DUR for the upstream keys to succeed, and start as soon as they have' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l blocked-exit-code -d 'Exit code when blocked by --after (nothing ran)' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l contain -d 'What holds the run\'s processes together: auto (a cgroup of the attempt\'s own where cgroup v2 is writable, else the guardian; never one that changes the command\'s pids), or the one named' -r -f -a "auto\t'A cgroup where cgroup v2 is writable, else the guardian'
cgroup\t'A cgroup of the attempt\'s own, or refuse to run'
pid-namespace\t'A PID namespace: the command\'s pid and its parent\'s are not the host\'s'
guardian\t'The guardian alone: a subreaper, and the IDEM_RUN_ID look'"
complete -c idem -n "__fish_idem_using_subcommand backfill" -l nice -d 'Run the command at nice value N, -20 (first) to 19 (last), as nice(1) does; below idem\'s own takes root' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l ionice -d 'Run the command in I/O scheduling class CLASS (idle, best-effort or realtime, this one root\'s) at LEVEL 0 (first) to 7 (last), as ionice(1) does' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -s k -l key -d 'Idempotency key; may hold {date} {hour} {minute} {week} {month} {year} {host} (local time, TZ honoured), {minute/N} and {hour/N} (every N minutes or hours); {{ and }} for braces' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand backfill" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand backfill" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand backfill" -l dry-run -d 'List the periods that would run, and run nothing'
complete -c idem -n "__fish_idem_using_subcommand backfill" -l all -d 'Every period, its success too (as --force would)'
complete -c idem -n "__fish_idem_using_subcommand backfill" -l shell -d 'Run the words after -- as one /bin/sh -c script'
complete -c idem -n "__fish_idem_using_subcommand backfill" -l force -d 'Run even though the key succeeded (or its command changed)'
complete -c idem -n "__fish_idem_using_subcommand backfill" -l replace -d 'If the key is running elsewhere, stop that run (as `idem stop` does), wait until none of it lives, then run this one'
complete -c idem -n "__fish_idem_using_subcommand backfill" -l quiet-success -d 'Hold the command\'s output and print it only if the run fails'
complete -c idem -n "__fish_idem_using_subcommand backfill" -l replay -d 'When skipping, print the recorded output of the successful run'
complete -c idem -n "__fish_idem_using_subcommand backfill" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand backfill" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand backfill" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand backfill" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -f -a "list" -d 'Runs, newest first'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -f -a "show" -d 'A key\'s state, its runs and attempts, with captured output'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -f -a "forget" -d 'Make keys run again next time; history stays unless --purge'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -f -a "prune" -d 'Drop old history and output; never changes what `run` decides'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -f -a "export" -d 'Every run with its attempts, as JSON Lines'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -f -a "import" -d 'Read an export stream from stdin into this ledger (idempotent)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -f -a "mark" -d 'Record a success that did not run (by whom, why): the key is skipped and the runs that wait for it (--after) go on; refused (75) while the key runs'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -f -a "path" -d 'Print the resolved ledger location'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -f -a "metrics" -d 'Per-job metrics in the Prometheus text format'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -f -a "deliver" -d 'Deliver the pings and hooks still owed (run it from a timer)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and not __fish_seen_subcommand_from list show forget prune export import mark path metrics deliver help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -l key -d 'Only keys matching this glob (* ? [..])' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -l job -d 'Only runs of jobs matching this glob (* ? [..])' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -l status -d 'Only runs with this status (repeatable)' -r -f -a "running\t''
succeeded\t''
failed\t''
abandoned\t''"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -l since -d 'Only runs started within DUR, or since a time: 2026-12-01, "2026-12-01 08:15", or RFC 3339 (local time unless it says)' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -l until -d 'Only runs started before DUR ago, or up to a time (as --since)' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -l limit -d 'At most N runs' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -l json -d 'Print a JSON array'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from show" -l limit -d 'The latest N runs (their output is read one attempt at a time)' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from show" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from show" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from show" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from show" -l json -d 'Print JSON'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from show" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from forget" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from forget" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from forget" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from forget" -l purge -d 'Remove the keys\' history too'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from forget" -l dry-run -d 'Say what would change, change nothing'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from forget" -l force -d 'Also forget a running key whose owner idem cannot judge (its lock file moved or deleted while it ran, or a claim of an idem too old to lock); a live run is never forgotten'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from forget" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from forget" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from forget" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from forget" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from prune" -l older-than -d 'Drop runs that finished longer ago than DUR' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from prune" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from prune" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from prune" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from prune" -l dry-run -d 'Say what would be dropped, change nothing'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from prune" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from prune" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from prune" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from prune" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from export" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from export" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from export" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from export" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from export" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from export" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from export" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from import" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from import" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from import" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from import" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from import" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from import" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from import" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from mark" -l reason -d 'Why, for the people who read `ledger show` later' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from mark" -l job -d 'The job it belongs to [default: its latest run\'s, else the key as typed]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from mark" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from mark" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from mark" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from mark" -l succeeded -d 'Mark it succeeded (the one mark there is)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from mark" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from mark" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from mark" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from mark" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from path" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from path" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from path" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from path" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from path" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from path" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from path" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from metrics" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from metrics" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from metrics" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from metrics" -l per-key -d 'Also the per-key families (idem_key_*), a series set per key'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from metrics" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from metrics" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from metrics" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from metrics" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from deliver" -l for -d 'Stop taking events after DUR (an event under way finishes)' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from deliver" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from deliver" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from deliver" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from deliver" -l json -d 'Print the counts as JSON'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from deliver" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from deliver" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from deliver" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from deliver" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "list" -d 'Runs, newest first'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "show" -d 'A key\'s state, its runs and attempts, with captured output'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "forget" -d 'Make keys run again next time; history stays unless --purge'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "prune" -d 'Drop old history and output; never changes what `run` decides'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "export" -d 'Every run with its attempts, as JSON Lines'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "import" -d 'Read an export stream from stdin into this ledger (idempotent)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "mark" -d 'Record a success that did not run (by whom, why): the key is skipped and the runs that wait for it (--after) go on; refused (75) while the key runs'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "path" -d 'Print the resolved ledger location'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "metrics" -d 'Per-job metrics in the Prometheus text format'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "deliver" -d 'Deliver the pings and hooks still owed (run it from a timer)'
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c idem -n "__fish_idem_using_subcommand status" -l job -d 'Only jobs matching this glob (* ? [..])' -r
complete -c idem -n "__fish_idem_using_subcommand status" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand status" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand status" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand status" -l json -d 'Print a JSON array'
complete -c idem -n "__fish_idem_using_subcommand status" -l wide -d 'Every column and the whole command, however wide the table'
complete -c idem -n "__fish_idem_using_subcommand status" -l after -d 'List each job\'s upstreams (--after) and what a blocked job waits for'
complete -c idem -n "__fish_idem_using_subcommand status" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand status" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand status" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand pause" -l reason -d 'Why, shown by `status` and by every run it holds back' -r
complete -c idem -n "__fish_idem_using_subcommand pause" -l until -d 'End the pause by itself: after DUR, or at a time: 2026-12-01, "2026-12-01 08:15", or RFC 3339 (local time unless it says)' -r
complete -c idem -n "__fish_idem_using_subcommand pause" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand pause" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand pause" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand pause" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand pause" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand pause" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand pause" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand resume" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand resume" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand resume" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand resume" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand resume" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand resume" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand resume" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand stop" -l signal -d 'The signal the run\'s processes get first; SIGKILL follows after --kill-after' -r
complete -c idem -n "__fish_idem_using_subcommand stop" -l kill-after -d 'Grace between the signal and SIGKILL on this host\'s ledger (a shared ledger\'s owner uses its run\'s --kill-after)' -r
complete -c idem -n "__fish_idem_using_subcommand stop" -l wait -d 'How long to wait for the stopped runs to be recorded over' -r
complete -c idem -n "__fish_idem_using_subcommand stop" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand stop" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand stop" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand stop" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand stop" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand stop" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand stop" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand doctor" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand doctor" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand doctor" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand doctor" -l json -d 'Print JSON'
complete -c idem -n "__fish_idem_using_subcommand doctor" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand doctor" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand doctor" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand serve" -l listen -d 'The address and port to listen on: 127.0.0.1:8417, [::1]:8417, localhost:8417; any address that is not loopback needs --auth-file or IDEM_SERVE_TOKEN' -r
complete -c idem -n "__fish_idem_using_subcommand serve" -l auth-file -d 'Ask every request for a user and password (HTTP basic authentication) from FILE: one `user:bcrypt-hash` a line, as `htpasswd -nbB user password` writes them' -r -F
complete -c idem -n "__fish_idem_using_subcommand serve" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand serve" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand serve" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand serve" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand serve" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand serve" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand completions" -l db -d 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]' -r
complete -c idem -n "__fish_idem_using_subcommand completions" -l color -d 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never' -r -f -a "auto\t'At a terminal, unless NO_COLOR is set or TERM is dumb'
always\t'Always, even into a pipe'
never\t'Never'"
complete -c idem -n "__fish_idem_using_subcommand completions" -l log-format -d 'idem\'s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way' -r -f -a "text\t'`idem: TEXT`, as a person reads it'
json\t'One JSON object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message'"
complete -c idem -n "__fish_idem_using_subcommand completions" -s q -l quiet -d 'Print none of idem\'s own lines (errors that stop idem still print)'
complete -c idem -n "__fish_idem_using_subcommand completions" -s v -l verbose -d 'Also print the lines idem keeps quiet under cron (skips)'
complete -c idem -n "__fish_idem_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c idem -n "__fish_idem_using_subcommand completions" -s V -l version -d 'Print version'
complete -c idem -n "__fish_idem_using_subcommand help; and not __fish_seen_subcommand_from run backfill ledger status pause resume stop doctor serve completions help" -f -a "run" -d 'Run COMMAND under KEY unless KEY already succeeded'
complete -c idem -n "__fish_idem_using_subcommand help; and not __fish_seen_subcommand_from run backfill ledger status pause resume stop doctor serve completions help" -f -a "backfill" -d 'Run the periods of a job between two times that never succeeded'
complete -c idem -n "__fish_idem_using_subcommand help; and not __fish_seen_subcommand_from run backfill ledger status pause resume stop doctor serve completions help" -f -a "ledger" -d 'Inspect and maintain the ledger'
complete -c idem -n "__fish_idem_using_subcommand help; and not __fish_seen_subcommand_from run backfill ledger status pause resume stop doctor serve completions help" -f -a "status" -d 'One line per job: its state, last run and success, failures in a row'
complete -c idem -n "__fish_idem_using_subcommand help; and not __fish_seen_subcommand_from run backfill ledger status pause resume stop doctor serve completions help" -f -a "pause" -d 'Pause a job: its runs start nothing until `idem resume` or --until'
complete -c idem -n "__fish_idem_using_subcommand help; and not __fish_seen_subcommand_from run backfill ledger status pause resume stop doctor serve completions help" -f -a "resume" -d 'Resume a paused job: its next run runs'
complete -c idem -n "__fish_idem_using_subcommand help; and not __fish_seen_subcommand_from run backfill ledger status pause resume stop doctor serve completions help" -f -a "stop" -d 'Stop the running runs of keys, wherever they run'
complete -c idem -n "__fish_idem_using_subcommand help; and not __fish_seen_subcommand_from run backfill ledger status pause resume stop doctor serve completions help" -f -a "doctor" -d 'Check a ledger for problems without changing anything'
complete -c idem -n "__fish_idem_using_subcommand help; and not __fish_seen_subcommand_from run backfill ledger status pause resume stop doctor serve completions help" -f -a "serve" -d 'Serve the ledger over HTTP: a status board, each job\'s runs, metrics, and buttons that pause, resume and stop'
complete -c idem -n "__fish_idem_using_subcommand help; and not __fish_seen_subcommand_from run backfill ledger status pause resume stop doctor serve completions help" -f -a "completions" -d 'Print a shell completion script'
complete -c idem -n "__fish_idem_using_subcommand help; and not __fish_seen_subcommand_from run backfill ledger status pause resume stop doctor serve completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c idem -n "__fish_idem_using_subcommand help; and __fish_seen_subcommand_from ledger" -f -a "list" -d 'Runs, newest first'
complete -c idem -n "__fish_idem_using_subcommand help; and __fish_seen_subcommand_from ledger" -f -a "show" -d 'A key\'s state, its runs and attempts, with captured output'
complete -c idem -n "__fish_idem_using_subcommand help; and __fish_seen_subcommand_from ledger" -f -a "forget" -d 'Make keys run again next time; history stays unless --purge'
complete -c idem -n "__fish_idem_using_subcommand help; and __fish_seen_subcommand_from ledger" -f -a "prune" -d 'Drop old history and output; never changes what `run` decides'
complete -c idem -n "__fish_idem_using_subcommand help; and __fish_seen_subcommand_from ledger" -f -a "export" -d 'Every run with its attempts, as JSON Lines'
complete -c idem -n "__fish_idem_using_subcommand help; and __fish_seen_subcommand_from ledger" -f -a "import" -d 'Read an export stream from stdin into this ledger (idempotent)'
complete -c idem -n "__fish_idem_using_subcommand help; and __fish_seen_subcommand_from ledger" -f -a "mark" -d 'Record a success that did not run (by whom, why): the key is skipped and the runs that wait for it (--after) go on; refused (75) while the key runs'
complete -c idem -n "__fish_idem_using_subcommand help; and __fish_seen_subcommand_from ledger" -f -a "path" -d 'Print the resolved ledger location'
complete -c idem -n "__fish_idem_using_subcommand help; and __fish_seen_subcommand_from ledger" -f -a "metrics" -d 'Per-job metrics in the Prometheus text format'
complete -c idem -n "__fish_idem_using_subcommand help; and __fish_seen_subcommand_from ledger" -f -a "deliver" -d 'Deliver the pings and hooks still owed (run it from a timer)'

# After `run ... --`, the command's own completion; keys from the ledger
# after `run --key` and for `ledger show` and `ledger forget`.
function __fish_idem_after_dashes
    set -l tokens (commandline -opc) (commandline -ct)
    set -l at (contains -i -- -- $tokens)
    or return
    __fish_complete_subcommand --commandline $tokens[(math $at + 1)..-1]
end
function __fish_idem_keys
    set -l tokens (commandline -opc)
    set -l db
    if set -l at (contains -i -- --db $tokens)
        set db --db $tokens[(math $at + 1)]
    end
    $tokens[1] $db __complete keys (commandline -ct) 2>/dev/null
end
complete -c idem -n "__fish_idem_using_subcommand run; and contains -- -- (commandline -opc)" -f -a "(__fish_idem_after_dashes)"
complete -c idem -n "__fish_idem_using_subcommand run; and not contains -- -- (commandline -opc)" -s k -l key -f -r -a "(__fish_idem_keys)"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from show forget" -f -a "(__fish_idem_keys)"
