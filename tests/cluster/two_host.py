#!/usr/bin/env python3
"""Multi-node runs on two real hosts made of network namespaces (docs/architecture.md §10
"Two hosts"; ctest cluster.two_host.*, label integration). Python 3 standard library only.

scripts/netns_hosts.sh makes hosts nodea and nodeb (own network stack, address, UTS host
name and "local disk"); mpirun places 2 ranks on each through an rsh agent, Open MPI's
traffic on the veth subnet. Cases:

  train    `olmo2 train --tp 2 --pp 2` across the hosts (TP inside each host):
           * its first STEPS JSON records equal, bit for bit, those of the same run as 4
             ranks on one host (loss, z_loss, grad_norm, lr, token counts);
           * with --metrics-per-node --metrics-host 0.0.0.0, both nodes' endpoints answer
             from nodea's network, each with its own node's ranks' step times (nodea 0 1,
             nodeb 2 3), and only nodea's (rank 0's) with the job-wide families;
           * placement: rank 0's start-up lines name each host with its ranks
             (docs/architecture.md §7 "Placement");
           * SIGUSR1 to mpirun stops every rank on both hosts with status 75
             (docs/architecture.md §12 "Exit status");
           * with ranks dealt to the hosts in turn (--map-by node), each TP pair spans
             both: the same records bit for bit, the placement lines say so and a
             warning names each TP group ({0,1} and {2,3}).
  storage  --resume from a --save-dir both hosts see runs on (the control); from a path
           that shows each host its own disk, with the checkpoint on nodea's only and
           then a copy on each, it is refused at start (status 1, no step taken, well
           before the collective timeout) by one error naming nodeb and its ranks 2 and
           3 (docs/architecture.md §7 "Shared storage").
  slurm    a two-node Slurm on the hosts (tests/cluster/slurm_hosts.py) runs
           deploy/slurm/train_multinode.sbatch (2 nodes x 2 tasks, TP 2, PP 2, the
           metrics port in the job's comment, a shared save root), pre-empted by
           `scancel` once STEPS steps are logged: both nodes' metrics endpoints show
           their own ranks; status 75 and a checkpoint of its last step; its first STEPS
           records equal the one-host run's bit for bit; the placement lines name both
           hosts. The next job resumes on both nodes and its 4 steps equal, bit for bit,
           a one-host resume from a copy of the same checkpoint.

A check given with --pending NAME=REASON (work that another branch is landing) may fail:
it prints XFAIL with the reason; if it passes, the test fails so that the marker goes.
Exits 77 with one line when the namespaces cannot be made (no `ip`, no privileges) or,
for slurm, Slurm or munge is not installed.

Usage: two_host.py --case train|storage|slurm --olmo2 PATH --mpiexec PATH --netns-script PATH
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "deploy"))
from netns_hosts import SKIP_STATUS, NetnsHosts, Skip  # noqa: E402
from run_checks import (BY_NODE, COMPARED, STEPS, Checks, check_placement, compare_records,  # noqa: E402
                        json_records, one_host_reference, run_logged, train_args)
from slurm_hosts import SlurmOnHosts  # noqa: E402
from prometheus_harness import TestFailure, popen, stop_job, tail, wait_for  # noqa: E402
from train_integration import MODEL_CONFIG, write_tokens  # noqa: E402

METRICS_PORT = 9400  # free: each run has its own network namespaces
STARTUP_LIMIT = 60  # seconds within which the storage refusal must come (the collective timeout is 120)


def scrape(hosts, host):
    """{(family, labels): value} from `host`'s metrics endpoint, fetched from nodea's network."""
    r = subprocess.run(hosts.in_host_a_network(
        ["curl", "-sf", "--max-time", "5", f"http://{hosts.ip[host]}:{METRICS_PORT}/metrics"]),
        capture_output=True, text=True)
    if r.returncode != 0:
        return None
    samples = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if m:
            samples[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return samples


def step_ranks(samples):
    """The ranks whose step time has been observed at least once."""
    return sorted(int(re.search(r'rank="(\d+)"', labels).group(1)) for (name, labels), v in samples.items()
                  if name == "olmo2_train_step_seconds_count" and v > 0)


def case_train(args, hosts, tmp, env, checks):
    reference = one_host_reference(args, tmp, env)
    cmd = hosts.mpirun(args.mpiexec, ranks_per_host=2) + train_args(args, tmp, 1000000) + [
        "--metrics-per-node", "--metrics-host", "0.0.0.0", "--metrics-port", str(METRICS_PORT),
        "--save-dir", os.path.join(tmp, "shared-ckpt")]
    out, err_path = os.path.join(tmp, "two-host.out"), os.path.join(tmp, "two-host.err")
    t0 = time.time()
    with open(out, "w") as o, open(err_path, "w") as e:
        job = popen(cmd, stdout=o, stderr=e, env=env, cwd=tmp)
    try:
        seen = {}

        def scraped_both():
            if job.poll() is not None:
                raise TestFailure(f"the two-host job exited with {job.returncode}:\n{tail(err_path)}")
            for host in hosts.ip:
                seen[host] = scrape(hosts, host)
            return (len(json_records(out)) >= STEPS and all(seen.values())
                    and all(step_ranks(s) for s in seen.values()))
        wait_for("both nodes' metrics endpoints and STEPS steps", scraped_both, timeout=120)
        print(f"ok: two-host job running, both endpoints answer ({time.time() - t0:.1f} s)")
        problems = []
        for host, ranks in (("nodea", [0, 1]), ("nodeb", [2, 3])):
            got = step_ranks(seen[host])
            if got != ranks:
                problems.append(f"{host}:{METRICS_PORT} shows step times of ranks {got}, expected {ranks}")
            has_loss = ("olmo2_train_loss", "") in seen[host]
            if has_loss != (host == "nodea"):
                problems.append(f"{host}:{METRICS_PORT} {'serves' if has_loss else 'lacks'} olmo2_train_loss "
                                "(only rank 0's endpoint, on nodea, serves the job-wide families)")
        checks.check("metrics_per_node", problems,
                     f"{hosts.ip['nodea']}:{METRICS_PORT} shows ranks 0 1 and the job-wide loss, "
                     f"{hosts.ip['nodeb']}:{METRICS_PORT} ranks 2 3")
    finally:
        status = stop_job(job)
    records = json_records(out)
    err = tail(err_path, 20000)
    # docs/architecture.md §12: a signal stops training with a checkpoint and status 75 on every rank.
    checks.check("stop_status", [] if status == 75 else [f"mpirun exited with {status} after SIGUSR1, "
                                                          f"expected 75:\n{err[-2000:]}"],
                 f"SIGUSR1 stopped all 4 ranks on both hosts after {len(records)} steps, status 75")

    compare_records(checks, reference, records, "on two hosts")
    check_placement(checks, err)
    case_tp_across(args, hosts, tmp, env, checks, reference)


def case_tp_across(args, hosts, tmp, env, checks, reference):
    """Ranks dealt to the hosts in turn (--map-by node): each TP pair spans both hosts."""
    cmd = hosts.mpirun(args.mpiexec, ranks_per_host=2) + ["--map-by", "node"] + train_args(args, tmp, STEPS)
    status, out, err = run_logged(cmd, tmp, "tp-across", 120, env)
    if status != 0:
        raise TestFailure(f"the run with TP across the hosts exited with {status}:\n{err[-3000:]}")
    compare_records(checks, reference, json_records(out), "with each TP pair across the hosts",
                    name="losses_tp_across")
    check_placement(checks, err, BY_NODE, ["0,1", "2,3"], name="placement_tp_across")


def refused_at_start(run, what):
    """Problems with a resume (run: status, records, stderr, seconds) that should have
    been refused at start by one error naming nodeb and its ranks 2 and 3."""
    status, records, err, took = run
    problems = []
    if status != 1:
        problems.append(f"{what}: mpirun exited with {status}, expected 1")
    if records:
        problems.append(f"{what}: {len(records)} steps were taken before the refusal (first: step {records[0]['step']})")
    if took > STARTUP_LIMIT:
        problems.append(f"{what}: the refusal took {took:.0f} s (limit {STARTUP_LIMIT} s): not at start")
    errors = [line for line in err.splitlines() if line.startswith("olmo2: error:")]
    named = [line for line in errors if re.search(r"\bnodeb\b", line)
             and re.search(r"\b2\b", line) and re.search(r"\b3\b", line)]
    if len(named) != 1:
        problems.append(f"{what}: expected one 'olmo2: error:' line naming nodeb and ranks 2 and 3, got "
                        f"{len(named)}; errors: {errors[:6]}\nstderr ends:\n{err[-1500:]}")
    return problems, (named or [""])[0]


def case_storage(args, hosts, tmp, env, checks):
    # A step-2 checkpoint of this model in a directory both hosts see, made by one
    # process (a resume slices it for any layout: docs/architecture.md §7).
    shared = os.path.join(tmp, "shared-ckpt")
    status, _, err = run_logged(train_args(args, tmp, 2, layout=False) + ["--save-dir", shared],
                                tmp, "checkpoint", 60, env)
    step2 = os.path.join(shared, "step-00000002")
    if status != 0 or not os.path.isdir(step2):
        raise TestFailure(f"making the checkpoint exited with {status}:\n{err[-2000:]}")

    def resume(save_dir, name):
        cmd = hosts.mpirun(args.mpiexec, ranks_per_host=2) + train_args(args, tmp, 4) + [
            "--save-dir", save_dir, "--resume"]
        t0 = time.time()
        status, out, err = run_logged(cmd, tmp, name, STARTUP_LIMIT + 30, env)
        return status, json_records(out), err, time.time() - t0

    # The control: a save directory both hosts see resumes and finishes on both.
    status, records, err, _ = resume(shared, "resume-shared")
    steps = [r["step"] for r in records]
    if status != 0 or steps != [3, 4]:
        raise TestFailure(f"the resume from a shared --save-dir exited with {status} after steps {steps}, "
                          f"expected 0 after [3, 4]:\n{err[-2000:]}")
    print("ok: the resume from a --save-dir both hosts see ran steps 3 and 4 on both")

    # The checkpoint on nodea's disk only: nodeb sees an empty directory at that path.
    local = os.path.join(hosts.local, "ckpt")
    shutil.copytree(step2, os.path.join(hosts.disk["nodea"], "ckpt", "step-00000002"))
    os.makedirs(os.path.join(hosts.disk["nodeb"], "ckpt"))
    problems, named = refused_at_start(resume(local, "resume-one-disk"), "only nodea's disk has it")
    checks.check("unshared_save_dir", problems, f"the resume with the checkpoint on nodea's disk only was "
                                                f"refused at start: {named}")

    # The same checkpoint copied to both disks: every file is there, yet the directory
    # is not one (a step written by rank 0 would land on nodea's disk only).
    shutil.copytree(step2, os.path.join(hosts.disk["nodeb"], "ckpt", "step-00000002"))
    problems, named = refused_at_start(resume(local, "resume-two-copies"), "a copy on each disk")
    checks.check("unshared_save_dir_copies", problems, f"the resume with a copy of the checkpoint on each "
                                                       f"host's disk was refused at start: {named}")


def case_slurm(args, hosts, tmp, env, checks):
    reference = one_host_reference(args, tmp, env)
    os.chmod(tmp, 0o755)  # munged (user munge) must reach its socket folder inside
    # deploy/slurm/train_multinode.sbatch passes --tp, --pp, --save-dir (SAVE_ROOT/job
    # name), --resume auto, --log-format json and, from the job's comment, the metrics
    # options; the rest of the command line is the job's arguments.
    script = os.path.join(REPO, "deploy", "slurm", "train_multinode.sbatch")
    save_dir = os.path.join(tmp, "checkpoints", "olmo2-two-node")
    job_env = ",".join(["ALL", "OMPI_MCA_mpi_yield_when_idle=1", "OMP_NUM_THREADS=1", f"OLMO2={args.olmo2}",
                        "OLMO2_TP=2", "OLMO2_PP=2", f"OLMO2_SAVE_ROOT={tmp}/checkpoints"])
    with SlurmOnHosts(hosts, os.path.join(tmp, "slurm")) as slurm:
        print("ok: slurmctld on nodea, a slurmd on each host, both nodes idle")

        def submit(name, steps):
            out, err = os.path.join(tmp, f"{name}.out"), os.path.join(tmp, f"{name}.err")
            job_args = [a for a in train_args(args, tmp, steps, layout=False)[2:] if a not in ("--log-format", "json")]
            proc, job = slurm.sbatch(["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
                                      "--job-name=olmo2-two-node", f"--output={out}", f"--error={err}",
                                      f"--chdir={tmp}", f"--comment=olmo2-metrics=port:{METRICS_PORT},per-node",
                                      f"--export={job_env}", script] + job_args + ["--collective-timeout", "120"])
            return proc, job, out, err

        # Pre-empted: scancel (SIGTERM everywhere) once STEPS steps are logged.
        t0 = time.time()
        proc, job, out, err_path = submit("olmo2-preempted", 1000000)
        seen = {}

        def running():
            if proc.poll() is not None:
                return True  # reported below
            for host in hosts.ip:
                seen[host] = scrape(hosts, host)
            return len(json_records(out)) >= STEPS and all(seen.values()) and all(map(step_ranks, seen.values()))
        wait_for(f"job {job} to log {STEPS} steps and both nodes' metrics to answer", running, timeout=120)
        if proc.poll() is not None:
            raise TestFailure(f"job {job} ended with {proc.returncode} before it was pre-empted:\n"
                              f"{tail(err_path)[-3000:]}")
        problems = [f"{h}:{METRICS_PORT} shows step times of ranks {step_ranks(seen.get(h) or {})}, expected {r}"
                    for h, r in (("nodea", [0, 1]), ("nodeb", [2, 3])) if step_ranks(seen.get(h) or {}) != r]
        checks.check("slurm_metrics_per_node", problems, f"the job's comment gave each node an endpoint: "
                     f"{hosts.ip['nodea']}:{METRICS_PORT} ranks 0 1, {hosts.ip['nodeb']}:{METRICS_PORT} ranks 2 3")
        slurm.scancel(job)
        status = slurm.wait(proc, job, 60)
        records, err = json_records(out), tail(err_path, 20000)
        steps = [r["step"] for r in records]
        stopped = max(steps, default=0)
        if status != 75 or not os.path.isdir(os.path.join(save_dir, f"step-{stopped:08d}")):
            raise TestFailure(f"the pre-empted job {job} exited with {status} after steps 1..{stopped} "
                              f"(expected 75 and a checkpoint of its last step: {os.listdir(save_dir) if os.path.isdir(save_dir) else 'no save dir'})"
                              f"\njob stderr:\n{err[-3000:]}\nslurmctld log:\n{slurm.log_tail('slurmctld.log', 1500)}")
        print(f"ok: scancel stopped job {job} on both nodes after step {stopped}, status 75, "
              f"its checkpoint written ({time.time() - t0:.1f} s)")
        compare_records(checks, reference, records, "under Slurm on two nodes")
        check_placement(checks, err)

        # The same checkpoint resumed on one host (a copy of the save directory) ...
        shutil.copytree(save_dir, os.path.join(tmp, "one-host-ckpt"))
        status, one_out, one_err = run_logged(
            [args.mpiexec, "-np", "4", "--allow-run-as-root", "--oversubscribe"]
            + train_args(args, tmp, stopped + 4) + ["--save-dir", os.path.join(tmp, "one-host-ckpt"), "--resume"],
            tmp, "one-host-resume", 120, env)
        expected = json_records(one_out)
        if status != 0 or [r["step"] for r in expected] != list(range(stopped + 1, stopped + 5)):
            raise TestFailure(f"the one-host resume exited with {status}:\n{one_err[-2000:]}")
        # ... and by the requeued job on both nodes: the same steps bit for bit.
        proc, job, out, err_path = submit("olmo2-resumed", stopped + 4)
        status = slurm.wait(proc, job, 120)
        records = json_records(out)
        if status != 0:
            raise TestFailure(f"the resumed job {job} exited with {status}:\n{tail(err_path)[-3000:]}")
        mismatches = [f"step {a['step']}: {k} {b.get(k)!r} under Slurm, {a[k]!r} on one host"
                      for a, b in zip(expected, records) for k in COMPARED if a[k] != b.get(k)]
        if len(records) != len(expected):
            mismatches.append(f"steps {[r['step'] for r in records]} under Slurm, "
                              f"{[r['step'] for r in expected]} on one host")
        checks.check("resume_after_preemption", mismatches[:10],
                     f"the next job resumed from step {stopped} on both nodes and its steps "
                     f"{stopped + 1}..{stopped + 4} equal a one-host resume bit for bit")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", required=True, choices=("train", "storage", "slurm"))
    ap.add_argument("--olmo2", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--netns-script", required=True)
    ap.add_argument("--pending", action="append", default=[], metavar="NAME=REASON",
                    help="a check expected to fail until another branch lands")
    ap.add_argument("--keep-tmp", action="store_true", help="leave the temporary folder (for debugging)")
    args = ap.parse_args()
    pending = dict(p.split("=", 1) for p in args.pending)
    for what in ("olmo2", "mpiexec", "netns_script"):
        path = os.path.abspath(getattr(args, what))
        setattr(args, what, path)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            print(f"FAIL --{what.replace('_', '-')} {path!r} is not an executable")
            return 1
    if shutil.which("curl") is None and args.case == "train":
        print("SKIP: curl (Debian package curl) is not installed; it scrapes the metrics endpoints")
        return SKIP_STATUS
    if args.case == "slurm":
        try:
            SlurmOnHosts.check_tools()
        except Skip as e:
            print(f"SKIP: {e}")
            return SKIP_STATUS

    def interrupted(signum, _frame):  # ctest's timeout: the finally blocks stop what was started
        raise SystemExit(f"FAIL interrupted by {signal.Signals(signum).name}")
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)

    tmp = tempfile.mkdtemp(prefix=f"olmo2-two-host-{args.case}-")
    t0 = time.time()
    try:
        write_tokens(os.path.join(tmp, "tokens.npy"))
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            json.dump(MODEL_CONFIG, f)
        env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1", OMP_NUM_THREADS="1")
        checks = Checks(pending)
        with NetnsHosts(args.netns_script, os.path.join(tmp, "hosts")) as hosts:
            print(f"ok: hosts nodea {hosts.ip['nodea']} and nodeb {hosts.ip['nodeb']} up")
            {"train": case_train, "storage": case_storage, "slurm": case_slurm}[args.case](args, hosts, tmp, env, checks)
        if checks.failed:
            raise TestFailure("\n".join(checks.failed))
        return 0
    except Skip as e:
        print(f"SKIP: {e}")
        t0 = None  # the skip is the one line printed
        return SKIP_STATUS
    except (TestFailure, RuntimeError) as e:  # RuntimeError: a daemon that did not start
        print(f"FAIL {e}")
        return 1
    finally:
        if t0 is not None:
            print(f"test time {time.time() - t0:.1f} s")
        if args.keep_tmp:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
