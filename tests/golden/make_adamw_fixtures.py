#!/usr/bin/env python3
"""AdamW + gradient-clipping fixture for tests/train/test_optimizer.cpp.

Run by scripts/make_fixtures.sh, or alone with the reference environment's python
(deterministic; rewrites tests/golden/fixtures/adamw/ and nothing else):
    /opt/olmo2-fixtures-venv/bin/python tests/golden/make_adamw_fixtures.py

Three small fp32 parameters with seeded values go through STEPS optimizer steps of
torch.optim.AdamW (foreach=False, i.e. `_single_tensor_adam`; betas (0.9, 0.95), eps
1e-8; two param groups: weight_decay 0.1, and 0.0 for model.embed_tokens.weight as in
the OLMo 2 recipe). Before every step torch.nn.utils.clip_grad_norm_(max_norm=1.0) runs
on the grads; the grads of the last step are large enough to be clipped, the others
are not. The learning rate of step k (0-based) is computed here, independently of the
C++ LrSchedule: linear warm-up peak·(k+1)/W for k < W, then cosine to min_lr_ratio·peak
over total−W steps.

adamw.safetensors (all F32):
  init.<name>                  the initial value
  grad.<k>.<name>              the grad handed to step k, before clipping
  clipped_grad.<k>.<name>      the grad after clip_grad_norm_ (what AdamW reads)
  total_norm                   [STEPS] the norm clip_grad_norm_ returned at each step
  param.<k>.<name>             the value after step k
  exp_avg.<k>.<name>           torch's state["exp_avg"] after step k
  exp_avg_sq.<k>.<name>        torch's state["exp_avg_sq"] after step k
adamw.json: schedule, lrs (exact Python floats), hyper-parameters, which steps were
clipped, and the versions used.
"""
import json
import math
import os
import platform

import numpy as np
import safetensors
import safetensors.torch
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "adamw")

PARAMS = [  # name, shape, weight decay
    ("model.embed_tokens.weight", (5, 3), 0.0),
    ("model.layers.0.mlp.up_proj.weight", (4, 3), 0.1),
    ("model.norm.weight", (3,), 0.1),
]
STEPS = 6
CLIPPED_STEP = STEPS - 1
MAX_NORM = 1.0
BETAS = (0.9, 0.95)
EPS = 1e-8
# A peak well above the recipe's so that updates are large against fp32 rounding.
SCHEDULE = dict(kind="cosine", peak_lr=1e-2, warmup_steps=2, total_steps=5, min_lr_ratio=0.1)


def lr_at(step, s=SCHEDULE):
    peak, warm, total = s["peak_lr"], s["warmup_steps"], s["total_steps"]
    if step < warm:
        return peak * (step + 1) / warm
    lo = peak * s["min_lr_ratio"]
    p = min(1.0, max(0.0, (step - warm) / max(1, total - warm)))
    return lo + (peak - lo) * 0.5 * (1.0 + math.cos(math.pi * p))


def main():
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(20250101)
    params = [torch.nn.Parameter(torch.randn(shape, generator=gen, dtype=torch.float32))
              for _, shape, _ in PARAMS]
    # Norm gains start near 1, as in a model.
    with torch.no_grad():
        params[2].add_(1.0)
    grads = []
    for k in range(STEPS):
        scale = 10.0 if k == CLIPPED_STEP else 0.1
        grads.append([scale * torch.randn(shape, generator=gen, dtype=torch.float32)
                      for _, shape, _ in PARAMS])

    out = {}
    for (name, _, _), p in zip(PARAMS, params):
        out[f"init.{name}"] = p.detach().clone()
    groups = [{"params": [p], "weight_decay": wd} for (_, _, wd), p in zip(PARAMS, params)]
    opt = torch.optim.AdamW(groups, lr=SCHEDULE["peak_lr"], betas=BETAS, eps=EPS,
                            foreach=False, fused=False)
    lrs, norms, clipped = [], [], []
    for k in range(STEPS):
        lr = lr_at(k)
        lrs.append(lr)
        for g in opt.param_groups:
            g["lr"] = lr
        for (name, _, _), p, g in zip(PARAMS, params, grads[k]):
            p.grad = g.clone()
            out[f"grad.{k}.{name}"] = g.clone()
        norm = torch.nn.utils.clip_grad_norm_(params, MAX_NORM, foreach=False)
        norms.append(float(norm))
        clipped.append(bool(float(norm) + 1e-6 > MAX_NORM))
        for (name, _, _), p in zip(PARAMS, params):
            out[f"clipped_grad.{k}.{name}"] = p.grad.detach().clone()
        opt.step()
        for (name, _, _), p in zip(PARAMS, params):
            st = opt.state[p]
            out[f"param.{k}.{name}"] = p.detach().clone()
            out[f"exp_avg.{k}.{name}"] = st["exp_avg"].clone()
            out[f"exp_avg_sq.{k}.{name}"] = st["exp_avg_sq"].clone()
    assert clipped == [False] * CLIPPED_STEP + [True], clipped
    out["total_norm"] = torch.tensor(norms, dtype=torch.float32)

    os.makedirs(OUT, exist_ok=True)
    safetensors.torch.save_file({k: v.contiguous() for k, v in sorted(out.items())},
                                os.path.join(OUT, "adamw.safetensors"))
    meta = {
        "schedule": SCHEDULE,
        "lrs": lrs,
        "steps": STEPS,
        "clipped": clipped,
        "total_norms": norms,
        "max_norm": MAX_NORM,
        "betas": list(BETAS),
        "eps": EPS,
        "params": [{"name": n, "shape": list(s), "weight_decay": wd} for n, s, wd in PARAMS],
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "safetensors": safetensors.__version__,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        },
    }
    with open(os.path.join(OUT, "adamw.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
