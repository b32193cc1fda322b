#!/usr/bin/env python3
"""bf16 mixed-precision training reference: 10 optimizer steps of the recipe, in bf16
compute with fp32 master weights, and the same 10 steps in fp32.

Run by scripts/make_fixtures.sh, or alone with the reference environment's python after
make_fixtures.py (deterministic: a rerun writes the same bytes):
    /opt/olmo2-fixtures-venv/bin/python tests/golden/make_bf16_train_fixtures.py [--out DIR]
For each model directory in MODELS it writes, beside the model, train_bf16_reference.json
and train_bf16_reference.safetensors, and touches nothing else (--out DIR writes
DIR/<model>/… instead, for comparisons; the models are still read from the fixtures;
--models A,B only those). The Olmo 3 model (make_olmo3_fixtures.py's) runs the same
loop on Olmo3ForCausalLM: its sliding-window layers and YaRN frequencies are
transformers' (docs/architecture.md §3).

Precision (`--precision bf16`, docs/architecture.md §7; every cast is written here, no
torch.autocast): the master weights and both AdamW moments are fp32. Each step
  1. every parameter (embeddings and norm gains included) is cast to bf16 (round to
     nearest even) into a bf16 copy of the model; the rotary inverse frequencies are a
     buffer, not a parameter, and stay fp32;
  2. each micro-batch runs transformers' Olmo2ForCausalLM (Olmo3ForCausalLM) forward on those bf16
     parameters (eager attention; bf16 activations; RMSNorm statistics, RoPE, softmax in
     fp32 as transformers computes them, docs/architecture.md §3) and the loss below from
     its bf16 logits cast to fp32; torch autograd's backward (in bf16 where the forward
     was) gives bf16 parameter gradients;
  3. each micro-batch's bf16 gradients are cast to fp32 and summed in fp32 (the fp32
     gradient reduction);
  4. the global L2 norm of the fp32 gradients (torch.nn.utils.clip_grad_norm_, max 1.0)
     clips them, and torch.optim.AdamW (foreach=False) updates the fp32 master weights
     with the step's learning rate (docs/architecture.md §7 AdamW, Clipping, Schedule).
The fp32 run is the same loop on the fp32 model with no casts.

The batch is what `olmo2 train` reads from a token file (docs/architecture.md §7 Data):
WINDOWS windows of SEQ_LEN tokens (ids drawn from [0, vocab − 2), so neither eos nor
pad — whose embedding row torch's padding_idx would freeze — is an input), labels the
ids shifted left by one with the last −100; the global batch is every window, so step k
is epoch k and visits the windows in window_permutation(WINDOWS, SEED, k)
(runtime/train/data_loader.h, reproduced and checked below), cut into micro-batches of
MICRO_BATCH consecutive entries — the trainer's grouping in every layout whose DP shares
hold whole micro-batches of that size.

Loss (docs/architecture.md §7): with N the non-ignored targets of the global batch,
micro-batch m back-propagates
    (Σ_{t∈m} CE_t + z_coef · Σ_{t∈m} lse_t²) / N,
CE_t and lse_t = logsumexp(logits_t) in fp32 from the fp32-cast logits, the sums in
float64.

train_bf16_reference.safetensors:
  tokens                       int32 [WINDOWS·SEQ_LEN]: the token file's contents
  ids.<b>, labels.<b>          int32 [SEQ_LEN]: window b
  <run>.loss, <run>.ce, <run>.z
                               F64 [STEPS]: step k's objective ce + z, its cross-entropy
                               (token-weighted over the global batch) and its Z-loss
                               z_coef·Σ lse²/N, for <run> = bf16 and fp32, computed in the
                               forward of step k (before step k's update)
  <run>.grad_norm              F32 [STEPS]: clip_grad_norm_'s fp32 total norm of step k,
                               before clipping
  <run>.lr                     F64 [STEPS]: the learning rate of step k
  <run>.final.<name>           F32: every fp32 master weight after the last step
train_bf16_reference.json: the batch's shape, each step's micro-batches, the target count, every
hyper-parameter, the lrs (exact floats), per run the per-step values and which steps
were clipped, the versions used, and `sensitivity`: how far the bf16 result moves under
perturbations that all stay within the definition above (an fp32 backward, products
summed in another order, one backward per sequence, bf16 gradient sums) and under
deviations from it (bf16 master weights, fp32 logits, the fp32 run) — the evidence for
the C++ tests' tolerances (tests/golden/bf16_train_fixture.h, docs/architecture.md §10).
The models are loaded from the fixtures (`olmo2 train --model DIR`), not initialised.
"""
import argparse
import json
import math
import os

