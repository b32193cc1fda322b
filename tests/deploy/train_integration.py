#!/usr/bin/env python3
"""Integration test of the training exporter with deploy/ (docs/architecture.md §9, §10; ctest
deploy.train_integration, label integration). Python 3 standard library only.

Trains a tiny OLMo 2 model under `mpirun -np 4` with tp 2 x pp 2 and a loss spike
injected at step SPIKE_STEP (--debug-scale-loss), its metrics endpoint on a port the
kernel picks (--metrics-port 0, read back from --port-file), then starts a real
Prometheus on loopback, port 0 too (a copy of deploy/prometheus/prometheus.yml whose
olmo2-train local targets file names that endpoint, 1 s scrape and evaluation
intervals, the real rule files), and through Prometheus's HTTP API checks:

  * every training metric of deploy/metrics.txt exists with exactly its labels (rank,
    tp, pp, dp for each of the 4 ranks; layer 0..3), and no olmo2_train_* series that
    the contract does not list;
  * every panel expression of the training dashboard (deploy/grafana/panel_queries.py,
    job and instance substituted) parses and returns data (the serving dashboard has its
    own test against a real server: deploy.serve_integration);
  * olmo2_train_spikes_total{signal="loss"} == 1;
  * the Olmo2TrainLossSpike alert for this run is pending or firing (/api/v1/alerts).

It also pipes the job's own /metrics through `promtool check metrics` (must be clean),
stops the job with SIGUSR1 (mpirun forwards it; must exit 75, stopped early with a
checkpoint), and cross-checks the per-step JSON log: exactly one loss spike, at
SPIKE_STEP. Prometheus, the job and the temporary folder are removed on every exit path.

Usage: train_integration.py --olmo2 PATH --mpiexec PATH --prometheus PATH --promtool PATH
"""
import argparse
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prometheus_harness import (HeldPort, Prometheus, TestFailure as Failure, api,  # noqa: E402
                                check_families, check_panels, popen, port_from_file, query, stop_job, tail,
                                wait_for, write_config)

RANKS = 4          # mpirun -np 4: tp 2 x pp 2 x dp 1
LAYERS = 4
SPIKE_STEP = 40    # --debug-scale-loss SPIKE_STEP:30 (the detector is active after --spike-window / 2 = 8 steps)
SAVE_INTERVAL = 50  # --save-interval: a save (olmo2_train_checkpoint_save_seconds) before MIN_STEP
MIN_STEP = SPIKE_STEP + 20  # the checks start once Prometheus has scraped this step
JOB = "olmo2-train"

MODEL_CONFIG = {
    "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 97, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": LAYERS, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "eos_token_id": 96, "pad_token_id": 95,
}


def write_tokens(path, n=16384, seed=1234):
    """A uint32 .npy of a learnable sequence: token i = 3i mod 17, one in eight random
    (fixed seed), so the loss falls smoothly and only the injected step spikes."""
    rng = random.Random(seed)
    tokens = [rng.randrange(95) if rng.random() < 1 / 8 else (i * 3) % 17 for i in range(n)]
    header = "{'descr': '<u4', 'fortran_order': False, 'shape': (%d,), }" % n
    pad = 64 - (10 + len(header) + 1) % 64
    header = (header + " " * (pad % 64) + "\n").encode("latin1")
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
        f.write(struct.pack(f"<{n}I", *tokens))


def check_contract(series, instance):
    """series: every olmo2_train_* series of this run (instant query): the contract's
    families with exactly their labels (check_families), one series per label set,
    every rank with its tp/pp/dp, every layer."""
    def check_part(part, labels, got, problems):
        sets = {tuple((k, s["metric"][k]) for k in sorted(labels) if k in s["metric"]) for s in got}
        per_set = len(got) // max(1, len(sets))
        if part.endswith("_bucket"):
            les = {s["metric"].get("le") for s in got}
            if "+Inf" not in les or len(got) != len(sets) * len(les):
                problems.append(f"{part}: buckets {sorted(les)} not the same for each of {len(sets)} label sets")
        elif per_set != 1 or len(got) != len(sets):
            problems.append(f"{part}: {len(got)} series for {len(sets)} label sets")
        if not labels:
            return
        if "rank" in labels:
            coords = {(d["rank"], d["tp"], d["pp"], d["dp"]) for d in (dict(t) for t in sets)}
            ranks = sorted(c[0] for c in coords)
            layout = sorted((c[1], c[2], c[3]) for c in coords)
            if ranks != [str(r) for r in range(RANKS)]:
                problems.append(f"{part}: ranks {ranks}, expected 0..{RANKS - 1}")
            if layout != [(t, p, "0") for t in "01" for p in "01"]:
                problems.append(f"{part}: (tp, pp, dp) {layout}, expected each of tp 0..1 x pp 0..1, dp 0")
        elif "layer" in labels:
            layers = sorted(int(dict(t)["layer"]) for t in sets)
            if layers != list(range(LAYERS)):
                problems.append(f"{part}: layers {layers}, expected 0..{LAYERS - 1}")
        else:
            for label, values in labels.items():
                seen = sorted(dict(t)[label] for t in sets)
                if values is not None and seen != sorted(values):
                    problems.append(f"{part}: {label} values {seen}, expected {sorted(values)}")
    return check_families(series, "olmo2_train_", JOB, instance, check_part)


