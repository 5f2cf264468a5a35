#!/usr/bin/env python3
"""Repeated trials of "never twice": each situation that once ran a key
twice, hung or crashed (issue list of the ledger's moves, the processes'
escapes and the host's limits), run TRIALS times through its tests.

    benches/trials.py [--trials 10] [--only WORD]

Each test counts the command's executions with a counter file and its
overlaps with `flock -n`, and fails on a second execution, an overlap, a
panic, a hang or a key left `running`; a trial is one run of every test of
its situation. The table gives, per situation, the trials and how many
failed, with the first failure's words. Needs what `scripts/test` needs,
and root, as the tests themselves do.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SITUATIONS = [
    ("the lock file deleted or replaced mid-run",
     ["faults::moved::a_lock_file_deleted_or_replaced_under_a_live_run_keeps_its_key_busy",
      "faults::moved::a_named_lock_outlives_its_lock_file",
      "faults::moved::a_dead_run_whose_lock_file_was_deleted_waits_for_a_reboot_or_a_person"]),
    ("a lock file planted by another user",
     ["faults::moved::a_lock_file_of_another_user_or_open_to_others_is_refused"]),
    ("one ledger as two files (hard link, the file bind-mounted alone)",
     ["faults::moved::a_ledger_with_a_second_hard_link_is_refused",
      "faults::moved::a_ledger_file_mounted_alone_is_refused"]),
    ("a worker that closes its descriptors, idem and its guardian SIGKILLed",
     ["containment::a_worker_that_closed_its_descriptors_dies_with_idem_and_its_guardian",
      "containment::a_retry_never_overlaps_the_worker_its_first_attempt_left",
      "containment_scan::a_worker_that_closed_its_descriptors_keeps_its_key_without_a_pid_namespace",
      "containment_scan::stop_ends_a_worker_that_closed_its_descriptors_after_its_idem_was_killed"]),
    ("PostgreSQL: a child that outlives idem and its guardian",
     ["containment::on_postgresql_a_worker_that_closed_its_descriptors_dies_with_idem"]),
    ("limits: open files, processes, address space",
     ["guardian_steps::under_any_open_files_limit_a_step_that_fails_is_named_and_nothing_is_left_running",
      "guardian_steps::a_thread_the_system_refuses_ends_the_attempt_with_125",
      "limits::under_any_address_space_limit_idem_runs_the_command_once_or_none_of_it",
      "limits::under_any_process_limit_idem_runs_the_command_once_or_none_of_it"]),
    ("fences after export and import",
     ["faults::fences::sqlite::fences_go_on_growing_in_a_ledger_moved_by_export_and_import",
      "faults::fences::postgres::fences_go_on_growing_in_a_ledger_moved_by_export_and_import",
      "faults::fences::fences_go_on_growing_from_sqlite_to_postgres_and_back"]),
    ("a signal that arrives twice (timeout -s INT)",
     ["guardian_steps::a_signal_sent_twice_by_timeout_is_passed_on_once"]),
    ("a stopped guardian, a lock handed away, who holds a key",
     ["containment::the_timeout_holds_with_the_guardian_stopped",
      "containment_scan::a_lock_handed_to_a_process_outside_the_run_is_named_while_idem_waits",
      "control::holders::a_held_key_names_the_processes_that_hold_it"]),
    ("a symbolic link in a folder above the ledger",
     ["faults::moved::a_link_in_a_folder_above_the_ledger_is_followed"]),
]


def test_binary():
    """The integration tests' binary, built if it is not."""
    built = subprocess.run(["cargo", "test", "--locked", "--no-run", "--message-format=json", "--test", "main"],
                           cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for line in built.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message.get("executable") \
                and message["target"]["name"] == "main":
            return message["executable"]
    sys.exit("trials: no test binary was built")


def known(binary):
    listed = subprocess.run([binary, "--list"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return {line.rsplit(": ", 1)[0] for line in listed.splitlines() if line.endswith(": test")}


def trial(binary, tests):
    """One run of each test; the first failure's words, or None."""
    for test in tests:
        done = subprocess.run([binary, "--exact", test, "--test-threads", "1", "-q"], cwd=ROOT,
                              capture_output=True, text=True)
        if done.returncode != 0:
            lines = [line for line in done.stdout.splitlines() if "panicked" in line or "assertion" in line]
            return f"{test}: {' '.join(lines[:2])[:200]}"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--only", help="the situations whose words contain this")
    args = parser.parse_args()
    binary = test_binary()
    names = known(binary)
    rows = []
    for words, tests in SITUATIONS:
        if args.only and args.only not in words:
            continue
        missing = [test for test in tests if test not in names]
        if missing:
            sys.exit(f"trials: no test named {missing[0]}; update SITUATIONS")
        started = time.monotonic()
        failures = [failure for failure in (trial(binary, tests) for _ in range(args.trials)) if failure]
        seconds = time.monotonic() - started
        print(f"{words}: {args.trials - len(failures)} of {args.trials} trials held ({seconds:.0f} s)"
              + (f"; first failure: {failures[0]}" if failures else ""), flush=True)
        rows.append((words, len(tests), args.trials, len(failures), failures[0] if failures else ""))
    print("\n| situation | tests | trials | failed (a double run, an overlap, a panic, a hang) | first failure |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(map(str, row)) + " |")


if __name__ == "__main__":
    main()
