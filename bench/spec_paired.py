#!/usr/bin/env python3
"""Per-repeat ratios of bench/spec_bench's log (its stderr; LOG= of bench/spec_bench.sh).

Each log line pairs one proposer run with the plain-decoding run of the same repeat, so
the ratio of the two is less exposed to slow drifts in the machine's load than the ratio
of the medians in the table. Prints, per (batch, proposer), the median and range of
  tok/s ratio   proposer tok/s / off tok/s
  CPU ratio     off CPU us per token / proposer's (> 1: the proposer needs less CPU;
                only in logs of spec_bench with the CPU field)

  bench/spec_paired.py LOG
"""
import re
import statistics
import sys
from collections import defaultdict

LINE = re.compile(r"# batch (\d+) rep \d+: off ([\d.]+), (\S+) ([\d.]+) tok/s"
                  r"(?: \(e2e [\d.]+ / [\d.]+; CPU us/token ([\d.]+) / ([\d.]+)\))?")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    tps, cpu = defaultdict(list), defaultdict(list)
    with open(sys.argv[1]) as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            name = m[3] if not m[3].startswith("draft:") else "draft " + m[3].split("/")[-1]
            key = (int(m[1]), name)
            tps[key].append(float(m[4]) / float(m[2]))
            if m[5] and float(m[6]) > 0:
                cpu[key].append(float(m[5]) / float(m[6]))
    for key in sorted(tps):
        xs = tps[key]
        line = f"batch {key[0]:3d} {key[1]:24s} tok/s ratio {statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"
        if cpu[key]:
            c = cpu[key]
            line += f"  CPU ratio {statistics.median(c):.2f} ({min(c):.2f}-{max(c):.2f})"
        print(f"{line}  n={len(xs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
