#!/usr/bin/env python3
"""Simulated goodput vs number of instances, colocated vs disaggregated (issue #15 (b)).

Every number this prints comes from `pdserve simulate` (a discrete-event simulation on a
virtual clock with the real scheduler and routing policies, bench/RESULTS.md says what is
modelled) driven by a profile measured on this machine with `pdserve profile`.
For each total N: N colocated instances; the planner's plan for a budget of N
(`pdserve simulate --plan N`: the GLPK MIP on the workload's rate, mean lengths and ideal
prefix-hit share, then that plan simulated); and, for reference, the best P+D = N split
among a few P:D ratios found by simulating each.

  bench/planner_sim_sweep.py --profile bench/profiles/synth-llama-small-q8_0.json \
      --model ../shared/models/synth-llama-small-q8_0.gguf --trace mooncake FILE \
      --scaling "--length-scale 0.25 --max-input 3000 --max-output 256 --max-requests 10000" \
      --slo "--slo-ttft 5000 --slo-tpot 100" --sizes 1,2,4,8,16,32,64
"""
import argparse
import json
import os
import shlex
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


def simulate(a, extra, out=None):
    if out is None:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
    cmd = [a.pdserve, "simulate", "--profile", a.profile, "-m", a.model, "--trace", a.trace[0], a.trace[1],
           *shlex.split(a.scaling), *shlex.split(a.slo), "--policy", a.policy, *extra, "--json", out]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit("simulate failed: %s\n%s" % (" ".join(cmd), p.stderr))
    rep = json.load(open(out))
    s = rep["summary"]
    os.unlink(out)
    return {"plan": rep.get("plan"), "goodput": s["goodput"] or 0.0, "good": s["good_requests"], "completed": s["completed"],
            "ttft_p50": s["ttft_ms"]["p50"], "ttft_p99": s["ttft_ms"]["p99"], "tpot_p50": s["tpot_ms"]["p50"],
            "tpot_p99": s["tpot_ms"]["p99"], "wall": wall}


def planned(a, n):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    r = simulate(a, ["--plan", str(n)], out)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pdserve", default="build/pdserve")
    ap.add_argument("--profile", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--trace", nargs=2, required=True)
    ap.add_argument("--scaling", default="")
    ap.add_argument("--slo", default="")
    ap.add_argument("--policy", default="least_load")
    ap.add_argument("--sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--ratios", default="0.25,0.5,0.75,0.875")
    ap.add_argument("--jobs", type=int, default=8)
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    ratios = [float(x) for x in a.ratios.split(",") if x]  # "": no split search
    print("| instances | colocated goodput (req/s) | SLO met | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) "
          "| planner's plan (budget N) | planned goodput (req/s) | SLO met | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) "
          "| best searched P+D (goodput) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    jobs = {}
    with ThreadPoolExecutor(max_workers=a.jobs) as ex:  # simulations are independent
        for n in sizes:
            jobs[(n, 0)] = ex.submit(simulate, a, ["--colocated", str(n)])
            jobs[(n, -1)] = ex.submit(planned, a, n)
            if n >= 2:
                for p in sorted({min(n - 1, max(1, round(n * r))) for r in ratios}):
                    jobs[(n, p)] = ex.submit(simulate, a, ["--prefill", str(p), "--decode", str(n - p)])
        for n in sizes:
            c = jobs[(n, 0)].result()
            best = None
            for (m, p), f in jobs.items():
                if m != n or p <= 0:
                    continue
                r = f.result()
                r["split"] = "%d+%d" % (p, n - p)
                if best is None or r["goodput"] > best["goodput"]:
                    best = r
            row = "| %d | %.3f | %.1f%% | %.0f / %.0f | %.1f / %.1f |" % (
                n, c["goodput"], 100.0 * c["good"] / max(1, c["completed"]), c["ttft_p50"], c["ttft_p99"], c["tpot_p50"],
                c["tpot_p99"])
            q = jobs[(n, -1)].result()
            pl = q["plan"]
            if pl["prefill"] == 0:
                name = "%d colocated" % pl["decode"]
            else:
                name = "%dP+%dD, remote > %s" % (pl["prefill"], pl["decode"],
                                                 pl["threshold"] if pl["threshold"] == "inf" else "%d" % pl["threshold"])
            row += " %s | %.3f | %.1f%% | %.0f / %.0f | %.1f / %.1f |" % (
                name, q["goodput"], 100.0 * q["good"] / max(1, q["completed"]), q["ttft_p50"], q["ttft_p99"], q["tpot_p50"],
                q["tpot_p99"])
            row += (" %s (%.3f) |" % (best["split"], best["goodput"])) if best else " - |"
            print(row, flush=True)

if __name__ == "__main__":
    main()