# torch's AVX2 kernels, one thread: what scripts/make_fixtures.sh pins, also when the
# script runs alone (must be set before torch is imported).
for _k, _v in (("ATEN_CPU_CAPABILITY", "avx2"), ("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
               ("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")):
    os.environ.setdefault(_k, _v)

import platform  # noqa: E402

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

transformers.utils.logging.disable_progress_bar()

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
# deep-gqa: 6 layers, for pp 4; olmo3-mha: 4 layers (pp 4: one a stage), sliding and full.
# (olmo3-gqa-f32, with YaRN's attention factor 1.25, spreads wider under the perturbations
# below than the C++ tests' bounds allow: its step-1 loss moves 3.5e-5 with fp64 products.)
MODELS = ("mha-f32", "gqa-f32", "deep-gqa-f32", "olmo3-mha-f32")
STEM = "train_bf16_reference"

SEQ_LEN = 16
WINDOWS = 8                    # = the global batch: every step takes every window
MICRO_BATCH = 2
SEED = 7                       # --seed: the data order (the weights are loaded, not initialised)
BATCH_SEED = 4321              # torch's generator for the token ids
STEPS = 10
Z_COEF = 1e-5
BETAS = (0.9, 0.95)
EPS = 1e-8
WEIGHT_DECAY = 0.1
NO_DECAY = ("model.embed_tokens.weight",)
MAX_NORM = 1.0
# runtime/train/lr_schedule.h's warm-up + cosine as the trainer builds it for --steps 10
# --warmup-steps 2 (total_steps = steps), at the recipe's peak and floor (--lr 4e-4,
# --min-lr-ratio 0.1). A larger peak only makes the runs drift apart sooner (measured at
# 1e-3 and 3e-3) and hides bf16 master weights better.
SCHEDULE = dict(kind="cosine", peak_lr=4e-4, warmup_steps=2, total_steps=STEPS, min_lr_ratio=0.1)


def lr_at(step, s=SCHEDULE):
    """LrSchedule::lr, the same double operations in the same order."""
    peak, warm, total = s["peak_lr"], s["warmup_steps"], s["total_steps"]
    if step < warm:
        return peak * (step + 1) / warm
    lo = peak * s["min_lr_ratio"]
    p = min(1.0, max(0.0, (step - warm) / max(1, total - warm)))
    return lo + (peak - lo) * 0.5 * (1.0 + math.cos(math.pi * p))


def _mix64(z):
    m = (1 << 64) - 1
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def window_permutation(n, seed, epoch):
    """runtime/train/data_loader.h's window_permutation: splitmix64, Lemire's bounded
    draw with rejection, Fisher–Yates from the identity."""
    m64 = (1 << 64) - 1
    state = _mix64((_mix64(seed) + epoch) & m64)

    def below(m):
        nonlocal state
        while True:
            state = (state + 0x9E3779B97F4A7C15) & m64
            p = _mix64(state) * m
            low = p & m64
            if low >= m or low >= ((1 << 64) - m) % m:
                return p >> 64

    p = list(range(n))
    for i in range(n, 1, -1):
        j = below(i)
        p[i - 1], p[j] = p[j], p[i - 1]
    return p


# The orders tests/train/test_data_loader.cpp pins.
assert window_permutation(10, 42, 0) == [0, 3, 5, 7, 9, 8, 2, 1, 4, 6]
assert window_permutation(10, 42, 1) == [6, 5, 1, 4, 7, 3, 2, 9, 8, 0]
assert window_permutation(10, 43, 0) == [2, 5, 1, 3, 9, 7, 6, 8, 0, 4]


def micro_batches(step):
    """Step `step`'s micro-batches (window indices) as the trainer forms them."""
    order = window_permutation(WINDOWS, SEED, step)  # one step per epoch
    return [order[i:i + MICRO_BATCH] for i in range(0, WINDOWS, MICRO_BATCH)]


def make_batch(vocab):
    g = torch.Generator().manual_seed(BATCH_SEED)
    tokens = torch.randint(0, vocab - 2, (WINDOWS * SEQ_LEN,), generator=g, dtype=torch.int64)
    ids, labels = [], []
    for b in range(WINDOWS):
        x = tokens[b * SEQ_LEN:(b + 1) * SEQ_LEN].clone()
        ids.append(x)
        labels.append(torch.cat([x[1:], torch.tensor([-100])]))
    return tokens, ids, labels


def loss_sums(logits, labels):
    """Σ CE and Σ lse² (float64) over the non-ignored targets, from fp32 logits."""
    mask = labels != -100
    lse = torch.logsumexp(logits, dim=-1)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                         ignore_index=-100, reduction="none").reshape(labels.shape)
    return ce[mask].double().sum(), (lse[mask].double() ** 2).sum(), int(mask.sum())


