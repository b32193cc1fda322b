#!/usr/bin/env python3
"""Smoke test of deploy/prometheus against a real Prometheus server (ctest label
integration). Python 3 standard library only.

A fake exporter on loopback serves every metric of deploy/metrics.txt (counters and
histograms moving on each scrape; the loss-spike counter rises after a few scrapes).
slurm/prolog.sh registers it in a temporary targets folder, Prometheus runs with a copy
of prometheus.yml and rules/ (scrape and evaluation interval 1 s instead of 15 s), and
through the HTTP API the test checks: the file_sd target is up with its Slurm labels,
every rule loaded and healthy, every dashboard query (panel_queries.py) parses and
returns data, Olmo2TrainLossSpike fires, and epilog.sh removes the target. It also runs
the fake exposition through `promtool check metrics`. The exporter and Prometheus bind
ports the kernel picks (Prometheus's is read from its log). Stops what it started.

Usage: prometheus_smoke.py --prometheus PATH --promtool PATH
"""
import argparse
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEPLOY = os.path.join(REPO, "deploy")
from prometheus_harness import Prometheus, api, contract, wait_for  # noqa: E402 (this folder)

LAYERS = 4
RANKS = [dict(rank="0", tp="0", pp="0", dp="0"), dict(rank="1", tp="0", pp="0", dp="1")]


