#!/usr/bin/env python3
"""What each path of idem costs in instructions and system calls, against
its budget: a skip, a first run, a retry and `status` on a big ledger.

    benches/budget.py                      # the binary `cargo install` makes
    benches/budget.py --idem PATH ...      # these binaries, side by side
    benches/budget.py --big-runs 20000     # a smaller ledger for `status`

Instructions are callgrind's (valgrind), which do not depend on the
machine's load: the same binary on the same ledger counts the same. A path
counts every process of idem's own once (idem and its guardian, and the
command's process until it execs; the command itself runs outside
valgrind; a forked child's share starts at its fork), split into the dynamic loader's start (`_dl_start`, or a static
binary's `_dl_relocate_static_pie`), SQLite reading the ledger's schema
(`sqlite3InitOne`), preparing statements (`sqlite3_prepare_v2/v3` less the
schema read they trigger) and the rest. System calls are `strace -f -c`'s,
of every process including the command. Needs valgrind and strace (Debian:
valgrind, strace); bench.py prints the same table beside its times.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What `cargo install --locked --path .` installs: the README's first
# command, so the binary most people run.
INSTALLED = ROOT / "target" / "release" / "idem"

# (path, budget in instructions or None): the goals.
BUDGETS = {"skip": 900_000, "first run": 2_000_000, "retry": None, "status": None}

# Functions whose inclusive cost is a part of the budget, by part.
LOADER = ["_dl_start", "_dl_relocate_static_pie"]
SCHEMA = ["sqlite3InitOne"]
PREPARE = ["sqlite3_prepare_v2", "sqlite3_prepare_v3"]


def inclusive(out_file):
    """Total instructions and the inclusive cost of each function of a
    callgrind output file, by function name."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out_file)],
                          capture_output=True, text=True, check=True).stdout
    total = 0
    costs = {}
    for line in text.splitlines():
        found = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?)\s*(?:\[.*\])?$", line)
        if not found:
            continue
        count = int(found.group(1).replace(",", ""))
        what = found.group(2)
        if what.startswith("PROGRAM TOTALS"):
            total = count
            continue
        name = what.rsplit(":", 1)[-1].strip()
        costs[name] = max(costs.get(name, 0), count)
    return total, costs


