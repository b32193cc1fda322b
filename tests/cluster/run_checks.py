"""What the two-host tests share (docs/architecture.md §10 "Two hosts"): named checks that
may be pending, the tiny training run's command line, running a command with its output
in files, the one-host reference and the bit-for-bit comparison with it, and the check of
rank 0's placement lines. Python 3 standard library only.
"""
import json
import os
import re
import subprocess

from prometheus_harness import TestFailure, popen, stop_job, tail

STEPS = 8  # records compared with the one-host run
COMPARED = ("step", "loss", "z_loss", "grad_norm", "lr", "tokens", "target_tokens", "skipped")
# Where the 4 ranks of tp 2 x pp 2 go, {host: [(rank, tp, pp, dp, local rank)]}: 2 per host
# in rank order (mpirun's default, srun -m block), or dealt in turn (mpirun --map-by node).
BLOCK = {"nodea": [(0, 0, 0, 0, 0), (1, 1, 0, 0, 1)], "nodeb": [(2, 0, 1, 0, 0), (3, 1, 1, 0, 1)]}
BY_NODE = {"nodea": [(0, 0, 0, 0, 0), (2, 0, 1, 0, 1)], "nodeb": [(1, 1, 0, 0, 0), (3, 1, 1, 0, 1)]}


class Checks:
    """Named checks, some of them pending (expected to fail until another branch lands)."""

    def __init__(self, pending):
        self.pending = pending
        self.failed = []

    def check(self, name, problems, ok_text):
        """problems: a list of strings (empty: passed)."""
        reason = self.pending.get(name)
        if not problems:
            if reason is not None:
                self.failed.append(f"{name} passes but is marked --pending ({reason}): remove the marker")
                print(f"XPASS {name}: {ok_text}")
            else:
                print(f"ok: {ok_text}")
        elif reason is not None:
            print(f"XFAIL {name} (pending: {reason}):\n  " + "\n  ".join(problems))
        else:
            self.failed.append(f"{name}:\n  " + "\n  ".join(problems))



def json_records(path):
    """The --log-format json step records of a run's stdout (complete lines only: the
    run may be writing the next one)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.startswith("{") and line.endswith("\n")]



def train_args(args, tmp, steps, layout=True):
    """olmo2 train of the tiny model; with layout, tp 2 x pp 2 (4 ranks). A constant
    learning rate, so that a step's values do not depend on --steps."""
    return [args.olmo2, "train", "--threads", "1", "--model-config", os.path.join(tmp, "config.json"),
            "--data", os.path.join(tmp, "tokens.npy"), "--seq-len", "16", "--global-batch", "8",
            "--micro-batch", "2", "--steps", str(steps), "--lr", "1e-3", "--schedule", "constant",
            "--peak-tflops", "1", "--log-format", "json", "--log-interval", "1000000"] + (
        ["--tp", "2", "--pp", "2", "--collective-timeout", "120"] if layout else [])



def run_logged(cmd, tmp, name, timeout, env):
    """Runs cmd to completion (killed after timeout s); returns (status, stdout path, stderr text)."""
    out, err = os.path.join(tmp, f"{name}.out"), os.path.join(tmp, f"{name}.err")
    with open(out, "w") as o, open(err, "w") as e:
        proc = popen(cmd, stdout=o, stderr=e, env=env, cwd=tmp)
        try:
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            status = stop_job(proc, timeout=10)
            print(f"note: {name} still ran after {timeout} s; stopped (status {status})")
            status = "timeout"
    return status, out, tail(err, 20000)



def one_host_reference(args, tmp, env):
    """The first STEPS JSON records of the tp 2 x pp 2 run as 4 ranks on this host."""
    status, out, err = run_logged([args.mpiexec, "-np", "4", "--allow-run-as-root",
                                   "--oversubscribe"] + train_args(args, tmp, STEPS), tmp, "one-host", 120, env)
    reference = json_records(out)
    if status != 0 or len(reference) != STEPS:
        raise TestFailure(f"the one-host run exited with {status} after {len(reference)} records:\n{err[-3000:]}")
    print(f"ok: one-host reference, {STEPS} steps, final loss {reference[-1]['loss']}")
    return reference



def compare_records(checks, reference, records, where, name="losses"):
    """The first STEPS records of a run against the one-host run's, bit for bit."""
    mismatches = [f"step {a['step']}: {k} {b.get(k)!r} {where}, {a[k]!r} on one host"
                  for a, b in zip(reference, records) for k in COMPARED if a[k] != b.get(k)]
    if len(records) < STEPS:
        mismatches.append(f"the run {where} logged {len(records)} records, expected at least {STEPS}")
    checks.check(name, mismatches[:10],
                 f"the first {STEPS} steps {where} equal the one-host run bit for bit "
                 f"({', '.join(COMPARED[1:5])}; final loss {reference[-1]['loss']})")



def check_placement(checks, err, expected=BLOCK, tp_groups_across=(), name="placement"):
    """Rank 0's start-up lines in a run's stderr (docs/architecture.md §7 "Placement"):
    one per host, e.g. "placement: host nodea: rank 0 (tp 0, pp 0, dp 0) local 0 threads 1,
    rank 1 (...) ...", with expected[host] = [(rank, tp, pp, dp, local rank)]; and a
    warning for exactly the TP groups in tp_groups_across ("0,1": ranks 0 and 1)."""
    problems = []
    for host, want in expected.items():
        lines = [line for line in err.splitlines() if line.startswith("placement:") and f"host {host}:" in line]
        got = [tuple(int(v) for v in m) for line in lines for m in
               re.findall(r"rank (\d+) \(tp (\d+), pp (\d+), dp (\d+)\) local (\d+)", line)]
        if len(lines) != 1 or got != want:
            problems.append(f"{host}: {len(lines)} placement lines with (rank, tp, pp, dp, local) {got}, "
                            f"expected one with {want}")
    warned = sorted(m.group(1) for m in re.finditer(r"^olmo2: warning: TP group \{([\d,]+)\} spans nodes", err, re.M))
    if warned != sorted(tp_groups_across):
        problems.append(f"warnings for TP groups across nodes: {warned}, expected {sorted(tp_groups_across)}")
    where = "; ".join(f"{h} ranks {' '.join(str(r[0]) for r in want)}" for h, want in expected.items())
    checks.check(name, problems + ([f"start of stderr:\n{err[:1500]}"] if problems else []),
                 f"the placement lines name {where} (tp, pp, dp and local ranks as expected); "
                 f"TP groups warned about as spanning nodes: {warned or 'none'}")
