#!/usr/bin/env python3
"""The deploy/slurm/ batch scripts and the Prometheus prolog under a real Slurm 22.05
(docs/architecture.md §9, §12 "Exit status"). Starts a cluster on loopback with
scripts/slurm_cluster.sh (its own munged; PrologSlurmctld/EpilogSlurmctld = the
slurmctld hook), then, with a tiny OLMo 2 model at tp 2:

  reference   train_srun.sbatch runs STEPS steps uninterrupted (srun --mpi=pmix); the
              prolog's targets file names this node and the port of the job's comment
              while it runs, and the epilog removes it;
  srun        train_srun.sbatch, plain `scancel` after a few steps: a checkpoint, olmo2
              exits 75; the same command again resumes: the JSON loss lines of both
              halves equal the reference's, bit for bit;
  requeue     train_requeue.sbatch, `scancel --signal=USR1` (what --signal=USR1@N sends
              at the time limit): exit 75, the script requeues the job, which resumes
              (SLURM_RESTART_COUNT=1) and finishes with 0; losses equal the reference;
              a run that fails (a missing data file) ends FAILED, not requeued;
  mpirun      train_mpirun.sbatch, `scancel --batch --signal=USR1`: the trap forwards it
              to mpirun, a checkpoint, exit 75; resubmitted, it resumes; losses equal;
  multinode   train_multinode.sbatch, 4 tasks on one node at tp 2 x pp 2: exit 0, losses
              as tp 2's; 3 tasks per node at tp 2 refused;
  serve       serve.sbatch with port:auto: it publishes host:port in a file and in the
              job's comment, the prolog registers the same port as olmo2-serve, a
              /v1/completions request there answers, and `scancel` ends the job within
              the shutdown grace with status 0;
  prolog      a two-node job with per-node metrics (partition pair) is registered on
              both nodes, a serving job beside it on the same node with its own port,
              and the epilog removes both files.

Skips (status 77, one line) when Slurm or munge is missing or the cluster cannot start.
Everything the test started is stopped by PID (slurm_cluster.sh stop) in a finally.

Ports: the metrics port of a job's `olmo2-metrics=port:N` comment must be known before
the job starts (the prolog registers it), so it cannot be a port-0 bind; it is picked
below the kernel's ephemeral range (prometheus_harness.low_port), as slurm_cluster.sh
picks the daemons' ports, where no other test's server (all bind port 0) or outgoing
connection is given it. Only tests that take low ports themselves could collide: ctest
runs them under RESOURCE_LOCK slurm_cluster.

Usage: slurm_integration.py --olmo2 PATH --random-model PATH --tokenizer PATH
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prometheus_harness import REPO, TestFailure as Failure, low_port, tail, wait_for  # noqa: E402
from train_integration import write_tokens  # noqa: E402

SLURM = os.path.join(REPO, "deploy", "slurm")
SKIP = 77
STEPS = 120        # the whole run; a stop comes after STOP_AFTER steps or soon after
STOP_AFTER = 5
MODEL_CONFIG = {
    "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 97, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "eos_token_id": 96, "pad_token_id": 95,
}
SERVE_MODEL_CONFIG = {
    "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 100352, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "eos_token_id": 100257, "pad_token_id": 100277,
}
GRACE = 25  # serve's default --shutdown-grace


class Cluster:
    def __init__(self, tmp, olmo2):
        self.dir = os.path.join(tmp, "cluster")
        self.tmp = tmp
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.dir, "slurm.conf"), OLMO2=olmo2, OLMO2_TP="2",
                        OLMO2_SAVE_ROOT=os.path.join(tmp, "checkpoints"), OLMO2_ADDRESS_DIR=tmp,
                        OMPI_MCA_mpi_yield_when_idle="1", OMP_NUM_THREADS="1")

    def script(self, *args, **kw):
        return subprocess.run([os.path.join(REPO, "scripts", "slurm_cluster.sh"), *args, self.dir],
                              capture_output=True, text=True, **kw)

    def run(self, *cmd, check=True):
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise Failure(f"{' '.join(cmd)}: status {r.returncode}: {r.stderr.strip()}")
        return r.stdout

    def sbatch(self, script, name, comment, args):
        out = self.run("sbatch", "--parsable", f"--job-name={name}", f"--comment={comment}",
                       f"--output={self.tmp}/{name}.out", "--chdir", self.tmp, os.path.join(SLURM, script), *args)
        return out.strip().split(";")[0]

    def job(self, job_id):
        """{field: value} of `scontrol show job -o` (values without spaces)."""
        out = self.run("scontrol", "show", "job", "-o", job_id)
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    def wait_state(self, job_id, states, timeout=120):
        try:
            return wait_for(f"job {job_id} to be {'/'.join(states)}",
                            lambda: self.job(job_id)["JobState"] in states and self.job(job_id), timeout=timeout,
                            interval=0.3)
        except Failure as e:
            info = self.job(job_id)
            out = info.get("StdOut", "")
            raise Failure(f"{e}: it is {info.get('JobState')} (reason {info.get('Reason')})\n"
                          f"{tail(out, 2000) if os.path.exists(out) else ''}\n{self.logs()}") from None

    def logs(self):
        names = sorted(os.listdir(os.path.join(self.dir, "log"))) if os.path.isdir(os.path.join(self.dir, "log")) else []
        return "".join(f"--- {name}:\n{tail(os.path.join(self.dir, 'log', name), 1500)}\n" for name in names)


TIMING = ("step_time", "tokens_per_second", "peak_rss_bytes", "compute_time", "bubble_time",
          "comm_wait_time")  # the JSON step line's measurements, not the run's values


def losses(path):
    """{step: [the JSON step line without its timings, one per time the step was logged]}
    of a job's output file(s)."""
    found = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("{"):
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if "step" in rec and "loss" in rec:
                    found.setdefault(rec["step"], []).append({k: v for k, v in rec.items() if k not in TIMING})
    return found