# ---------------------------------------------------------------------------------------
# An explicit OLMo 2 forward (docs/architecture.md §3) on parameters that are fp32
# tensors, rounding to bf16 wherever transformers' bf16 model stores a bf16 tensor, and
# with a straight-through backward: gradients stay fp32 through every rounding. That is a
# backward in fp32 from bf16-valued activations, used here only to measure how much the
# reference's bf16 backward matters (the `fp32-backward` perturbation).


class _RoundBf16(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(torch.float32)

    @staticmethod
    def backward(ctx, g):
        return g


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _mm_fp32(a, b):
    return a @ b


def _mm_fp64(a, b):
    return (a.double() @ b.double()).float()


def layer_ropes(model):
    """Per layer: the rotary inv_freq buffer (fp32), the cos/sin scaling and the attention
    window (None: every earlier position) transformers' model uses."""
    cfg, r = model.config, model.model.rotary_emb
    out = []
    for t in getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers:
        if hasattr(r, f"{t}_inv_freq"):  # Olmo 3: per layer type
            inv, scaling = getattr(r, f"{t}_inv_freq"), getattr(r, f"{t}_attention_scaling")
        else:
            inv, scaling = r.inv_freq, r.attention_scaling
        assert inv.dtype == torch.float32
        out.append((inv, scaling, cfg.sliding_window if t == "sliding_attention" else None))
    return out


def explicit_logits(p, cfg, ropes, ids, rnd, round_logits=True, mm=_mm_fp32):
    """Logits [T, V] (fp32 tensor) of one sequence; `p` maps HF names to weights; `ropes`
    layer_ropes' list; `mm` the matrix product (fp32, or fp64 rounded to fp32: another
    accumulation order)."""
    t = ids.shape[0]
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = cfg.hidden_size // heads
    eps = cfg.rms_norm_eps

    def norm(x, w):
        return rnd(w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)))

    def lin(x, w):
        return rnd(mm(x, w.T))

    x = p["model.embed_tokens.weight"][ids]
    for layer in range(cfg.num_hidden_layers):
        inv_freq, scaling, window = ropes[layer]
        freqs = torch.arange(t)[:, None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * scaling, emb.sin() * scaling
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        if window:  # transformers' sliding mask: kv_idx > q_idx − window
            causal &= torch.ones(t, t, dtype=torch.bool).triu(-(window - 1))
        pre = f"model.layers.{layer}."
        q = norm(lin(x, p[pre + "self_attn.q_proj.weight"]), p[pre + "self_attn.q_norm.weight"])
        k = norm(lin(x, p[pre + "self_attn.k_proj.weight"]), p[pre + "self_attn.k_norm.weight"])
        v = lin(x, p[pre + "self_attn.v_proj.weight"])
        q = q.view(t, heads, hd).transpose(0, 1)
        k = k.view(t, kv, hd).transpose(0, 1)
        v = v.view(t, kv, hd).transpose(0, 1)
        q = rnd(q * cos + _rotate_half(q) * sin)
        k = rnd(k * cos + _rotate_half(k) * sin)
        k = k.repeat_interleave(heads // kv, dim=0)
        v = v.repeat_interleave(heads // kv, dim=0)
        s = rnd(rnd(mm(q, k.transpose(1, 2))) * hd ** -0.5)
        s = s.masked_fill(~causal, float("-inf"))
        a = rnd(mm(rnd(torch.softmax(s, dim=-1)), v)).transpose(0, 1).reshape(t, heads * hd)
        o = lin(a, p[pre + "self_attn.o_proj.weight"])
        x = rnd(x + norm(o, p[pre + "post_attention_layernorm.weight"]))
        g = lin(x, p[pre + "mlp.gate_proj.weight"])
        u = lin(x, p[pre + "mlp.up_proj.weight"])
        d = lin(rnd(rnd(F.silu(g)) * u), p[pre + "mlp.down_proj.weight"])
        x = rnd(x + norm(d, p[pre + "post_feedforward_layernorm.weight"]))
    h = norm(x, p["model.norm.weight"])
    logits = mm(h, p["lm_head.weight"].T)
    return rnd(logits) if round_logits else logits


# ---------------------------------------------------------------------------------------
# The training loop. A variant changes one thing of the reference (see VARIANTS).

VARIANTS = {
    # name: (kind, description)
    "bf16": ("reference", "the definition in the module comment"),
    "fp32": ("deviation", "everything in fp32, no casts (the comparison run)"),
    "fp32-backward": ("perturbation", "the same bf16-rounded forward written out explicitly "
                      "(packed sequences), backward in fp32 through every rounding "
                      "(straight-through): what a backward computing in fp32 from "
                      "bf16-valued activations does"),
    "fp64-products": ("perturbation", "as fp32-backward, with every matrix product (forward "
                      "and backward) accumulated in fp64 and rounded to fp32: another "
                      "summation order, which flips some bf16 roundings of the forward"),
    "bf16-grad-sum": ("perturbation", "the two micro-batches' bf16 gradients summed in bf16, "
                      "then cast to fp32"),
    "per-sequence": ("perturbation", "one forward and backward per sequence (no padding), each "
                     "sequence's bf16 gradients cast to fp32 and summed in fp32"),
    "fp32-logits": ("deviation", "as fp32-backward, but the logits not rounded to bf16 "
                    "before the loss"),
    "bf16-master": ("deviation", "master weights rounded to bf16 after every update (bf16 "
                    "parameters, fp32 moments)"),
}


def train(model_dir, ids, labels, variant):
    master = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager",
                                              dtype=torch.float32)
    master.train()  # dropout is 0 in OLMo 2; train() only for the autograd path
    cfg = master.config
    ropes = layer_ropes(master)
    names = [n for n, _ in master.named_parameters()]
    params = dict(master.named_parameters())
    bf16 = variant != "fp32"
    explicit = variant in ("fp32-backward", "fp64-products", "fp32-logits")
    if bf16 and not explicit:
        # The bf16 compute copy: the same modules, every parameter bf16; buffers stay fp32.
        compute = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager",
                                                   dtype=torch.float32)
        compute.train()
        for p in compute.parameters():
            p.data = torch.empty(p.shape, dtype=torch.bfloat16)
        layer_ropes(compute)  # the buffers stay fp32
        cparams = dict(compute.named_parameters())
    else:
        compute, cparams = master, params

    groups = [{"params": [params[n] for n in names if n not in NO_DECAY], "weight_decay": WEIGHT_DECAY},
              {"params": [params[n] for n in names if n in NO_DECAY], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=SCHEDULE["peak_lr"], betas=BETAS, eps=EPS,
                            foreach=False, fused=False)
    count = sum(int((y != -100).sum()) for y in labels)
    rec = {"ce": [], "z": [], "loss": [], "grad_norm": [], "clipped": [], "lr": [], "micro_batches": []}
    for k in range(STEPS):
        lr = lr_at(k)
        for g in opt.param_groups:
            g["lr"] = lr
        if compute is not master:
            with torch.no_grad():
                for n in names:
                    cparams[n].copy_(params[n].to(torch.bfloat16))  # round to nearest even
        grads = {n: torch.zeros_like(params[n]) for n in names}  # fp32 reduction buffers
        compute.zero_grad(set_to_none=True)
        ce_sum = z_sum = 0.0
        n_seen = 0
        step_batches = micro_batches(k)
        rec["micro_batches"].append(step_batches)
        if explicit:
            rnd = _RoundBf16.apply
            p = {n: rnd(params[n]) for n in names}
            for mb in step_batches:
                for b in mb:
                    logits = explicit_logits(p, cfg, ropes, ids[b], rnd,
                                             round_logits=variant != "fp32-logits",
                                             mm=_mm_fp64 if variant == "fp64-products" else _mm_fp32)
                    ce_s, z_s, c = loss_sums(logits, labels[b])
                    ((ce_s + Z_COEF * z_s) / count).backward(retain_graph=True)
                    ce_sum, z_sum, n_seen = ce_sum + ce_s.item(), z_sum + z_s.item(), n_seen + c
            for n in names:
                grads[n] = params[n].grad.clone()
        else:
            groups_of = ([[b] for mb in step_batches for b in mb] if variant == "per-sequence"
                         else step_batches)
            for mb in groups_of:
                if variant != "bf16-grad-sum":
                    compute.zero_grad(set_to_none=True)
                x = torch.stack([ids[b] for b in mb])  # equal lengths: no padding, no mask
                y = torch.stack([labels[b] for b in mb])
                logits = compute(input_ids=x).logits.float()
                ce_s, z_s, c = loss_sums(logits, y)
                ((ce_s + Z_COEF * z_s) / count).backward()
                ce_sum, z_sum, n_seen = ce_sum + ce_s.item(), z_sum + z_s.item(), n_seen + c
                if variant != "bf16-grad-sum":
                    for n in names:
                        grads[n] += cparams[n].grad.float()
            if variant == "bf16-grad-sum":
                for n in names:
                    grads[n] = cparams[n].grad.float()
        assert n_seen == count
        for n in names:
            params[n].grad = grads[n]
        norm = torch.nn.utils.clip_grad_norm_([params[n] for n in names], MAX_NORM, foreach=False)
        opt.step()
        if variant == "bf16-master":
            with torch.no_grad():
                for n in names:
                    params[n].copy_(params[n].to(torch.bfloat16))
        master.zero_grad(set_to_none=True)
        rec["ce"].append(ce_sum / count)
        rec["z"].append(Z_COEF * z_sum / count)
        rec["loss"].append(ce_sum / count + Z_COEF * z_sum / count)
        rec["grad_norm"].append(float(norm))
        rec["clipped"].append(bool(float(norm) + 1e-6 > MAX_NORM))
        rec["lr"].append(lr)
    rec["final"] = {n: params[n].detach().clone().contiguous() for n in names}
    return rec, count


def rel_l2(a, b, ref):
    """‖a − b‖ / ‖ref‖ over every parameter together (float64)."""
    num = sum(float(((a[n].double() - b[n].double()) ** 2).sum()) for n in a)
    den = sum(float((ref[n].double() ** 2).sum()) for n in a)
    return math.sqrt(num / den)


def compare(run, ref, init):
    update = {n: ref["final"][n] - init[n] for n in init}
    return {
        "loss_rel_diff": [abs(a - b) / abs(b) for a, b in zip(run["loss"], ref["loss"])],
        "ce_rel_diff": [abs(a - b) / abs(b) for a, b in zip(run["ce"], ref["ce"])],
        "z_rel_diff": [abs(a - b) / abs(b) for a, b in zip(run["z"], ref["z"])],
        "grad_norm_rel_diff": [abs(a - b) / abs(b) for a, b in zip(run["grad_norm"], ref["grad_norm"])],
        # ‖W − W_ref‖ / ‖W_ref‖, and the same over the reference's update ‖W_ref − W_0‖
        "final_weights_rel_l2": rel_l2(run["final"], ref["final"], ref["final"]),
        "final_weights_rel_l2_of_update": rel_l2(run["final"], ref["final"], update),
    }


def record(name, out_root):
    d = os.path.join(FIXTURES, name)
    init = safetensors.torch.load_file(os.path.join(d, "model.safetensors"))
    vocab = AutoConfig.from_pretrained(d).vocab_size
    tokens, ids, labels = make_batch(vocab)
    runs = {}
    for v in VARIANTS:
        runs[v], count = train(d, ids, labels, v)
    init = {n: init[n] for n in runs["bf16"]["final"]}

    tensors = {"tokens": tokens.to(torch.int32)}
    for b, (x, y) in enumerate(zip(ids, labels)):
        tensors[f"ids.{b}"] = x.to(torch.int32)
        tensors[f"labels.{b}"] = y.to(torch.int32)
    for r in ("bf16", "fp32"):
        for key in ("loss", "ce", "z", "lr"):
            tensors[f"{r}.{key}"] = torch.tensor(runs[r][key], dtype=torch.float64)
        tensors[f"{r}.grad_norm"] = torch.tensor(runs[r]["grad_norm"], dtype=torch.float32)
        for n, w in runs[r]["final"].items():
            tensors[f"{r}.final.{n}"] = w
    sensitivity = {}
    for v, (kind, desc) in VARIANTS.items():
        if v == "bf16":
            continue
        sensitivity[v] = {"kind": kind, "what": desc, **compare(runs[v], runs["bf16"], init)}
    meta = {
        "model": name,
        "seq_len": SEQ_LEN,
        "windows": WINDOWS,
        "global_batch": WINDOWS,
        "micro_batch": MICRO_BATCH,
        "seed": SEED,
        "micro_batches": runs["bf16"]["micro_batches"],
        "target_count": count,
        "batch_seed": BATCH_SEED,
        "token_range": [0, vocab - 2],
        "steps": STEPS,
        "z_coef": Z_COEF,
        "betas": list(BETAS),
        "eps": EPS,
        "weight_decay": WEIGHT_DECAY,
        "no_weight_decay": list(NO_DECAY),
        "max_norm": MAX_NORM,
        "schedule": SCHEDULE,
        "lrs": runs["bf16"]["lr"],
        "runs": {r: {k: runs[r][k] for k in ("loss", "ce", "z", "grad_norm", "clipped")}
                 for r in ("bf16", "fp32")},
        "sensitivity": sensitivity,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
            "safetensors": safetensors.__version__,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(),
        },
    }
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    safetensors.torch.save_file({k: v.contiguous() for k, v in sorted(tensors.items())},
                                os.path.join(out, STEM + ".safetensors"))
    with open(os.path.join(out, STEM + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    b, f32 = runs["bf16"], runs["fp32"]
    print(f"{name}: {count} targets; bf16 loss {b['loss'][0]:.6f} -> {b['loss'][-1]:.6f}, "
          f"fp32 {f32['loss'][0]:.6f} -> {f32['loss'][-1]:.6f}; clipped {b['clipped']}")
    for v, s in sensitivity.items():
        print(f"  {v:14s} {s['kind']:12s} loss rel diff max {max(s['loss_rel_diff']):.2e}  "
              f"grad norm max {max(s['grad_norm_rel_diff']):.2e}  "
              f"weights rel L2 {s['final_weights_rel_l2']:.2e} "
              f"(of the update {s['final_weights_rel_l2_of_update']:.2e})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=FIXTURES, help="root of the <model>/ output directories")
    ap.add_argument("--models", help="comma-separated model directories (default: every one of MODELS)")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    for name in args.models.split(",") if args.models else MODELS:
        record(name, args.out)


if __name__ == "__main__":
    main()
