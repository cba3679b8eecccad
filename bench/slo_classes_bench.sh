#!/usr/bin/env bash
# Two-class SLO benchmark (issue #14): high = short chats (TTFT <= 300 ms, TPOT <= 50 ms),
# low = long batch-style prompts (pdserve's low targets, TTFT <= 10 s, TPOT <= 500 ms), as
# one Poisson stream, against `pdserve serve`, with classes off (no "slo_class" field: the
# classless FCFS scheduler) and on (each request sends its class). A fresh server per run.
# Usage (from the repo root, Release build):
#   bench/slo_classes_bench.sh capacity RATE...   classes off at each rate: completed req/s
#   bench/slo_classes_bench.sh compare RATE       classes off, then on, at RATE
#   bench/slo_classes_bench.sh on|off RATE        one of them
#   bench/slo_classes_bench.sh saturate C         classes off, closed loop of C clients for
#                                                 DURATION s: the saturated req/s (capacity)
#   bench/slo_classes_bench.sh all C              saturate C, then compare at FACTOR (1.5) x it
# Environment: MODEL, THREADS (2), DURATION (arrivals for D s, default 120), SEED, PORT,
# OUT (directory for the JSON reports, default /tmp/pdserve-slo-bench), SERVE_ARGS (extra
# `pdserve serve` flags), HIGH / LOW (the --class specs).
set -euo pipefail
BIN=${BIN:-build/pdserve}
MODEL=${MODEL:-../shared/models/synth-llama-small-q8_0.gguf}
THREADS=${THREADS:-2}
DURATION=${DURATION:-120}
SEED=${SEED:-1}
PORT=${PORT:-18950}
OUT=${OUT:-/tmp/pdserve-slo-bench}
SERVE_ARGS=${SERVE_ARGS:-}
FACTOR=${FACTOR:-1.5}
HIGH=${HIGH:-high:share=0.5,input=uniform:16:48,output=32,ttft_ms=300,tpot_ms=50}
LOW=${LOW:-low:share=0.5,input=uniform:384:768,output=64,ttft_ms=10000,tpot_ms=500}
mkdir -p "$OUT"
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT

start_server() {
  # shellcheck disable=SC2086
  "$BIN" serve --model "$MODEL" --port "$PORT" --threads "$THREADS" $SERVE_ARGS >"$OUT/serve.log" 2>&1 &
  PID=$!
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0; sleep 0.1; done
  echo "server not healthy" >&2
  exit 1
}
stop_server() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=; }

run() {  # $1 = off | on, $2 = rate (closed-C: a closed loop of C clients)
  local name="$1-rate$2" field=() load=(--rate "$2")
  [ "$1" = off ] && field=(--no-class-field)
  case "$2" in closed-*) load=(--concurrency "${2#closed-}") ;; esac
  start_server
  echo "== classes $1, rate $2 req/s, $(date -u +%FT%TZ), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$BIN" bench --url "http://127.0.0.1:$PORT" --tokenizer "$MODEL" "${load[@]}" --duration "$DURATION" \
    --seed "$SEED" --class "$HIGH" --class "$LOW" "${field[@]}" --no-progress --json "$OUT/$name.json"
  echo "   load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^pdserve_(num_preemptions|preemptions)_total' || true
  stop_server
}

case "${1:-}" in
  capacity) shift; for r in "$@"; do run off "$r"; done ;;
  compare) run off "$2"; run on "$2" ;;
  on|off) run "$1" "$2" ;;
  saturate) run off "closed-$2" ;;
  all)
    run off "closed-$2"
    cap=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["summary"]["request_throughput"])' "$OUT/off-rateclosed-$2.json")
    rate=$(python3 -c "print(round($FACTOR * $cap, 3))")
    echo "capacity $cap req/s -> rate $rate req/s"
    run off "$rate"; run on "$rate" ;;
  *) echo "usage: $0 capacity RATE... | compare RATE | saturate C | all C" >&2; exit 2 ;;
esac
