#!/usr/bin/env python3
"""Paired A/B of two pdserve binaries on `pdserve bench-model` (issue #21).

This machine's speed drifts by ±20 % within minutes, so two binaries timed minutes apart
say little. Here A and B run in turn (A B, B A, A B, ...: each goes first half the time),
and the figure is the median over pairs of B's tok/s ÷ A's in the same pair, per row of
bench-model's table (pp512, tg128, batched decode B=...). A ratio whose min is above 1 was
faster in every pair.

  bench/paired_bench_model.py OLD_PDSERVE NEW_PDSERVE PAIRS -- BENCH_MODEL_ARGS...
  e.g. bench/paired_bench_model.py /tmp/pdserve-old build/pdserve 8 -- \\
         -m /tmp/limits/tinyllama-1.1b-Q4_K_M.gguf -p 0 -n 128 --batch 0 -t 2
"""
import re
import statistics
import subprocess
import sys

ROW = re.compile(r'^\|\s*((?:pp|tg|batched)[^|]*?)\s*\|\s*\d+\s*\|\s*[\d.]+\s*\|\s*([\d.]+)', re.M)


def run(binary, args):
    out = subprocess.run([binary, 'bench-model'] + args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f'{binary} bench-model failed ({out.returncode}): {out.stderr.strip()[-400:]}')
    rows = {m.group(1): float(m.group(2)) for m in ROW.finditer(out.stdout)}
    if not rows:
        sys.exit(f'{binary} bench-model printed no tok/s row')
    return rows


def main():
    if len(sys.argv) < 5 or sys.argv[4] != '--':
        sys.exit(__doc__)
    a_bin, b_bin, pairs, args = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[5:]
    a_all, b_all, ratios = {}, {}, {}
    for i in range(pairs):
        if i % 2:
            b = run(b_bin, args)
            a = run(a_bin, args)
        else:
            a = run(a_bin, args)
            b = run(b_bin, args)
        for k in a.keys() & b.keys():
            a_all.setdefault(k, []).append(a[k])
            b_all.setdefault(k, []).append(b[k])
            ratios.setdefault(k, []).append(b[k] / a[k])
    print(f'# A = {a_bin}, B = {b_bin}, {pairs} pairs: bench-model {" ".join(args)}')
    print('| row | A tok/s (median) | B tok/s (median) | B/A per pair: median (min–max) |')
    print('|---|---|---|---|')
    for k in sorted(ratios):
        r = sorted(ratios[k])
        print(f'| {k} | {statistics.median(a_all[k]):.1f} | {statistics.median(b_all[k]):.1f} | '
              f'{statistics.median(r):.3f} ({r[0]:.2f}–{r[-1]:.2f}) |')


if __name__ == '__main__':
    main()
