#!/usr/bin/env bash
# Issue #21 "close to the machine's limits": ONE table of pdserve vs the reference engine
# (llama.cpp through ../shared/tools/peer.sh, run interleaved on the same files) against
# this machine's measured read bandwidth and int8 / fp32 compute peak, each target of the
# issue marked met / not met with its figure.
#
#   bench/machine_limits.sh BUILD OUTDIR [PHASE ...]
#     BUILD   a Release build with pdserve and bench/kernels_bench
#     OUTDIR  models and logs (kept: a phase rerun replaces only its own logs)
#     PHASE   models | peak | tput | decode | ctx | ttft | pairs | table   (default: all of them, in that order)
#       models  pdserve synth: TinyLlama-1.1B shape, one GGUF per type (skipped when present)
#       peak    kernels_bench: BM_StreamRead (read bandwidth) and BM_PeakInt8Vnni (AVX-512
#               VNNI; the int8 peak where the CPU has it) / BM_PeakInt8Avx2 / BM_PeakFma32
#               (register-only loops: the compute peak), 1 and 2 threads
#       tput    per type, pdserve then the reference on the same file: tg128 at 1 and 2
#               threads, pp512 at 2 threads (pdserve bench-model / llama-bench), batched
#               decode B=32 (8-token prompts, 16 steps: bench-model --batch 32 /
#               llama-batched-bench -npp 8 -ntg 16 -npl 32), and pdserve's --profile tables
#       decode  target 1 against the bandwidth of the same moment: per type, pdserve tg128 at
#               1 and 2 threads, each run between two BM_StreamRead runs at its thread count,
#               DECODE_REPEATS times (default 3). This machine moves between a fast and a
#               slow state (bandwidth at 1 thread 19-29 GB/s within minutes), so a bound
#               measured minutes apart (the peak phase) can be off by a third either way
#       ctx     pdserve decode at 512 / 4,096 / 16,384 context (bench-model --depth), 2 threads,
#               per KV cache dtype (CTX_KV: default "f16 q8_0 q4_0")
#       ttft    warm-cache TTFT: 8 closed-loop clients, the same 256-token prompt (fully
#               cached after the first request), 32 output tokens; `pdserve bench` against
#               pdserve serve, then against llama-server (-np 8), a warm-up pass first
#       pairs   target 3 in paired rounds: PAIR_ROUNDS times (default 6) pdserve's batched decode
#               B=32 and the reference's, the order alternating; the table's target 3 is then
#               the median of the per-round ratios (a single tput pair, minutes apart, moved
#               1.8-2.6x on a busy Ice Lake Xeon, 2026-12-07)
#       table   the one table (markdown) from the logs, also written to OUTDIR/table.md
# Measure on a quiet machine; on a shared one, each measuring phase under the bench lock:
#   flock /work/bench.lock bench/machine_limits.sh build /tmp/limits tput
# Environment: TYPES (default "Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K"), SHAPE (tinyllama-1.1b),
#   CTX_TYPE (Q4_0: the type of the ctx phase), CTX_KV (f16 q8_0 q4_0: its KV dtypes), TTFT_TYPE (Q4_0), TTFT_REQUESTS (48, measured), DECODE_REPEATS (3),
#   PAIR_ROUNDS (6),
#   PEER (../shared/tools/peer.sh), SYNTH_ARGS (extra `pdserve synth` flags, e.g. "--layers 8 --ff 512"
#   for a scaled-down mixture-of-experts shape).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: bench/machine_limits.sh BUILD OUTDIR [PHASE ...]}
out=${2:?usage: bench/machine_limits.sh BUILD OUTDIR [PHASE ...]}
shift 2
phases=${*:-models peak tput decode ctx ttft pairs table}
pair_rounds=${PAIR_ROUNDS:-6}
decode_repeats=${DECODE_REPEATS:-3}
types=${TYPES:-Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K}
shape=${SHAPE:-tinyllama-1.1b}
ctx_type=${CTX_TYPE:-Q4_0}
ctx_kv=${CTX_KV:-f16 q8_0 q4_0}
ttft_type=${TTFT_TYPE:-Q4_0}
ttft_requests=${TTFT_REQUESTS:-48}
peer=${PEER:-../shared/tools/peer.sh}
# peer.sh picks llama.cpp's CPU backend from the CPU flags: zen4 for AVX-512 VNNI + BF16,
# skylakex for any other AVX-512 CPU. On an AVX-512 VNNI CPU without BF16 llama.cpp's own
# loader would take a variant with VNNI: icelake (with VBMI) or cascadelake. Use that one, so
# the reference runs its int8 dot products as pdserve does (2026-12-07, Ice Lake Xeon, Q4_0
# pp64 at 2 threads: 108 tok/s with icelake, 90 with skylakex). The caller's GGML_BACKEND_PATH
# wins.
ref_backends=/tmp/sid/root/usr/lib/x86_64-linux-gnu/ggml/backends0
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
if [ -z "${GGML_BACKEND_PATH:-}" ] && [[ $cpu_flags == *" avx512_vnni "* && $cpu_flags != *" avx512_bf16 "* ]]; then
  ref_variant=cascadelake
  [[ $cpu_flags == *" avx512vbmi "* ]] && ref_variant=icelake
  if [ -f "$ref_backends/libggml-cpu-$ref_variant.so" ]; then export GGML_BACKEND_PATH=$ref_backends/libggml-cpu-$ref_variant.so; fi
