#!/bin/bash
# Reference outputs of the reference engine (llama.cpp build 11669 through ../shared/tools/peer.sh)
# for synth-llama-small-f16 quantised by its llama-quantize to each TYPE below; see README.md
# ("Quantised weight references"). Run from the repo root after ../shared/tools/peer.sh --setup.
# Usage: bash tests/data/make_quant_refs.sh [TYPE ...]   (default: Q3_K_M Q2_K IQ4_XS Q3_K_S IQ4_NL)
set -euo pipefail
PORT=${PORT:-18961}
TMP=${TMPDIR:-/tmp}/pdserve-quant-refs
mkdir -p "$TMP"
types=("$@")
[ ${#types[@]} -eq 0 ] && types=(Q3_K_M Q2_K IQ4_XS Q3_K_S IQ4_NL)
prompts=('Hello world' 'The quick brown fox jumps over the lazy dog.' 'Once upon a time' ' leading space and  double  spaces'
         'Привет мир 🦙 日本語' '1 2 3 4 5 6 7 8 9 10')
for t in "${types[@]}"; do
  lt=$(echo "$t" | tr 'A-Z' 'a-z')
  model="$TMP/synth-llama-small-$lt.gguf"
  ../shared/tools/peer.sh llama-quantize ../shared/models/synth-llama-small-f16.gguf "$model" "$t" > "$TMP/quantize-$lt.log" 2>&1
  ../shared/tools/peer.sh llama-server -m "$model" --port "$PORT" -t 2 -c 2048 -np 1 --no-webui --no-jinja \
    > "$TMP/server-$lt.log" 2>&1 &
  pid=$!
  until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do sleep 1; done
  python3 ../shared/tools/make_refs.py --url "http://127.0.0.1:$PORT" --model-file "synth-llama-small-$lt.gguf" \
    --out "tests/data/synth-llama-small-$lt.json" --n 24 \
    --engine "llama.cpp build 11669 (Debian sid llama.cpp-tools 0.7.0, libggml0 0.27.0), CPU haswell (AVX2) backend, 2 threads" \
    "${prompts[@]}"
  kill "$pid"; wait "$pid" 2> /dev/null || true
done
