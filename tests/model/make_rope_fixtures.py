#!/usr/bin/env python3
"""RoPE frequency fixtures for olmo2's rope_frequencies (docs/architecture.md §3).

Run with the pinned reference environment:
    /opt/olmo2-fixtures-venv/bin/python tests/model/make_rope_fixtures.py
Writes tests/model/fixtures/rope_frequencies.json: per case the RoPE parameters, the head
size, and what transformers computes for them — inv_freq as the exact float32 bits and
the cos/sin scaling (attention_scaling, a Python float; the model multiplies f32 cos/sin
by it, so olmo2 compares its f32 rounding).

PyTorch's f32 pow is not always the correctly rounded power: the elements of whole
vector chunks go through its vectorized pow (within 1 ulp), the rest
through the C library's. olmo2 rounds the power correctly (runtime/model/rope_frequencies.cpp),
so per case the fixture lists `pow_not_correctly_rounded`: the indices i where transformers'
theta^(2i/hd) in f32 is not the correctly rounded value (checked against 50-digit mpmath);
the test allows those entries 2 ulps and requires every other entry bit for bit.

Olmo 3 cases are taken from the model's own rotary embedding (Olmo3RotaryEmbedding built
from an Olmo3Config, the `<layer_type>_inv_freq` buffers the forward uses). transformers
5.24 reads YaRN's `truncate` from the top of rope_parameters, which an Olmo 3 config nests
per layer type, so it never applies there; the truncate-false case is therefore computed
by `_compute_yarn_parameters` on a flat-RoPE config (LlamaConfig), where it does apply.
"""
import json
import os

import mpmath
import numpy as np
import torch
import transformers
from transformers import LlamaConfig, Olmo3Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.olmo3.modeling_olmo3 import Olmo3RotaryEmbedding

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "rope_frequencies.json")

RELEASED_YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192,
                 "attention_factor": 1.2079441541679836, "beta_fast": 32, "beta_slow": 1}

# name: (head_dim, num_hidden_layers' full_attention rope dict, sliding_attention rope dict)
OLMO3_CASES = {
    # Olmo 3 7B / 32B (head_dim 128): the released full and sliding RoPE.
    "released-hd128": (128, dict(RELEASED_YARN, rope_theta=500000.0),
                       {"rope_type": "default", "rope_theta": 500000.0}),
    # The same without attention_factor (0.1·ln 8 + 1) and defaulted betas.
    "released-no-attention-factor": (128, {"rope_type": "yarn", "factor": 8.0,
                                           "original_max_position_embeddings": 8192,
                                           "rope_theta": 500000.0},
                                     {"rope_type": "default", "rope_theta": 500000.0}),
    # factor 1: interpolation equals extrapolation, scaling 1.
    "factor-1-hd64": (64, {"rope_type": "yarn", "factor": 1.0, "original_max_position_embeddings": 4096,
                           "rope_theta": 10000.0},
                      {"rope_type": "default", "rope_theta": 10000.0}),
    # Small heads and a short original context: the correction range clamps at both ends.
    "factor-4-orig-16-hd8": (8, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                 "rope_theta": 10000.0},
                             {"rope_type": "default", "rope_theta": 10000.0}),
    "factor-4-orig-16-hd16": (16, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                   "rope_theta": 500000.0, "attention_factor": 1.5},
                              {"rope_type": "default", "rope_theta": 500000.0}),
    # A tiny test model's shape (head_dim 16) with the released YaRN.
    "released-hd16": (16, dict(RELEASED_YARN, rope_theta=500000.0),
                      {"rope_type": "default", "rope_theta": 500000.0}),
    # Fractional factor and betas, an f32-inexact theta on both types.
    "fractional-hd64": (64, {"rope_type": "yarn", "factor": 2.5, "original_max_position_embeddings": 1000,
                             "beta_fast": 16.5, "beta_slow": 1.25, "rope_theta": 123456.789},
                        {"rope_type": "default", "rope_theta": 123456.789}),
    # Wide heads, other thetas (a whole 32-float chunk per half and more).
    "wide-hd256": (256, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                         "rope_theta": 1000000.0},
                   {"rope_type": "default", "rope_theta": 10000.0}),
    # A window in which low == high after truncation (the ramp's 0.001 guard).
    "equal-bounds-hd4": (4, {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16,
                             "beta_fast": 4, "beta_slow": 4, "rope_theta": 10000.0},
                         {"rope_type": "default", "rope_theta": 10000.0}),
}