class FakeExporter:
    """Exposition text for the contract's metrics; counters grow by scrape."""

    def __init__(self, metrics):
        self.metrics = metrics
        self.scrapes = 0
        self.lock = threading.Lock()

    def label_sets(self, labels):
        sets = [{}]
        for label, values in labels.items():
            if label == "rank":
                sets = [dict(s, **r) for s in sets for r in RANKS]
            elif label in ("tp", "pp", "dp"):
                continue
            elif label == "layer":
                sets = [dict(s, layer=str(i)) for s in sets for i in range(LAYERS)]
            else:
                sets = [dict(s, **{label: v}) for s in sets for v in values]
        return sets

    def render(self):
        with self.lock:
            self.scrapes += 1
            n = self.scrapes
        now = time.time()
        out = []
        for name, kind, labels in self.metrics:
            out.append(f"# HELP {name} fake {name} for the deploy smoke test")
            out.append(f"# TYPE {name} {kind}")
            for ls in self.label_sets(labels):
                def fmt(extra=None):
                    items = dict(ls, **(extra or {}))
                    return "{" + ",".join(f'{k}="{v}"' for k, v in items.items()) + "}" if items else ""
                if kind == "gauge":
                    value = {"olmo2_train_last_step_timestamp_seconds": now, "olmo2_train_step": n,
                             "olmo2_train_model_flops_utilization": 0.4,
                             "olmo2_serve_kv_cache_usage_ratio": 0.3}.get(name, 1.0 + 0.1 * (n % 5))
                    out.append(f"{name}{fmt()} {value}")
                elif kind == "counter":
                    if name == "olmo2_train_spikes_total":
                        value = 1 if (ls.get("signal") == "loss" and n > 4) else 0
                    elif name in ("olmo2_train_skipped_steps_total", "olmo2_train_nonfinite_steps_total"):
                        value = 0
                    else:
                        value = 10 * n
                    out.append(f"{name}{fmt()} {value}")
                else:
                    count = 0
                    for le in ("0.1", "1", "+Inf"):
                        count = {"0.1": n, "1": 3 * n, "+Inf": 4 * n}[le]
                        out.append(f"{name}_bucket{fmt({'le': le})} {count}")
                    out.append(f"{name}_sum{fmt()} {1.5 * n}")
                    out.append(f"{name}_count{fmt()} {count}")
        return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--promtool", required=True)
    args = ap.parse_args()

    metrics = contract()
    exporter = FakeExporter(metrics)
    check = subprocess.run([args.promtool, "check", "metrics"], input=FakeExporter(metrics).render(),
                           capture_output=True, text=True)
    if check.returncode != 0:
        print("FAIL promtool check metrics on the fake exposition:\n" + check.stdout + check.stderr)
        return 1

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = exporter.render().encode() if self.path.startswith("/metrics") else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    exporter_port = server.server_address[1]

    tmp = tempfile.mkdtemp(prefix="olmo2-deploy-smoke-")
    prom = None
    try:
        conf_dir = os.path.join(tmp, "prometheus")
        shutil.copytree(os.path.join(DEPLOY, "prometheus", "rules"), os.path.join(conf_dir, "rules"))
        os.makedirs(os.path.join(conf_dir, "targets"))
        with open(os.path.join(DEPLOY, "prometheus", "prometheus.yml"), encoding="utf-8") as f:
            conf = f.read()
        conf = re.sub(r"(scrape_interval|evaluation_interval): 15s", r"\1: 1s", conf)
        conf = conf.replace("scrape_timeout: 10s", "scrape_timeout: 1s")
        with open(os.path.join(conf_dir, "prometheus.yml"), "w", encoding="utf-8") as f:
            f.write(conf)

        env = dict(os.environ, SLURM_JOB_ID="4242", SLURM_JOB_NAME="olmo2-smoke", SLURM_JOB_USER="ci",
                   SLURM_JOB_NODELIST="127.0.0.1", SLURM_JOB_COMMENT=f"olmo2-metrics=port:{exporter_port}",
                   OLMO2_PROMETHEUS_TARGETS=os.path.join(conf_dir, "targets"))
        subprocess.run([os.path.join(DEPLOY, "prometheus", "slurm", "prolog.sh")], env=env, check=True)
        target_file = os.path.join(conf_dir, "targets", "olmo2-train-4242.json")
        if not os.path.exists(target_file):
            print("FAIL prolog.sh wrote no targets file")
            return 1

        prom = Prometheus(args.prometheus, os.path.join(conf_dir, "prometheus.yml"), tmp)
        prom.wait_ready()
        base = prom.base

        instance = f"127.0.0.1:{exporter_port}"
        def our_target():
            for t in api(base, "targets")["activeTargets"]:
                if t["labels"].get("instance") == instance and t["health"] == "up":
                    return t
        t = wait_for("the file_sd target to be scraped", our_target)
        want = {"job": "olmo2-train", "slurm_job_id": "4242", "slurm_job_name": "olmo2-smoke", "slurm_user": "ci"}
        if any(t["labels"].get(k) != v for k, v in want.items()):
            print(f"FAIL target labels {t['labels']}, expected {want}")
            return 1
        print(f"ok: file_sd target {instance} up with labels {want}")

        expected = 0
        for name in ("recording.yml", "alerts.yml"):
            with open(os.path.join(DEPLOY, "prometheus", "rules", name), encoding="utf-8") as f:
                expected += len(re.findall(r"^\s*- (?:record|alert):", f.read(), re.M))
        groups = api(base, "rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        bad = [r["name"] for r in rules if r.get("health") not in ("ok", "unknown")]
        if len(rules) != expected or bad:
            print(f"FAIL {len(rules)} rules loaded (expected {expected}), unhealthy: {bad}")
            return 1
        print(f"ok: {expected} rules loaded")

        # Enough scrapes for rate() over 1m and the spike counter to rise.
        wait_for("a few scrapes", lambda: exporter.scrapes >= 8)
        queries = subprocess.run([sys.executable, os.path.join(DEPLOY, "grafana", "panel_queries.py"),
                                  "--instance", instance, "--job", "olmo2-train",
                                  os.path.join(DEPLOY, "grafana", "olmo2-training.json")],
                                 capture_output=True, text=True, check=True).stdout.splitlines()
        queries += subprocess.run([sys.executable, os.path.join(DEPLOY, "grafana", "panel_queries.py"),
                                   "--instance", instance, "--job", "olmo2-train",
                                   os.path.join(DEPLOY, "grafana", "olmo2-serving.json")],
                                  capture_output=True, text=True, check=True).stdout.splitlines()
        failed = []
        for line in queries:
            q = json.loads(line)
            try:
                data = api(base, "query", query=q["expr"])
                if not data["result"] and data["resultType"] != "scalar":
                    failed.append(f"{q['dashboard']}: {q['panel']}: no data for {q['expr']}")
            except Exception as e:  # noqa: BLE001
                failed.append(f"{q['dashboard']}: {q['panel']}: {e} for {q['expr']}")
        if failed:
            print("FAIL dashboard queries:\n  " + "\n  ".join(failed))
            return 1
        print(f"ok: {len(queries)} dashboard queries return data")

        def spike_alert():
            return [a for a in api(base, "alerts")["alerts"]
                    if a["labels"]["alertname"] == "Olmo2TrainLossSpike" and a["state"] == "firing"]
        wait_for("Olmo2TrainLossSpike to fire", spike_alert)
        print("ok: Olmo2TrainLossSpike firing")

        subprocess.run([os.path.join(DEPLOY, "prometheus", "slurm", "epilog.sh")], env=env, check=True)
        if os.path.exists(target_file):
            print("FAIL epilog.sh left the targets file")
            return 1
        wait_for("the target to go away after the epilog", lambda: not any(
            t["labels"].get("instance") == instance for t in api(base, "targets")["activeTargets"]), timeout=90)
        print("ok: epilog removed the target")
        return 0
    finally:
        if prom is not None:
            prom.stop()  # prints its log when it did not exit cleanly
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