def check_values(series):
    """A few values that show the gather worked: every layer's norms (from both pipeline
    stages) positive and finite, every rank's step time observed, the step past the spike."""
    problems = []
    values = {}
    for s in series:
        m = s["metric"]
        key = (m["__name__"], m.get("layer") or m.get("rank") or m.get("signal") or m.get("reason") or "")
        if "le" not in m:
            values[key] = float(s["value"][1])
    for name in ("olmo2_train_layer_output_norm", "olmo2_train_attention_output_norm",
                 "olmo2_train_mlp_output_norm", "olmo2_train_layer_grad_norm"):
        for layer in range(LAYERS):
            v = values.get((name, str(layer)), float("nan"))
            if not (math.isfinite(v) and v > 0):
                problems.append(f"{name}{{layer=\"{layer}\"}} = {v}, expected a positive number")
    for layer in range(LAYERS):
        v = values.get(("olmo2_train_attention_logit_max", str(layer)), float("nan"))
        if not math.isfinite(v):
            problems.append(f"olmo2_train_attention_logit_max{{layer=\"{layer}\"}} = {v}")
    for rank in range(RANKS):
        if not values.get(("olmo2_train_step_seconds_count", str(rank)), 0) > 0:
            problems.append(f"olmo2_train_step_seconds_count{{rank=\"{rank}\"}}: no step observed")
    for name in ("olmo2_train_loss", "olmo2_train_grad_norm", "olmo2_train_learning_rate",
                 "olmo2_train_tokens_total", "olmo2_train_tokens_per_second"):
        v = values.get((name, ""), float("nan"))
        if not (math.isfinite(v) and v > 0):
            problems.append(f"{name} = {v}, expected a positive number")
    if not values.get(("olmo2_train_checkpoint_save_seconds_count", ""), 0) > 0:
        problems.append("olmo2_train_checkpoint_save_seconds_count: no checkpoint save observed")
    return problems


