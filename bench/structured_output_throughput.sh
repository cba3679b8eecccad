#!/usr/bin/env bash
# Decode tokens/s with and without a JSON schema (issue #17): `pdserve serve` on MODEL,
# C concurrent completions of N tokens each (ignore_eos, greedy, distinct prompts), the
# same requests unconstrained and with guided_json. Prints wall time and tokens/s.
#   bench/structured_output_throughput.sh [MODEL] [C=32] [N=64] [PORT=18977]
set -euo pipefail
MODEL=${1:-../shared/models/synth-qwen2-small-q8_0.gguf}
C=${2:-32}
N=${3:-64}
PORT=${4:-18977}
BIN=${PDSERVE_BIN:-build/pdserve}
SCHEMA='{"type":"object","properties":{"name":{"type":"string","maxLength":24},"age":{"type":"integer"},"email":{"type":"string"},"tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":4},"address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["street","zip"]},"active":{"type":"boolean"}},"required":["name","age","email","tags","address","active"]}'
"$BIN" serve --model "$MODEL" --port "$PORT" --log-level warn &
PID=$!
trap 'kill $PID' EXIT
for _ in $(seq 100); do curl -sf "127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
run() {  # $1: extra JSON fields
  local t0 t1
  t0=$(date +%s.%N)
  seq "$C" | xargs -P "$C" -I{} curl -s "127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"Record {} of the list:\", \"max_tokens\": $N, \"temperature\": 0, \"ignore_eos\": true $1}" >/dev/null
  t1=$(date +%s.%N)
  echo "$(echo "$t1 - $t0" | bc) s, $(echo "$C * $N / ($t1 - $t0)" | bc) tokens/s"
}
run "" >/dev/null  # warm up
echo "unconstrained:      $(run "")"
echo "json schema (cold): $(run ", \"guided_json\": $SCHEMA")"
echo "json schema (warm): $(run ", \"guided_json\": $SCHEMA")"
echo "unconstrained:      $(run "")"
