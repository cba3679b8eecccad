#!/usr/bin/env bash
# Issue #19's benchmark: tg128 / pp512 / batched decode (B=32) of pdserve vs the reference
# engine (llama.cpp through ../shared/tools/peer.sh, interleaved per file) on random-weight
# files of the shapes people run, quantised as Q8_0 and Q4_K_M.
#
#   bench/arch_bench.sh BUILD OUTDIR [PHASE ...]
#     PHASE  models | tput | table   (default: all three)
#   Per shape it runs bench/machine_limits.sh's `models` and `tput` phases (same commands,
#   same logs) in OUTDIR/SHAPE, then prints one table (also OUTDIR/table.md).
# Environment: TYPES (default "Q8_0 Q4_K_M"), SHAPES (default "llama-3.2-1b qwen3-0.6b
#   qwen3-30b-a3b"), MOE_SYNTH_ARGS (the scaled-down MoE: default "--layers 12": Qwen3-30B-A3B's
#   width, 8 experts of 768 rows, 2 per token, 12 of its 48 layers).
# Measure on a quiet machine, or each run under the bench lock (flock /work/bench.lock ...).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: bench/arch_bench.sh BUILD OUTDIR [PHASE ...]}
out=${2:?usage: bench/arch_bench.sh BUILD OUTDIR [PHASE ...]}
shift 2
phases=${*:-models tput table}
export TYPES=${TYPES:-Q8_0 Q4_K_M}
shapes=${SHAPES:-llama-3.2-1b qwen3-0.6b qwen3-30b-a3b}
moe_args=${MOE_SYNTH_ARGS:---layers 12}
synth_args_of() { case "$1" in qwen3-30b-a3b|mixtral-8x7b) echo "$moe_args" ;; *) echo "" ;; esac; }

for ph in $phases; do
  case "$ph" in
    models|tput)
      for s in $shapes; do
        echo "## $s: $ph"
        SHAPE=$s SYNTH_ARGS="$(synth_args_of "$s")" bench/machine_limits.sh "$build" "$out/$s" "$ph"
      done ;;
    table)
      python3 - "$out" "$TYPES" "$shapes" "$moe_args" <<'PY' | tee "$out/table.md"
import os, re, sys
out, types, shapes, moe_args = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
def read(s, name):
    p = os.path.join(out, s, "logs", name)
    return open(p).read() if os.path.exists(p) else ""
def pds_rows(log):  # pdserve bench-model: | test | tokens | seconds | tok/s |
    return {m.group(1): float(m.group(4))
            for m in re.finditer(r"^\| (\S+)[^|]*\|\s*(\d+) \|\s*([\d.]+) \|\s*([\d.]+) \|", log, re.M)}
def ref_bench(log, test):  # llama-bench -o md: last column "t/s" = "mean ± sd"
    for line in log.splitlines():
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) > 2 and c[-2] == test: return float(c[-1].split("±")[0])
    return None
def ref_batched(log):  # llama-batched-bench: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s |
    for line in log.splitlines():
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) >= 8 and c[:3] == ["8", "16", "32"]: return float(c[7])
    return None
def info(log):
    m = re.search(r"\((\d+) bytes\)", log)
    return int(m.group(1)) / 1e6 if m else None
def f(x, spec="%.1f"): return "—" if x is None else spec % x
def cell(p, r): return "%s / %s (%s)" % (f(p), f(r), f(p / r if p and r else None, "%.2f×"))
loads = re.findall(r"load average ([\d.]+)", "".join(read(s, n) for s in shapes for n in os.listdir(os.path.join(out, s, "logs"))
                                                     if os.path.isdir(os.path.join(out, s, "logs"))))
print("pdserve / llama.cpp tok/s (ratio). tg128 at 1 and 2 threads, pp512 at 2 threads, batched decode of 32 "
      "sequences (8-token prompts, 16 steps) at 2 threads. Load average at the runs' starts: %s." % (", ".join(loads) or "—"))
print()
print("| shape | type | weights MB | tg128 1 thr | tg128 2 thr | pp512 2 thr | batched B=32 2 thr |")
print("|---|---|---:|---|---|---|---|")
for s in shapes:
    name = s + (" (%s)" % moe_args if s in ("qwen3-30b-a3b", "mixtral-8x7b") and moe_args else "")
    for t in types:
        p1, p2 = pds_rows(read(s, "pds-%s-t1.log" % t)), pds_rows(read(s, "pds-%s-t2.log" % t))
        r1, r2, rb = read(s, "ref-%s-t1.log" % t), read(s, "ref-%s-t2.log" % t), read(s, "ref-%s-batched.log" % t)
        print("| %s | %s | %s | %s | %s | %s | %s |" % (
            name, t, f(info(read(s, "pds-%s-t2.log" % t)), "%.0f"), cell(p1.get("tg128"), ref_bench(r1, "tg128")),
            cell(p2.get("tg128"), ref_bench(r2, "tg128")), cell(p2.get("pp512"), ref_bench(r2, "pp512")),
            cell(p2.get("batched"), ref_batched(rb))))
PY
      ;;
    *) echo "error: unknown phase '$ph' (models | tput | table)" >&2; exit 2 ;;
  esac
done
