#!/usr/bin/env python3
"""Sliding-window attention fixture for tests/ops/test_window_attention_fixture.cpp:
transformers' Olmo 3 sliding-window causal mask (masking_utils'
create_sliding_window_causal_mask, which keeps kv_idx > q_idx - sliding_window and
kv_idx <= q_idx) applied by modeling_olmo3's eager_attention_forward (f32), with
transformers' sdpa_attention_forward on the same mask checked against it here.

Run with the reference environment's python (deterministic; rewrites
tests/ops/fixtures/window_attention.json and nothing else):
    /opt/olmo2-fixtures-venv/bin/python tests/ops/make_window_attention_fixtures.py

One prefill of S positions (q, k, v N(0, 1) f32 from a seeded torch.Generator), GQA
H/KV query/kv heads, head dim HD, window W. Stored row-major as the C++ op lays them out:
q [S, H·HD], k and v [S, KV·HD], out [S, H·HD] (eager), plus the boolean mask [S, S].
"""
import json
import os
import platform

import torch
import transformers
from transformers import Olmo3Config
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import create_sliding_window_causal_mask
from transformers.models.olmo3.modeling_olmo3 import eager_attention_forward

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "window_attention.json")
S, H, KV, HD, W = 11, 4, 2, 8, 4


class Module(torch.nn.Module):
    """The attributes the attention functions read from an Olmo3Attention."""

    def __init__(self):
        super().__init__()
        self.num_key_value_groups = H // KV
        self.training = False
        self.is_causal = True


def mask(impl):
    config = Olmo3Config(hidden_size=H * HD, num_attention_heads=H, num_key_value_heads=KV,
                         num_hidden_layers=2, sliding_window=W, attn_implementation=impl)
    embeds = torch.zeros(1, S, H * HD)
    return create_sliding_window_causal_mask(config=config, inputs_embeds=embeds, attention_mask=None,
                                             cache=None, position_ids=torch.arange(S).unsqueeze(0),
                                             allow_is_causal_skip=False)


def main():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(20260)
    q = torch.randn(1, H, S, HD, generator=g)
    k = torch.randn(1, KV, S, HD, generator=g)
    v = torch.randn(1, KV, S, HD, generator=g)
    scaling = HD ** -0.5
    eager_mask = mask("eager")  # [1, 1, S, S] f32: 0 kept, dtype min masked
    sdpa_mask = mask("sdpa")    # [1, 1, S, S] bool: True kept
    keep = sdpa_mask[0, 0]
    want = torch.tensor([[j <= i and j > i - W for j in range(S)] for i in range(S)])
    assert torch.equal(keep, want), "transformers' sliding mask is not the documented one"
    assert torch.equal(eager_mask[0, 0] == 0, want)
    out, _ = eager_attention_forward(Module(), q, k, v, eager_mask, scaling=scaling)  # [1, S, H, HD]
    out_sdpa, _ = sdpa_attention_forward(Module(), q, k, v, sdpa_mask, scaling=scaling)
    assert torch.allclose(out, out_sdpa, atol=1e-6), (out - out_sdpa).abs().max()

    def rows(x):  # [1, heads, S, HD] -> [S, heads*HD] as a flat list
        return x[0].transpose(0, 1).reshape(S, -1).flatten().tolist()

    fixture = {
        "source": "transformers masking_utils.create_sliding_window_causal_mask + "
                  "models/olmo3 eager_attention_forward (sdpa_attention_forward agrees within 1e-6)",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "seq": S, "heads": H, "kv_heads": KV, "head_dim": HD, "window": W,
        "mask": [[bool(x) for x in r] for r in keep.tolist()],
        "q": rows(q), "k": rows(k), "v": rows(v),
        "out": out[0].reshape(S, H * HD).flatten().tolist(),
        "max_abs_eager_vs_sdpa": float((out - out_sdpa).abs().max()),
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:  # one key a line
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in fixture.items()) + "\n}\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
