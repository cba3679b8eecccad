#!/usr/bin/env bash
# Decode tokens/s with and without a JSON schema (issue #17): `pdserve serve` on MODEL,
# C concurrent completions of N tokens each (ignore_eos, greedy, distinct prompts), the
# same requests unconstrained and with guided_json, alternated R times (after one cold
# schema run that compiles the grammar's states and masks). Prints each run, the medians
# and the slowdown (median schema time / median unconstrained time − 1).
#   bench/structured_output_throughput.sh [MODEL] [C=32] [N=64] [PORT=18977] [R=3]
# Run the measurement under the machine's bench lock: flock /work/bench.lock bench/...
set -euo pipefail
MODEL=${1:-../shared/models/synth-qwen2-small-q8_0.gguf}
C=${2:-32}
N=${3:-64}
PORT=${4:-18977}
R=${5:-3}
BIN=${PDSERVE_BIN:-build/pdserve}
RECORD='{"type":"object","properties":{"name":{"type":"string","maxLength":24},"age":{"type":"integer"},"email":{"type":"string"},"tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":4},"address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["street","zip"]},"active":{"type":"boolean"}},"required":["name","age","email","tags","address","active"]}'
# An array of at least 100 records: no output can complete within N tokens, so every
# token is a grammar-constrained one (a grammar that has accepted only allows EOS, which
# ignore_eos would then repeat, making the constrained run look cheaper than it is).
SCHEMA="{\"type\":\"array\",\"minItems\":100,\"items\":$RECORD}"
"$BIN" serve --model "$MODEL" --port "$PORT" --log-level warn &
PID=$!
for _ in $(seq 100); do curl -sf "127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
OUT=$(mktemp -d)
trap 'kill $PID; rm -rf "$OUT"' EXIT
run() {  # $1: extra JSON fields; prints the wall seconds (fails unless C × N tokens came back)
  local t0 t1 n
  rm -f "$OUT"/*
  t0=$(date +%s.%N)
  seq "$C" | xargs -P "$C" -I{} curl -s -o "$OUT/{}.json" "127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"Record {} of the list:\", \"max_tokens\": $N, \"temperature\": 0, \"ignore_eos\": true $1}"
  t1=$(date +%s.%N)
  n=$(cat "$OUT"/*.json | jq -s '[.[].usage.completion_tokens] | add')
  [ "$n" = "$((C * N))" ] || { echo "expected $((C * N)) completion tokens, got $n" >&2; exit 1; }
  echo "$t1 - $t0" | bc
}
rate() { echo "$C * $N / $1" | bc; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(uptime | sed 's/.*load/load/')"
run "" >/dev/null  # warm up
t=$(run ", \"guided_json\": $SCHEMA")
echo "json schema (cold): $t s, $(rate "$t") tokens/s"
U=()
S=()
for _ in $(seq "$R"); do
  t=$(run ""); U+=("$t"); echo "unconstrained:      $t s, $(rate "$t") tokens/s"
  t=$(run ", \"guided_json\": $SCHEMA"); S+=("$t"); echo "json schema (warm): $t s, $(rate "$t") tokens/s"
done
mu=$(median "${U[@]}")
ms=$(median "${S[@]}")
echo "median unconstrained $(rate "$mu") tokens/s, json schema $(rate "$ms") tokens/s:" \
     "schema slower by $(echo "scale=1; 100 * ($ms - $mu) / $mu" | bc) %"
echo "# $(uptime | sed 's/.*load/load/')"
