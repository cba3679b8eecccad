#!/bin/bash
# Makes the quantised-KV reference outputs in this folder with the reference engine
# (llama.cpp via ../shared/tools/peer.sh; run from the repo root after peer.sh --setup).
# LLAMA_ATTN_ROT_DISABLE=1: this llama.cpp rotates Q, K and V by a Hadamard matrix when the KV cache
# type is quantised (llama.cpp PR #21038); pdserve stores the plain rows, so the references turn it off.
# usage: bash tests/data/make_kv_refs.sh [PORT]
set -e
port=${1:-18951}
trap '[ -n "$pid" ] && kill $pid 2>/dev/null' EXIT
synth_prompts=('Hello world' 'The quick brown fox jumps over the lazy dog.' 'Once upon a time' \
               ' leading space and  double  spaces' '1 2 3 4 5 6 7 8 9 10')
stories_prompts=('Once upon a time' 'Lily and Ben went to the park.' 'The little dog' 'One day, a bird' \
                 'Tom had a big red ball. He')
for spec in synth-llama-small-f16:q8_0 synth-llama-small-f16:q4_0 synth-qwen2-small-q8_0:q8_0 synth-qwen2-small-q8_0:q4_0 \
            stories260K:bf16; do
  model=${spec%%:*}; kv=${spec##*:}
  if [ $model = stories260K ]; then prompts=("${stories_prompts[@]}"); else prompts=("${synth_prompts[@]}"); fi
  LLAMA_ATTN_ROT_DISABLE=1 ../shared/tools/peer.sh llama-server -m ../shared/models/$model.gguf --port $port -t 2 -c 2048 -np 1 \
    --no-webui --no-jinja -fa on -ctk $kv -ctv $kv >/tmp/kvref-$model-$kv.log 2>&1 &
  pid=$!
  until curl -sf http://127.0.0.1:$port/health >/dev/null; do sleep 1; done
  python3 ../shared/tools/make_refs.py --url http://127.0.0.1:$port --model-file $model.gguf \
    --out tests/data/$model-kv-$kv.json --n 24 \
    --engine "llama.cpp build 11669 (Debian sid llama.cpp-tools 0.7.0, libggml0 0.27.0), CPU haswell backend, 2 threads, -fa on -ctk $kv -ctv $kv, LLAMA_ATTN_ROT_DISABLE=1" \
    "${prompts[@]}"
  kill $pid; wait $pid 2>/dev/null || true
done
