#!/usr/bin/env python3
"""Per-request FUSE latency from the kernel's tracepoints, per opcode.

Usage (root):
    perf record -e fuse:fuse_request_send -e fuse:fuse_request_end -a -o fuse.data -- CMD
    perf script -i fuse.data | scripts/fuse_latency.py

Pairs each request's send and end events by (connection, request id) and prints, per
opcode, the count, the total time callers waited and the mean.
"""
import collections
import re
import sys

EVENT = re.compile(
    r"\s(\d+\.\d+):\s+fuse:fuse_request_(send|end): connection (\d+) req (\d+)"
    r"(?: opcode \d+ \((\w+)\))?"
)


def main() -> None:
    sent = {}
    stats = collections.defaultdict(lambda: [0, 0.0])
    for line in sys.stdin:
        m = EVENT.search(line)
        if not m:
            continue
        t, kind, conn, req, op = float(m[1]), m[2], m[3], m[4], m[5]
        if kind == "send":
            sent[(conn, req)] = (t, op)
        elif (conn, req) in sent:
            t0, op = sent.pop((conn, req))
            stats[op][0] += 1
            stats[op][1] += t - t0
    for op, (n, total) in sorted(stats.items(), key=lambda kv: -kv[1][1]):
        print(f"{op:20s} {n:8d} {total:9.3f} s {total / n * 1e6:9.1f} us")
    count = sum(n for n, _ in stats.values())
    total = sum(t for _, t in stats.values())
    print(f"{'all':20s} {count:8d} {total:9.3f} s")


if __name__ == "__main__":
    main()