def run(args, tmp):
    write_tokens(os.path.join(tmp, "tokens.npy"))
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(MODEL_CONFIG, f)
    prom = job = closed = None
    t0 = time.time()
    try:
        out_path, err_path = os.path.join(tmp, "train.out"), os.path.join(tmp, "train.err")
        port_file = os.path.join(tmp, "metrics.port")
        cmd = [args.mpiexec, "-np", str(RANKS), "--allow-run-as-root", "--oversubscribe",
               args.olmo2, "train", "--threads", "1",
               "--model-config", os.path.join(tmp, "config.json"), "--data", os.path.join(tmp, "tokens.npy"),
               "--seq-len", "16", "--global-batch", "8", "--micro-batch", "2", "--steps", "1000000",
               "--lr", "1e-3", "--tp", "2", "--pp", "2",
               "--spike-window", "16", "--debug-scale-loss", f"{SPIKE_STEP}:30",
               "--metrics-port", "0", "--port-file", port_file, "--metrics-host", "127.0.0.1",
               "--diag-interval", "5",
               "--save-dir", os.path.join(tmp, "ckpt"), "--save-interval", str(SAVE_INTERVAL), "--keep", "1",
               "--log-format", "json", "--log-interval", "1000000"]
        env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1", OMP_NUM_THREADS="1")
        with open(out_path, "w") as out, open(err_path, "w") as err:
            job = popen(cmd, stdout=out, stderr=err, env=env, cwd=tmp)
        instance = f"127.0.0.1:{port_from_file(port_file, job, 'the training job')}"
        print(f"ok: metrics endpoint on {instance} ({time.time() - t0:.1f} s)")

        # The olmo2-serve local target goes to a port that is bound but not listened on
        # (held until the end, so nothing else gets it), so that a server someone runs on
        # 8000 is not scraped; it is simply down (Olmo2TargetDown needs 3 min).
        closed = HeldPort()
        config = write_config(os.path.join(tmp, "prometheus"),
                              {"olmo2-train": instance, "olmo2-serve": f"127.0.0.1:{closed.port}"})
        prom = Prometheus(args.prometheus, config, tmp)
        prom.wait_ready()
        print(f"ok: Prometheus ready on {prom.base} ({time.time() - t0:.1f} s)")

        def job_alive():
            if job.poll() is not None:
                raise Failure(f"the training job exited with status {job.returncode}")

        def target_up():
            job_alive()
            return any(t["labels"].get("job") == JOB and t["labels"].get("instance") == instance
                       and t["health"] == "up" for t in api(prom.base, "targets")["activeTargets"])
        wait_for(f"Prometheus to scrape {instance}", target_up, timeout=120)
        print(f"ok: target {JOB}/{instance} up ({time.time() - t0:.1f} s)")

        # Past the spike and a checkpoint save (SAVE_INTERVAL < MIN_STEP), per-layer values
        # set, and enough scrapes in the last minute for the dashboards' rate() over 1m.
        sel = f'{{job="{JOB}",instance="{instance}"}}'
        def far_enough():
            job_alive()
            _, r = query(prom.base, f"count_over_time(olmo2_train_step{sel}[1m]) >= 3 "
                                    f"and olmo2_train_step{sel} >= {MIN_STEP}")
            return r
        wait_for(f"step {MIN_STEP} and 3 scrapes", far_enough, timeout=120)
        _, r = query(prom.base, f"olmo2_train_step{sel}")
        print(f"ok: step {r[0]['value'][1]} scraped ({time.time() - t0:.1f} s)")

        problems = []
        _, series = query(prom.base, f'{{__name__=~"olmo2_train_.*",job="{JOB}",instance="{instance}"}}')
        p = check_contract(series, instance)
        problems += p
        if not p:
            print(f"ok: every training metric of deploy/metrics.txt with its labels ({len(series)} series)")
        p = check_values(series)
        problems += p
        if not p:
            print("ok: per-layer norms of all 4 layers, every rank's step time, a checkpoint save")

        n, p = check_panels(prom.base, "olmo2-training.json", JOB, instance)
        problems += p
        if not p:
            print(f"ok: {n} training-dashboard queries parse and return data")

        _, r = query(prom.base, f'olmo2_train_spikes_total{{signal="loss",job="{JOB}",instance="{instance}"}}')
        loss_spikes = [float(s["value"][1]) for s in r]
        _, r = query(prom.base, f'olmo2_train_spikes_total{{signal="grad_norm",job="{JOB}",instance="{instance}"}}')
        grad_spikes = [float(s["value"][1]) for s in r]
        if loss_spikes != [1.0]:
            problems.append(f'olmo2_train_spikes_total{{signal="loss"}} = {loss_spikes}, expected [1]')
        else:
            print(f'ok: olmo2_train_spikes_total{{signal="loss"}} == 1 (grad_norm: {grad_spikes})')

        def spike_alert():
            return [a for a in api(prom.base, "alerts")["alerts"]
                    if a["labels"].get("alertname") == "Olmo2TrainLossSpike"
                    and a["labels"].get("instance") == instance and a["state"] in ("pending", "firing")]
        try:
            alert = wait_for("Olmo2TrainLossSpike to be pending or firing", spike_alert, timeout=30)
            print(f"ok: Olmo2TrainLossSpike {alert[0]['state']}")
        except Failure as e:
            problems.append(str(e))

        with urllib.request.urlopen(f"http://{instance}/metrics", timeout=10) as resp:
            exposition = resp.read().decode()
        check = subprocess.run([args.promtool, "check", "metrics"], input=exposition, capture_output=True, text=True)
        if check.returncode != 0 or check.stdout.strip() or check.stderr.strip():
            problems.append(f"promtool check metrics on http://{instance}/metrics (status {check.returncode}):\n"
                            + check.stdout + check.stderr)
        else:
            print(f"ok: promtool check metrics clean ({len(exposition)} bytes)")

        status = stop_job(job)
        if status != 75:  # stopped early with a checkpoint (launcher/exit_status.h)
            problems.append(f"mpirun exited with status {status} after SIGUSR1, not 75")
        else:
            print(f"ok: SIGUSR1 stopped the job, mpirun exit status 75 ({time.time() - t0:.1f} s)")
        steps = []
        with open(out_path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("{"):
                    steps.append(json.loads(line))
        spike_steps = [s["step"] for s in steps if s.get("loss_spike")]
        if spike_steps != [SPIKE_STEP]:
            problems.append(f"the JSON log has loss spikes at steps {spike_steps}, expected [{SPIKE_STEP}] "
                            "(a natural spike: lower --lr or stop sooner)")
        else:
            print(f"ok: the log has one loss spike, at step {SPIKE_STEP}, in {len(steps)} steps")
        if problems:
            raise Failure("\n  ".join(problems))
        return 0
    except Failure as e:
        print(f"FAIL {e}")
        if job is not None:
            print(f"--- training job stderr (end) ---\n{tail(os.path.join(tmp, 'train.err'))}")
        return 1
    finally:
        if job is not None:
            stop_job(job)
        if prom is not None:
            prom.stop()
        if closed is not None:
            closed.close()
        print(f"test time {time.time() - t0:.1f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--olmo2", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--promtool", required=True)
    ap.add_argument("--keep-tmp", action="store_true", help="leave the temporary folder (for debugging)")
    args = ap.parse_args()
    for what in ("olmo2", "mpiexec", "prometheus", "promtool"):
        path = os.path.abspath(getattr(args, what))
        setattr(args, what, path)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            print(f"FAIL --{what} {path!r} is not an executable")
            return 1

    # ctest's timeout or Ctrl-C: stop what was started (the finally blocks) before exiting.
    def interrupted(signum, _frame):
        raise SystemExit(f"FAIL interrupted by {signal.Signals(signum).name}")
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)

    tmp = tempfile.mkdtemp(prefix="olmo2-train-integration-")
    try:
        return run(args, tmp)
    finally:
        if args.keep_tmp:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
