#!/usr/bin/env python3
"""Soak test with faults (issue #20 item 5): a benchmark, not a unit test.

Runs random traffic for --minutes against one `pdserve serve` (--mode serve) or a local PD
cluster (--mode pd: two prefill workers, one of them injecting faults, two decode workers,
a router; a decode worker is SIGKILLed and restarted every --kill-every seconds), and checks
what a long run must keep:

  * every greedy or seeded request's text equals its reference answer, computed alone (one
    request at a time, nothing else running) before the load starts: pdserve gives each
    token the same bits in any batch, so any difference is a wrong output;
  * KV blocks used when idle are 0: every minute the load pauses, in-flight requests end
    (aborted ones included), and each engine's /health must come back to
    kv_blocks_used == 0 and no request running;
  * RSS, the C heap in use (process_heap_bytes on /metrics: glibc mallinfo2, live
    allocations only, so allocator slack and first-touched pages do not count), open file
    descriptors and threads of every process stay flat after warm-up (reported per minute
    and as growth per hour, a least-squares slope from the end of --warmup-minutes on).

Request shapes, drawn at random per request: a prompt from a fixed pool, completions or
chat, max_tokens 1-96, greedy or seeded sampling (temperature 0.8, top_p 0.95), n 1-3,
streamed or not; some are aborted by the client (a streamed one closes its connection after
a few events; a non-streamed one gives up after a short socket timeout), the servers run
with a short --request-timeout that the longest requests under load pass. Outcomes: ok,
wrong, client_abort, server_timeout, http_<status>, error.

Standard library only. Example (the committed table in bench/RESULTS.md):
  python3 bench/soak.py --mode serve --minutes 60 --out /tmp/soak-serve.md
  python3 bench/soak.py --mode pd --minutes 60 --out /tmp/soak-pd.md
Exit status 1 when a wrong output was seen or blocks were held while idle.
"""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROMPTS = [
    "Once upon a time", "The little dog", "Lily and Tom went to the park", "One day, a big bear",
    "The sun was shining and", "Sam had a red ball.", "There was a girl named Sue", "Mom said",
    "The cat sat on the", "In the forest there lived", "Tim wanted to play with", "The bird flew",
    "A small boy found a box", "It was a rainy day", "The princess looked at", "Ben and his friend",
]


