#!/usr/bin/env python3
"""KV transfer between network namespaces over shaped links (issue #16, bench/RESULTS.md).

A prefill worker in namespace "pre", a decode worker (and a router for the client) in
namespace "dec", joined by veth pairs to a bridge. The prefill worker's link is shaped with
`tc qdisc ... tbf` (both directions) at each rate; latency is added by a small delaying
TCP relay in the root namespace (this kernel has no netem): the decode worker reaches the
prefill worker through it, and it holds every chunk for D ms in each direction (RTT +2D).
Per (codec, window) the workers are started once; per (rate, delay) the link is
re-shaped and the relay's delay changed (its connection stays up), then: one cold request (a fresh 2,000-token prompt:
remote prefill compute + streaming) and N warm ones (the same prompt again: the prefill
worker has it cached, so the time is the transfer of all 126 blocks). TTFT is the
client's time to a max_tokens=1 answer; transfer time and bytes are the decode worker's
pdserve_kv_transfer_seconds_sum / pdserve_kv_transfer_bytes_total deltas.

Every request's path is checked (pdserve_remote_prefill_total, pdserve_local_prefill_total,
pdserve_kv_recompute_fallback_total) and the workers' logs are kept (--log-dir). The decode
worker gets --kv-transfer-timeout 600: the 30 s default bounds the whole Prefill call,
compute included, and a cold 2,000-token prefill on a loaded machine passes it (the
request is then recomputed locally).

usage (root): bench/kv_transfer_netns.py build/pdserve ../shared/models/synth-llama-small-f16.gguf [--warm 5]
    [--rates 10gbit,1gbit,100mbit|unshaped] [--delays 0.2,1,5] [--configs none:8388608,zstd:8388608,none:65535]
"""
import argparse
import asyncio
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

TAG = f"pdb{os.getpid()}"
SUB = f"10.{200 + os.getpid() % 50}.{(os.getpid() // 50) % 250}."
HOSTS = {"pre": 2, "dec": 3}


def sh(cmd, check=True):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: {r.stderr}")
    return r.stdout


def ns(h):
    return f"{TAG}-{h}"


def ip(h):
    return SUB + str(HOSTS[h])


def veth(h):
    return f"{TAG}v{h}"


def setup():
    sh(f"ip link add {TAG}br type bridge && ip addr add {SUB}1/24 dev {TAG}br && ip link set {TAG}br up")
    for h in HOSTS:
        sh(f"ip netns add {ns(h)} && ip link add {veth(h)} type veth peer name {veth(h)}p && "
           f"ip link set {veth(h)}p netns {ns(h)} && ip -n {ns(h)} link set {veth(h)}p name eth0 && "
           f"ip link set {veth(h)} master {TAG}br && ip link set {veth(h)} up && "
           f"ip -n {ns(h)} addr add {ip(h)}/24 dev eth0 && ip -n {ns(h)} link set eth0 up && ip -n {ns(h)} link set lo up && "
           f"ip -n {ns(h)} route add default via {SUB}1")


def teardown():
    for h in HOSTS:
        sh(f"ip link del {veth(h)}", check=False)
        sh(f"ip netns pids {ns(h)} | xargs -r kill -9; ip netns del {ns(h)}", check=False)
    sh(f"ip link del {TAG}br", check=False)