fi
read -r -a synth_args <<< "${SYNTH_ARGS:-}"
pds="$build/pdserve"
# Everything checked before any phase runs (a bad value must not cost a long run, or a log).
for ph in $phases; do
  case "$ph" in
    models|peak|tput|decode|ctx|ttft|pairs|table) ;;
    *) echo "error: unknown phase '$ph' (models | peak | tput | decode | ctx | ttft | pairs | table)" >&2; exit 2 ;;
  esac
done
[[ "$decode_repeats" =~ ^[1-9][0-9]*$ ]] || { echo "error: DECODE_REPEATS='$decode_repeats' is not a positive integer" >&2; exit 2; }
[[ "$pair_rounds" =~ ^[1-9][0-9]*$ ]] || { echo "error: PAIR_ROUNDS='$pair_rounds' is not a positive integer" >&2; exit 2; }
if [[ " $phases " =~ \ (models|tput|decode|ctx|ttft|pairs)\  ]] && [ ! -x "$pds" ]; then
  echo "error: $pds not found (BUILD must be a Release build with pdserve)" >&2; exit 2
fi
if [[ " $phases " =~ \ (peak|decode)\  ]] && [ ! -x "$build/bench/kernels_bench" ]; then
  echo "error: $build/bench/kernels_bench not found (BUILD must be a Release build with the benchmarks)" >&2; exit 2
fi
mkdir -p "$out/logs"
model() { echo "$out/$shape-$1.gguf"; }
have_peer() { [ -x "$peer" ] && "$peer" llama-bench --help >/dev/null 2>&1; }
stamp() { echo "# $(date -u '+%F %T') UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)"; }

phase_models() {
  for t in $types; do
    [ -s "$(model "$t")" ] || nice -n 19 "$pds" synth --shape "$shape" --type "$t" "${synth_args[@]}" \
        --vocab-from ../shared/models/synth-llama-small-f16.gguf -o "$(model "$t")" >/dev/null
  done
}

phase_peak() {
  { stamp; "$build/bench/kernels_bench" --benchmark_filter='StreamRead/|PeakInt8|PeakFma32' 2>/dev/null; stamp; } \
      | tee "$out/logs/peak.log"
}

# The reference's batched decode B=32 (8-token prompts, 16 steps) on model $1.
ref_b32() { "$peer" llama-batched-bench -m "$1" -c 2048 -b 2048 -ub 512 -npp 8 -ntg 16 -npl 32 -t 2 -tb 2; }

