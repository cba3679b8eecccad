#!/usr/bin/env python3
"""Measured: colocated `pdserve serve` (2 threads) vs 1P+1D (prefill and decode workers of
1 thread each behind `pdserve router`) on this 2-core machine, over input/output ratios and
Poisson rates, with `pdserve bench`; and the planner's choice for each cell (issue #15 (a)).

  run   --ratio 1024/32 --rates 0.5,1,1.5 --out DIR   measure one ratio (take the bench lock:
        `flock /work/bench.lock bench/planner_measured_sweep.py run ...`); writes DIR/<cell>.json
        (pdserve bench's report) and DIR/<cell>.env (date, uptime before/after, commands)
  table --out DIR --profile P                          the table: goodput of both layouts per
        cell, the measured winner, and the planner's choice for a budget of 2 instances
        (`pdserve simulate --plan 2`, i.e. the GLPK MIP on the cell's rate and lengths with
        the profile, then its plan simulated) — not a measurement, so no lock needed.

Every server runs at normal priority and the bench client beside it (the client is light:
one thread per in-flight request, SSE parsing). Ports: BASE..BASE+5 (env BASE, 19310).
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request


def wait_health(port, proc, timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit("server on port %d exited (%d)" % (port, proc.returncode))
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    raise SystemExit("port %d not healthy after %d s" % (port, timeout))


def cell_name(layout, inp, out, rate):
    return "%s-%d-%d-r%s" % (layout, inp, out, ("%g" % rate).replace(".", "p"))


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def bench_args(a, inp, out, rate):
    n = max(a.min_requests, int(round(rate * a.seconds)))
    return ["--model", os.path.splitext(os.path.basename(a.model))[0], "--tokenizer", a.model, "--rate", "%g" % rate, "--input-len", str(inp),
            "--output-len", str(out), "--max-requests", str(n), "--seed", "1", "--slo-ttft", str(a.slo_ttft),
            "--slo-tpot", str(a.slo_tpot), "--no-progress"]


def run_cell(a, layout, inp, out, rate):
    base = int(os.environ.get("BASE", "19310"))
    procs = []
    logs = []
    name = cell_name(layout, inp, out, rate)
    cmds = []
    try:
        def start(cmd, tag):
            log = open(os.path.join(a.out, name + "." + tag + ".log"), "w")
            logs.append(log)
            cmds.append(" ".join(shlex.quote(c) for c in cmd))
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            procs.append(p)
            return p

        engine = ["--max-seqs", str(a.max_seqs), "--max-batched-tokens", str(a.max_batched_tokens)]
        if layout == "colocated":
            port = base
            p = start([a.pdserve, "serve", "-m", a.model, "--port", str(port), "-t", "2", *engine], "serve")
            wait_health(port, p)
        else:
            pf, pfm, dc, dcm, port = base + 1, base + 2, base + 3, base + 4, base + 5
            p = start([a.pdserve, "prefill", "-m", a.model, "--port", str(pf), "--metrics-port", str(pfm), "-t", "1", *engine],
                      "prefill")
            wait_health(pfm, p)
            p = start([a.pdserve, "decode", "-m", a.model, "--port", str(dc), "--metrics-port", str(dcm), "-t", "1",
                       "--prefill", "127.0.0.1:%d" % pf, *engine], "decode")
            wait_health(dcm, p)
            p = start([a.pdserve, "router", "-m", a.model, "--port", str(port), "--decode", "127.0.0.1:%d" % dc], "router")
            wait_health(port, p)
        js = os.path.join(a.out, name + ".json")
        cmd = [a.pdserve, "bench", "--url", "http://127.0.0.1:%d" % port, *bench_args(a, inp, out, rate), "--json", js]
        cmds.append(" ".join(shlex.quote(c) for c in cmd))
        env = {"date_start": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "uptime_start": uptime()}
        b = subprocess.run(cmd, capture_output=True, text=True)
        env.update({"date_end": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "uptime_end": uptime(),
                    "commands": cmds, "bench_rc": b.returncode})
        with open(os.path.join(a.out, name + ".txt"), "w") as f:
            f.write(b.stdout + b.stderr)
        with open(os.path.join(a.out, name + ".env"), "w") as f:
            json.dump(env, f, indent=1)
        if b.returncode != 0:
            raise SystemExit("bench failed (%d): %s\n%s" % (b.returncode, cmds[-1], b.stderr[-2000:]))
        s = json.load(open(js))["summary"]
        print("%s: goodput %.3f req/s, %d/%d good; %s" % (name, s["goodput"] or 0, s["good_requests"], s["completed"],
                                                        env["uptime_end"]), flush=True)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()


def parse_ratio(r):
    i, o = r.split("/")
    return int(i), int(o)


def cmd_run(a):
    os.makedirs(a.out, exist_ok=True)
    inp, out = parse_ratio(a.ratio)
    for rate in [float(x) for x in a.rates.split(",")]:
        for layout in ("colocated", "pd"):
            run_cell(a, layout, inp, out, rate)


def planner_choice(a, inp, out, rate):
    """`pdserve simulate --plan 2` on the cell's workload: the MIP's plan and its simulation."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        js = f.name
    cmd = [a.pdserve, "simulate", "--profile", a.profile, "-m", a.model, "--rate", "%g" % rate, "--input-len", str(inp),
           "--output-len", str(out), "--max-requests", str(max(a.min_requests, int(round(rate * a.seconds)))), "--seed", "1",
           "--slo-ttft", str(a.slo_ttft), "--slo-tpot", str(a.slo_tpot), "--max-seqs", str(a.max_seqs),
           "--max-batched-tokens", str(a.max_batched_tokens), "--plan", "2", "--json", js]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("simulate failed: %s\n%s" % (" ".join(cmd), p.stderr))
    plan = None
    for line in p.stdout.splitlines():
        if line.startswith("Plan "):
            plan = line
    rep = json.load(open(js))
    os.unlink(js)
    return rep.get("plan"), rep["summary"], plan


