#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, in build-fuzz/) and runs
# each for SECONDS (default 60), as many at a time as there are cores.
#   scripts/fuzz.sh [SECONDS]          every target
#   FUZZ_TARGETS="sse grammar" scripts/fuzz.sh 600
#   scripts/fuzz.sh --seeds            rewrites the binary seeds (corpus/gguf, corpus/kv_transfer)
# Seeds are read from tests/fuzz/corpus/NAME (never written); what a run finds goes to
# build-fuzz/corpus/NAME (kept between runs) and a crashing input to
# build-fuzz/artifacts/NAME-crash-*. Prints a table (target, seconds, executions, cov, ft,
# crashes) and writes it to build-fuzz/fuzz-summary.md; exits 1 when any target crashed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD="${FUZZ_BUILD:-build-fuzz}"
ALL_TARGETS="gguf tokenizer_spm tokenizer_bpe openai_request chat_template sse kv_transfer grammar"
TARGETS="${FUZZ_TARGETS:-$ALL_TARGETS}"
JOBS="${FUZZ_JOBS:-$(nproc)}"

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  # Debug: -O1 -g without NDEBUG, so the assertions (BlockPool invariants, ...) are on.
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DPDSERVE_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" >/dev/null
fi
if [ "${1:-}" = "--seeds" ]; then
  cmake --build "$BUILD" -j "$(nproc)" --target fuzz_make_seeds
  ASAN_OPTIONS=detect_leaks=0 "$BUILD/fuzz/fuzz_make_seeds" tests/fuzz/corpus
  exit 0
fi
SECONDS_EACH="${1:-60}"
build_targets=()
for t in $TARGETS; do build_targets+=("fuzz_$t"); done
cmake --build "$BUILD" -j "$(nproc)" --target "${build_targets[@]}"

mkdir -p "$BUILD/corpus" "$BUILD/artifacts" "$BUILD/logs"
run_one() {
  local t="$1"
  mkdir -p "$BUILD/corpus/$t"
  # -rss_limit_mb: a malformed input must not make the reader allocate without bound.
  "$BUILD/fuzz/fuzz_$t" "$BUILD/corpus/$t" "tests/fuzz/corpus/$t" \
    -max_total_time="$SECONDS_EACH" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$BUILD/artifacts/$t-" >"$BUILD/logs/$t.log" 2>&1
}

pids=()
names=()
status=0
for t in $TARGETS; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
  echo "fuzz: $t for ${SECONDS_EACH} s"
  run_one "$t" &
  pids+=("$!")
  names+=("$t")
done
declare -A rc
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then rc[${names[$i]}]=0; else rc[${names[$i]}]=$?; status=1; fi
done

summary="$BUILD/fuzz-summary.md"
{
  echo "| target | seconds | executions | cov | ft | corpus | crashes |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  for t in $TARGETS; do
    log="$BUILD/logs/$t.log"
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
    line=$(grep -E '^#[0-9]+' "$log" | grep -E 'cov: ' | tail -1)
    cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$line")
    ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$line")
    corp=$(sed -n 's/.*corp: \([0-9]*\).*/\1/p' <<<"$line")
    crash=0
    [ "${rc[$t]}" -ne 0 ] && crash=1
    echo "| $t | $SECONDS_EACH | ${execs:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | $crash |"
  done
} | tee "$summary"
if [ "$status" -ne 0 ]; then
  for t in $TARGETS; do
    [ "${rc[$t]}" -ne 0 ] || continue
    echo "fuzz: $t failed (exit ${rc[$t]}); the end of $BUILD/logs/$t.log:" >&2
    tail -40 "$BUILD/logs/$t.log" >&2
  done
fi
exit "$status"
