#!/usr/bin/env python3
"""Golden fixture for a checkpoint written by `olmo2 train`: transformers' logits of it.

The other golden fixtures check our forward on weights that transformers wrote; this
one checks the other direction end to end: the program trains a tiny model for a few
steps, saves it in the Hugging Face layout (runtime/train/checkpoint.h), transformers loads
that checkpoint, and its logits become the reference that
tests/golden/test_trained_checkpoint.cpp compares the program's own forward against,
after re-running the same training.

Run by scripts/make_fixtures.sh, or alone (from the repository root, after building the
program) with the reference environment's python:

  /opt/olmo2-fixtures-venv/bin/python tests/golden/make_trained_checkpoint_fixture.py \\
      [--olmo2 build/olmo2] [--model olmo2|olmo3]

It (re)writes tests/golden/fixtures/trained/ (--model olmo3: trained-olmo3/, an Olmo 3
model with sliding-window and YaRN layers, docs/architecture.md §3) and nothing else:
  config.json            a tiny OLMo 2 (Olmo 3) config (the --model-config of the run)
  tokens.npy             3072 uint32 ids from a seeded numpy generator: mostly a
                         learnable cycle, some noise, an eos every 64 ids (--data)
  train_args.json        {"args": [...]}: the exact `olmo2 train` arguments, without
                         --model-config / --data / --save-dir, which the test adds
  reference.safetensors  ids.0 / ids.1 (int32, lengths 13 and 6) and logits.0 /
                         logits.1 ([T, V] fp32) of transformers (eager attention, fp32)
                         on the step-00000003 checkpoint the program saved
  reference.json         versions used, the checkpoint's config.json as saved, and the
                         measured sanity margins (below)

Checks, each a failure (exit 1) when it does not hold:
  - transformers loads the checkpoint with no missing, unexpected or mismatched keys,
    and its config is an Olmo2Config (Olmo3Config) whose fields equal the input config's
    (Olmo 3: layer_types, sliding_window and rope_parameters per layer type included);
  - a second run with --save-interval 1 --keep 0 writes a bitwise-identical
    step-00000003 model (training is deterministic at a fixed thread count);
  - Olmo 3: transformers' logits without the window (sliding_window 1000) and without
    YaRN (plain RoPE) differ from these by more than 1e-3, ten times the test's bound
    (after 3 steps from the program's small init, YaRN moves them by ~1e-2);
  - the trained logits differ from the untrained init's (a run with --steps 1 --lr 0,
    whose AdamW update is zero) by more than 1e-2, and from the step-2 checkpoint's by
    more than 1e-2: far above the test's 1e-4 tolerance, so the test would catch a
    checkpoint of the wrong step or of stale weights.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
import safetensors.torch
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "fixtures", "trained")
sys.path.insert(0, HERE)
from check_hf_checkpoint import load_checked  # noqa: E402  (the same load checks)

CONFIG = {
    "architectures": ["Olmo2ForCausalLM"],
    "model_type": "olmo2",
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "eos_token_id": 127,
    "pad_token_id": 126,
}
S, F = "sliding_attention", "full_attention"
# Olmo 3: sliding, full, sliding, full; a window of 5 inside the 16-token training
# sequences; YaRN over an original context of 8 on the full layers, with θ 100 so that
# most of their frequencies turn within the sequences (max_position_embeddings = factor ×
# original, as transformers expects of YaRN).
CONFIG_OLMO3 = {
    **{k: v for k, v in CONFIG.items() if k != "rope_theta"},
    "architectures": ["Olmo3ForCausalLM"],
    "model_type": "olmo3",
    "num_hidden_layers": 4,
    "max_position_embeddings": 32,
    "layer_types": [S, F, S, F],
    "sliding_window": 5,
    "rope_parameters": {F: {"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0,
                            "original_max_position_embeddings": 8},
                        S: {"rope_type": "default", "rope_theta": 10000.0}},
}
VARIANTS = {"olmo2": ("trained", CONFIG), "olmo3": ("trained-olmo3", CONFIG_OLMO3)}
STEPS = 3
TRAIN_ARGS = ["--seq-len", "16", "--global-batch", "4", "--micro-batch", "2", "--steps", str(STEPS),
              "--lr", "1e-2", "--warmup-steps", "1", "--seed", "7", "--threads", "1"]
LENGTHS = (13, 6)
MARGIN = 1e-2  # the least logit change a wrong-step checkpoint must show
FEATURE_MARGIN = 1e-3  # Olmo 3: the least change without the window or YaRN (10 × the test's 1e-4)


def make_tokens(n=3072):
    rng = np.random.default_rng(1234)
    i = np.arange(n)
    cycle = (i * 5) % 29  # a cycle of 29 ids: learnable within a few steps at lr 1e-2
    noise = rng.integers(0, 120, size=n)
    ids = np.where(rng.random(n) < 0.15, noise, cycle)
    ids[i % 64 == 0] = CONFIG["eos_token_id"]
    return ids.astype(np.uint32)


def run_train(olmo2, extra, save_dir):
    cmd = [olmo2, "train", "--model-config", os.path.join(OUT, "config.json"),
           "--data", os.path.join(OUT, "tokens.npy"), "--save-dir", save_dir] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
    return r


def with_arg(args, name, value):
    """TRAIN_ARGS with option `name` set to `value`."""
    out = list(args)
    out[out.index(name) + 1] = value
    return out


def load(ckpt, failures):
    return load_checked(ckpt, failures, attn_implementation="eager",
                        config_class="Olmo3Config" if CONFIG.get("model_type") == "olmo3" else "Olmo2Config")


def logits_of(model, seqs):
    with torch.no_grad():
        return [model(input_ids=torch.tensor([s], dtype=torch.long)).logits[0].float() for s in seqs]


def max_diff(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--olmo2", default=os.path.join(ROOT, "build", "olmo2"), help="the program")
    parser.add_argument("--model", choices=sorted(VARIANTS), default="olmo2", help="which fixture")
    args = parser.parse_args()
    global OUT, CONFIG
    OUT = os.path.join(HERE, "fixtures", VARIANTS[args.model][0])
    CONFIG = VARIANTS[args.model][1]
    olmo2 = os.path.abspath(args.olmo2)
    torch.manual_seed(0)
    failures = []

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=1)
        f.write("\n")
    np.save(os.path.join(OUT, "tokens.npy"), make_tokens())
    with open(os.path.join(OUT, "train_args.json"), "w") as f:
        json.dump({"args": TRAIN_ARGS}, f, indent=1)
        f.write("\n")

    rng = np.random.default_rng(99)
    seqs = [rng.integers(0, CONFIG["vocab_size"], size=n).tolist() for n in LENGTHS]

    tmp = tempfile.mkdtemp(prefix="olmo2-trained-fixture-")
    try:
        main_dir, every_dir, init_dir = (os.path.join(tmp, d) for d in ("main", "every", "init"))
        r = run_train(olmo2, TRAIN_ARGS + ["--log-format", "json"], main_dir)
        losses = [json.loads(line)["loss"] for line in r.stdout.splitlines() if line.strip()]
        print(f"losses: {losses}")
        run_train(olmo2, TRAIN_ARGS + ["--save-interval", "1", "--keep", "0"], every_dir)
        run_train(olmo2, with_arg(with_arg(TRAIN_ARGS, "--steps", "1"), "--lr", "0"), init_dir)

        ckpt = os.path.join(main_dir, f"step-{STEPS:08d}")
        print(f"checkpoint files: {sorted(os.listdir(ckpt))}")
        with open(os.path.join(ckpt, "config.json")) as f:
            saved_config = json.load(f)
        print(f"saved config.json: {json.dumps(saved_config, sort_keys=True)}")
        gen_path = os.path.join(ckpt, "generation_config.json")
        if os.path.exists(gen_path):
            with open(gen_path) as f:
                print(f"saved generation_config.json: {f.read().strip()}")
        with safetensors.safe_open(os.path.join(ckpt, "model.safetensors"), "pt") as f:
            dtypes = sorted({str(f.get_slice(k).get_dtype()) for k in f.keys()})
            print(f"model.safetensors: {len(list(f.keys()))} tensors, dtypes {dtypes}, metadata {f.metadata()}")

        with open(os.path.join(ckpt, "model.safetensors"), "rb") as a, \
                open(os.path.join(every_dir, f"step-{STEPS:08d}", "model.safetensors"), "rb") as b:
            if a.read() != b.read():
                failures.append("two runs of the same training wrote different step-3 weights")

        print(f"loading {ckpt}")
        config, model = load(ckpt, failures)
        print(f"  config {type(config).__name__}, model {type(model).__name__}, dtype {config.dtype}, "
              f"attn {model.config._attn_implementation}")
        for k, v in CONFIG.items():
            got = config.rope_parameters["rope_theta"] if k == "rope_theta" else getattr(config, k, None)
            if k == "rope_parameters":  # every given key of each type as given (defaults may be added)
                got = {t: {q: (got.get(t) or {}).get(q) for q in p} for t, p in v.items()}
            if got != v:
                failures.append(f"config {k}: saved/loaded {got!r}, input {v!r}")
        ref = logits_of(model, seqs)

        _, init_model = load(os.path.join(init_dir, "step-00000001"), failures)
        vs_init = max_diff(ref, logits_of(init_model, seqs))
        _, step2_model = load(os.path.join(every_dir, "step-00000002"), failures)
        vs_step2 = max_diff(ref, logits_of(step2_model, seqs))
        print(f"max |logits(step 3) - logits(init)| = {vs_init:.4g}")
        print(f"max |logits(step 3) - logits(step 2)| = {vs_step2:.4g}")
        print(f"max |logits(step 3)| = {max(t.abs().max().item() for t in ref):.4g}")
        if not vs_init > MARGIN:
            failures.append(f"trained logits within {vs_init:.3g} of the init's: the test would check little")
        if not vs_step2 > MARGIN:
            failures.append(f"step-3 logits within {vs_step2:.3g} of step 2's: a stale checkpoint could pass")
        margins = {}
        if CONFIG.get("model_type") == "olmo3":
            # The window and YaRN matter: transformers without either moves the logits
            # far more than the test's tolerance, so a program ignoring one would fail.
            plain = {t: {"rope_type": "default", "rope_theta": p["rope_theta"]}
                     for t, p in CONFIG["rope_parameters"].items()}
            for what, change in (("no_window", {"sliding_window": 1000}), ("no_yarn", {"rope_parameters": plain})):
                from transformers import AutoModelForCausalLM
                other = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager",
                                                             **change).eval()
                margins[what] = max_diff(ref, logits_of(other, seqs))
                print(f"max |logits - logits({what})| = {margins[what]:.4g}")
                if not margins[what] > FEATURE_MARGIN:
                    failures.append(f"{what}: logits within {margins[what]:.3g}: the test would not see it")
    finally:
        shutil.rmtree(tmp)

    tensors = {}
    for b, (s, lg) in enumerate(zip(seqs, ref)):
        tensors[f"ids.{b}"] = torch.tensor(s, dtype=torch.int32)
        tensors[f"logits.{b}"] = lg.contiguous()
    safetensors.torch.save_file(tensors, os.path.join(OUT, "reference.safetensors"))
    os.chmod(os.path.join(OUT, "reference.safetensors"), 0o644)
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump({
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__, "safetensors": safetensors.__version__,
                         "numpy": np.__version__},
            "losses": losses,
            "max_logit_diff_vs_init": vs_init,
            "max_logit_diff_vs_step2": vs_step2,
            **{f"max_logit_diff_{k}": v for k, v in margins.items()},
            "saved_config": saved_config,
        }, f, indent=1)
        f.write("\n")

    for m in failures:
        print(f"FAIL: {m}", file=sys.stderr)
    print(f"wrote {OUT}" if not failures else "fixture written, but checks failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
