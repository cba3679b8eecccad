#!/usr/bin/env python3
"""Simulated day (issue #15 (b)): the planner re-plans every interval inside the simulator
(`pdserve simulate --plan BUDGET --replan-interval S`: the real Observer forecast,
PlanController hysteresis and the MIP's keep-the-cache-holders rule, on the simulated
router's counters) over a day-shaped trace (bench/planner_day_trace.py), against a fixed
fleet sized for the peak (the largest prefill and decode counts the planner used, with its
threshold, all day). Prints one markdown table: per interval the arrivals, the elastic
fleet (action, P+D) and both fleets' SLO attainment; then the totals.

  bench/planner_day_sim.py --profile bench/profiles/synth-llama-small-q8_0.json \
      --model ../shared/models/synth-llama-small-q8_0.gguf \
      --trace ../shared/traces/mooncake_conversation_trace.jsonl --requests 10000 --day 2400 \
      --peak-ratio 4 --interval 100 --budget 32 \
      --scaling "--length-scale 0.125 --max-input 2048 --max-output 256" --slo "--slo-ttft 2000 --slo-tpot 100"
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def simulate(a, trace, extra):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [a.pdserve, "simulate", "--profile", a.profile, "-m", a.model, "--trace", "mooncake", trace, *shlex.split(a.scaling),
           *shlex.split(a.slo), *extra, "--json", out]
    print("$ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("simulate failed: %s\n%s" % (" ".join(cmd), p.stderr))
    rep = json.load(open(out))
    os.unlink(out)
    return rep


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pdserve", default="build/pdserve")
    ap.add_argument("--profile", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--trace", required=True, help="a Mooncake trace to re-time")
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--day", type=float, default=2400)
    ap.add_argument("--peak-ratio", type=float, default=4)
    ap.add_argument("--interval", type=float, default=100)
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--scaling", default="")
    ap.add_argument("--slo", default="")
    ap.add_argument("--planner", default="", help="extra planner flags (--headroom, --scale-down-after, --window)")
    a = ap.parse_args()
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
        day = f.name
    subprocess.run([sys.executable, os.path.join(HERE, "planner_day_trace.py"), a.trace, day, "--requests", str(a.requests), "--day",
                    str(a.day), "--peak-ratio", str(a.peak_ratio)], check=True, stdout=sys.stderr)
    el = simulate(a, day, ["--plan", str(a.budget), "--replan-interval", str(a.interval), *shlex.split(a.planner)])
    rows = el["intervals"]
    maxp = max(r.get("prefill", 0) for r in rows)
    maxd = max(r.get("decode", 1) for r in rows)
    thr = [r["threshold"] for r in rows if r.get("prefill", 0) == maxp][0] if maxp else None
    fleet = ["--colocated", str(maxd)] if maxp == 0 else ["--prefill", str(maxp), "--decode", str(maxd), "--remote-prefill-threshold",
                                                          str(int(thr)) if thr != "inf" else str(1 << 30)]
    fx = simulate(a, day, [*fleet, "--report-interval", str(a.interval)])
    os.unlink(day)
    print("| t (s) | arrivals (req/s) | forecast (req/s) | planner action | elastic P+D | elastic SLO met | fixed %s SLO met |" %
          ("%dP+%dD" % (maxp, maxd) if maxp else "%d colocated" % maxd))
    print("|---|---|---|---|---|---|---|")
    for r, q in zip(rows, fx["intervals"]):
        print("| %.0f | %.2f | %.2f | %s | %d+%d | %.1f%% | %.1f%% |" % (
            r["t"], r["rate"], r.get("forecast_rate", 0), r.get("action", "-"), r.get("prefill", 0), r.get("decode", 0),
            100 * r["slo_attainment"], 100 * q["slo_attainment"]))
    inst_el = sum((r.get("prefill", 0) + r.get("decode", 0)) * a.interval for r in rows)
    inst_fx = (maxp + maxd) * a.interval * len(rows)
    for name, rep, inst in (("elastic (planner)", el, inst_el), ("fixed peak-sized", fx, inst_fx)):
        s = rep["summary"]
        print("\n%s: %d/%d requests within SLO (%.1f%%), goodput %.3f req/s, TTFT p50/p99 %.0f/%.0f ms, TPOT p50/p99 %.1f/%.1f ms, "
              "%.0f instance-seconds (mean %.2f instances)" % (
                  name, s["good_requests"], s["completed"], 100.0 * s["good_requests"] / max(1, s["completed"]), s["goodput"] or 0,
                  s["ttft_ms"]["p50"], s["ttft_ms"]["p99"], s["tpot_ms"]["p50"], s["tpot_ms"]["p99"], inst, inst / (a.interval * len(rows))))


if __name__ == "__main__":
    main()
