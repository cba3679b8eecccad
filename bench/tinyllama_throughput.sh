#!/usr/bin/env bash
# Reproduces the "Raw model throughput" table of bench/RESULTS.md (issue #6): random-weight
# TinyLlama-1.1B-shape models in Q8_0, Q4_0 and Q4_K_M (made by `pdserve synth`, no
# download), the machine's read bandwidth, then pp512 / tg128 / batched decode at 1 and 2
# threads with `pdserve bench-model`. Run it on an idle machine: the figures move with load.
#
#   bench/tinyllama_throughput.sh [BUILD_DIR] [OUT_DIR]
#     BUILD_DIR  a Release build with pdserve and bench/kernels_bench (default: build)
#     OUT_DIR    where the models and logs go (default: /tmp/pdserve-tinyllama)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-/tmp/pdserve-tinyllama}
mkdir -p "$out"
echo "# $(date -u +%F) $(uname -m), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in Q8_0 Q4_0 Q4_K_M; do
  f="$out/tinyllama-$t.gguf"
  [ -s "$f" ] || "$build/pdserve" synth --shape tinyllama-1.1b --type "$t" \
      --vocab-from ../shared/models/synth-llama-small-f16.gguf -o "$f" >/dev/null
done
echo "## read bandwidth"
"$build/bench/kernels_bench" --benchmark_filter=StreamRead 2>/dev/null | grep -E "StreamRead|bytes_per_second" || true
for threads in 1 2; do
  for t in Q8_0 Q4_0 Q4_K_M; do
    echo "## $t, $threads thread(s), load $(cut -d' ' -f1 /proc/loadavg)"
    "$build/pdserve" bench-model --model "$out/tinyllama-$t.gguf" -p 512 -n 128 --threads "$threads" --batch 1,8,32
  done
done