phase_tput() {
  local t m
  have_peer || echo "reference engine: $peer not runnable: pdserve only" | tee "$out/logs/peer-missing.log"
  for t in $types; do
    m=$(model "$t")
    echo "## $t"
    { stamp; "$pds" bench-model -m "$m" -p 0 -n 128 -t 1 --batch 0; } > "$out/logs/pds-$t-t1.log"
    { stamp; "$pds" bench-model -m "$m" -p 512 -n 128 -t 2 --batch 32 --profile; stamp; } > "$out/logs/pds-$t-t2.log"
    grep -E '^\| (pp|tg|batched)' "$out/logs/pds-$t-t1.log" "$out/logs/pds-$t-t2.log" || true
    if have_peer; then
      { stamp; "$peer" llama-bench -m "$m" -p 0 -n 128 -t 1 -r 2 -o md; } > "$out/logs/ref-$t-t1.log" 2>&1
      { stamp; "$peer" llama-bench -m "$m" -p 512 -n 128 -t 2 -r 2 -o md; } > "$out/logs/ref-$t-t2.log" 2>&1
      { stamp; ref_b32 "$m"; stamp; } > "$out/logs/ref-$t-batched.log" 2>&1
      grep -E '^\| .*(pp|tg)[0-9]|^\|\s+8 \|' "$out/logs/ref-$t-t1.log" "$out/logs/ref-$t-t2.log" "$out/logs/ref-$t-batched.log" || true
    fi
  done
}

# One line per measurement: "stream THREADS VALUE PREFIX" (Google Benchmark's
# bytes_per_second: a power-of-1024 prefix, so "G" is GiB/s) / "tg THREADS TOK_PER_S".
stream_line() {
  local line
  line=$(OMP_NUM_THREADS=$1 "$build/bench/kernels_bench" --benchmark_filter="^BM_StreamRead/$1/" 2>/dev/null \
      | sed -nE "s/.*bytes_per_second=([0-9.]+)([kMGT]?)i?\/s.*/stream $1 \1 \2/p")
  [ -n "$line" ] || { echo "error: BM_StreamRead/$1 printed no bytes_per_second" >&2; return 1; }
  echo "$line"
}

phase_decode() {
  local t m th r
  for t in $types; do
    m=$(model "$t")
    {
      stamp
      for r in $(seq "$decode_repeats"); do
        for th in 1 2; do
          stream_line "$th"
          "$pds" bench-model -m "$m" -p 0 -n 128 -t "$th" --batch 0 \
              | sed -nE -e '/^model /p' -e "s/^\| tg128 .*\| *([0-9.]+) \|$/tg $th \1/p"
          stream_line "$th"
        done
      done
      stamp
    } > "$out/logs/pds-$t-decode.log.part"  # replaces the last log only when complete
    mv "$out/logs/pds-$t-decode.log.part" "$out/logs/pds-$t-decode.log"
    echo "$t: $(grep -c '^tg' "$out/logs/pds-$t-decode.log") tg runs"
  done
}

phase_ctx() {
  local m d kv
  m=$(model "$ctx_type")
  rm -f "$out"/logs/ctx-*.log
  for kv in $ctx_kv; do
    for d in 512 4096 16384; do
      { stamp; "$pds" bench-model -m "$m" -p 0 -n 64 -t 2 --batch 0 --depth "$d" --kv-dtype "$kv" --profile; } \
          > "$out/logs/ctx-$kv-$d.log"
      echo "KV $kv: $(grep -E '^\| tg' "$out/logs/ctx-$kv-$d.log")"
    done
  done
}

# Waits for URL/health to answer 200 (a server starting), at most 120 s.
wait_health() {
  for _ in $(seq 1200); do
    curl -sf -o /dev/null "$1/health" && return 0
    sleep 0.1
  done
  echo "error: $1 did not come up" >&2
  return 1
}

