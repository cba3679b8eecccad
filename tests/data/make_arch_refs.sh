#!/bin/bash
# Reference outputs of the reference engine (llama.cpp build 11669 through ../shared/tools/peer.sh)
# for random-weight files of the issue-#19 architectures made by `pdserve synth`; see README.md
# ("Architecture references"). Run from the repo root after building build/pdserve and
# ../shared/tools/peer.sh --setup.
# Usage: bash tests/data/make_arch_refs.sh [NAME ...]   (default: all rows of the table below)
set -euo pipefail
PORT=${PORT:-18971}
TMP=${TMPDIR:-/tmp}/pdserve-arch-refs
PDSERVE=${PDSERVE:-build/pdserve}
mkdir -p "$TMP"
# The CPU backend peer.sh picks on this machine (its own rule; GGML_BACKEND_PATH overrides):
# the rows up to gemma3-q8_0 were made on an AMD Zen 3 (haswell), the qwen3moe and mixtral ones on an
# Intel Xeon with AVX-512 VNNI/BF16 (zen4). See README.md.
flags=$(grep -m1 '^flags' /proc/cpuinfo)
case "${GGML_BACKEND_PATH:-$flags}" in
  *zen4*|*avx512_vnni*avx512_bf16*|*avx512_bf16*avx512_vnni*) BACKEND="zen4 (AVX-512)" ;;
  *skylakex*|*avx512f*) BACKEND="skylakex (AVX-512)" ;;
  *haswell*|*avx2*) BACKEND="haswell (AVX2)" ;;
  *) BACKEND="x64" ;;
esac
# name                 shape          layers  type    vocab (tokenizer GGUF)                        -c    [sliding window or -] [FFN width]
rows=(
  "llama3-f16          llama-3.2-1b   2       F16     ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048"
  "llama3-q8_0         llama-3.2-1b   2       Q8_0    ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048"
  "llama3-q4_k_m       llama-3.2-1b   2       Q4_K_M  ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048"
  "qwen3-f16           qwen3-0.6b     2       F16     ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048"
  "qwen3-q8_0          qwen3-0.6b     2       Q8_0    ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048"
  "qwen3-q4_k_m        qwen3-0.6b     2       Q4_K_M  ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048"
  "phi3-f16            phi-3.5-mini   1       F16     ../shared/tokenizer/ggml-vocab-phi-3.gguf     2048"
  "phi3-f16-ctx8192    phi-3.5-mini   1       F16     ../shared/tokenizer/ggml-vocab-phi-3.gguf     8192"
  "phi3-q8_0           phi-3.5-mini   1       Q8_0    ../shared/tokenizer/ggml-vocab-phi-3.gguf     2048"
  "phi3-q4_k_m         phi-3.5-mini   1       Q4_K_M  ../shared/tokenizer/ggml-vocab-phi-3.gguf     2048"
  "gemma2-f16          gemma-2-2b     2       F16     ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048  8"
  "gemma2-q8_0         gemma-2-2b     2       Q8_0    ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048  8"
  "gemma2-q4_k_m       gemma-2-2b     2       Q4_K_M  ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048  8"
  "gemma3-f16          gemma-3-1b     7       F16     ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048  8"
  "gemma3-q4_k_m       gemma-3-1b     7       Q4_K_M  ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048  8"
  "gemma3-q8_0         gemma-3-1b     7       Q8_0    ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048  8"
  "qwen3moe-f16        qwen3-30b-a3b  2       F16     ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048"
  "qwen3moe-q8_0       qwen3-30b-a3b  2       Q8_0    ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048"
  "qwen3moe-q4_k_m     qwen3-30b-a3b  2       Q4_K_M  ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048"
  "mixtral-f16         mixtral-8x7b   2       F16     ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048  -  512"
  "mixtral-q8_0        mixtral-8x7b   2       Q8_0    ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048  -  512"
  "mixtral-q4_k_m      mixtral-8x7b   2       Q4_K_M  ../shared/tokenizer/ggml-vocab-llama-spm.gguf 2048  -  512"
)
# Four of the six prompts of ../shared/reference, 16 tokens each (the files are 0.3-0.6 GB: kept short).
prompts=('Hello world' 'The quick brown fox jumps over the lazy dog.' 'Привет мир 🦙 日本語' '1 2 3 4 5 6 7 8 9 10')
for row in "${rows[@]}"; do
  read -r name shape layers type vocab ctx window ff <<< "$row"
  [ "$window" = "-" ] && window=
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
  model="$TMP/synth-$shape-$layers-$type${window:+-w$window}${ff:+-ff$ff}.gguf"
  [ -f "$model" ] || "$PDSERVE" synth --shape "$shape" --layers "$layers" --type "$type" --vocab-from "$vocab" --seed 1 \
    ${window:+--sliding-window "$window"} ${ff:+--ff "$ff"} -o "$model"
  ../shared/tools/peer.sh llama-server -m "$model" --port "$PORT" -t 1 -c "$ctx" -np 1 --no-webui --no-jinja \
    > "$TMP/server-$name.log" 2>&1 &
  pid=$!
  until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do
    kill -0 "$pid" 2> /dev/null || { echo "llama-server failed, see $TMP/server-$name.log" >&2; exit 1; }
    sleep 1
  done
  python3 ../shared/tools/make_refs.py --url "http://127.0.0.1:$PORT" --model-file "$(basename "$model")" \
    --out "tests/data/arch-$name.json" --n 16 \
    --engine "llama.cpp build 11669 (Debian sid llama.cpp-tools 0.7.0, libggml0 0.27.0), CPU $BACKEND backend, 1 thread, -c $ctx" \
    "${prompts[@]}"
  kill "$pid"; wait "$pid" 2> /dev/null || true
done
