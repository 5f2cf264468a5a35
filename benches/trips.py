#!/usr/bin/env python3
"""Round trips of a skip and of a first run on PostgreSQL, counted.

Starts a throwaway server and bench.py's proxy in front of it (1 ms each
way), runs `idem run` through it and prints, for each, the median round
trips over 5 runs (a round trip: a burst from the client answered by one
from the server). `--show` also prints what each of the client's bursts
carried (the protocol's message types, and the start of each statement),
to tell which statement costs which trip.

    benches/trips.py [--idem PATH] [--show]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

GOALS = {"skip": 3, "first run": 6}


def messages(burst):
    """The frontend messages of one burst: type letter and, for a query or
    a parse, the statement's first words."""
    if burst[:1] == b"\0":
        return ["startup or SSL request"]
    said, at = [], 0
    while at + 5 <= len(burst):
        kind = chr(burst[at])
        length = int.from_bytes(burst[at + 1:at + 5], "big")
        body = burst[at + 5:at + 1 + length]
        if kind == "Q":
            said.append("Q " + " ".join(body.split(b"\0")[0].decode(errors="replace").split())[:60])
        elif kind == "P":
            text = body.split(b"\0")[1].decode(errors="replace")
            said.append("P " + " ".join(text.split())[:60])
        else:
            said.append(kind)
        at += 1 + length
    return said


class Recv:
    """A socket whose recv is watched (sockets' own methods are read-only)."""

    def __init__(self, sock, seen):
        self.sock, self.seen = sock, seen

    def recv(self, size):
        data = self.sock.recv(size)
        self.seen(data)
        return data


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--idem", default=str(bench.ROOT / "target" / "debug" / "idem"))
    parser.add_argument("--show", action="store_true")
    args = parser.parse_args()
    bin = bench.pg_binaries()
    if bin is None:
        sys.exit("trips: no PostgreSQL server binaries (initdb, pg_ctl); install the postgresql package")
    server = bench.Postgres(bin)
    work = Path(tempfile.mkdtemp(prefix="idem-trips-"))
    try:
        proxy = bench.Proxy(server.socket, 0.001)
        bursts = []
        plain_read = proxy.read

        def read(source, chunks, side, link):
            if side == "client":
                source = Recv(source, lambda data: data and bursts.append(data))
            plain_read(source, chunks, side, link)

        proxy.read = read
        env = bench.idem_env(work, f"postgresql://postgres@127.0.0.1:{proxy.port}/idem")
        skip = [args.idem, "run", "--key", "trips-skip", "--", "true"]
        first = [args.idem, "run", "--key", "trips-first", "--force", "--", "true"]
        bench.sh(*skip, env=env, stdout=subprocess.DEVNULL)
        bench.sh(*first, env=env, stdout=subprocess.DEVNULL)
        for what, command in [("skip", skip), ("first run", first)]:
            trips = []
            for turn in range(5):
                proxy.counts()
                bursts.clear()
                bench.sh(*command, env=env, stdout=subprocess.DEVNULL)
                trips.append(proxy.counts()[0])
                if args.show and turn == 0:
                    print(f"{what}:")
                    for number, burst in enumerate(bursts, 1):
                        print(f"  {number}: {', '.join(messages(burst)) or f'{len(burst)} bytes'}")
            median = statistics.median_low(trips)
            spread = "" if min(trips) == max(trips) else f" ({min(trips)}-{max(trips)})"
            goal = GOALS[what]
            print(f"{what}: {median}{spread} round trips (goal <= {goal}: {'yes' if median <= goal else 'NO'})",
                  flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