phase_ttft() {
  local m trace port url pid name
  m=$(model "$ttft_type")
  # All requests at t=0 (the closed loop is --concurrency 8); one hash block = the same
  # 256-token prompt in every request. --max-requests bounds the run (not --duration: every
  # request of the trace "arrives" before it).
  trace="$out/ttft_trace.jsonl"
  python3 -c 'import json
for _ in range(1000): print(json.dumps({"timestamp": 0, "input_length": 256, "output_length": 32, "hash_ids": [0]}))' > "$trace"
  for name in pds ref; do
    port=$((18900 + RANDOM % 500))
    url=http://127.0.0.1:$port
    if [ "$name" = pds ]; then
      "$pds" serve --model "$m" --port "$port" --model-name tinyllama --threads 2 > "$out/logs/ttft-$name-server.log" 2>&1 &
    else
      have_peer || { echo "reference engine missing: no llama-server TTFT"; continue; }
      "$peer" llama-server -m "$m" -t 2 -tb 2 -np 8 -c 8192 --port "$port" --alias tinyllama > "$out/logs/ttft-$name-server.log" 2>&1 &
    fi
    pid=$!
    wait_health "$url"
    local common=(--url "$url" --model tinyllama --tokenizer "$m" --trace mooncake "$trace" --concurrency 8 --no-progress)
    "$pds" bench "${common[@]}" --max-requests 16 > "$out/logs/ttft-$name-warmup.log"  # every slot / the cache warm
    { stamp; "$pds" bench "${common[@]}" --max-requests "$ttft_requests" --json "$out/logs/ttft-$name.json"; stamp; } \
        > "$out/logs/ttft-$name.log"
    grep -iE 'ttft|completed' "$out/logs/ttft-$name.log" | head -4
    kill "$pid"
    wait "$pid" 2>/dev/null || true
  done
}

# Target 3 in rounds: pdserve's and the reference's batched decode B=32 (phase_tput's commands),
# pdserve first in odd rounds, the reference first in even ones; round i's outputs in
# pairs-TYPE-pds-i.log / pairs-TYPE-ref-i.log, read by the table as phase_tput's logs.
phase_pairs() {
  local t=Q4_K_M m i
  m=$(model "$t")
  rm -f "$out/logs/pairs-$t-"*.log
  if ! have_peer; then
    echo "reference engine: $peer not runnable: no pairs"
    return 0
  fi
  pds_b32() { { stamp; "$pds" bench-model -m "$m" -p 0 -n 0 -t 2 --batch 32; } > "$out/logs/pairs-$t-pds-$i.log"; }
  ref_b32_log() { { stamp; ref_b32 "$m"; } > "$out/logs/pairs-$t-ref-$i.log" 2>&1; }
  for i in $(seq 1 "$pair_rounds"); do
    if [ $((i % 2)) = 1 ]; then pds_b32; ref_b32_log; else ref_b32_log; pds_b32; fi
    grep -hE '^\| batched|^\|\s+8 \|' "$out/logs/pairs-$t-pds-$i.log" "$out/logs/pairs-$t-ref-$i.log" || true
  done
}

phase_table() {
  python3 - "$out" "$types" "$ctx_type" "$ctx_kv" <<'EOF' | tee "$out/table.md"
import json, os, re, sys
out, types, ctx_type, ctx_kv = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4].split()
logs = os.path.join(out, "logs")
def read(name):
    p = os.path.join(logs, name)
    return open(p).read() if os.path.exists(p) else ""
def fmt(x, f="%.1f"):
    return "—" if x is None else f % x
def mark(ok):
    return "—" if ok is None else ("**met**" if ok else "not met")

