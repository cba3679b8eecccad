#!/usr/bin/env bash
# Reproduces the speculative-decoding table of bench/RESULTS.md (issue #18): decode tok/s
# and acceptance with each proposer vs plain decoding, at batch 1, 8 and 32, on
#   stories260K: story continuation and an input-copying task (ngram, layerskip, draft);
#   the TinyLlama-1.1B-shape Q4_0 synth: the input-copying task (ngram);
#   stories260K widened to 257 MiB of Q8_0 weights (bench/widen_model.py: the same function,
#   bandwidth-bound as a 1B model's decode): both tasks, with stories260K itself as the draft;
#   stories260K fine-tuned to repeat a passage (bench/copy_model.py, needs PyTorch), widened
#   the same way: both tasks, with the fine-tuned stories260K as the draft.
# Each part is one build/bench/spec_bench run (see its header; "plain" is plain decoding run
# again as a control of the noise); run them under the bench
# lock on an idle machine. The synth model is made with `pdserve synth` if missing.
#
#   bench/spec_bench.sh [BUILD_DIR] [PART...]
#     BUILD_DIR  a Release build with pdserve and bench/spec_bench (default: build)
#     PART       stories-story, stories-copy, tinyllama-copy, wide-story, wide-copy,
#                copytuned-story, copytuned-copy
#                (default: the first three)
# Environment: TOKENS (generated per request; default 256 for stories260K, 64 for the
# synth), REPEATS (default 3; the table gives medians), BATCHES (default 1,8,32), TL (synth path, default
# /tmp/pdserve-tinyllama/tinyllama-Q4_0.gguf), WIDE (the widened model's path, default
# /tmp/pdserve-wide/stories260K-wide-q8_0.gguf; made if missing), COPYTUNED (the fine-tuned
# model's directory, default /tmp/pdserve-copytuned: stories260K-copy.gguf and its widened
# stories260K-copy-wide-q8_0.gguf; made if missing, with /usr/bin/python3 and PyTorch), SPEC_ARGS (extra spec_bench flags, e.g.
# --no-spec-adaptive), LOG (where each run's line goes; default /dev/null).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(stories-story stories-copy tinyllama-copy)
stories=../shared/models/stories260K.gguf
tl=${TL:-/tmp/pdserve-tinyllama/tinyllama-Q4_0.gguf}
wide=${WIDE:-/tmp/pdserve-wide/stories260K-wide-q8_0.gguf}
copytuned=${COPYTUNED:-/tmp/pdserve-copytuned}
repeats=${REPEATS:-3}
# widen SRC DST: SRC (an F32 stories260K-shaped GGUF) widened to 1,024 / 16,384 and quantised
# to Q8_0 as DST (written as DST.tmp, then renamed: never left half-written).
widen() {
  python3 bench/widen_model.py "$1" "$2.f32" --embd 1024 --ff 16384 >/dev/null
  "$build/pdserve" --log-level warn quantize "$2.f32" "$2.tmp" Q8_0 >/dev/null
  mv "$2.tmp" "$2"
  rm -f "$2.f32"
}
echo "# $(date -u '+%F %T UTC') $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), commit $(git rev-parse --short HEAD)"
for part in "${parts[@]}"; do
  echo "# $part: load average before $(cut -d' ' -f1-3 /proc/loadavg)"
  case $part in
    stories-story|stories-copy)
      "$build/bench/spec_bench" "$stories" "${part#stories-}" --batches "${BATCHES:-1,8,32}" --tokens "${TOKENS:-256}" \
          --repeats "$repeats" --threads 1 --label stories260K \
          --proposers "ngram,layerskip:2,plain,layerskip:4,draft:$stories" ${SPEC_ARGS:-} 2>>"${LOG:-/dev/null}" ;;
    tinyllama-copy)
      if [ ! -s "$tl" ]; then
        mkdir -p "$(dirname "$tl")"
        "$build/pdserve" synth --shape tinyllama-1.1b --type Q4_0 \
            --vocab-from ../shared/models/synth-llama-small-f16.gguf -o "$tl" >/dev/null
      fi
      "$build/bench/spec_bench" "$tl" copy --batches "${BATCHES:-1,8,32}" --tokens "${TOKENS:-64}" --repeats "$repeats" \
          --threads 2 --label "TinyLlama-shape Q4_0 synth" --proposers plain,ngram ${SPEC_ARGS:-} 2>>"${LOG:-/dev/null}" ;;
    wide-story|wide-copy)
      if [ ! -s "$wide" ]; then
        mkdir -p "$(dirname "$wide")"
        widen "$stories" "$wide"
      fi
      "$build/bench/spec_bench" "$wide" "${part#wide-}" --batches "${BATCHES:-1,8,32}" --tokens "${TOKENS:-256}" \
          --repeats "$repeats" --threads 2 --label "stories260K widened (Q8_0)" \
          --proposers "ngram,layerskip:2,plain,layerskip:4,draft:$stories" ${SPEC_ARGS:-} 2>>"${LOG:-/dev/null}" ;;
    copytuned-story|copytuned-copy)
      small=$copytuned/stories260K-copy.gguf big=$copytuned/stories260K-copy-wide-q8_0.gguf
      if [ ! -s "$small" ]; then
        mkdir -p "$copytuned"
        /usr/bin/python3 bench/copy_model.py "$build/pdserve" "$stories" "$small.tmp" >&2
        mv "$small.tmp" "$small"
      fi
      if [ ! -s "$big" ] || [ "$small" -nt "$big" ]; then widen "$small" "$big"; fi  # missing, or older than $small
      "$build/bench/spec_bench" "$big" "${part#copytuned-}" --batches "${BATCHES:-1,8,32}" --tokens "${TOKENS:-256}" \
          --repeats "$repeats" --threads 2 --label "stories260K copy-tuned, widened (Q8_0)" \
          --proposers "ngram,layerskip:2,plain,layerskip:4,draft:$small" ${SPEC_ARGS:-} 2>>"${LOG:-/dev/null}" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
  echo "# $part: load average after $(cut -d' ' -f1-3 /proc/loadavg)"
done
