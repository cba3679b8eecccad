#!/usr/bin/env python3
"""Checks deploy/: renders every kustomize overlay with `kubectl kustomize` (and again with
the kubectl in $PDSERVE_OLD_KUBECTL when set, e.g. Debian's kubernetes-client 1.20 with
its kustomize v2.0.3) and checks the objects: probes on /health, the preStop drain hook,
grace period > --drain-timeout, resource requests, the placement rules, headless
Services matching the pods and the --discovery names, PDB and HPA targets, the ConfigMap
reference. Then checks that deploy/grafana/pdserve.json parses and that every metric it
(and the HPAs) query exists in the /metrics of a running pdserve decode worker and router.

usage: check_deploy.py PDSERVE_BIN MODEL
"""
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "deploy", "k8s")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
    return cond


def render(kubectl, overlay):
    out = subprocess.run([kubectl, "kustomize", os.path.join(K8S, "overlays", overlay)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{kubectl} kustomize {overlay} failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(objs, kind):
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check_overlay(kubectl, overlay, objs, hpa_metrics):
    where = f"[{os.path.basename(kubectl)} {overlay}]"
    deps = by_kind(objs, "Deployment")
    svcs = by_kind(objs, "Service")
    cms = by_kind(objs, "ConfigMap")
    sts = by_kind(objs, "StatefulSet")
    check(len(cms) == 1, f"{where} one ConfigMap, got {list(cms)}")
    cm = next(iter(cms.values()))
    drain = float(cm["data"]["PDSERVE_DRAIN_TIMEOUT"])
    want = {"monolithic": {"pdserve"}, "disaggregated": {"pdserve-router", "pdserve-prefill", "pdserve-decode"}}[overlay]
    check(set(deps) == want, f"{where} Deployments {sorted(deps)} != {sorted(want)}")
    check("pdserve-redis" in sts, f"{where} no Redis StatefulSet")
    check(svcs.get("pdserve-redis", {}).get("spec", {}).get("clusterIP") == "None", f"{where} Redis Service not headless")
    for name, d in deps.items():
        pod = d["spec"]["template"]
        labels = pod["metadata"]["labels"]
        check(matches(d["spec"]["selector"]["matchLabels"], labels), f"{where} {name}: selector does not match its pods")
        c = pod["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        for probe in ("readinessProbe", "livenessProbe"):
            p = c.get(probe, {}).get("httpGet", {})
            check(p.get("path") == "/health" and p.get("port") in ports, f"{where} {name}: {probe} is not GET /health on a container port")
        cmd = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        check(cmd, f"{where} {name}: no preStop hook")
        role = labels.get("pdserve.io/role")
        if role in ("prefill", "decode"):
            check("kill -TERM 1" in " ".join(cmd), f"{where} {name}: preStop does not drain (SIGTERM to pdserve)")
            check(any(a.startswith("--drain-timeout=") for a in c["args"]), f"{where} {name}: no --drain-timeout")
        check(pod["spec"].get("terminationGracePeriodSeconds", 30) > drain,
              f"{where} {name}: terminationGracePeriodSeconds not above the drain timeout {drain}")
        req = c.get("resources", {}).get("requests", {})
        check("cpu" in req and "memory" in req, f"{where} {name}: no cpu/memory requests")
        refs = [e["configMapRef"]["name"] for e in c.get("envFrom", []) if "configMapRef" in e]
        check(refs == [cm["metadata"]["name"]], f"{where} {name}: envFrom {refs} is not the ConfigMap {cm['metadata']['name']}")
        # Every Deployment is behind a Service selecting its pods.
        check(any(matches(s["spec"].get("selector", {}), labels) for s in svcs.values()), f"{where} {name}: no Service selects its pods")
        # --discovery dns://NAME:PORT names a headless Service with that port.
        for a in c["args"]:
            m = re.match(r"--discovery=dns://([^:]+):(\d+)$", a)
            if m:
                s = svcs.get(m.group(1))
                check(s is not None and s["spec"].get("clusterIP") == "None" and
                      int(m.group(2)) in [p["port"] for p in s["spec"]["ports"]],
                      f"{where} {name}: {a} is not a headless Service port")
    if overlay == "disaggregated":
        for role in ("prefill", "decode"):
            check(svcs[f"pdserve-{role}"]["spec"].get("clusterIP") == "None", f"{where} pdserve-{role} Service not headless")
        aff = deps["pdserve-prefill"]["spec"]["template"]["spec"].get("affinity", {})
        terms = aff.get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
        exprs = [e for t in terms for e in t.get("matchExpressions", [])]
        check(any(e["key"] == "pdserve.io/node-type" and e["operator"] == "In" and e["values"] == ["prefill"] for e in exprs),
              f"{where} prefill: no nodeAffinity on the node-type label: {aff}")
        aff = deps["pdserve-decode"]["spec"]["template"]["spec"].get("affinity", {})
        pterms = [t["podAffinityTerm"] for t in aff.get("podAffinity", {}).get("preferredDuringSchedulingIgnoredDuringExecution", [])]
        pterms += aff.get("podAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", [])
        redis_labels = sts["pdserve-redis"]["spec"]["template"]["metadata"]["labels"]
        check(any(t["topologyKey"] == "topology.kubernetes.io/rack" and matches(t["labelSelector"]["matchLabels"], redis_labels)
                  for t in pterms), f"{where} decode: no podAffinity to the kv-cache pods by rack: {aff}")
        check("affinity" not in deps["pdserve-router"]["spec"]["template"]["spec"], f"{where} router has placement rules")
    pdbs = by_kind(objs, "PodDisruptionBudget")
    for name, d in deps.items():
        labels = d["spec"]["template"]["metadata"]["labels"]
        check(any(matches(p["spec"]["selector"]["matchLabels"], labels) for p in pdbs.values()), f"{where} {name}: no PDB")
    hpas = by_kind(objs, "HorizontalPodAutoscaler")
    check(hpas, f"{where} no HPA")
    for name, h in hpas.items():
        t = h["spec"]["scaleTargetRef"]
        check(t["kind"] == "Deployment" and t["name"] in deps, f"{where} HPA {name} targets {t}")
        for m in h["spec"]["metrics"]:
            hpa_metrics.add(m["pods"]["metric"]["name"])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def metric_names(url, proc):
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"pdserve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                text = r.read().decode()
            return {l.split()[2] for l in text.splitlines() if l.startswith("# TYPE ")}
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"no /metrics at {url}")


def served_metrics(binary, model):
    """The metric families of a decode worker and of a router in front of it."""
    names = set()
    gport, mport, rport = free_port(), free_port(), free_port()
    dec = subprocess.Popen([binary, "decode", "--model", model, "--port", str(gport), "--metrics-port", str(mport)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rt = None
    try:
        names |= metric_names(f"http://127.0.0.1:{mport}/metrics", dec)
        rt = subprocess.Popen([binary, "router", "--model", model, "--port", str(rport), "--decode", f"127.0.0.1:{gport}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline:  # the router lists its worker once it is healthy
            got = metric_names(f"http://127.0.0.1:{rport}/metrics", rt)
            if "pdserve_router_decode_worker_up" in got:
                break
            time.sleep(0.2)
        names |= got
    finally:
        for p in (rt, dec):
            if p:
                p.terminate()
                p.wait(timeout=30)
    return names


def main():
    binary, model = sys.argv[1], sys.argv[2]
    kubectls = ["kubectl"] + ([os.environ["PDSERVE_OLD_KUBECTL"]] if os.environ.get("PDSERVE_OLD_KUBECTL") else [])
    hpa_metrics = set()
    for k in kubectls:
        for overlay in ("monolithic", "disaggregated"):
            check_overlay(k, overlay, render(k, overlay), hpa_metrics)

    with open(os.path.join(ROOT, "deploy", "grafana", "pdserve.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    check(len(exprs) >= 10, f"only {len(exprs)} dashboard queries")
    queried = set()
    for e in exprs:
        for m in re.findall(r"\bpdserve_[a-z0-9_]+", e):
            queried.add(re.sub(r"_(bucket|sum|count)$", "", m) if m.endswith(("_bucket", "_sum", "_count")) else m)
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for topic in ("ttft", "tpot", "itl", "finish reason", "kv cache usage", "hit ratio", "preemptions", "transfer bytes", "transfer failures"):
        check(topic in titles, f"dashboard: no panel about {topic}")
    with open(os.path.join(ROOT, "deploy", "prometheus", "prometheus.yml")) as f:
        prom = yaml.safe_load(f)
    check(any(j.get("kubernetes_sd_configs") for j in prom["scrape_configs"]), "prometheus.yml: no kubernetes_sd scrape job")

    served = served_metrics(binary, model)
    for name in sorted(queried | hpa_metrics):
        check(name in served, f"{name} (dashboard/HPA) is not in pdserve's /metrics")
    if failures:
        print("\n".join(failures))
        return 1
    print(f"ok: {len(kubectls)} kubectl(s) x 2 overlays, {len(queried)} dashboard metrics")
    return 0


if __name__ == "__main__":
    sys.exit(main())