def rate_bytes(rate):
    """'10gbit' / '1gbit' / '100mbit' (tc's spelling) in bytes per second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg])bit", rate)
    if not m:
        raise ValueError(f"rate '{rate}': expected e.g. 10gbit, 1gbit, 100mbit (or 'unshaped')")
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def shape(rate):
    """tbf at `rate` on both ends of the prefill worker's link ('' or 'unshaped': none). The
    bucket holds 1 ms of the rate (at least 64 KiB, one GSO packet of the veth): a larger one
    would let a good part of a 2 MB transfer pass unshaped after an idle gap."""
    for dev, pre in ((veth("pre"), ""), ("eth0", f"ip netns exec {ns('pre')} ")):
        sh(f"{pre}tc qdisc del dev {dev} root", check=False)
        if rate and rate != "unshaped":
            burst = max(65536, int(rate_bytes(rate) / 1000))
            sh(f"{pre}tc qdisc add dev {dev} root tbf rate {rate} burst {burst} latency 100ms")


class Relay:
    """Forwards TCP connections on (host, port) to target, delaying every chunk by delay_s."""

    def __init__(self, host, port, target, delay_s):
        self.host, self.port, self.target, self.delay = host, port, target, delay_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()

    async def _start(self):
        return await asyncio.start_server(self._conn, self.host, self.port, reuse_address=True)

    async def _pipe(self, reader, writer):
        q = asyncio.Queue()

        async def sender():
            while True:
                due, data = await q.get()
                if data is None:
                    break
                wait = due - self.loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            writer.close()

        task = asyncio.ensure_future(sender())
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    break
                q.put_nowait((self.loop.time() + self.delay, data))
        except (ConnectionError, OSError):
            pass
        q.put_nowait((0, None))
        await task

    async def _conn(self, reader, writer):
        try:
            tr, tw = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, tw), self._pipe(tr, writer), return_exceptions=True)

    def close(self):
        async def stop():
            self.server.close()
            for t in asyncio.all_tasks():
                if t is not asyncio.current_task():
                    t.cancel()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


def metrics(host, port):
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(pdserve_kv_transfer_(?:seconds_sum|bytes_total|failures_total)|pdserve_time_to_first_token_seconds_sum|'
                     r'pdserve_(?:remote|local)_prefill_total|pdserve_kv_recompute_fallback_total)(?:\{[^}]*\})? (\S+)$', line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
    return out


def wait_health(host, port, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{host}:{port} not healthy")


def complete(host, port, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://{host}:{port}/v1/completions", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        j = json.loads(r.read())
    return time.perf_counter() - t0, j["usage"]["prompt_tokens"]


WORDS = "the little dog ran to park and saw a big red ball under tree it was happy sun sky bird sang".split()


def make_prompt(rng, n_words=1995):
    return f"{rng.randint(1000, 9999)} " + " ".join(rng.choice(WORDS) for _ in range(n_words))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--rates", default="10gbit,1gbit,100mbit")
    ap.add_argument("--delays", default="0.2,1,5")
    ap.add_argument("--configs", default="none:8388608,zstd:8388608,none:65535")
    ap.add_argument("--transfer-timeout", default="600",
                    help="the decode worker's --kv-transfer-timeout (s): its default 30 s covers the whole prefill call, "
                         "which a cold 2,000-token prefill on a loaded machine exceeds (then it is recomputed locally)")
    ap.add_argument("--log-dir", default=f"/tmp/kv_transfer_netns.{os.getpid()}", help="the workers' logs (one file per role and config)")
    a = ap.parse_args()
    rng = random.Random(16)
    rows = []
    os.makedirs(a.log_dir, exist_ok=True)
    print(f"worker logs in {a.log_dir}", file=sys.stderr)
    setup()
    procs = []
    try:
        relay_port = 17500
        for cfg in a.configs.split(","):
            codec, window = cfg.split(":")
            bdp = "true" if int(window) >= 1 << 20 else "false"
            grpc = ["--grpc-stream-window", window, "--grpc-bdp-probe", bdp]
            log = lambda role: open(os.path.join(a.log_dir, f"{role}-{codec}-{window}.log"), "w")
            pre = subprocess.Popen(["ip", "netns", "exec", ns("pre"), a.binary, "prefill", "--model", a.model, "--host", ip("pre"),
                                    "--port", "7001", "--metrics-port", "9001", *grpc], stdout=subprocess.DEVNULL, stderr=log("prefill"))
            dec = subprocess.Popen(["ip", "netns", "exec", ns("dec"), a.binary, "decode", "--model", a.model, "--host", ip("dec"),
                                    "--port", "7000", "--metrics-port", "9000", "--prefill", f"{SUB}1:{relay_port}",
                                    "--remote-prefill-threshold", "0", "--no-prefix-cache", "--kv-compression", codec,
                                    "--kv-transfer-timeout", a.transfer_timeout, *grpc],
                                   stdout=subprocess.DEVNULL, stderr=log("decode"))
            rt = subprocess.Popen(["ip", "netns", "exec", ns("dec"), a.binary, "router", "--model", a.model, "--host", ip("dec"),
                                   "--port", "8000", "--decode", f"{ip('dec')}:7000"], stdout=subprocess.DEVNULL, stderr=log("router"))
            procs = [rt, dec, pre]
            relay = Relay(f"{SUB}1", relay_port, (ip("pre"), 7001), 0)
            wait_health(ip("pre"), 9001)
            wait_health(ip("dec"), 9000)
            wait_health(ip("dec"), 8000)
            time.sleep(2)  # the decode worker's prefill health check has passed (every 0.5 s)
            for rate in a.rates.split(","):
                for delay in a.delays.split(","):
                    shape(rate)
                    relay.delay = float(delay) / 1000  # read per chunk: the connection stays up
                    time.sleep(0.5)
                    prompt = make_prompt(rng)
                    m0 = metrics(ip("dec"), 9000)
                    p0 = metrics(ip("pre"), 9001)
                    cold, ntok = complete(ip("dec"), 8000, prompt)  # cold: a prompt never seen
                    m1 = metrics(ip("dec"), 9000)
                    p1 = metrics(ip("pre"), 9001)
                    d = lambda k: m1.get(k, 0) - m0.get(k, 0)
                    cold_path = ("local" if d("pdserve_local_prefill_total") else
                                 "recompute" if d("pdserve_kv_recompute_fallback_total") else "remote")
                    if cold == cold and cold_path != "remote":
                        print(f"warning: the cold request at {rate}/{delay} ms was prefilled on the decode worker ({cold_path}; "
                              f"transfer failures +{d('pdserve_kv_transfer_failures_total'):.0f}, see the decode log)", file=sys.stderr)
                    warm, xfer, nbytes, pre_ttft = [], [], [], []
                    for _ in range(a.warm):
                        ma = metrics(ip("dec"), 9000)
                        pa = metrics(ip("pre"), 9001)
                        t, _ = complete(ip("dec"), 8000, prompt)
                        mb = metrics(ip("dec"), 9000)
                        pb = metrics(ip("pre"), 9001)
                        pre_ttft.append(pb["pdserve_time_to_first_token_seconds_sum"] - pa["pdserve_time_to_first_token_seconds_sum"])
                        warm.append(t)
                        xfer.append(mb["pdserve_kv_transfer_seconds_sum"] - ma["pdserve_kv_transfer_seconds_sum"])
                        nbytes.append(mb["pdserve_kv_transfer_bytes_total"] - ma["pdserve_kv_transfer_bytes_total"])
                        if mb.get("pdserve_remote_prefill_total", 0) == ma.get("pdserve_remote_prefill_total", 0) or \
                                mb.get("pdserve_kv_recompute_fallback_total", 0) != ma.get("pdserve_kv_recompute_fallback_total", 0):
                            print(f"warning: a warm request at {rate}/{delay} ms was not served by a remote prefill", file=sys.stderr)
                    row = {"codec": codec, "window": int(window), "bdp_probe": bdp, "rate": rate, "delay_ms": float(delay),
                           "prompt_tokens": ntok, "ttft_cold_s": cold, "cold_path": cold_path,
                           "prefill_worker_ttft_cold_s": p1["pdserve_time_to_first_token_seconds_sum"] - p0["pdserve_time_to_first_token_seconds_sum"],
                           "transfer_cold_s": m1["pdserve_kv_transfer_seconds_sum"] - m0["pdserve_kv_transfer_seconds_sum"],
                           "ttft_warm_median_s": statistics.median(warm), "transfer_warm_median_s": statistics.median(xfer),
                           "bytes_per_request": statistics.median(nbytes),
                           "prefill_worker_ttft_warm_median_s": statistics.median(pre_ttft),
                           "wire_MBps_warm": statistics.median(nbytes) / statistics.median(xfer) / 1e6,
                           "exposed_tail_warm_median_s": statistics.median(x - p for x, p in zip(xfer, pre_ttft)),
                           "warm_ttft_all_s": warm, "warm_transfer_all_s": xfer, "prefill_worker_ttft_warm_all_s": pre_ttft}
                    row["loadavg_1min"] = os.getloadavg()[0]
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
            procs = []
            relay.close()
    finally:
        for p in procs:
            p.kill()
        shape("")
        teardown()
    print(f"load average at the end: {os.getloadavg()}", file=sys.stderr)
    print("| codec | window | rate | delay (each way) | bytes/request | cold TTFT | cold: prefill-worker TTFT | "
          "warm TTFT (median) | warm transfer (median) | prefill-worker TTFT (warm) | exposed tail (warm) | MB/s over the warm transfer |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        w = "8 MiB + BDP" if r["bdp_probe"] == "true" else f"{round(r['window'] / 1024)} KiB fixed"
        cold = f"{r['ttft_cold_s']:.2f} s" + ("" if r["cold_path"] == "remote" else f" ({r['cold_path']})")
        print(f"| {r['codec']} | {w} | {r['rate']} | {r['delay_ms']} ms | {r['bytes_per_request']:,.0f} | {cold} | "
              f"{r['prefill_worker_ttft_cold_s']:.2f} s | "
              f"{r['ttft_warm_median_s'] * 1000:.1f} ms | {r['transfer_warm_median_s'] * 1000:.1f} ms | "
              f"{r['prefill_worker_ttft_warm_median_s'] * 1000:.1f} ms | {r['exposed_tail_warm_median_s'] * 1000:.1f} ms | {r['wire_MBps_warm']:.1f} |")

if __name__ == "__main__":
    sys.exit(main())
