"""Helpers for the deploy/ tests that run a real Prometheus server (Python 3 standard
library only): the metric contract of deploy/metrics.txt, a free loopback port, the
HTTP API, polling, and a Prometheus started on a copy of deploy/prometheus/ with 1 s
scrape and evaluation intervals and a local targets file per job.

Also what the integration tests against a real olmo2 job share: the contract check of
one job's series, the dashboard-panel check, stopping an mpirun job, a log's tail.

Used by train_integration.py, serve_integration.py and prometheus_smoke.py.
"""
import ctypes
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEPLOY = os.path.join(REPO, "deploy")


def contract():
    """[(name, type, {label: [values] or None})] from deploy/metrics.txt."""
    metrics = []
    with open(os.path.join(DEPLOY, "metrics.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, kind, labels = line.split()
                labels = {} if labels == "-" else {
                    l.partition("=")[0]: (l.partition("=")[2].split("|") if "=" in l else None)
                    for l in labels.split(",")}
                metrics.append((name, kind, labels))
    return metrics


def free_port(avoid=()):
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


def api(base, path, **params):
    """GET base/api/v1/path?params; the `data` of a successful answer, else raises."""
    url = f"{base}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{url}: {body}")
    return body["data"]


def query(base, expr):
    """Instant query: (resultType, result)."""
    data = api(base, "query", query=expr)
    return data["resultType"], data["result"]


class TestFailure(Exception):
    """A check failed; the message says what. wait_for passes it through at once."""


def wait_for(what, check, timeout=30, interval=0.5):
    """Polls check() until it returns something true, and returns that. Other errors
    (a server not up yet) are retried and reported on timeout, as a TestFailure."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            result = check()
            if result:
                return result
        except TestFailure:
            raise
        except Exception as e:  # noqa: BLE001 - reported on timeout
            last = e
        time.sleep(interval)
    raise TestFailure(f"timed out after {timeout} s waiting for {what}" + (f" (last error: {last})" if last else ""))


try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up before any fork
except (OSError, AttributeError):  # not Linux
    _PRCTL = None


def _parent_death_signal(sig):
    """A preexec_fn: the child gets `sig` when this process dies (Linux), so that a test
    killed by ctest's timeout leaves no server or training job behind."""
    def preexec():
        if _PRCTL is not None:
            _PRCTL(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG
    return preexec


def popen(args, **kw):
    """subprocess.Popen that sends the child SIGTERM if this test process dies."""
    return subprocess.Popen(args, preexec_fn=_parent_death_signal(signal.SIGTERM), **kw)


def write_config(conf_dir, targets):
    """Copies deploy/prometheus/prometheus.yml and rules/ into conf_dir with 1 s scrape and
    evaluation intervals (1 s scrape timeout), and registers targets = {"olmo2-train":
    "127.0.0.1:PORT", ...} the way a run on one machine does: a file_sd file
    targets/<job>-local.json per job. Every interval and every job's file_sd pattern must
    be found, so that a changed configuration fails here instead of being scraped as it is."""
    shutil.copytree(os.path.join(DEPLOY, "prometheus", "rules"), os.path.join(conf_dir, "rules"))
    os.makedirs(os.path.join(conf_dir, "targets"), exist_ok=True)
    with open(os.path.join(DEPLOY, "prometheus", "prometheus.yml"), encoding="utf-8") as f:
        conf = f.read()
    conf, n = re.subn(r"\b(scrape_interval|evaluation_interval): 15s\b", r"\1: 1s", conf)
    conf, m = re.subn(r"\bscrape_timeout: 10s\b", "scrape_timeout: 1s", conf)
    if n != 2 or m != 1:
        raise TestFailure("deploy/prometheus/prometheus.yml: expected global scrape_interval and "
                         "evaluation_interval of 15s and scrape_timeout 10s to shorten for the test")
    for job, target in targets.items():
        if conf.count(f'"targets/{job}-*.json"') != 1:
            raise TestFailure(f'deploy/prometheus/prometheus.yml: file_sd pattern "targets/{job}-*.json" '
                              "not found once")
        with open(os.path.join(conf_dir, "targets", f"{job}-local.json"), "w", encoding="utf-8") as f:
            json.dump([{"targets": [target]}], f)
    path = os.path.join(conf_dir, "prometheus.yml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(conf)
    return path


class Prometheus:
    """A Prometheus server on 127.0.0.1 with the given config, its data and log in tmp."""

    def __init__(self, binary, config, tmp, port):
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = os.path.join(tmp, "prometheus.log")
        self._log = open(self.log_path, "w", encoding="utf-8")
        self.proc = popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp}/prometheus-data",
                           f"--web.listen-address=127.0.0.1:{port}"],
                          stdout=self._log, stderr=subprocess.STDOUT, cwd=tmp)

    def wait_ready(self, timeout=60):
        def ready():
            if self.proc.poll() is not None:
                raise TestFailure(f"Prometheus exited with status {self.proc.returncode}:\n{self.log_tail()}")
            return urllib.request.urlopen(f"{self.base}/-/ready", timeout=2).status == 200
        wait_for("Prometheus to be ready", ready, timeout)

    def log_tail(self, chars=3000):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def stop(self):
        """SIGTERM to this PID, SIGKILL after 10 s; prints the log when it did not exit cleanly."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        if self.proc.returncode not in (0, -signal.SIGTERM):
            print(f"Prometheus exited with status {self.proc.returncode}; its log ends:\n{self.log_tail()}")


def check_families(series, prefix, job, instance, check_part):
    """series: every `prefix`* series of one target (instant query). Each metric of
    deploy/metrics.txt with that prefix must be there with exactly its labels (plus job
    and instance, and le on histogram buckets), and no other series; for each metric
    (each of _bucket/_sum/_count of a histogram) check_part(part, labels, got, problems)
    then checks the values its series carry. Returns the problems found."""
    problems = []
    by_name = {}
    for s in series:
        by_name.setdefault(s["metric"]["__name__"], []).append(s)
    wanted = set()
    for name, kind, labels in contract():
        if not name.startswith(prefix):
            continue
        parts = [name + suffix for suffix in ("_bucket", "_sum", "_count")] if kind == "histogram" else [name]
        wanted.update(parts)
        for part in parts:
            got = by_name.get(part, [])
            if not got:
                problems.append(f"{part}: no series")
                continue
            keys = {"job", "instance"} | set(labels) | ({"le"} if part.endswith("_bucket") else set())
            for s in got:
                m = s["metric"]
                if set(m) - {"__name__"} != keys:
                    problems.append(f"{part}: labels {sorted(set(m) - {'__name__'})}, expected {sorted(keys)}")
                elif m["job"] != job or m["instance"] != instance:
                    problems.append(f"{part}: job/instance {m['job']}/{m['instance']}")
            check_part(part, labels, got, problems)
    extra = sorted(set(by_name) - wanted)
    if extra:
        problems.append(f"series not in deploy/metrics.txt: {extra}")
    return problems


def check_panels(base, dashboard, job, instance):
    """Every expression of deploy/grafana/`dashboard` (deploy/grafana/panel_queries.py,
    job and instance substituted) must parse and return data. Returns (queries, problems)."""
    out = subprocess.run([sys.executable, os.path.join(DEPLOY, "grafana", "panel_queries.py"),
                          "--job", job, "--instance", instance, os.path.join(DEPLOY, "grafana", dashboard)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    problems, nan_only = [], []
    for line in out:
        q = json.loads(line)
        try:
            kind, result = query(base, q["expr"])
            if kind != "scalar" and not result:
                problems.append(f"panel {q['panel']!r} ({q['ref_id']}): no data for {q['expr']}")
            elif kind == "vector" and all(math.isnan(float(s["value"][1])) for s in result):
                nan_only.append(f"{q['panel']} ({q['ref_id']})")
        except Exception as e:  # noqa: BLE001 - a parse error comes back as HTTP 400
            detail = e.read().decode(errors="replace") if hasattr(e, "read") else str(e)
            problems.append(f"panel {q['panel']!r} ({q['ref_id']}): {detail} for {q['expr']}")
    if not out:
        problems.append(f"panel_queries.py printed no queries for {dashboard}")
    if nan_only:  # data, but only NaN (e.g. 0/0, a quantile of an idle minute): allowed, shown in the log
        print(f"note: only NaN from {', '.join(nan_only)}")
    return len(out), problems


def stop_job(proc, timeout=60):
    """SIGUSR1 to mpirun (forwarded to every rank: all stop together); then SIGTERM and
    SIGKILL to that PID if it does not exit. Returns its status."""
    if proc.poll() is not None:
        return proc.returncode
    for sig, wait in ((signal.SIGUSR1, timeout), (signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            print(f"mpirun did not exit {wait} s after {signal.Signals(sig).name}")
    return proc.poll()


def tail(path, chars=4000):
    """The last `chars` characters of a log file ("" when it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return ""