# Machine: bandwidth (bytes/s) and peaks (OP/s), 1 and 2 threads. Google Benchmark prints
# bytes_per_second with power-of-1024 prefixes ("G/s" = GiB/s) and user counters (OP/s)
# with powers of 1000.
peak = read("peak.log")
K1024 = {"": 1, "k": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
K1000 = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
def bench_rate(name, counter):
    m = re.search(r"^%s/min_time\S*\s.*?%s=([\d.]+)([kMGT]?)i?/s" % (re.escape(name), re.escape(counter)), peak, re.M)
    if not m: return None
    return float(m.group(1)) * (K1024 if counter == "bytes_per_second" else K1000)[m.group(2)]
bw = {t: bench_rate("BM_StreamRead/%d" % t, "bytes_per_second") for t in (1, 2)}
# The int8 peak of the GEMMs' own path: AVX-512 VNNI where the CPU has it, else AVX2.
i8 = {t: bench_rate("BM_PeakInt8Vnni/%d" % t, "OP/s") for t in (1, 2)}
i8_name = "AVX-512 VNNI vpdpbusd zmm, BM_PeakInt8Vnni"
if not i8[2]:
    i8 = {t: bench_rate("BM_PeakInt8Avx2/%d" % t, "OP/s") for t in (1, 2)}
    i8_name = "AVX2 vpmaddubsw+vpmaddwd, BM_PeakInt8Avx2"
f32 = {t: bench_rate("BM_PeakFma32/%d" % t, "OP/s") for t in (1, 2)}
# AMX-INT8 (TDPBSSD on full tiles) where the CPU has it: the GEMMs of 16 or more tokens of
# Q4_0, Q4_K, Q5_K (tiled order) and Q6_K run on it there (qgemm_avx512_amx.cc). Target 2 keeps the issue's VNNI peak; the
# table also gives the share of this one.
amx = {t: bench_rate("BM_PeakInt8Amx/%d" % t, "OP/s") for t in (1, 2)}

def pds_rows(log):
    rows = {}
    for m in re.finditer(r"^\| (\S+)[^|]*\|\s*(\d+) \|\s*([\d.]+) \|\s*([\d.]+) \|", log, re.M):
        rows[m.group(1)] = float(m.group(4))
    return rows
def pds_info(log):
    m = re.search(r"\((\d+) bytes\); ([\d.]+) GOP per token", log)
    return (int(m.group(1)), float(m.group(2))) if m else (None, None)
def adjacent(log, wbytes):
    # Target 1 from phase_decode: each tg run's weight bytes per second over the mean of the
    # BM_StreamRead runs just before and after it (same thread count; a tg run counts only
    # with such a stream line on both sides). Per thread count: (median %, median tok/s, runs).
    lines = [l.split() for l in log.splitlines() if l[:3] in ("str", "tg ")]
    def stream_bps(l):  # "stream THREADS VALUE PREFIX" (bytes_per_second, power-of-1024 prefix)
        return float(l[2]) * K1024[l[3] if len(l) > 3 else ""]
    def median(xs):
        xs = sorted(xs)
        n = len(xs)
        return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    res = {}
    for th in ("1", "2"):
        pcts, toks = [], []
        for i, l in enumerate(lines):
            if l[0] != "tg" or l[1] != th or not wbytes or i == 0 or i == len(lines) - 1:
                continue
            before, after = lines[i - 1], lines[i + 1]
            if before[:2] == after[:2] == ["stream", th]:
                pcts.append(float(l[2]) * wbytes / ((stream_bps(before) + stream_bps(after)) / 2) * 100)
                toks.append(float(l[2]))
        if pcts:
            res[int(th)] = (median(pcts), median(toks), len(pcts))
    return res
def ref_bench(log, test):  # llama-bench -o md: last column "t/s" = "mean ± sd"
    for line in log.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 2 and cells[-2] == test:
            return float(cells[-1].split("±")[0])
    return None
def ref_batched(log):  # llama-batched-bench: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | ...
    for line in log.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0] == "8" and cells[1] == "16" and cells[2] == "32":
            return float(cells[7])
    return None