def rss_by_kind(pid):
    """RSS (MiB) of `pid` by kind of mapping, from /proc/PID/smaps: file (the binary,
    libraries, mapped files), malloc (the brk heap and glibc's 64-MiB-aligned arena heaps),
    stacks (thread stacks: anonymous mappings right after a 4-KiB guard page), anon (the
    rest: mmap-served allocations such as the KV pool, other anonymous memory)."""
    vmas, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if not parts[0].endswith(":") and "-" in parts[0]:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                cur = {"lo": lo, "hi": hi, "perms": parts[1], "path": " ".join(parts[5:]), "rss": 0}
                vmas.append(cur)
            elif parts[0] == "Rss:" and cur is not None:
                cur["rss"] = int(parts[1])
    out = {"file": 0, "malloc": 0, "stacks": 0, "anon": 0}

    def guard(v):
        return v is not None and v["perms"].startswith("---") and not v["path"]

    for i, v in enumerate(vmas):
        prev = vmas[i - 1] if i else None
        nxt = vmas[i + 1] if i + 1 < len(vmas) else None
        if v["path"] and not v["path"].startswith("["):
            kind = "file"
        elif v["path"] == "[heap]":
            kind = "malloc"
        elif v["path"]:
            kind = "anon"  # [stack] of the main thread, [vdso], ...
        elif v["lo"] % (64 << 20) == 0 and guard(nxt) and nxt["lo"] == v["hi"]:
            kind = "malloc"  # a non-main arena's heap: used part, then its reserved rest
        elif guard(prev) and prev["hi"] == v["lo"] and prev["hi"] - prev["lo"] == 4096:
            kind = "stacks"
        else:
            kind = "anon"
        out[kind] += v["rss"]
    return {k: x / 1024 for k, x in out.items()}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """One pdserve process: its role, args, HTTP port for /health (serve/router: the API
    port; workers: --metrics-port) and the Popen handle; restartable with the same args."""

    def __init__(self, name, args, http_port, log_dir):
        self.name, self.args, self.http_port = name, args, http_port
        self.log = open(os.path.join(log_dir, name + ".log"), "ab")
        self.p = None
        self.restarts = 0

    def start(self):
        self.p = subprocess.Popen(self.args, stdout=self.log, stderr=self.log)

    def kill(self):
        if self.p and self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()

    def stop(self):
        if self.p and self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def health(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=5)
            c.request("GET", "/health")
            r = c.getresponse()
            body = r.read()
            c.close()
            return r.status, json.loads(body) if body else {}
        except (OSError, ValueError, http.client.HTTPException):
            return None, {}

    def wait_ready(self, timeout=120):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.p.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.p.returncode} (see its log)")
            if self.health()[0] == 200:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready after {timeout} s")

    def heap(self):
        """(heap in use MiB, heap free MiB) from /metrics (process_heap_bytes,
        process_heap_free_bytes), or (None, None) when unreachable or not reported."""
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=5)
            c.request("GET", "/metrics")
            r = c.getresponse()
            body = r.read().decode()
            c.close()
        except (OSError, UnicodeDecodeError, http.client.HTTPException):
            return None, None
        got = {}
        for line in body.splitlines():
            name, _, value = line.partition(" ")
            if name in ("process_heap_bytes", "process_heap_free_bytes"):
                try:
                    got[name] = float(value) / 2**20
                except ValueError:
                    pass
        return got.get("process_heap_bytes"), got.get("process_heap_free_bytes")

    def usage(self):
        """Usage of the live process, or None: a dict with rss (MiB), heap and heap_free
        (MiB, None when /metrics does not say), fds, threads."""
        if not self.p or self.p.poll() is not None:
            return None
        try:
            rss = threads = 0
            with open(f"/proc/{self.p.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1]) / 1024
                    elif line.startswith("Threads:"):
                        threads = int(line.split()[1])
            fds = len(os.listdir(f"/proc/{self.p.pid}/fd"))
            kinds = rss_by_kind(self.p.pid)
        except OSError:
            return None
        heap, heap_free = self.heap()
        return {"rss": rss, "heap": heap, "heap_free": heap_free, "fds": fds, "threads": threads, "kinds": kinds}


def start_cluster(a, log_dir):
    """Returns (processes, API port, engines checked for idle blocks, decode workers)."""
    binary, model = a.pdserve, a.model
    common = ["-m", model, "-t", "1", "--log-level", "warn"]
    if a.mode == "serve":
        port = free_port()
        s = Proc("serve", [binary, "serve", *common, "--port", str(port), "--request-timeout", str(a.request_timeout)], port,
                 log_dir)
        return [s], port, [s], []
    procs, engines = [], []
    prefill_ports = []
    for i, faults in enumerate([[], ["--fault-corrupt-block", "2", "--fault-drop-after", "5"]]):
        gp, mp = free_port(), free_port()
        p = Proc(f"prefill{i}", [binary, "prefill", *common, "--port", str(gp), "--metrics-port", str(mp), *faults],
                 mp, log_dir)
        procs.append(p)
        engines.append(p)
        prefill_ports.append(f"127.0.0.1:{gp}")
    decodes, decode_ports = [], []
    for i in range(2):
        gp, mp = free_port(), free_port()
        d = Proc(f"decode{i}", [binary, "decode", *common, "--port", str(gp), "--metrics-port", str(mp),
                                "--remote-prefill-threshold", "0", "--prefill", ",".join(prefill_ports),
                                "--request-timeout", str(a.request_timeout)], mp, log_dir)
        procs.append(d)
        engines.append(d)
        decodes.append(d)
        decode_ports.append(f"127.0.0.1:{gp}")
    port = free_port()
    r = Proc("router", [binary, "router", "-m", model, "--log-level", "warn", "--port", str(port), "--decode",
                        ",".join(decode_ports)], port, log_dir)
    procs.append(r)
    return procs, port, engines, decodes


class Shape:
    def __init__(self, rnd, allow_abort=True):
        self.prompt = rnd.choice(PROMPTS)
        self.chat = rnd.random() < 0.3
        self.max_tokens = rnd.choice([1, 4, 16, 32, 64, 96])
        self.seeded = rnd.random() < 0.4
        self.seed = rnd.randrange(1, 1000) if self.seeded else None
        self.n = rnd.choice([1, 1, 1, 2, 3])
        self.stream = rnd.random() < 0.5
        self.abort = allow_abort and rnd.random() < 0.15

    def key(self):
        return (self.prompt, self.chat, self.max_tokens, self.seed)

    def body(self, model_n=None):
        b = {"max_tokens": self.max_tokens, "n": model_n or self.n, "stream": self.stream}
        if self.chat:
            b["messages"] = [{"role": "user", "content": self.prompt}]
        else:
            b["prompt"] = self.prompt
        if self.seeded:
            b.update({"temperature": 0.8, "top_p": 0.95, "seed": self.seed})
        else:
            b["temperature"] = 0
        return b


def request(port, shape, rnd, n=None, stream=None):
    """Sends one request; returns (outcome, {choice index: text}, finish reasons)."""
    body = shape.body(n)
    if stream is not None:
        body["stream"] = stream
    path = "/v1/chat/completions" if shape.chat else "/v1/completions"
    timeout = 60
    if shape.abort and not body["stream"]:
        timeout = rnd.choice([0.01, 0.05, 0.2])
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    texts, finish = {}, {}
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            err = r.read()
            return ("server_timeout" if b"request-timeout" in err else f"http_{r.status}"), texts, finish
        if not body["stream"]:
            j = json.loads(r.read())
            if "error" in j:  # an error after the 200 was sent (the keep-alive spaces of a long request)
                return ("server_timeout" if "request-timeout" in json.dumps(j) else "error"), texts, finish
            for ch in j["choices"]:
                texts[ch["index"]] = ch["message"]["content"] if shape.chat else ch["text"]
                finish[ch["index"]] = ch["finish_reason"]
            return "ok", texts, finish
        events = 0
        while True:
            line = r.readline()
            if not line:
                return "error", texts, finish
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                return "ok", texts, finish
            events += 1
            if shape.abort and events >= 2:
                c.sock.shutdown(socket.SHUT_RDWR)
                return "client_abort", texts, finish
            j = json.loads(data)
            if "error" in j:
                return ("server_timeout" if "request-timeout" in json.dumps(j) else "error"), texts, finish
            for ch in j.get("choices", []):
                i = ch["index"]
                piece = (ch.get("delta", {}).get("content") if shape.chat else ch.get("text")) or ""
                texts[i] = texts.get(i, "") + piece
                if ch.get("finish_reason"):
                    finish[i] = ch["finish_reason"]
    except (socket.timeout, TimeoutError):
        return ("client_abort" if shape.abort else "error"), texts, finish
    except (OSError, ValueError, http.client.HTTPException):
        return ("client_abort" if shape.abort else "error"), texts, finish
    finally:
        c.close()


class Soak:
    def __init__(self, a):
        self.a = a
        self.rnd = random.Random(a.seed)
        self.lock = threading.Lock()
        self.counts = {}
        self.wrong_examples = []
        self.refs = {}
        self.pause = threading.Event()
        self.in_flight = 0
        self.stop = threading.Event()

    def count(self, outcome):
        with self.lock:
            self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def reference(self, port, shape):
        """The text of choice 0 computed alone (n = 1, not streamed); seeded choice k of a
        request uses seed + k (pdserve's rule), so only choice 0 is compared for seeded n > 1."""
        k = shape.key()
        deadline = time.time() + 180  # a loaded machine may pass --request-timeout even alone
        while k not in self.refs:
            out, texts, _ = request(port, shape, self.rnd, n=1, stream=False)
            if out == "ok":
                self.refs[k] = texts[0]
            elif time.time() > deadline:
                raise RuntimeError(f"no reference answer for {k}: {out}")
            else:
                time.sleep(1)
        return self.refs[k]

    def client(self, port, cid):
        rnd = random.Random(self.a.seed * 1000 + cid)
        while not self.stop.is_set():
            if self.pause.is_set():
                time.sleep(0.05)
                continue
            with self.lock:
                self.in_flight += 1
            try:
                shape = Shape(rnd)
                try:
                    out, texts, finish = request(port, shape, rnd)
                except Exception as e:  # an answer of an unexpected shape: counted, the client goes on
                    out, texts, finish = "error", {}, {}
                    print(f"  client {cid}: {e!r} on {json.dumps(shape.body())}", flush=True)
                if out == "ok":
                    ref = self.refs.get(shape.key())
                    choices = range(shape.n) if not shape.seeded else [0]
                    for i in choices:
                        if ref is not None and texts.get(i) != ref:
                            out = "wrong"
                            if len(self.wrong_examples) < 5:
                                self.wrong_examples.append((shape.body(), i, texts.get(i), ref))
                self.count(out)
            finally:
                with self.lock:
                    self.in_flight -= 1
            if self.a.think_ms > 0:
                time.sleep(rnd.uniform(0, 2 * self.a.think_ms) / 1000)

    def quiesce(self, engines):
        """Pauses the load until nothing is in flight and every engine reports no running
        request; returns each engine's kv_blocks_used then (None: unreachable)."""
        self.pause.set()
        t0 = time.time()
        while self.in_flight > 0 and time.time() - t0 < 120:
            time.sleep(0.05)
        used = {}
        deadline = time.time() + 15
        while True:
            used = {}
            for e in engines:
                status, h = e.health()
                used[e.name] = h.get("kv_blocks_used") if status == 200 and h.get("requests_running", 1) == 0 else None
            if all(v == 0 for v in used.values()) or time.time() > deadline:
                break
            time.sleep(0.1)
        return used


def fmt_mib(v):
    return "—" if v is None else f"{v:.1f}"


def growth_line(p, rows, warmup):
    """The summary line of process `p`: least-squares growth per hour of RSS, heap in use,
    heap free, fds and threads over the minutes from `warmup` on (from minute 2 when the
    run is shorter), the first and last values of that window, and RSS growth by kind of
    mapping (rss_by_kind)."""
    start = warmup if sum(1 for r in rows if r[0] >= warmup) >= 2 else 2
    pts = [(m, us[p.name]) for m, _, _, us in rows if m >= start and us.get(p.name)]
    if len(pts) < 2:
        return f"- {p.name}: fewer than 2 samples from minute {start:g}"
    xs = [m for m, _ in pts]
    parts = []
    for key, label, unit in [("rss", "RSS", " MiB"), ("heap", "heap in use", " MiB"), ("heap_free", "heap free", " MiB"),
                             ("fds", "fds", ""), ("threads", "threads", "")]:
        sel = [(m, u[key]) for m, u in pts if u[key] is not None]
        if len(sel) < 2:
            parts.append(f"{label} —")
            continue
        first, last = sel[0][1], sel[-1][1]
        span = f" ({first:.1f} → {last:.1f})" if unit else f" ({first} → {last})"
        parts.append(f"{label} {slope_per_hour([m for m, _ in sel], [v for _, v in sel]):+.1f}{unit}{span}")
    kinds = "; RSS by kind: " + ", ".join(
        f"{k} {slope_per_hour(xs, [u['kinds'][k] for _, u in pts]):+.1f} ({pts[0][1]['kinds'][k]:.1f} → "
        f"{pts[-1][1]['kinds'][k]:.1f})" for k in ("file", "malloc", "stacks", "anon")) + " MiB"
    return (f"- {p.name}: growth per hour from minute {start:g} (minutes {xs[0]}–{xs[-1]}): " + ", ".join(parts) + kinds +
            (f" (restarted {p.restarts} times: its figures restart too)" if p.restarts else ""))


def slope_per_hour(xs, ys):
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["serve", "pd"], default="serve")
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--think-ms", type=float, default=0,
                    help="mean pause of a client between requests (0: closed loop, as fast as served)")
    ap.add_argument("--kill-every", type=float, default=180, help="pd: SIGKILL a decode worker every S seconds")
    ap.add_argument("--request-timeout", type=float, default=2.0,
                    help="the servers' --request-timeout (s): the longest requests under load pass it")
    ap.add_argument("--pdserve", default=os.path.join(ROOT, "build", "pdserve"))
    ap.add_argument("--model", default=os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf"))
    ap.add_argument("--warmup-minutes", type=float, default=10,
                    help="growth per hour is fitted from the end of this minute on (the figures before it are warm-up)")
    ap.add_argument("--out", help="write the report (markdown) here too")
    ap.add_argument("--log-dir", default="/tmp/pdserve-soak")
    a = ap.parse_args()

    def interrupted(signum, frame):  # SIGTERM (and SIGINT, ignored in a background job) stop the servers too
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    os.makedirs(a.log_dir, exist_ok=True)
    procs, port, engines, decodes = start_cluster(a, a.log_dir)
    for p in procs:
        p.start()
    soak = Soak(a)
    rows, ok = [], True
    clients_alive = 0
    try:
        for p in procs:
            p.wait_ready()
        # References, alone: every (prompt, chat, max_tokens, seed) the load will draw for
        # greedy requests, and the seeds it draws lazily are computed before the load too.
        rnd = random.Random(a.seed)
        for prompt in PROMPTS:
            for chat in (False, True):
                for mt in [1, 4, 16, 32, 64, 96]:
                    s = Shape(rnd, allow_abort=False)
                    s.prompt, s.chat, s.max_tokens, s.seeded, s.seed = prompt, chat, mt, False, None
                    soak.reference(port, s)
        seeded = 0
        for cid in range(a.clients):  # the seeded shapes each client will draw first
            r2 = random.Random(a.seed * 1000 + cid)
            for _ in range(200):
                s = Shape(r2)
                if s.seeded:
                    s2 = Shape(rnd, allow_abort=False)
                    s2.prompt, s2.chat, s2.max_tokens, s2.seeded, s2.seed = s.prompt, s.chat, s.max_tokens, True, s.seed
                    soak.reference(port, s2)
                    seeded += 1
        print(f"soak: {len(soak.refs)} reference answers ({seeded} seeded draws), {a.clients} clients, "
              f"{a.minutes} min, mode {a.mode}", flush=True)
        threads = [threading.Thread(target=soak.client, args=(port, i), daemon=True) for i in range(a.clients)]
        for t in threads:
            t.start()
        t_start = time.time()
        next_kill = t_start + a.kill_every
        minute = 0
        while time.time() - t_start < a.minutes * 60:
            next_report = t_start + (minute + 1) * 60
            while time.time() < min(next_report, t_start + a.minutes * 60):
                if decodes and time.time() >= next_kill:
                    d = decodes[sum(x.restarts for x in decodes) % len(decodes)]
                    d.kill()
                    d.start()
                    d.restarts += 1
                    next_kill += a.kill_every
                    threading.Thread(target=d.wait_ready, daemon=True).start()
                time.sleep(0.2)
            minute += 1
            used = soak.quiesce(engines)
            usage = {p.name: p.usage() for p in procs}
            with soak.lock:
                counts = dict(soak.counts)
            soak.pause.clear()
            rows.append((minute, counts, used, usage))
            held = {k: v for k, v in used.items() if v != 0}
            clients_alive = sum(t.is_alive() for t in threads)
            print(f"min {minute}: {counts} idle blocks {used} clients {clients_alive}/{len(threads)} " +
                  " ".join(f"{n}={u['rss']:.1f}MiB/heap {fmt_mib(u['heap'])}MiB/{u['fds']}fd/{u['threads']}thr"
                           for n, u in usage.items() if u), flush=True)
            if held:
                ok = False
                print(f"  blocks held or engine busy/unreachable when idle: {held}", flush=True)
        soak.stop.set()
        for t in threads:
            t.join(timeout=90)
    finally:
        for p in reversed(procs):
            p.stop()
    final = rows[-1][1] if rows else {}
    wrong = final.get("wrong", 0)
    ok = ok and wrong == 0
    lines = [f"Soak, mode {a.mode}: {a.minutes} min, {a.clients} clients (think {a.think_ms:g} ms), seed {a.seed}, model "
             f"{os.path.basename(a.model)}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "", "Requests by outcome per minute (then the total); idle checks and process figures at the end of each minute.",
             "", "| minute | " + " | ".join(sorted({k for r in rows for k in r[1]})) +
             " | idle blocks used | " + " | ".join(f"{p.name} RSS / heap MiB, fds, threads" for p in procs) + " |"]
    keys = sorted({k for r in rows for k in r[1]})
    lines.append("|---:|" + "---:|" * len(keys) + "---|" + "---|" * len(procs))
    prev = {}
    for minute, counts, used, usage in rows:
        delta = {k: counts.get(k, 0) - prev.get(k, 0) for k in keys}
        prev = counts
        u = " | ".join(f"{usage[p.name]['rss']:.1f} / {fmt_mib(usage[p.name]['heap'])}, {usage[p.name]['fds']}, "
                       f"{usage[p.name]['threads']}" if usage[p.name] else "—" for p in procs)
        lines.append(f"| {minute} | " + " | ".join(str(delta[k]) for k in keys) + " | " +
                     ", ".join(f"{k} {v}" for k, v in used.items()) + f" | {u} |")
    lines.append("| total | " + " | ".join(str(final.get(k, 0)) for k in keys) + " | | " + " | ".join(
        f"restarted {p.restarts}x" if p.restarts else "" for p in procs) + " |")
    lines.append("")
    for p in procs:
        lines.append(growth_line(p, rows, a.warmup_minutes))
    lines.append(f"- client threads alive at the last minute: {clients_alive} of {a.clients}")
    lines.append(f"- wrong outputs: {wrong}; idle checks with blocks held: "
                 f"{sum(1 for r in rows if any(v != 0 for v in r[2].values()))} of {len(rows)}")
    for ex in soak.wrong_examples:
        lines.append(f"  - wrong: {json.dumps(ex[0])} choice {ex[1]}: {ex[2]!r} vs reference {ex[3]!r}")
    report = "\n".join(lines)
    print(report)
    if a.out:
        with open(a.out, "w") as f:
            f.write(report + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
