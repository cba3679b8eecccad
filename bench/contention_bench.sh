#!/usr/bin/env bash
# Decode and prefill speed on a busy machine: `pdserve bench-model` at 1 and 2 threads, with
# no other load and then with HOGS busy-loop processes beside it (other tenants' jobs, a
# build). With a join that waits for every thread (OpenMP's), a worker the OS has not
# scheduled holds every parallel loop for a time slice, so 2 threads fall far below 1; a join
# that waits only for claimed work should never fall much below the 1-thread rate.
#
#   bench/contention_bench.sh MODEL LABEL=PDSERVE [LABEL=PDSERVE ...]
#     MODEL    a GGUF (e.g. the TinyLlama-shape synth: pdserve synth --shape tinyllama-1.1b)
#     LABEL=   a name and a pdserve binary (several: compared in the same run, interleaved)
# Environment: HOGS (busy loops beside the run; default 4), REPEATS (default 3; medians),
#   TG (decode tokens; default 32), PP (prompt tokens; default 256).
# Prints one line per (load, binary, threads): tg and pp tok/s, medians of REPEATS (and the
# single tg runs). Use a model whose runs take a second or more (a 1B shape: a tiny model's
# 20 ms runs swing with every time slice) and REPEATS >= 3.
set -euo pipefail
usage="usage: bench/contention_bench.sh MODEL LABEL=PDSERVE [LABEL=PDSERVE ...]"
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
model=$1
shift
[ -s "$model" ] || { echo "error: no model file $model" >&2; exit 2; }
for spec in "$@"; do
  [[ $spec == *=* && -x ${spec#*=} ]] || { echo "error: '$spec' is not LABEL=PATH-TO-PDSERVE" >&2; echo "$usage" >&2; exit 2; }
done
hogs=${HOGS:-4}
repeats=${REPEATS:-3}
tg=${TG:-32}
pp=${PP:-256}
pids=()
stop_hogs() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_hogs EXIT

median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# One bench-model run: prints "tg_tok_s pp_tok_s".
run_one() {
  local bin=$1 threads=$2 out
  if ! out=$("$bin" bench-model -m "$model" -p "$pp" -n "$tg" -t "$threads" --batch 0 2>&1); then
    echo "error: $bin bench-model failed:" >&2
    echo "$out" >&2
    return 1
  fi
  echo "$(echo "$out" | awk -v t="tg$tg" '$2 == t {print $(NF-1)}') $(echo "$out" | awk -v t="pp$pp" '$2 == t {print $(NF-1)}')"
}

echo "# $(date -u '+%F %T UTC') $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); model $model"
echo "# tg$tg / pp$pp tok/s, median of $repeats; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for load in 0 "$hogs"; do
  stop_hogs
  for ((i = 0; i < load; ++i)); do
    sh -c 'while :; do :; done' &
    pids+=($!)
  done
  declare -A tgs=() pps=()
  for ((r = 0; r < repeats; ++r)); do
    for spec in "$@"; do
      for threads in 1 2; do
        line=$(run_one "${spec#*=}" "$threads")
        read -r t p <<<"$line"
        tgs["${spec%%=*} $threads"]+="$t "
        pps["${spec%%=*} $threads"]+="$p "
      done
    done
  done
  for spec in "$@"; do
    for threads in 1 2; do
      key="${spec%%=*} $threads"
      printf 'busy loops %-2s  %-12s threads %s  tg %7s  pp %7s   (tg runs: %s)\n' "$load" "${spec%%=*}" "$threads" \
        "$(echo "${tgs[$key]}" | tr ' ' '\n' | grep . | median)" "$(echo "${pps[$key]}" | tr ' ' '\n' | grep . | median)" "${tgs[$key]}"
    done
  done
  unset tgs pps
done
