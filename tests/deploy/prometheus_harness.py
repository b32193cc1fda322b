"""Helpers for the deploy/ tests that run a real Prometheus server (Python 3 standard
library only): the metric contract of deploy/metrics.txt, the HTTP API, polling, and a
Prometheus started on a copy of deploy/prometheus/ with 1 s scrape and evaluation
intervals and a local targets file per job.

Ports: no test picks a port in advance for a server to bind later (another test could
take it in between). Servers bind port 0 and say which port they got: olmo2 in its
--port-file (port_from_file), Prometheus in its log (Prometheus.wait_ready). HeldPort is
a port nobody answers on; low_port is for the few ports a daemon or the Slurm prolog
must be told before anything binds.

Also what the integration tests against a real olmo2 job share: the contract check of
one job's series, the dashboard-panel check, stopping an mpirun job, a log's tail.

Used by train_integration.py, serve_integration.py, prometheus_smoke.py and
slurm_integration.py here, and by tests/serve_clients/harness.py.
"""
import ctypes
import json
import math
import os
import random
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


def port_from_file(path, proc, what, timeout=120):
    """The port of the first line (HOST:PORT, the part after the last ':') of the
    --port-file `path` that `proc` (olmo2 serve --port 0, olmo2 train --metrics-port 0,
    or mpirun running one) writes once it listens. Polls until the file holds a line;
    a TestFailure naming `what` if proc exits first or `timeout` seconds pass."""
    deadline = time.time() + timeout
    while True:
        try:
            with open(path, encoding="utf-8") as f:
                line = f.readline().strip()
        except FileNotFoundError:
            line = ""
        if line:  # written atomically (a temporary file renamed over it): never a part line
            port = line.rpartition(":")[2]
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise TestFailure(f"{what}: {path} starts with {line!r}, not HOST:PORT")
            return int(port)
        if proc.poll() is not None:
            raise TestFailure(f"{what} exited with status {proc.returncode} before writing its port to {path}")
        if time.time() > deadline:
            raise TestFailure(f"{what} wrote no port to {path} within {timeout} s (still running)")
        time.sleep(0.1)


class HeldPort:
    """A loopback TCP port that is bound and never listened on: a connection to it is
    refused at once (a scrape target that is down), and, while this holds it, no other
    process can be given it — unlike a port found free and closed again, which another
    test's server may bind in between. Keep it until the test ends; .close() or `with`."""

    def __init__(self):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))  # no listen(): the kernel answers a SYN with RST
        self.port = self._sock.getsockname()[1]

    def close(self):
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def ephemeral_range():
    """(first, last) of /proc/sys/net/ipv4/ip_local_port_range (Linux's default 32768 60999)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            lo, hi = (int(x) for x in f.read().split()[:2])
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def low_port(tries=200):
    """A port in [20000, first port of the ephemeral range) (20000-32767 by default)
    that can be bound right now, for the few ports that must be named BEFORE anything
    binds them: slurmctld's and slurmd's in slurm.conf, the `olmo2-metrics=port:N` job
    comment that the Slurm prolog registers as a Prometheus target before the job starts.

    Why below the ephemeral range: the kernel hands out ports from
    net.ipv4.ip_local_port_range only, both to a bind to port 0 and to an outgoing
    connection's local end. Every other test's server now binds port 0, and clients get
    ephemeral ports, so none of them can take this port between this check and the
    daemon's bind. Only a process that itself picks low ports can: the tests that call
    this (or scripts/slurm_cluster.sh, same rule), which ctest runs under one
    RESOURCE_LOCK. Where the ephemeral range starts at or below 20100, a port above its
    end (up to 65535) is used instead, for the same reason."""
    lo, hi = ephemeral_range()
    first, last = (20000, lo - 1) if lo > 20100 else (hi + 1, 65535)
    if first > last:
        raise TestFailure(f"no port outside the ephemeral range {lo}-{hi} to pick")
    for _ in range(tries):
        port = random.randint(first, last)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:  # all addresses, no SO_REUSEADDR: in use on any address or in TIME_WAIT fails
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        return port
    raise TestFailure(f"no free port in {first}-{last} after {tries} tries")


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


LISTENING = re.compile(r'msg="Listening on".*\baddress=(\S+):(\d+)')


def prometheus_port(log_path, proc, timeout=60):
    """The port a Prometheus started with --web.listen-address=HOST:0 bound: from the
    `msg="Listening on" address=HOST:PORT` line of its log (Prometheus 2.42). A
    TestFailure if proc exits first or no such line comes within `timeout` seconds."""
    deadline = time.time() + timeout
    while True:
        try:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = LISTENING.search(line)
                    if m and m.group(2) != "0":
                        return int(m.group(2))
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            raise TestFailure(f"Prometheus exited with status {proc.returncode}:\n{tail(log_path, 3000)}")
        if time.time() > deadline:
            raise TestFailure(f'no msg="Listening on" line in Prometheus\'s log within {timeout} s:\n'
                              f"{tail(log_path, 3000)}")
        time.sleep(0.1)


class Prometheus:
    """A Prometheus server on 127.0.0.1 with the given config, its data and log in tmp.
    It binds a port the kernel picks (--web.listen-address=127.0.0.1:0); self.base is
    set by wait_ready, from the port its log names."""

    def __init__(self, binary, config, tmp):
        self.base = None
        self.log_path = os.path.join(tmp, "prometheus.log")
        self._log = open(self.log_path, "w", encoding="utf-8")
        self.proc = popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp}/prometheus-data",
                           "--web.listen-address=127.0.0.1:0"],
                          stdout=self._log, stderr=subprocess.STDOUT, cwd=tmp)

    def wait_ready(self, timeout=60):
        t0 = time.time()
        if self.base is None:
            self.base = f"http://127.0.0.1:{prometheus_port(self.log_path, self.proc, timeout)}"

        def ready():
            if self.proc.poll() is not None:
                raise TestFailure(f"Prometheus exited with status {self.proc.returncode}:\n{self.log_tail()}")
            return urllib.request.urlopen(f"{self.base}/-/ready", timeout=2).status == 200
        wait_for("Prometheus to be ready", ready, max(1.0, timeout - (time.time() - t0)))

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