print("Machine: %s, %d cores; read bandwidth (BM_StreamRead) %s / %s GB/s at 1 / 2 threads; "
      "int8 peak (%s) %s / %s GOP/s; fp32 FMA peak %s / %s GFLOP/s."
      % (open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].split("\n")[0].strip(), os.cpu_count(),
         fmt(bw[1] and bw[1] / 1e9), fmt(bw[2] and bw[2] / 1e9), i8_name, fmt(i8[1] and i8[1] / 1e9, "%.0f"),
         fmt(i8[2] and i8[2] / 1e9, "%.0f"), fmt(f32[1] and f32[1] / 1e9, "%.0f"), fmt(f32[2] and f32[2] / 1e9, "%.0f")))
backend = re.search(r"loaded CPU backend from \S*libggml-cpu-(\w+)\.so", "".join(read("ref-%s-t2.log" % t) for t in types))
if backend:
    print("Reference: llama.cpp's %s CPU backend." % backend.group(1))
if amx[2]:
    print("AMX-INT8 peak (tdpbssd, full tiles, BM_PeakInt8Amx) %s / %s GOP/s at 1 / 2 threads: pdserve's Q4_0, Q4_K, "
          "Q5_K (tiled order) and Q6_K matmuls of >= 16 tokens use it." % (fmt(amx[1] and amx[1] / 1e9, "%.0f"), fmt(amx[2] / 1e9, "%.0f")))
print()
print("| type | weight MB / GOP per token | tg128 1 thr: pdserve / ref / bound tok/s (pdserve % of bound) | "
      "tg128 2 thr: pdserve / ref / bound (%) | tg128 vs the bandwidth measured next to it, 1 / 2 thr: median % (median tok/s) | "
      "target 1 (≥ 90 % of bound) | pp512 2 thr: pdserve / ref tok/s "
      "(pdserve % of int8 peak" + ("; of the AMX peak" if amx[2] else "") + ") | target 2 (≥ 50 % / K ≥ 40 %) | "
      "batched B=32: pdserve / ref tok/s (×) | target 3 |")
