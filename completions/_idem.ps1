
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'idem' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'idem'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'idem' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Run COMMAND under KEY unless KEY already succeeded')
            [CompletionResult]::new('backfill', 'backfill', [CompletionResultType]::ParameterValue, 'Run the periods of a job between two times that never succeeded')
            [CompletionResult]::new('ledger', 'ledger', [CompletionResultType]::ParameterValue, 'Inspect and maintain the ledger')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'One line per job: its state, last run and success, failures in a row')
            [CompletionResult]::new('pause', 'pause', [CompletionResultType]::ParameterValue, 'Pause a job: its runs start nothing until `idem resume` or --until')
            [CompletionResult]::new('resume', 'resume', [CompletionResultType]::ParameterValue, 'Resume a paused job: its next run runs')
            [CompletionResult]::new('stop', 'stop', [CompletionResultType]::ParameterValue, 'Stop the running runs of keys, wherever they run')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Check a ledger for problems without changing anything')
            [CompletionResult]::new('serve', 'serve', [CompletionResultType]::ParameterValue, 'Serve the ledger over HTTP: a status board, each job''s runs, metrics, and buttons that pause, resume and stop')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'idem;run' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Idempotency key; may hold {date} {hour} {minute} {week} {month} {year} {host} (local time, TZ honoured), {minute/N} and {hour/N} (every N minutes or hours); {{ and }} for braces')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Idempotency key; may hold {date} {hour} {minute} {week} {month} {year} {host} (local time, TZ honoured), {minute/N} and {hour/N} (every N minutes or hours); {{ and }} for braces')
            [CompletionResult]::new('--job', '--job', [CompletionResultType]::ParameterName, 'The job this run belongs to, for `idem status` and metrics [default: the key as typed, before expansion]')
            [CompletionResult]::new('--retries', '--retries', [CompletionResultType]::ParameterName, 'Further attempts after a failed one; 0 = one attempt')
            [CompletionResult]::new('--backoff', '--backoff', [CompletionResultType]::ParameterName, 'Base delay before a retry; attempt n waits a random time in [d/2, d] with d = min(max-backoff, backoff * 2^(n-1))')
            [CompletionResult]::new('--max-backoff', '--max-backoff', [CompletionResultType]::ParameterName, 'Cap on one delay between attempts')
            [CompletionResult]::new('--retry-on', '--retry-on', [CompletionResultType]::ParameterName, 'Retry only these exit codes, e.g. 1,3,10-20')
            [CompletionResult]::new('--no-retry-on', '--no-retry-on', [CompletionResultType]::ParameterName, 'Never retry these exit codes')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Per attempt: SIGTERM the command''s process group after DUR, SIGKILL after --kill-after more; counts as exit 124 and is retried')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'Grace between SIGTERM and SIGKILL on timeout')
            [CompletionResult]::new('--timeout-signal', '--timeout-signal', [CompletionResultType]::ParameterName, 'The signal --timeout sends first (a name like TERM, INT, HUP, or a number)')
            [CompletionResult]::new('--splay', '--splay', [CompletionResultType]::ParameterName, 'Wait a random time in [0, DUR] before claiming (spreads a fleet''s load)')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'A success counts for DUR; after that the key runs again [default: forever]')
            [CompletionResult]::new('--catch-up', '--catch-up', [CompletionResultType]::ParameterName, 'First run, oldest first, the earlier periods of the key''s template within the last N whose key never succeeded, back to the job''s first run (each its own key, IDEM_SLOT set; one still running is passed by until the next call)')
            [CompletionResult]::new('--misfire', '--misfire', [CompletionResultType]::ParameterName, 'With --catch-up: run every period due (all), or only the newest and record the older ones skipped by policy (latest)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'If the key is running elsewhere, wait up to DUR and adopt its outcome')
            [CompletionResult]::new('--lock', '--lock', [CompletionResultType]::ParameterName, 'A named lock held while the command runs: runs of different keys sharing it never overlap; NAME:N gives it N slots, so at most N run at once (repeatable; the variable takes a list, a,b:2)')
            [CompletionResult]::new('--overlap', '--overlap', [CompletionResultType]::ParameterName, 'When a run of the same job (any key) is running: allow both, skip (a conflict), queue behind it (at most one waits per job), or replace it (stop it, as --replace does)')
            [CompletionResult]::new('--on-abandoned', '--on-abandoned', [CompletionResultType]::ParameterName, 'What to do when the last run died without an outcome')
            [CompletionResult]::new('--skipped-exit-code', '--skipped-exit-code', [CompletionResultType]::ParameterName, 'Exit code when skipped because the key succeeded')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the key is running elsewhere')
            [CompletionResult]::new('--paused-exit-code', '--paused-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the job is paused (`idem pause`); nothing ran')
            [CompletionResult]::new('--pause-after', '--pause-after', [CompletionResultType]::ParameterName, 'Pause the job by itself at its Nth failure in a row (or a later one), an alert with IDEM_EVENT=paused; `idem resume JOB` ends it')
            [CompletionResult]::new('--capture', '--capture', [CompletionResultType]::ParameterName, 'Bytes of the output tail kept per attempt and stream (0 = none, at most 1MiB); --capture 0 keeps secrets a command prints out of the ledger')
            [CompletionResult]::new('--progress', '--progress', [CompletionResultType]::ParameterName, 'Spinner for waits (backoff, --wait): auto (when stderr is a terminal) or never; a bad IDEM_PROGRESS is a warning, not an error')
            [CompletionResult]::new('--lease', '--lease', [CompletionResultType]::ParameterName, 'Shared ledger: how long a claim lives without a heartbeat (at least 1s)')
            [CompletionResult]::new('--on-failure', '--on-failure', [CompletionResultType]::ParameterName, 'Run `sh -c CMD` after a failed run is recorded, when it is an alert (see --alert-after), and with IDEM_EVENT=slow for --warn-after')
            [CompletionResult]::new('--on-recovery', '--on-recovery', [CompletionResultType]::ParameterName, 'Run `sh -c CMD` after the first success that follows an alerted failure')
            [CompletionResult]::new('--alert-after', '--alert-after', [CompletionResultType]::ParameterName, 'A failure is an alert only when it is the job''s Nth in a row or later; below that it is recorded but quiet (output held as with --quiet-success)')
            [CompletionResult]::new('--trace', '--trace', [CompletionResultType]::ParameterName, 'Send a trace of the run over OTLP/HTTP to URL, the collector''s traces endpoint (/v1/traces included); without it, OTEL_EXPORTER_OTLP_ENDPOINT and OpenTelemetry''s other variables say where')
            [CompletionResult]::new('--warn-after', '--warn-after', [CompletionResultType]::ParameterName, 'Report an attempt still running after DUR, once (a line, the slow event of --on-failure, a ping to URL/log); it keeps running')
            [CompletionResult]::new('--warn-every', '--warn-every', [CompletionResultType]::ParameterName, 'With --warn-after: report the attempt again every DUR while it runs (each a line, a slow event, a ping)')
            [CompletionResult]::new('--ping', '--ping', [CompletionResultType]::ParameterName, 'A monitor to ping (repeatable): a Healthchecks URL (URL/start at the claim, URL on success, URL/fail on an alert, URL/log otherwise), sentry:DSN (cron check-ins) or cronitor:URL (telemetry); a secret, never printed whole')
            [CompletionResult]::new('--after', '--after', [CompletionResultType]::ParameterName, 'Start only once the upstream key TEMPLATE has succeeded (expanded now, or at IDEM_SLOT under --catch-up); until then the run is blocked and claims nothing (repeatable; the variable takes a list, a,b)')
            [CompletionResult]::new('--after-wait', '--after-wait', [CompletionResultType]::ParameterName, 'When blocked by --after, wait up to DUR for the upstream keys to succeed, and start as soon as they have')
            [CompletionResult]::new('--blocked-exit-code', '--blocked-exit-code', [CompletionResultType]::ParameterName, 'Exit code when blocked by --after (nothing ran)')
            [CompletionResult]::new('--contain', '--contain', [CompletionResultType]::ParameterName, 'What holds the run''s processes together: auto (a cgroup of the attempt''s own where cgroup v2 is writable, else the guardian; never one that changes the command''s pids), or the one named')
            [CompletionResult]::new('--nice', '--nice', [CompletionResultType]::ParameterName, 'Run the command at nice value N, -20 (first) to 19 (last), as nice(1) does; below idem''s own takes root')
            [CompletionResult]::new('--ionice', '--ionice', [CompletionResultType]::ParameterName, 'Run the command in I/O scheduling class CLASS (idle, best-effort or realtime, this one root''s) at LEVEL 0 (first) to 7 (last), as ionice(1) does')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('--shell', '--shell', [CompletionResultType]::ParameterName, 'Run the words after -- as one /bin/sh -c script')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Run even though the key succeeded (or its command changed)')
            [CompletionResult]::new('--replace', '--replace', [CompletionResultType]::ParameterName, 'If the key is running elsewhere, stop that run (as `idem stop` does), wait until none of it lives, then run this one')
            [CompletionResult]::new('--quiet-success', '--quiet-success', [CompletionResultType]::ParameterName, 'Hold the command''s output and print it only if the run fails')
            [CompletionResult]::new('--replay', '--replay', [CompletionResultType]::ParameterName, 'When skipping, print the recorded output of the successful run')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;backfill' {
            [CompletionResult]::new('--from', '--from', [CompletionResultType]::ParameterName, 'The first period: the one holding this time (a duration ago like 3d, a date, a date and time, RFC 3339)')
            [CompletionResult]::new('--to', '--to', [CompletionResultType]::ParameterName, 'The last period: the one holding this time [default: now]')
            [CompletionResult]::new('--job', '--job', [CompletionResultType]::ParameterName, 'The job this run belongs to, for `idem status` and metrics [default: the key as typed, before expansion]')
            [CompletionResult]::new('--retries', '--retries', [CompletionResultType]::ParameterName, 'Further attempts after a failed one; 0 = one attempt')
            [CompletionResult]::new('--backoff', '--backoff', [CompletionResultType]::ParameterName, 'Base delay before a retry; attempt n waits a random time in [d/2, d] with d = min(max-backoff, backoff * 2^(n-1))')
            [CompletionResult]::new('--max-backoff', '--max-backoff', [CompletionResultType]::ParameterName, 'Cap on one delay between attempts')
            [CompletionResult]::new('--retry-on', '--retry-on', [CompletionResultType]::ParameterName, 'Retry only these exit codes, e.g. 1,3,10-20')
            [CompletionResult]::new('--no-retry-on', '--no-retry-on', [CompletionResultType]::ParameterName, 'Never retry these exit codes')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Per attempt: SIGTERM the command''s process group after DUR, SIGKILL after --kill-after more; counts as exit 124 and is retried')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'Grace between SIGTERM and SIGKILL on timeout')
            [CompletionResult]::new('--timeout-signal', '--timeout-signal', [CompletionResultType]::ParameterName, 'The signal --timeout sends first (a name like TERM, INT, HUP, or a number)')
            [CompletionResult]::new('--splay', '--splay', [CompletionResultType]::ParameterName, 'Wait a random time in [0, DUR] before claiming (spreads a fleet''s load)')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'A success counts for DUR; after that the key runs again [default: forever]')
            [CompletionResult]::new('--catch-up', '--catch-up', [CompletionResultType]::ParameterName, 'First run, oldest first, the earlier periods of the key''s template within the last N whose key never succeeded, back to the job''s first run (each its own key, IDEM_SLOT set; one still running is passed by until the next call)')
            [CompletionResult]::new('--misfire', '--misfire', [CompletionResultType]::ParameterName, 'With --catch-up: run every period due (all), or only the newest and record the older ones skipped by policy (latest)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'If the key is running elsewhere, wait up to DUR and adopt its outcome')
            [CompletionResult]::new('--lock', '--lock', [CompletionResultType]::ParameterName, 'A named lock held while the command runs: runs of different keys sharing it never overlap; NAME:N gives it N slots, so at most N run at once (repeatable; the variable takes a list, a,b:2)')
            [CompletionResult]::new('--overlap', '--overlap', [CompletionResultType]::ParameterName, 'When a run of the same job (any key) is running: allow both, skip (a conflict), queue behind it (at most one waits per job), or replace it (stop it, as --replace does)')
            [CompletionResult]::new('--on-abandoned', '--on-abandoned', [CompletionResultType]::ParameterName, 'What to do when the last run died without an outcome')
            [CompletionResult]::new('--skipped-exit-code', '--skipped-exit-code', [CompletionResultType]::ParameterName, 'Exit code when skipped because the key succeeded')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the key is running elsewhere')
            [CompletionResult]::new('--paused-exit-code', '--paused-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the job is paused (`idem pause`); nothing ran')
            [CompletionResult]::new('--pause-after', '--pause-after', [CompletionResultType]::ParameterName, 'Pause the job by itself at its Nth failure in a row (or a later one), an alert with IDEM_EVENT=paused; `idem resume JOB` ends it')
            [CompletionResult]::new('--capture', '--capture', [CompletionResultType]::ParameterName, 'Bytes of the output tail kept per attempt and stream (0 = none, at most 1MiB); --capture 0 keeps secrets a command prints out of the ledger')
            [CompletionResult]::new('--progress', '--progress', [CompletionResultType]::ParameterName, 'Spinner for waits (backoff, --wait): auto (when stderr is a terminal) or never; a bad IDEM_PROGRESS is a warning, not an error')
            [CompletionResult]::new('--lease', '--lease', [CompletionResultType]::ParameterName, 'Shared ledger: how long a claim lives without a heartbeat (at least 1s)')
            [CompletionResult]::new('--on-failure', '--on-failure', [CompletionResultType]::ParameterName, 'Run `sh -c CMD` after a failed run is recorded, when it is an alert (see --alert-after), and with IDEM_EVENT=slow for --warn-after')
            [CompletionResult]::new('--on-recovery', '--on-recovery', [CompletionResultType]::ParameterName, 'Run `sh -c CMD` after the first success that follows an alerted failure')
            [CompletionResult]::new('--alert-after', '--alert-after', [CompletionResultType]::ParameterName, 'A failure is an alert only when it is the job''s Nth in a row or later; below that it is recorded but quiet (output held as with --quiet-success)')
            [CompletionResult]::new('--trace', '--trace', [CompletionResultType]::ParameterName, 'Send a trace of the run over OTLP/HTTP to URL, the collector''s traces endpoint (/v1/traces included); without it, OTEL_EXPORTER_OTLP_ENDPOINT and OpenTelemetry''s other variables say where')
            [CompletionResult]::new('--warn-after', '--warn-after', [CompletionResultType]::ParameterName, 'Report an attempt still running after DUR, once (a line, the slow event of --on-failure, a ping to URL/log); it keeps running')
            [CompletionResult]::new('--warn-every', '--warn-every', [CompletionResultType]::ParameterName, 'With --warn-after: report the attempt again every DUR while it runs (each a line, a slow event, a ping)')
            [CompletionResult]::new('--ping', '--ping', [CompletionResultType]::ParameterName, 'A monitor to ping (repeatable): a Healthchecks URL (URL/start at the claim, URL on success, URL/fail on an alert, URL/log otherwise), sentry:DSN (cron check-ins) or cronitor:URL (telemetry); a secret, never printed whole')
            [CompletionResult]::new('--after', '--after', [CompletionResultType]::ParameterName, 'Start only once the upstream key TEMPLATE has succeeded (expanded now, or at IDEM_SLOT under --catch-up); until then the run is blocked and claims nothing (repeatable; the variable takes a list, a,b)')
            [CompletionResult]::new('--after-wait', '--after-wait', [CompletionResultType]::ParameterName, 'When blocked by --after, wait up to DUR for the upstream keys to succeed, and start as soon as they have')
            [CompletionResult]::new('--blocked-exit-code', '--blocked-exit-code', [CompletionResultType]::ParameterName, 'Exit code when blocked by --after (nothing ran)')
            [CompletionResult]::new('--contain', '--contain', [CompletionResultType]::ParameterName, 'What holds the run''s processes together: auto (a cgroup of the attempt''s own where cgroup v2 is writable, else the guardian; never one that changes the command''s pids), or the one named')
            [CompletionResult]::new('--nice', '--nice', [CompletionResultType]::ParameterName, 'Run the command at nice value N, -20 (first) to 19 (last), as nice(1) does; below idem''s own takes root')
            [CompletionResult]::new('--ionice', '--ionice', [CompletionResultType]::ParameterName, 'Run the command in I/O scheduling class CLASS (idle, best-effort or realtime, this one root''s) at LEVEL 0 (first) to 7 (last), as ionice(1) does')
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Idempotency key; may hold {date} {hour} {minute} {week} {month} {year} {host} (local time, TZ honoured), {minute/N} and {hour/N} (every N minutes or hours); {{ and }} for braces')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Idempotency key; may hold {date} {hour} {minute} {week} {month} {year} {host} (local time, TZ honoured), {minute/N} and {hour/N} (every N minutes or hours); {{ and }} for braces')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'List the periods that would run, and run nothing')
            [CompletionResult]::new('--all', '--all', [CompletionResultType]::ParameterName, 'Every period, its success too (as --force would)')
            [CompletionResult]::new('--shell', '--shell', [CompletionResultType]::ParameterName, 'Run the words after -- as one /bin/sh -c script')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Run even though the key succeeded (or its command changed)')
            [CompletionResult]::new('--replace', '--replace', [CompletionResultType]::ParameterName, 'If the key is running elsewhere, stop that run (as `idem stop` does), wait until none of it lives, then run this one')
            [CompletionResult]::new('--quiet-success', '--quiet-success', [CompletionResultType]::ParameterName, 'Hold the command''s output and print it only if the run fails')
            [CompletionResult]::new('--replay', '--replay', [CompletionResultType]::ParameterName, 'When skipping, print the recorded output of the successful run')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;ledger' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Runs, newest first')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'A key''s state, its runs and attempts, with captured output')
            [CompletionResult]::new('forget', 'forget', [CompletionResultType]::ParameterValue, 'Make keys run again next time; history stays unless --purge')
            [CompletionResult]::new('prune', 'prune', [CompletionResultType]::ParameterValue, 'Drop old history and output; never changes what `run` decides')
            [CompletionResult]::new('export', 'export', [CompletionResultType]::ParameterValue, 'Every run with its attempts, as JSON Lines')
            [CompletionResult]::new('import', 'import', [CompletionResultType]::ParameterValue, 'Read an export stream from stdin into this ledger (idempotent)')
            [CompletionResult]::new('mark', 'mark', [CompletionResultType]::ParameterValue, 'Record a success that did not run (by whom, why): the key is skipped and the runs that wait for it (--after) go on; refused (75) while the key runs')
            [CompletionResult]::new('path', 'path', [CompletionResultType]::ParameterValue, 'Print the resolved ledger location')
            [CompletionResult]::new('metrics', 'metrics', [CompletionResultType]::ParameterValue, 'Per-job metrics in the Prometheus text format')
            [CompletionResult]::new('deliver', 'deliver', [CompletionResultType]::ParameterValue, 'Deliver the pings and hooks still owed (run it from a timer)')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'idem;ledger;list' {
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Only keys matching this glob (* ? [..])')
            [CompletionResult]::new('--job', '--job', [CompletionResultType]::ParameterName, 'Only runs of jobs matching this glob (* ? [..])')
            [CompletionResult]::new('--status', '--status', [CompletionResultType]::ParameterName, 'Only runs with this status (repeatable)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only runs started within DUR, or since a time: 2026-12-01, "2026-12-01 08:15", or RFC 3339 (local time unless it says)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only runs started before DUR ago, or up to a time (as --since)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most N runs')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print a JSON array')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;ledger;show' {
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'The latest N runs (their output is read one attempt at a time)')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;ledger;forget' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('--purge', '--purge', [CompletionResultType]::ParameterName, 'Remove the keys'' history too')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Say what would change, change nothing')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Also forget a running key whose owner idem cannot judge (its lock file moved or deleted while it ran, or a claim of an idem too old to lock); a live run is never forgotten')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;ledger;prune' {
            [CompletionResult]::new('--older-than', '--older-than', [CompletionResultType]::ParameterName, 'Drop runs that finished longer ago than DUR')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Say what would be dropped, change nothing')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;ledger;export' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;ledger;import' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;ledger;mark' {
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why, for the people who read `ledger show` later')
            [CompletionResult]::new('--job', '--job', [CompletionResultType]::ParameterName, 'The job it belongs to [default: its latest run''s, else the key as typed]')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('--succeeded', '--succeeded', [CompletionResultType]::ParameterName, 'Mark it succeeded (the one mark there is)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;ledger;path' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;ledger;metrics' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('--per-key', '--per-key', [CompletionResultType]::ParameterName, 'Also the per-key families (idem_key_*), a series set per key')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;ledger;deliver' {
            [CompletionResult]::new('--for', '--for', [CompletionResultType]::ParameterName, 'Stop taking events after DUR (an event under way finishes)')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print the counts as JSON')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;ledger;help' {
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Runs, newest first')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'A key''s state, its runs and attempts, with captured output')
            [CompletionResult]::new('forget', 'forget', [CompletionResultType]::ParameterValue, 'Make keys run again next time; history stays unless --purge')
            [CompletionResult]::new('prune', 'prune', [CompletionResultType]::ParameterValue, 'Drop old history and output; never changes what `run` decides')
            [CompletionResult]::new('export', 'export', [CompletionResultType]::ParameterValue, 'Every run with its attempts, as JSON Lines')
            [CompletionResult]::new('import', 'import', [CompletionResultType]::ParameterValue, 'Read an export stream from stdin into this ledger (idempotent)')
            [CompletionResult]::new('mark', 'mark', [CompletionResultType]::ParameterValue, 'Record a success that did not run (by whom, why): the key is skipped and the runs that wait for it (--after) go on; refused (75) while the key runs')
            [CompletionResult]::new('path', 'path', [CompletionResultType]::ParameterValue, 'Print the resolved ledger location')
            [CompletionResult]::new('metrics', 'metrics', [CompletionResultType]::ParameterValue, 'Per-job metrics in the Prometheus text format')
            [CompletionResult]::new('deliver', 'deliver', [CompletionResultType]::ParameterValue, 'Deliver the pings and hooks still owed (run it from a timer)')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'idem;ledger;help;list' {
            break
        }
        'idem;ledger;help;show' {
            break
        }
        'idem;ledger;help;forget' {
            break
        }
        'idem;ledger;help;prune' {
            break
        }
        'idem;ledger;help;export' {
            break
        }
        'idem;ledger;help;import' {
            break
        }
        'idem;ledger;help;mark' {
            break
        }
        'idem;ledger;help;path' {
            break
        }
        'idem;ledger;help;metrics' {
            break
        }
        'idem;ledger;help;deliver' {
            break
        }
        'idem;ledger;help;help' {
            break
        }
        'idem;status' {
            [CompletionResult]::new('--job', '--job', [CompletionResultType]::ParameterName, 'Only jobs matching this glob (* ? [..])')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print a JSON array')
            [CompletionResult]::new('--wide', '--wide', [CompletionResultType]::ParameterName, 'Every column and the whole command, however wide the table')
            [CompletionResult]::new('--after', '--after', [CompletionResultType]::ParameterName, 'List each job''s upstreams (--after) and what a blocked job waits for')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;pause' {
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why, shown by `status` and by every run it holds back')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'End the pause by itself: after DUR, or at a time: 2026-12-01, "2026-12-01 08:15", or RFC 3339 (local time unless it says)')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;resume' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;stop' {
            [CompletionResult]::new('--signal', '--signal', [CompletionResultType]::ParameterName, 'The signal the run''s processes get first; SIGKILL follows after --kill-after')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'Grace between the signal and SIGKILL on this host''s ledger (a shared ledger''s owner uses its run''s --kill-after)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'How long to wait for the stopped runs to be recorded over')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;doctor' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;serve' {
            [CompletionResult]::new('--listen', '--listen', [CompletionResultType]::ParameterName, 'The address and port to listen on: 127.0.0.1:8417, [::1]:8417, localhost:8417; any address that is not loopback needs --auth-file or IDEM_SERVE_TOKEN')
            [CompletionResult]::new('--auth-file', '--auth-file', [CompletionResultType]::ParameterName, 'Ask every request for a user and password (HTTP basic authentication) from FILE: one `user:bcrypt-hash` a line, as `htpasswd -nbB user password` writes them')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;completions' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Ledger: a SQLite file path, or a postgres:// URL for a shared ledger [default: <data dir>/idem/ledger.db]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour in tables: auto (at a terminal, unless NO_COLOR is set or TERM is dumb), always or never')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'idem''s own lines: text, or json (one object a line: time, level, event, key, job, run_id, attempt, exit_code, cause, message); under systemd they go to the journal with fields either way')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print none of idem''s own lines (errors that stop idem still print)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Also print the lines idem keeps quiet under cron (skips)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'idem;help' {
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Run COMMAND under KEY unless KEY already succeeded')
            [CompletionResult]::new('backfill', 'backfill', [CompletionResultType]::ParameterValue, 'Run the periods of a job between two times that never succeeded')
            [CompletionResult]::new('ledger', 'ledger', [CompletionResultType]::ParameterValue, 'Inspect and maintain the ledger')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'One line per job: its state, last run and success, failures in a row')
            [CompletionResult]::new('pause', 'pause', [CompletionResultType]::ParameterValue, 'Pause a job: its runs start nothing until `idem resume` or --until')
            [CompletionResult]::new('resume', 'resume', [CompletionResultType]::ParameterValue, 'Resume a paused job: its next run runs')
            [CompletionResult]::new('stop', 'stop', [CompletionResultType]::ParameterValue, 'Stop the running runs of keys, wherever they run')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Check a ledger for problems without changing anything')
            [CompletionResult]::new('serve', 'serve', [CompletionResultType]::ParameterValue, 'Serve the ledger over HTTP: a status board, each job''s runs, metrics, and buttons that pause, resume and stop')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'idem;help;run' {
            break
        }
        'idem;help;backfill' {
            break
        }
        'idem;help;ledger' {
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Runs, newest first')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'A key''s state, its runs and attempts, with captured output')
            [CompletionResult]::new('forget', 'forget', [CompletionResultType]::ParameterValue, 'Make keys run again next time; history stays unless --purge')
            [CompletionResult]::new('prune', 'prune', [CompletionResultType]::ParameterValue, 'Drop old history and output; never changes what `run` decides')
            [CompletionResult]::new('export', 'export', [CompletionResultType]::ParameterValue, 'Every run with its attempts, as JSON Lines')
            [CompletionResult]::new('import', 'import', [CompletionResultType]::ParameterValue, 'Read an export stream from stdin into this ledger (idempotent)')
            [CompletionResult]::new('mark', 'mark', [CompletionResultType]::ParameterValue, 'Record a success that did not run (by whom, why): the key is skipped and the runs that wait for it (--after) go on; refused (75) while the key runs')
            [CompletionResult]::new('path', 'path', [CompletionResultType]::ParameterValue, 'Print the resolved ledger location')
            [CompletionResult]::new('metrics', 'metrics', [CompletionResultType]::ParameterValue, 'Per-job metrics in the Prometheus text format')
            [CompletionResult]::new('deliver', 'deliver', [CompletionResultType]::ParameterValue, 'Deliver the pings and hooks still owed (run it from a timer)')
            break
        }
        'idem;help;ledger;list' {
            break
        }
        'idem;help;ledger;show' {
            break
        }
        'idem;help;ledger;forget' {
            break
        }
        'idem;help;ledger;prune' {
            break
        }
        'idem;help;ledger;export' {
            break
        }
        'idem;help;ledger;import' {
            break
        }
        'idem;help;ledger;mark' {
            break
        }
        'idem;help;ledger;path' {
            break
        }
        'idem;help;ledger;metrics' {
            break
        }
        'idem;help;ledger;deliver' {
            break
        }
        'idem;help;status' {
            break
        }
        'idem;help;pause' {
            break
        }
        'idem;help;resume' {
            break
        }
        'idem;help;stop' {
            break
        }
        'idem;help;doctor' {
            break
        }
        'idem;help;serve' {
            break
        }
        'idem;help;completions' {
            break
        }
        'idem;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