def cmd_table(a):
    cells = {}
    for fn in sorted(os.listdir(a.out)):
        if fn.endswith(".env"):
            name = fn[:-4]
            layout, inp, out, r = name.split("-")
            rate = float(r[1:].replace("p", "."))
            s = json.load(open(os.path.join(a.out, name + ".json")))["summary"]
            env = json.load(open(os.path.join(a.out, fn)))
            cells.setdefault((int(inp), int(out), rate), {})[layout] = (s, env)
    print("| input/output | rate (req/s) | colocated goodput (req/s) | SLO met | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) "
          "| 1P+1D goodput (req/s) | SLO met | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | measured winner "
          "| planner's choice (budget 2) | picked the winner? |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    order = [parse_ratio(r) for r in a.ratios.split(",")]
    agree = total = 0
    for key in sorted(cells, key=lambda k: (order.index(k[:2]) if k[:2] in order else 99, k[2])):
        c = cells[key]
        if "colocated" not in c or "pd" not in c:
            continue
        inp, out, rate = key
        row = "| %d/%d | %g |" % (inp, out, rate)
        g = {}
        for layout in ("colocated", "pd"):
            s, _ = c[layout]
            g[layout] = s["goodput"] or 0.0
            row += " %.3f | %.0f%% | %.0f / %.0f | %.1f / %.1f |" % (
                g[layout], 100.0 * s["good_requests"] / max(1, s["completed"]), s["ttft_ms"]["p50"], s["ttft_ms"]["p99"],
                s["tpot_ms"]["p50"], s["tpot_ms"]["p99"])
        tie = abs(g["colocated"] - g["pd"]) <= a.tie * max(g.values())
        winner = "tie" if tie else ("colocated" if g["colocated"] > g["pd"] else "1P+1D")
        plan, sim, line = planner_choice(a, inp, out, rate)
        if plan["prefill"] == 0:
            choice = "colocated (%dD, local prefill)" % plan["decode"]
            pick = "colocated"
        elif plan.get("threshold") == "inf":
            choice = "%dP+%dD, never remote (= colocated)" % (plan["prefill"], plan["decode"])
            pick = "colocated"
        else:
            choice = "%dP+%dD (remote above %s tokens)" % (plan["prefill"], plan["decode"], plan["threshold"])
            pick = "1P+1D"
        ok = tie or pick == winner
        total += 1
        agree += ok
        choice += "; predicted %.2f, simulated %.2f req/s" % (plan["predicted_goodput"], sim["goodput"] or 0.0)
        row += " %s | %s | %s |" % (winner, choice, "yes" if ok else "**no**")
        print(row, flush=True)
    print("\nplanner agrees with the measured winner (ties count as agreement) in %d of %d cells" % (agree, total))
    for key in sorted(cells):
        for layout, (s, env) in sorted(cells[key].items()):
            print("%s %s: %s .. %s; %s | %s" % (key, layout, env["date_start"], env["date_end"], env["uptime_start"],
                                              env["uptime_end"]), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["run", "table"])
    ap.add_argument("--pdserve", default="build/pdserve")
    ap.add_argument("--model", default="../shared/models/synth-llama-small-q8_0.gguf")
    ap.add_argument("--profile", default="bench/profiles/synth-llama-small-q8_0.json")
    ap.add_argument("--ratio", default="1024/32", help="run: INPUT/OUTPUT tokens")
    ap.add_argument("--ratios", default="1024/32,256/256,64/512", help="table: row order")
    ap.add_argument("--rates", default="0.5,1,1.5", help="run: Poisson rates (req/s)")
    ap.add_argument("--seconds", type=float, default=40, help="requests = rate x this (at least --min-requests)")
    ap.add_argument("--min-requests", type=int, default=20)
    ap.add_argument("--slo-ttft", type=float, default=2000, help="ms")
    ap.add_argument("--slo-tpot", type=float, default=50, help="ms")
    ap.add_argument("--max-seqs", type=int, default=64)
    ap.add_argument("--max-batched-tokens", type=int, default=2048)
    ap.add_argument("--tie", type=float, default=0.05, help="goodputs within this share of the larger are a tie")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # stop the servers on the way out
    cmd_run(a) if a.what == "run" else cmd_table(a)


if __name__ == "__main__":
    main()