def callgrind(args, env, cwd):
    """Every idem process of `args` under callgrind: the summed total and
    parts."""
    out = Path(tempfile.mkdtemp(prefix="callgrind-", dir=cwd))
    # A forked child's profile starts with its parent's counts so far:
    # dumping them before each way idem forks (glibc's fork, clone, or a
    # raw clone through syscall) leaves each child only its own.
    forks = [f"--dump-before={name}" for name in ["fork", "_Fork", "clone", "syscall"]]
    subprocess.run(["valgrind", "--tool=callgrind", "--quiet", *forks, f"--callgrind-out-file={out}/cg.%p", *args],
                   env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    parts = {"total": 0, "loader": 0, "schema": 0, "statements": 0}
    for file in sorted(out.glob("cg.*")):
        total, costs = inclusive(file)
        loader = sum(costs.get(name, 0) for name in LOADER)
        schema = sum(costs.get(name, 0) for name in SCHEMA)
        prepare = sum(costs.get(name, 0) for name in PREPARE)
        parts["total"] += total
        parts["loader"] += loader
        parts["schema"] += schema
        parts["statements"] += max(prepare - schema, 0)
    shutil.rmtree(out)
    if parts["total"] == 0:
        sys.exit(f"budget: callgrind counted nothing for {' '.join(args)}")
    parts["rest"] = parts["total"] - parts["loader"] - parts["schema"] - parts["statements"]
    return parts


def syscalls(args, env, cwd):
    """System calls of every process of `args`, as strace -f -c counts them."""
    out = Path(cwd) / "strace.txt"
    subprocess.run(["strace", "-f", "-c", "-o", str(out), *args], env=env, cwd=cwd,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    for line in out.read_text().splitlines():
        fields = line.split()
        if fields and fields[-1] == "total":
            # "100.00 seconds usecs/call calls errors total": calls is the
            # fourth field whether or not errors were counted.
            return int(fields[3])
    sys.exit(f"budget: strace counted nothing for {' '.join(args)}")


def env_for(work, db):
    env = {key: value for key, value in os.environ.items() if not key.startswith("IDEM_")}
    env.update(IDEM_DB=str(db), HOME=str(work), XDG_DATA_HOME=str(work / "data"), TZ="UTC")
    return env


def big_ledger(idem, work, runs, jobs):
    """A ledger of `runs` runs of `jobs` daily jobs, made by `ledger import`."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from big import write_export
    db = work / "big" / "ledger.db"
    db.parent.mkdir()
    export = work / "export.jsonl"
    write_export(export, runs, jobs)
    subprocess.run([idem, "ledger", "import", "--quiet", str(export)], env=env_for(work, db), check=True)
    export.unlink()
    return db


def measure(idem, work, big):
    """The paths of one binary: {path: (parts, syscalls)}."""
    db = work / "small" / "ledger.db"
    db.parent.mkdir(exist_ok=True)
    env = env_for(work, db)
    idem = str(idem)
    subprocess.run([idem, "run", "--key", "done", "--", "true"], env=env, check=True)
    paths = {}
    counter = iter(range(1_000_000))
    paths["skip"] = lambda: [idem, "run", "--key", "done", "--", "true"]
    paths["first run"] = lambda: [idem, "run", "--key", f"new-{next(counter)}", "--", "true"]
    paths["retry"] = lambda: [idem, "run", "--key", f"retry-{next(counter)}", "--retries", "1", "--backoff", "0s",
                              "--", "false"]
    results = {}
    for name, args in paths.items():
        results[name] = (callgrind(args(), env, work), syscalls(args(), env, work))
    big_env = env_for(work, big)
    results["status"] = (callgrind([idem, "status"], big_env, work), syscalls([idem, "status"], big_env, work))
    return results


def millions(count):
    return f"{count / 1e6:.2f}M"


def rows(results, big_runs):
    """Markdown rows of one binary's paths."""
    lines = []
    for name, (parts, calls) in results.items():
        budget = BUDGETS[name]
        what = f"status, {big_runs:,} runs" if name == "status" else name
        verdict = "—" if budget is None else ("met" if parts["total"] <= budget else "NOT MET")
        shown = "—" if budget is None else f"<= {millions(budget)}"
        lines.append(f"| {what} | {millions(parts['total'])} | {millions(parts['loader'])} | "
                     f"{millions(parts['schema'])} | {millions(parts['statements'])} | {millions(parts['rest'])} | "
                     f"{calls} | {shown} | {verdict} |")
    return lines


HEADER = ["| path | instructions | loader | schema | statements | rest | system calls | budget | |",
          "|---|---|---|---|---|---|---|---|---|"]


def table(binaries, big_runs, jobs):
    """The budget table of each binary, as Markdown lines."""
    for tool, package in [("valgrind", "valgrind"), ("callgrind_annotate", "valgrind"), ("strace", "strace")]:
        if not shutil.which(tool):
            sys.exit(f"budget: {tool} is missing; install it (Debian: apt-get install {package})")
    lines = []
    with tempfile.TemporaryDirectory(prefix="idem-budget-") as tmp:
        work = Path(tmp)
        big = big_ledger(str(binaries[0]), work, big_runs, jobs)
        for idem in binaries:
            one = work / f"binary-{len(lines)}"
            one.mkdir()
            lines += [f"`{idem}`", "", *HEADER, *rows(measure(idem, one, big), big_runs), ""]
    return lines


def installed_build():
    """The binary `cargo install --locked --path .` makes (a dynamic,
    position-independent executable), built where that command builds it."""
    subprocess.run(["cargo", "build", "--release", "--locked", "--quiet"], cwd=ROOT, check=True,
                   env=dict(os.environ, CARGO_TARGET_DIR=str(ROOT / "target")))
    return INSTALLED


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idem", action="append", type=Path,
                        help=f"a binary to measure (repeatable) [{INSTALLED.relative_to(ROOT)}]")
    parser.add_argument("--big-runs", type=int, default=1_000_000, help="runs of the ledger `status` reads")
    parser.add_argument("--jobs", type=int, default=1000, help="daily jobs of that ledger")
    args = parser.parse_args()
    binaries = [binary.resolve() for binary in args.idem or [INSTALLED]]
    for binary in binaries:
        if not binary.is_file():
            sys.exit(f"budget: no binary at {binary}; build it (cargo build --release --locked) or give --idem")
    print("\n".join(table(binaries, args.big_runs, args.jobs)))


if __name__ == "__main__":
    main()
