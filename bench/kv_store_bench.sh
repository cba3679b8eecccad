#!/usr/bin/env bash
# KV store tiers (issue #13), two measurements:
#  1. The Mooncake conversation trace (scaled as in the prefix-cache section of
#     bench/RESULTS.md) through `pdserve router --policy round_robin` over two decode
#     workers without a prefill worker (each prefills locally), without and with a shared
#     Redis tier: prefix hit ratio (sum of the workers' pdserve_prefix_cache_hits_total /
#     queries_total), TTFT p50/p99 (pdserve bench), the store's bytes/s, the workers' and
#     redis-server's CPU seconds.
#  2. TTFT of one long prompt after a restart: cold (empty --kv-offload-dir) vs warm (the
#     same directory a previous process filled), and the same through Redis; wall time and
#     the server's CPU time of a max_tokens=1 completion, plus a pool hit for reference.
# Usage: bench/kv_store_bench.sh [trace|trace-none|trace-redis|restart|all]   (from the repo root, Release build)
# Env: MAX_REQUESTS (300), TIME_SCALE (0.25), REPS (3 restart repetitions), LONG_TOKENS (1500),
#      OUT (keep logs, /metrics dumps and the bench JSON there), BASE (first of the ports used).
set -euo pipefail
BIN=${BIN:-build/pdserve}
MODEL=${MODEL:-../shared/models/stories260K.gguf}
LONG_MODEL=${LONG_MODEL:-../shared/models/synth-llama-small-f16.gguf}
LONG_TOKENS=${LONG_TOKENS:-1500}
TRACE=../shared/traces/mooncake_conversation_trace.jsonl
BASE=${BASE:-18800}
MAX_REQUESTS=${MAX_REQUESTS:-300}
TIME_SCALE=${TIME_SCALE:-0.25}
REPS=${REPS:-3}
WORK=$(mktemp -d /tmp/pdserve-kvbench-XXXXXX)
OUT=${OUT:-$WORK}  # logs, /metrics dumps and pdserve bench JSON land here
mkdir -p "$OUT"
PIDS=()
stop_all() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; PIDS=(); }
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

cpu_ms() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.0f", ($14 + $15) * 1000 / t }' "/proc/$1/stat"; }  # user+sys CPU of a process
wait_http() { for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.1; done; echo "port $1 not healthy" >&2; exit 1; }
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 ~ "^"n"[{ ]" || $1 == n { s += $NF } END { printf "%.0f", s }'; }
start_redis() {
  redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
  REDIS_PID=$!; PIDS+=($!)
  for _ in $(seq 100); do redis-cli -p "$1" ping 2>/dev/null | grep -q PONG && return 0; sleep 0.05; done
  exit 1
}

