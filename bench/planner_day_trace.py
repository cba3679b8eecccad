#!/usr/bin/env python3
"""A day-shaped Mooncake trace (issue #15 (b)): the first N requests of a Mooncake trace
(lengths, hash ids and order unchanged) re-timed so that the arrival rate follows a day —
off-peak at the start and end, peak in the middle:

    rate(t) = c * (off + (1 - off) * (1 - cos(2*pi*t/D)) / 2),   0 <= t <= D,
    off = 1 / PEAK_RATIO, c chosen so that N requests arrive in D seconds.

Re-timing keeps the trace's own burstiness: the trace's arrival times t_i (mean rate
lam = N / t_N) are mapped through the cumulative intensity, new_t_i = L^-1(lam * t_i) with
L(t) = integral of rate over [0, t] (so a gap in the trace stays a gap, scaled by the local
rate). Writes a Mooncake JSONL (timestamps in ms) for `pdserve simulate --trace mooncake`.

  bench/planner_day_trace.py ../shared/traces/mooncake_conversation_trace.jsonl /tmp/day.jsonl \
      --requests 10000 --day 2400 --peak-ratio 4
"""
import argparse
import bisect
import json
import math


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--day", type=float, default=2400, help="seconds of the simulated day")
    ap.add_argument("--peak-ratio", type=float, default=4, help="peak rate / off-peak rate")
    a = ap.parse_args()
    rows = []
    with open(a.trace) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) == a.requests:
                break
    n = len(rows)
    t = [r["timestamp"] / 1000.0 for r in rows]
    span = t[-1] - t[0]
    off = 1.0 / a.peak_ratio
    # L(x) on a fine grid (closed form of the integral of the shape), scaled to N at D.
    shape_int = lambda x: off * x + (1 - off) * (x / 2 - a.day / (4 * math.pi) * math.sin(2 * math.pi * x / a.day))
    c = n / shape_int(a.day)
    grid = [a.day * k / 100000 for k in range(100001)]
    cum = [c * shape_int(x) for x in grid]
    with open(a.out, "w") as f:
        for r, ti in zip(rows, t):
            target = n * (ti - t[0]) / span if span > 0 else 0
            k = min(bisect.bisect_left(cum, target), len(grid) - 1)
            if k > 0 and cum[k] != cum[k - 1]:  # linear between grid points
                x = grid[k - 1] + (grid[k] - grid[k - 1]) * (target - cum[k - 1]) / (cum[k] - cum[k - 1])
            else:
                x = grid[k]
            r = dict(r)
            r["timestamp"] = int(round(x * 1000))
            f.write(json.dumps(r) + "\n")
    print("wrote %s: %d requests over %.0f s, rate %.2f (off-peak) .. %.2f (peak) req/s, mean %.2f" %
          (a.out, n, a.day, c * off, c, n / a.day))


if __name__ == "__main__":
    main()