def bits(t):
    a = t.detach().to(torch.float32).contiguous().numpy()
    return [int(x) for x in a.view(np.uint32)]


def pow_not_correctly_rounded(theta, head_dim):
    """Indices where PyTorch's f32 theta ** (arange(0, hd, 2) / hd) is not the f32 nearest
    the exact power (ties cannot occur for these irrational powers)."""
    exps = torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim
    got = (theta ** exps).numpy()
    base = float(np.float32(theta))
    mpmath.mp.dps = 50
    bad = []
    for i, (e, g) in enumerate(zip(exps.numpy(), got)):
        exact = mpmath.power(mpmath.mpf(base), mpmath.mpf(float(e)))
        lo, hi = np.nextafter(g, np.float32(0)), np.nextafter(g, np.float32(np.inf))
        err = abs(exact - mpmath.mpf(float(g)))
        if min(abs(exact - mpmath.mpf(float(lo))), abs(exact - mpmath.mpf(float(hi)))) < err:
            bad.append(i)
    return bad


def olmo3_case(name, head_dim, full, sliding):
    heads = 2
    cfg = Olmo3Config(hidden_size=head_dim * heads, num_attention_heads=heads, num_key_value_heads=heads,
                      num_hidden_layers=4, max_position_embeddings=65536,
                      rope_parameters={"full_attention": dict(full), "sliding_attention": dict(sliding)})
    emb = Olmo3RotaryEmbedding(cfg)
    out = []
    for layer_type, given in (("full_attention", full), ("sliding_attention", sliding)):
        out.append({"name": f"{name}/{layer_type}", "head_dim": head_dim, "rope": given,
                    "resolved": cfg.rope_parameters[layer_type],
                    "source": f"Olmo3RotaryEmbedding {layer_type}_inv_freq",
                    "inv_freq_bits": bits(getattr(emb, f"{layer_type}_inv_freq")),
                    "pow_not_correctly_rounded": pow_not_correctly_rounded(
                        cfg.rope_parameters[layer_type]["rope_theta"], head_dim),
                    "attention_scaling": float(getattr(emb, f"{layer_type}_attention_scaling"))})
    return out


def flat_yarn_case(name, head_dim, rope):
    heads = 2
    cfg = LlamaConfig(hidden_size=head_dim * heads, num_attention_heads=heads, num_key_value_heads=heads,
                      num_hidden_layers=1, max_position_embeddings=65536, rope_parameters=dict(rope))
    inv_freq, scaling = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    return {"name": name, "head_dim": head_dim, "rope": rope, "resolved": cfg.rope_parameters,
            "source": "_compute_yarn_parameters on a flat LlamaConfig",
            "inv_freq_bits": bits(inv_freq), "attention_scaling": float(scaling),
            "pow_not_correctly_rounded": pow_not_correctly_rounded(rope["rope_theta"], head_dim)}


def main():
    cases = []
    for name, (hd, full, sliding) in OLMO3_CASES.items():
        cases += olmo3_case(name, hd, full, sliding)
    cases.append(flat_yarn_case("truncate-false-hd128", 128, dict(RELEASED_YARN, rope_theta=500000.0,
                                                                  truncate=False)))
    cases.append(flat_yarn_case("truncate-false-hd16", 16, {"rope_type": "yarn", "factor": 4.0,
                                                            "original_max_position_embeddings": 16,
                                                            "rope_theta": 10000.0, "truncate": False}))
    print("pow not correctly rounded:", {c["name"]: c["pow_not_correctly_rounded"] for c in cases
                                         if c["pow_not_correctly_rounded"]})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