def steps_in(path):
    try:
        return max(losses(path), default=0)
    except OSError:
        return 0


def exit_statuses(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return [int(m) for m in re.findall(r"olmo2 exit status (\d+)", f.read())]


def auto_port(job_id):
    """port:auto of deploy/slurm/ and the prolog: 20000 + job id mod 10000, below the
    kernel's ephemeral range (32768 on)."""
    return 20000 + int(job_id) % 10000


def check_targets(cluster, kind, job_id, port, host):
    path = os.path.join(cluster.dir, "targets", f"olmo2-{kind}-{job_id}.json")
    if not os.path.exists(path):
        raise Failure(f"the prolog wrote no {path} for running job {job_id}:\n{cluster.logs()}")
    with open(path, encoding="utf-8") as f:
        group = json.load(f)[0]
    if group["targets"] != [f"{host}:{port}"] or group["labels"].get("slurm_job_id") != job_id:
        raise Failure(f"{path}: {group}, expected target {host}:{port} and slurm_job_id {job_id}")


def check_removed(cluster, kind, job_id):
    path = os.path.join(cluster.dir, "targets", f"olmo2-{kind}-{job_id}.json")
    wait_for(f"the epilog to remove {path}", lambda: not os.path.exists(path), timeout=20, interval=0.2)


def train_args(tmp):
    return ["--model-config", os.path.join(tmp, "config.json"), "--data", os.path.join(tmp, "tokens.npy"),
            "--seq-len", "32", "--global-batch", "8", "--micro-batch", "2", "--steps", str(STEPS), "--lr", "1e-3",
            "--threads", "1", "--save-interval", "1000", "--keep", "2"]


def compare(name, got, reference):
    if sorted(got) != list(range(1, STEPS + 1)):
        missing = sorted(set(range(1, STEPS + 1)) - set(got))
        raise Failure(f"{name}: steps logged {min(got, default=None)}..{max(got, default=None)}, missing {missing[:10]}")
    # A step logged twice (before the stop and again after the resume) must agree too.
    bad = [s for s in got if any(v != reference[s][0] for v in got[s])]
    if bad:
        s = bad[0]
        raise Failure(f"{name}: step {s} logged {got[s]}, the uninterrupted run {reference[s][0]} "
                      f"({len(bad)} steps differ)")


def interrupted_run(cluster, script, name, stop, expect_requeue=False):
    """Runs script until STOP_AFTER steps, stops it with stop(job_id), then (unless the
    script requeues itself) submits it again; returns (losses, output path, job ids)."""
    tmp = cluster.tmp
    out = os.path.join(tmp, f"{name}.out")
    port = low_port()
    t0 = time.time()
    job = cluster.sbatch(script, name, f"olmo2-metrics=port:{port}", train_args(tmp))
    cluster.wait_state(job, ["RUNNING", "COMPLETED", "FAILED", "CANCELLED"])
    check_targets(cluster, "train", job, port, cluster.host)
    wait_for(f"{name}: step {STOP_AFTER} in {out}",
             lambda: steps_in(out) >= STOP_AFTER or cluster.job(job)["JobState"] not in ("RUNNING", "PENDING", "CONFIGURING"),
             timeout=90, interval=0.05)
    if steps_in(out) >= STEPS:
        raise Failure(f"{name}: the run finished before the test could stop it")
    stop(job)
    print(f"  {name}: stopped after step {steps_in(out)} ({time.time() - t0:.1f} s)")
    ids = [job]
    if expect_requeue:
        info = wait_for(f"{name}: job {job} to be requeued",
                        lambda: (lambda j: j if j["JobState"] == "PENDING" and j["Restarts"] == "1" else None)(
                            cluster.job(job)) or (cluster.job(job)["JobState"] in ("COMPLETED", "FAILED", "CANCELLED")
                                                  and cluster.job(job)), timeout=90, interval=0.3)
        if info["JobState"] != "PENDING":
            raise Failure(f"{name}: job {job} ended {info['JobState']} instead of being requeued; exit statuses "
                          f"{exit_statuses(out)} (a stop must exit 75):\n{tail(out, 1500)}")
        # Slurm holds a requeued job ~2 minutes (BeginTime); start it now — but not within
        # the second the node revoked the old run's credential: slurmd compares the new
        # credential's creation time with the revocation in whole seconds, and refuses the
        # launch ("Job credential revoked", the job ends FAILED), as seen under load.
        time.sleep(2.5)
        cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
        final = cluster.wait_state(job, ["COMPLETED", "FAILED", "CANCELLED"], timeout=120)
    else:
        stopped = cluster.wait_state(job, ["COMPLETED", "FAILED", "CANCELLED"], timeout=60)
        check_removed(cluster, "train", job)
        if exit_statuses(out) != [75]:
            raise Failure(f"{name}: job {job} ended {stopped['JobState']}, olmo2 exit statuses {exit_statuses(out)}, "
                          f"expected [75] (stopped with a checkpoint):\n{tail(out, 1500)}")
        ckpts = [d for d in os.listdir(os.path.join(tmp, "checkpoints", name)) if d.startswith("step-")]
        if not ckpts or not os.path.exists(os.path.join(tmp, "checkpoints", name, max(ckpts), "training_state.json")):
            raise Failure(f"{name}: no checkpoint after the stop: {ckpts}")
        print(f"  {name}: job {job} {stopped['JobState']}, exit 75, checkpoint {max(ckpts)}")
        os.rename(out, out + ".1")
        job2 = cluster.sbatch(script, name, f"olmo2-metrics=port:{port}", train_args(tmp))
        ids.append(job2)
        final = cluster.wait_state(job2, ["COMPLETED", "FAILED", "CANCELLED"], timeout=120)
        with open(out + ".1", encoding="utf-8") as a, open(out, encoding="utf-8") as b:
            joined = a.read() + b.read()
        with open(out, "w", encoding="utf-8") as f:
            f.write(joined)
    if final["JobState"] != "COMPLETED" or exit_statuses(out)[-1:] != [0]:
        raise Failure(f"{name}: the resumed job ended {final['JobState']}, exit statuses {exit_statuses(out)}:\n"
                      f"{tail(out, 2000)}\n{cluster.logs()}")
    check_removed(cluster, "train", ids[-1])
    return losses(out), out, ids, time.time() - t0


def case_reference(cluster):
    out = os.path.join(cluster.tmp, "olmo2-ref.out")
    port = low_port()
    t0 = time.time()
    job = cluster.sbatch("train_srun.sbatch", "olmo2-ref", f"olmo2-metrics=port:{port}", train_args(cluster.tmp))
    state = cluster.wait_state(job, ["RUNNING", "COMPLETED", "FAILED", "CANCELLED"])
    if state["JobState"] == "RUNNING":
        check_targets(cluster, "train", job, port, cluster.host)
    final = cluster.wait_state(job, ["COMPLETED", "FAILED", "CANCELLED"], timeout=120)
    if final["JobState"] != "COMPLETED" or exit_statuses(out) != [0]:
        raise Failure(f"reference run: job {job} {final['JobState']}, exit statuses {exit_statuses(out)}:\n"
                      f"{tail(out, 2000)}\n{cluster.logs()}")
    check_removed(cluster, "train", job)
    ref = losses(out)
    if sorted(ref) != list(range(1, STEPS + 1)):
        raise Failure(f"reference run: steps {sorted(ref)[:5]}… logged, expected 1..{STEPS}")
    print(f"ok: reference: train_srun.sbatch, {STEPS} steps at tp 2, exit 0, targets file with port {port} "
          f"while it ran, removed after ({time.time() - t0:.1f} s)")
    return ref


def case_serve(cluster, args):
    tmp = cluster.tmp
    with open(os.path.join(tmp, "serve-config.json"), "w", encoding="utf-8") as f:
        json.dump(SERVE_MODEL_CONFIG, f)
    r = subprocess.run([args.random_model, os.path.join(tmp, "serve-config.json"), args.tokenizer,
                        os.path.join(tmp, "model"), "0.2"], capture_output=True, text=True, timeout=120)
    model = r.stdout.split()[-1] if r.stdout.split() else ""
    if r.returncode != 0 or not os.path.isdir(model):
        raise Failure(f"olmo2_random_model: status {r.returncode}: {r.stdout}{r.stderr}")
    t0 = time.time()
    job = cluster.sbatch("serve.sbatch", "olmo2-serve-test", "chat olmo2-metrics=kind:serve,port:auto",
                         ["--model", model, "--threads", "1", "--kv-cache-memory", "256KiB",
                          "--max-batch-tokens", "64"])
    port = auto_port(job)
    out = os.path.join(tmp, "olmo2-serve-test.out")
    address_file = os.path.join(tmp, f"olmo2-serve-test-{job}.address")

    def published():
        state = cluster.job(job)["JobState"]
        if state not in ("PENDING", "CONFIGURING", "RUNNING"):
            raise Failure(f"serve job {job} is {state}:\n{tail(out, 2000)}")
        return os.path.exists(address_file) and open(address_file, encoding="utf-8").read().strip()
    address = wait_for(f"serve job {job} to publish its address", published, timeout=90, interval=0.2)
    if address != f"{cluster.host}:{port}":
        raise Failure(f"{address_file} says {address!r}, expected {cluster.host}:{port} (port:auto)")
    comment = cluster.run("squeue", "-h", "-j", job, "-o", "%k").strip()
    if comment != f"chat olmo2-metrics=kind:serve,port:auto olmo2-serve={address}":
        raise Failure(f"the job's comment is {comment!r}, expected the submitted one and olmo2-serve={address}")
    check_targets(cluster, "serve", job, port, cluster.host)
    req = urllib.request.Request(f"http://{address}/v1/completions", method="POST",
                                 data=json.dumps({"prompt": "Hello", "max_tokens": 4}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = json.load(resp)
    if body.get("usage", {}).get("completion_tokens") != 4 or not body.get("choices"):
        raise Failure(f"/v1/completions at {address} answered {body}")
    print(f"ok: serve: {address} published in {os.path.basename(address_file)} and the job's comment, "
          f"registered as olmo2-serve, a completion of 4 tokens ({time.time() - t0:.1f} s)")
    t1 = time.time()
    cluster.run("scancel", job)
    final = cluster.wait_state(job, ["COMPLETED", "FAILED", "CANCELLED"], timeout=GRACE + 15)
    took = time.time() - t1
    if took > GRACE or exit_statuses(out) != [0]:
        raise Failure(f"serve: scancel → job {final['JobState']} after {took:.1f} s (grace {GRACE} s), "
                      f"exit statuses {exit_statuses(out)}:\n{tail(out, 1500)}")
    check_removed(cluster, "serve", job)
    if os.path.exists(address_file):
        raise Failure(f"serve: {address_file} left after the job ended")
    print(f"ok: serve: scancel ended it in {took:.1f} s (< grace {GRACE} s), exit 0, address file and "
          "targets file removed")


def case_prolog(cluster):
    """Two jobs at once on this host's node: a per-node training job over both nodes of
    partition pair and a serving job with port:auto; each gets its own targets file."""
    port = low_port()
    t0 = time.time()
    pair = cluster.run("sbatch", "--parsable", "-p", "pair", "-N", "2", "-n", "2", "--job-name=olmo2-pernode",
                       f"--comment=olmo2-metrics=port:{port},per-node", f"--output={cluster.tmp}/pernode.out",
                       "--wrap", "sleep 4").strip()
    serve = cluster.run("sbatch", "--parsable", "--job-name=olmo2-auto", "--comment=olmo2-metrics=kind:serve,port:auto",
                        f"--output={cluster.tmp}/auto.out", "--wrap", "sleep 4").strip()
    for job in (pair, serve):
        cluster.wait_state(job, ["RUNNING"], timeout=30)
    path = os.path.join(cluster.dir, "targets", f"olmo2-train-{pair}.json")
    with open(path, encoding="utf-8") as f:
        group = json.load(f)[0]
    want = [f"{cluster.host}:{port}", f"{cluster.host}-b:{port}"]
    if group["targets"] != want or group["labels"] != {"slurm_job_id": pair, "slurm_job_name": "olmo2-pernode",
                                                       "slurm_user": "root"}:
        raise Failure(f"per-node job {pair}: {path} holds {group}, expected targets {want}")
    check_targets(cluster, "serve", serve, auto_port(serve), cluster.host)
    for job in (pair, serve):
        cluster.wait_state(job, ["COMPLETED"], timeout=30)
    check_removed(cluster, "train", pair)
    check_removed(cluster, "serve", serve)
    print(f"ok: prolog under slurmctld: per-node job {pair} → {want}, job {serve} on the same node → port:auto "
          f"{auto_port(serve)} as olmo2-serve; the epilog removed both ({time.time() - t0:.1f} s)")


def case_multinode(cluster, ref):
    """train_multinode.sbatch on this host's node (a step cannot span the test's two
    slurmds): 4 tasks, tp 2 x pp 2, --metrics-per-node; and its refusal of a task count
    per node that would split a TP group."""
    tmp = cluster.tmp
    t0 = time.time()
    env = dict(cluster.env, OLMO2_PP="2")
    bad = subprocess.run(["sbatch", "--parsable", "-N", "1", "--ntasks-per-node=3", "--cpus-per-task=1",
                          "--job-name=olmo2-split", f"--output={tmp}/split.out", "--chdir", tmp,
                          os.path.join(SLURM, "train_multinode.sbatch"), *train_args(tmp)],
                         env=env, capture_output=True, text=True, timeout=60)
    job = bad.stdout.strip()
    final = cluster.wait_state(job, ["COMPLETED", "FAILED", "CANCELLED"], timeout=60)
    text = open(os.path.join(tmp, "split.out"), encoding="utf-8").read()
    if final["JobState"] != "FAILED" or "not a multiple of TP 2" not in text:
        raise Failure(f"train_multinode.sbatch with 3 tasks per node at TP 2: {final['JobState']}, output {text!r}")
    port = low_port()
    r = subprocess.run(["sbatch", "--parsable", "-N", "1", "--ntasks-per-node=4", "--cpus-per-task=1",
                        "--job-name=olmo2-multinode", f"--comment=olmo2-metrics=port:{port},per-node",
                        f"--output={tmp}/multinode.out", "--chdir", tmp,
                        os.path.join(SLURM, "train_multinode.sbatch"), *train_args(tmp)],
                       env=env, capture_output=True, text=True, timeout=60)
    job = r.stdout.strip()
    final = cluster.wait_state(job, ["COMPLETED", "FAILED", "CANCELLED"], timeout=180)
    out = os.path.join(tmp, "multinode.out")
    if final["JobState"] != "COMPLETED" or exit_statuses(out) != [0]:
        raise Failure(f"train_multinode.sbatch: job {job} {final['JobState']}, exit statuses {exit_statuses(out)}:\n"
                      f"{tail(out, 2000)}")
    got = losses(out)
    worst = max(abs(got[s][0]["loss"] - ref[s][0]["loss"]) / abs(ref[s][0]["loss"]) for s in ref)
    # A pipeline-only split trains bit-identical weights (docs/architecture.md §6), so the losses are tp 2's.
    if sorted(got) != sorted(ref) or worst != 0:
        raise Failure(f"train_multinode.sbatch at tp 2 x pp 2: steps {len(got)}, loss differs from tp 2 by {worst:.2e}")
    print(f"ok: multinode script: refuses 3 tasks per node at TP 2; tp 2 x pp 2 with --metrics-per-node, exit 0, "
          f"losses equal tp 2's ({time.time() - t0:.1f} s)")


def run(args, tmp):
    cluster = Cluster(tmp, args.olmo2)
    r = cluster.script("start", timeout=120)
    if r.returncode != 0:
        print(f"SKIP: no Slurm cluster: {r.stderr.strip() or r.stdout.strip()}")
        return SKIP
    cluster.host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    t0 = time.time()
    print(f"ok: Slurm cluster up ({cluster.env['SLURM_CONF']})")
    write_tokens(os.path.join(tmp, "tokens.npy"))
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(MODEL_CONFIG, f)

    case_prolog(cluster)
    ref = case_reference(cluster)
    got, _, ids, took = interrupted_run(cluster, "train_srun.sbatch", "olmo2-srun",
                                        lambda job: cluster.run("scancel", job))
    compare("srun: scancel then resubmit", got, ref)
    print(f"ok: srun: scancel → checkpoint, exit 75; resubmitted (jobs {ids}), resumed: {STEPS} losses equal "
          f"the uninterrupted run's ({took:.1f} s)")
    got, out, ids, took = interrupted_run(cluster, "train_requeue.sbatch", "olmo2-requeue",
                                          lambda job: cluster.run("scancel", "--signal=USR1", job),
                                          expect_requeue=True)
    compare("requeue", got, ref)
    if exit_statuses(out) != [75, 0] or "SLURM_RESTART_COUNT=1" not in open(out, encoding="utf-8").read():
        raise Failure(f"requeue: exit statuses {exit_statuses(out)}, expected [75, 0] and a restart:\n{tail(out)}")
    print(f"ok: requeue: scancel --signal=USR1 → exit 75 → scontrol requeue → resumed (restart 1) → exit 0; "
          f"losses equal ({took:.1f} s)")
    # Plain scancel cancels for good: the batch shell's trap notes the SIGTERM, the ranks
    # save and exit 75, and the job is not requeued (it used to requeue itself forever).
    port = low_port()
    job = cluster.sbatch("train_requeue.sbatch", "olmo2-cancel", f"olmo2-metrics=port:{port}", train_args(tmp))
    cancel_out = os.path.join(tmp, "olmo2-cancel.out")
    cluster.wait_state(job, ["RUNNING", "COMPLETED", "FAILED", "CANCELLED"])
    wait_for(f"olmo2-cancel: a step in {cancel_out}", lambda: steps_in(cancel_out) >= 2, timeout=90, interval=0.05)
    cluster.run("scancel", job)
    wait_for(f"olmo2-cancel: the script's last line in {cancel_out}",
             lambda: "olmo2 exit status" in open(cancel_out, encoding="utf-8").read(), timeout=60, interval=0.2)
    time.sleep(2)  # a requeue would have put it back to PENDING by now
    final = cluster.job(job)
    text = open(cancel_out, encoding="utf-8").read()
    if final["JobState"] == "PENDING" or final["Restarts"] != "0" or exit_statuses(cancel_out) != [75] \
            or "not requeued" not in text:
        raise Failure(f"requeue script, plain scancel: {final['JobState']}, restarts {final['Restarts']}, "
                      f"exit statuses {exit_statuses(cancel_out)}:\n{tail(cancel_out, 1500)}")
    print(f"ok: requeue: plain scancel → checkpoint, exit 75, job {final['JobState']}, not requeued")
    # A failure is not requeued: a data file that does not exist (olmo2 exits 1 or 2).
    bad = cluster.sbatch("train_requeue.sbatch", "olmo2-bad", "olmo2-metrics=port:1",
                         [a if a != os.path.join(tmp, "tokens.npy") else os.path.join(tmp, "missing.npy")
                          for a in train_args(tmp)])
    final = cluster.wait_state(bad, ["COMPLETED", "FAILED", "CANCELLED"], timeout=180)  # a loaded machine may start srun slowly
    bad_out = os.path.join(tmp, "olmo2-bad.out")
    if final["JobState"] != "FAILED" or final["Restarts"] != "0" or exit_statuses(bad_out) not in ([1], [2]) \
            or "not requeued" not in open(bad_out, encoding="utf-8").read():
        raise Failure(f"requeue script with a missing data file: {final['JobState']}, restarts {final['Restarts']}, "
                      f"exit statuses {exit_statuses(bad_out)}:\n{tail(bad_out, 1500)}")
    print(f"ok: requeue: a failed run (exit {exit_statuses(bad_out)[0]}) ends FAILED and is not requeued")
    got, _, ids, took = interrupted_run(cluster, "train_mpirun.sbatch", "olmo2-mpirun",
                                        lambda job: cluster.run("scancel", "--batch", "--signal=USR1", job))
    compare("mpirun", got, ref)
    print(f"ok: mpirun: scancel --batch --signal=USR1 → trap → checkpoint, exit 75; resubmitted, losses equal "
          f"({took:.1f} s)")
    case_multinode(cluster, ref)
    case_serve(cluster, args)
    print(f"ok: all Slurm cases in {time.time() - t0:.1f} s")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--olmo2", required=True)
    ap.add_argument("--random-model", required=True, help="bench/olmo2_random_model")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    args.olmo2, args.random_model, args.tokenizer = (os.path.abspath(p) for p in
                                                     (args.olmo2, args.random_model, args.tokenizer))
    for tool in ("slurmctld", "slurmd", "munged"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            print(f"SKIP: {tool} is not installed (Debian: munge slurmctld slurmd slurm-client)")
            return SKIP
    tmp = tempfile.mkdtemp(prefix=f"olmo2-slurm-{os.getpid()}-")
    os.chmod(tmp, 0o755)
    cluster = Cluster(tmp, args.olmo2)
    try:
        return run(args, tmp)
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL {e}")
        return 1
    finally:
        r = cluster.script("stop", timeout=120)
        if r.returncode != 0:
            print(f"slurm_cluster.sh stop: {r.stderr.strip()}")
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