trace_run() {  # $1 = none | redis
  local d0=$((BASE + 1)) m0=$((BASE + 2)) d1=$((BASE + 3)) m1=$((BASE + 4)) r=$((BASE + 5)) rp=$((BASE + 6))
  local store=()
  if [ "$1" = redis ]; then start_redis "$rp"; store=(--kv-store "redis://127.0.0.1:$rp"); fi
  "$BIN" decode --model "$MODEL" --port "$d0" --metrics-port "$m0" --threads 1 "${store[@]}" >"$OUT/d0-$1.log" 2>&1 & local w0=$!; PIDS+=($!)
  "$BIN" decode --model "$MODEL" --port "$d1" --metrics-port "$m1" --threads 1 "${store[@]}" >"$OUT/d1-$1.log" 2>&1 & local w1=$!; PIDS+=($!)
  wait_http "$m0"; wait_http "$m1"
  "$BIN" router --model "$MODEL" --decode "127.0.0.1:$d0,127.0.0.1:$d1" --policy round_robin --port "$r" >"$OUT/router-$1.log" 2>&1 & PIDS+=($!)
  wait_http "$r"
  local t0=$(date +%s.%N)
  "$BIN" bench --url "http://127.0.0.1:$r" --model stories260K --tokenizer "$MODEL" \
    --trace mooncake "$TRACE" --length-scale 0.03125 --max-input 448 --max-output 32 --time-scale "$TIME_SCALE" \
    --max-requests "$MAX_REQUESTS" --slo-ttft 200 --slo-tpot 20 --json "$OUT/trace-$1.json" >"$OUT/bench-$1.txt" 2>&1
  local t1=$(date +%s.%N)
  grep -E "Workload|Requests completed|Duration|Request throughput|Goodput|Ideal prefix|\(ms\)|TTFT|TPOT" "$OUT/bench-$1.txt"
  sum2() { echo $(( $(metric "$m0" "$1") + $(metric "$m1" "$1") )); }
  local hits=$(sum2 pdserve_prefix_cache_hits_total) queries=$(sum2 pdserve_prefix_cache_queries_total)
  local rd=0 wr=0
  for m in "$m0" "$m1"; do
    curl -s "http://127.0.0.1:$m/metrics" >"$OUT/metrics-$1-$m.txt"
    rd=$((rd + $(awk '/^pdserve_kv_store_bytes_total/ && /direction="read"/ { s += $NF } END { printf "%.0f", s }' "$OUT/metrics-$1-$m.txt")))
    wr=$((wr + $(awk '/^pdserve_kv_store_bytes_total/ && /direction="write"/ { s += $NF } END { printf "%.0f", s }' "$OUT/metrics-$1-$m.txt")))
  done
  echo "store=$1 prefix_hit_tokens=$hits queried=$queries ratio=$(awk -v h=$hits -v q=$queries 'BEGIN{printf "%.1f %%", 100*h/q}')" \
       "store_block_hits=$(sum2 pdserve_kv_store_hits_total) misses=$(sum2 pdserve_kv_store_misses_total) writes=$(sum2 pdserve_kv_store_writes_total) errors=$(sum2 pdserve_kv_store_errors_total)" \
       "read=$rd B write=$wr B over $(awk -v a=$t0 -v z=$t1 'BEGIN{printf "%.1f", z-a}') s:" \
       "read $(awk -v b=$rd -v a=$t0 -v z=$t1 'BEGIN{printf "%.2f", b/(z-a)/1e6}') MB/s, write $(awk -v b=$wr -v a=$t0 -v z=$t1 'BEGIN{printf "%.2f", b/(z-a)/1e6}') MB/s"
  # CPU seconds (user+sys) of the two workers and of redis-server over the whole run, and
  # the mean latency of one store call (a fetch: the wait a missing prompt adds; a put: the
  # writer thread, off the step loop).
  echo "cpu: workers $(( $(cpu_ms "$w0") + $(cpu_ms "$w1") )) ms$([ "$1" = redis ] && echo ", redis-server $(cpu_ms "$REDIS_PID") ms")" \
       "$(cat "$OUT"/metrics-"$1"-*.txt | awk '/^pdserve_kv_store_latency_seconds_(sum|count)/ { split($1, a, "op=\""); op = substr(a[2], 1, 3); if ($1 ~ /_sum/) s[op] += $NF; else c[op] += $NF }
         END { for (op in c) if (c[op] > 0) printf "store %s: %d calls, mean %.2f ms; ", op, c[op], 1000 * s[op] / c[op] }')"
  stop_all
}

ttft_once() {  # $1 = port, $2 = server pid; a max_tokens=1 completion's wall time ≈ TTFT; prints ms, the server's CPU ms, cached tokens
  local c0=$(cpu_ms "$2") t0=$(date +%s%N)
  local out=$(curl -s "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": $(cat "$WORK/prompt.json"), \"max_tokens\": 1, \"temperature\": 0}")
  local t1=$(date +%s%N) c1=$(cpu_ms "$2")
  echo "$(( (t1 - t0) / 1000000 )) ms (server CPU $((c1 - c0)) ms), cached_tokens $(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens_details"]["cached_tokens"])')"
}

restart_run() {  # REPS times per tier: cold (empty tier) → restart → warm, then a repeat in the warm process (L1 hit)
  local p=$((BASE + 11)) rp=$((BASE + 12))
  start_redis "$rp"
  for rep in $(seq "$REPS"); do
    # A prompt of LONG_TOKENS token ids (ids, so the length is exact), new per repetition.
    python3 -c "import random; random.seed($rep); print([random.randrange(100, 30000) for _ in range($LONG_TOKENS)])" >"$WORK/prompt.json"
    for tier in disk redis; do
      local flags=(--kv-offload-dir "$WORK/offload")
      [ "$tier" = redis ] && flags=(--kv-store "redis://127.0.0.1:$rp")
      rm -rf "$WORK/offload"; redis-cli -p "$rp" flushall >/dev/null
      for phase in cold warm; do
        "$BIN" serve --model "$LONG_MODEL" --port "$p" --ctx-size 2048 "${flags[@]}" >"$OUT/serve-$tier-$phase-$rep.log" 2>&1 & local sp=$!
        wait_http "$p"
        echo "rep $rep $tier $phase (new process): $(ttft_once "$p" "$sp")"
        [ "$phase" = warm ] && echo "rep $rep $tier same process again (pool hit): $(ttft_once "$p" "$sp")"
        sleep 1  # let the write-through finish before the restart (it also flushes at shutdown)
        kill "$sp"; wait "$sp" 2>/dev/null || true
      done
    done
  done
  stop_all
}

case "${1:-all}" in
  trace) trace_run none; trace_run redis ;;
  trace-none) trace_run none ;;
  trace-redis) trace_run redis ;;
  restart) restart_run ;;
  all) trace_run none; trace_run redis; restart_run ;;
esac