print("|---|---|---|---|---|---|---|---|---|---|")
for t in types:
    p1, p2 = read("pds-%s-t1.log" % t), read("pds-%s-t2.log" % t)
    r1, r2, rb = read("ref-%s-t1.log" % t), read("ref-%s-t2.log" % t), read("ref-%s-batched.log" % t)
    wbytes, gop = pds_info(p2 or p1 or read("pds-%s-decode.log" % t))
    a1, a2 = pds_rows(p1), pds_rows(p2)
    tg1, tg2, pp = a1.get("tg128"), a2.get("tg128"), a2.get("pp512")
    b32 = a2.get("batched")
    rtg1, rtg2, rpp, rb32 = ref_bench(r1, "tg128"), ref_bench(r2, "tg128"), ref_bench(r2, "pp512"), ref_batched(rb)
    bound1 = bw[1] / wbytes if bw[1] and wbytes else None
    bound2 = bw[2] / wbytes if bw[2] and wbytes else None
    pct = lambda x, b: x / b * 100 if x and b else None
    ppk = pp * gop * 1e9 / i8[2] * 100 if pp and gop and i8[2] else None
    ppa = pp * gop * 1e9 / amx[2] * 100 if pp and gop and amx[2] else None
    kq = t.startswith("Q") and "_K" in t
    ok1 = None if None in (pct(tg1, bound1), pct(tg2, bound2)) else (pct(tg1, bound1) >= 90 and pct(tg2, bound2) >= 90)
    adj = adjacent(read("pds-%s-decode.log" % t), wbytes)
    if 1 in adj and 2 in adj:  # the same-moment bound decides when measured
        ok1 = adj[1][0] >= 90 and adj[2][0] >= 90
    adj_cell = " / ".join("%.0f %% (%.1f tok/s)" % adj[th][:2] if th in adj else "—" for th in (1, 2))
    if adj: adj_cell += " (medians of %d)" % min(v[2] for v in adj.values())
    ok2 = None if ppk is None else ppk >= (40 if kq else 50)
    ratio = b32 / rb32 if b32 and rb32 else None
    ok3 = (ratio >= 2.5 if ratio else None) if t == "Q4_K_M" else None
    rounds = []
    i = 1
    while read("pairs-%s-pds-%d.log" % (t, i)):
        p, r = pds_rows(read("pairs-%s-pds-%d.log" % (t, i))).get("batched"), ref_batched(read("pairs-%s-ref-%d.log" % (t, i)))
        if p and r: rounds.append(p / r)
        i += 1
    if rounds and t == "Q4_K_M":  # the paired rounds decide when measured
        rs = sorted(rounds)
        med = rs[len(rs) // 2] if len(rs) % 2 else (rs[len(rs) // 2 - 1] + rs[len(rs) // 2]) / 2
        ok3 = med >= 2.5
        ratio_cell = "%s; paired rounds: median %.2f× (%.2f–%.2f, %d)" % (fmt(ratio, "%.2f×"), med, rs[0], rs[-1], len(rs))
    else:
        ratio_cell = fmt(ratio, "%.2f×")
    print("| %s | %s / %s | %s / %s / %s (%s %%) | %s / %s / %s (%s %%) | %s | %s | %s / %s (%s %%%s) | %s | %s / %s (%s) | %s |" % (
        t, fmt(wbytes and wbytes / 1e6, "%.0f"), fmt(gop, "%.2f"), fmt(tg1), fmt(rtg1), fmt(bound1), fmt(pct(tg1, bound1), "%.0f"),
        fmt(tg2), fmt(rtg2), fmt(bound2), fmt(pct(tg2, bound2), "%.0f"), adj_cell, mark(ok1), fmt(pp), fmt(rpp), fmt(ppk, "%.0f"), "; %s %%" % fmt(ppa, "%.0f") if ppa else "",
        mark(ok2), fmt(b32), fmt(rb32), ratio_cell, mark(ok3) if t == "Q4_K_M" else "(Q4_K_M only)"))

# Target 4: warm-cache TTFT p50.
def ttft(name):
    p = os.path.join(logs, "ttft-%s.json" % name)
    if not os.path.exists(p): return None, None
    j = json.load(open(p))
    s = j.get("summary", j)
    return s["ttft_ms"]["p50"], s.get("completed")
tp, tr = ttft("pds"), ttft("ref")
ok4 = tp[0] <= tr[0] if tp[0] is not None and tr[0] is not None else None
print()
print("| target | pdserve | reference | figure | |")
print("|---|---|---|---|---|")
print("| 4: warm-cache TTFT p50, 8 clients, 256-token prompt cached, 32 output tokens (ms) | %s (%s requests) | %s (%s requests) | "
      "pdserve / ref %s | %s |" % (fmt(tp[0], "%.0f"), tp[1], fmt(tr[0], "%.0f"), tr[1],
                                   fmt(tp[0] / tr[0] if tp[0] and tr[0] else None, "%.2f×"), mark(ok4)))
# Target 5: long-context decode.
for kv in ctx_kv:
    ctx = {}
    for d in (512, 4096, 16384):
        r = [v for k, v in pds_rows(read("ctx-%s-%d.log" % (kv, d))).items() if k.startswith("tg")]
        ctx[d] = r[0] if r else None
    base = ctx[512]
    for d in (4096, 16384):
        slow = base / ctx[d] if base and ctx[d] else None
        print("| 5: %s decode at %d context, %s KV cache, 2 threads (tok/s) | %s (512: %s) | — | %s slower than 512 (≤ 1.5×) | %s |" % (
            ctx_type, d, kv, fmt(ctx[d]), fmt(base), fmt(slow, "%.2f×"), mark(slow <= 1.5 if slow else None)))
EOF
}

for ph in $phases; do
  case "$ph" in
    models|peak|tput|decode|ctx|ttft|pairs|table) "phase_$ph" ;;
    *) echo "error: unknown phase '$ph' (models | peak | tput | decode | ctx | ttft | pairs | table)" >&2; exit 2 ;;
  esac
done
