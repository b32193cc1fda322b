#!/usr/bin/env python3
"""Golden fixtures for olmo2, made with the reference implementation (transformers).

Run by scripts/make_fixtures.sh (which sets up the pinned reference environment and runs
every fixture script in order), or alone with that environment's python:
    /opt/olmo2-fixtures-venv/bin/python tests/golden/make_fixtures.py
It rewrites what it owns in tests/golden/fixtures/ (the model directories of MODELS, less
the files other scripts write into them, configs/ and VERSIONS.json) and records the
versions it used in VERSIONS.json. Everything else there belongs to another script and is
left alone: make_train_fixtures.py's train_reference.* beside the models,
make_adamw_fixtures.py's adamw/, make_trained_checkpoint_fixture.py's trained/.

Per model directory (written with `save_pretrained`, safetensors):
  reference.safetensors  input ids (`ids.<b>`), logits (`logits.<b>` [T_b, V] fp32) and
                         every layer's output hidden state (`hidden.<l>.<b>` [T_b, h])
                         for a batch of two sequences of different lengths, run as one
                         right-padded batch with an attention mask (eager attention).
  reference.json         the prompt and greedy continuation (full-recompute argmax),
                         and the eos variant used by the stop test.
Config-only directories (configs/) hold the released OLMo 2 and Olmo 3 shapes with the
parameter count `transformers` builds for them on the meta device.
"""
import fnmatch
import json
import os
import shutil
import sys

import numpy as np
import safetensors.torch
import torch
import transformers
from transformers import Olmo2Config, Olmo2ForCausalLM, Olmo3Config, Olmo3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
LENGTHS = (11, 7)
GEN_TOKENS = 8

MODELS = {
    # name: (config kwargs, dtype, save kwargs)
    "mha-f32": (dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, rope_theta=500000.0),
                torch.float32, {}),
    "gqa-f32": (dict(vocab_size=192, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                     num_attention_heads=8, num_key_value_heads=2, rope_theta=10000.0),
                torch.float32, {}),
    "gqa-bf16": (dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0),
                 torch.bfloat16, {}),
    "sharded-f32": (dict(vocab_size=128, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         rope_theta=500000.0),
                    torch.float32, {"max_shard_size": "100KB"}),
    "odd-f32": (dict(vocab_size=1000, hidden_size=96, intermediate_size=200, num_hidden_layers=2,
                     num_attention_heads=6, num_key_value_heads=3, rope_theta=500000.0),
                torch.float32, {}),
    # Deep enough for 4 pipeline stages (6 layers: 2/2/1/1), kv heads < tp at tp = 4,
    # and a vocab (202) that tp = 4 must pad.
    "deep-gqa-f32": (dict(vocab_size=202, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2,
                          rope_theta=500000.0),
                     torch.float32, {}),
}

RELEASED = {  # the released OLMo 2 models' config.json: hidden, layers, heads, kv heads, intermediate
    "OLMo-2-0425-1B": (2048, 16, 16, 16, 8192),
    "OLMo-2-1124-7B": (4096, 32, 32, 32, 11008),
    "OLMo-2-1124-13B": (5120, 40, 40, 40, 13824),
    "OLMo-2-0325-32B": (5120, 64, 40, 8, 27648),
}

# The released Olmo 3 models' config.json (allenai/Olmo-3-1025-7B, allenai/Olmo-3-1125-32B):
# hidden, layers, heads, kv heads, intermediate; vocab 100278, context 65536, every 4th
# layer full attention, window 4096, YaRN (factor 8 over 8192) on the full layers.
RELEASED_OLMO3 = {
    "olmo3-7b": (4096, 32, 32, 32, 11008),
    "olmo3-32b": (5120, 64, 40, 8, 27648),
}
OLMO3_ROPE = {
    "full_attention": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 8.0,
                       "original_max_position_embeddings": 8192,
                       "attention_factor": 1.2079441541679836, "beta_fast": 32.0, "beta_slow": 1.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 500000.0},
}


def make_config(kw, dtype):
    vocab = kw["vocab_size"]
    cfg = Olmo2Config(max_position_embeddings=64, rms_norm_eps=1e-6, eos_token_id=vocab - 2,
                      pad_token_id=vocab - 1, bos_token_id=None, **kw)
    cfg.dtype = dtype
    cfg._attn_implementation = "eager"
    return cfg


def randomize(model, gen):
    """Weights far from the defaults, so that a missed op or a wrong order shows."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                vals = 1.0 + 0.3 * torch.randn(p.shape, generator=gen)
            elif "embed_tokens" in name:
                vals = 0.5 * torch.randn(p.shape, generator=gen)
            else:
                vals = 0.1 * torch.randn(p.shape, generator=gen)
            p.copy_(vals.to(p.dtype))


def forward_reference(model, seqs, vocab, dtype):
    """The logits and every layer's hidden state of each sequence in `seqs` (one padded
    batch, pad id vocab-1), as reference.safetensors holds them: ids.B, logits.B,
    hidden.L.B; checked against each sequence run alone."""
    tmax = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), tmax), vocab - 1, dtype=torch.long)
    mask = torch.zeros((len(seqs), tmax), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
        mask[b, : len(s)] = 1

    hidden = {}
    hooks = []
    for l, layer in enumerate(model.model.layers):
        def hook(_mod, _inp, out, l=l):
            hidden[l] = (out[0] if isinstance(out, tuple) else out).detach()
        hooks.append(layer.register_forward_hook(hook))
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    for h in hooks:
        h.remove()

    tensors = {}
    for b, s in enumerate(seqs):
        n = len(s)
        tensors[f"ids.{b}"] = s.to(torch.int32)
        tensors[f"logits.{b}"] = logits[b, :n].float().contiguous()
        for l in hidden:
            tensors[f"hidden.{l}.{b}"] = hidden[l][b, :n].float().contiguous()
        # Sanity: the padded batch equals the sequence run alone.
        with torch.no_grad():
            alone = model(input_ids=s[None]).logits[0].float()
        assert torch.allclose(alone, tensors[f"logits.{b}"], atol=1e-5 if dtype == torch.float32 else 5e-2)
    return tensors


def record(name, kw, dtype, save_kw, seed):
    gen = torch.Generator().manual_seed(seed)
    cfg = make_config(kw, dtype)
    torch.manual_seed(seed)
    model = Olmo2ForCausalLM(cfg).to(dtype).eval()
    randomize(model, gen)
    path = os.path.join(OUT, name)
    model.save_pretrained(path, safe_serialization=True, **save_kw)

    vocab = kw["vocab_size"]
    # Ids below vocab-2 so eos/pad are never inputs.
    seqs = [torch.randint(0, vocab - 2, (n,), generator=gen) for n in LENGTHS]
    tensors = forward_reference(model, seqs, vocab, dtype)
    safetensors.torch.save_file(tensors, os.path.join(path, "reference.safetensors"))

    prompt = seqs[0].tolist()
    out = []
    with torch.no_grad():
        cur = list(prompt)
        for _ in range(GEN_TOKENS):
            nxt = int(torch.argmax(model(input_ids=torch.tensor([cur])).logits[0, -1]))
            out.append(nxt)
            cur.append(nxt)
    # The stop test makes out[k] the eos token, k the first index whose token is new.
    k = next(i for i in range(1, len(out)) if out[i] not in out[:i])
    ref = {"prompt_ids": prompt, "greedy_ids": out, "stop_eos_index": k,
           "parameter_count": sum(p.numel() for p in model.parameters())}
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)


def released_configs():
    for name, (h, layers, heads, kv, inter) in RELEASED.items():
        cfg = Olmo2Config(vocab_size=100352, hidden_size=h, num_hidden_layers=layers,
                          num_attention_heads=heads, num_key_value_heads=kv,
                          intermediate_size=inter, max_position_embeddings=4096,
                          rms_norm_eps=1e-6, rope_theta=500000.0, eos_token_id=100257,
                          pad_token_id=100277, bos_token_id=None, tie_word_embeddings=False)
        path = os.path.join(OUT, "configs", name)
        os.makedirs(path, exist_ok=True)
        cfg.architectures = ["Olmo2ForCausalLM"]
        cfg.save_pretrained(path)
        with torch.device("meta"):
            count = sum(p.numel() for p in Olmo2ForCausalLM(cfg).parameters())
        with open(os.path.join(path, "parameter_count.txt"), "w") as f:
            f.write(f"{count}\n")
    for name, (h, layers, heads, kv, inter) in RELEASED_OLMO3.items():
        cfg = Olmo3Config(vocab_size=100278, hidden_size=h, num_hidden_layers=layers,
                          num_attention_heads=heads, num_key_value_heads=kv,
                          intermediate_size=inter, max_position_embeddings=65536,
                          rms_norm_eps=1e-6, sliding_window=4096,
                          rope_parameters=json.loads(json.dumps(OLMO3_ROPE)),
                          eos_token_id=100257, pad_token_id=100277, bos_token_id=None,
                          tie_word_embeddings=False)
        assert cfg.layer_types == (["sliding_attention"] * 3 + ["full_attention"]) * (layers // 4)
        path = os.path.join(OUT, "configs", name)
        os.makedirs(path, exist_ok=True)
        cfg.architectures = ["Olmo3ForCausalLM"]
        cfg.save_pretrained(path)
        with torch.device("meta"):
            count = sum(p.numel() for p in Olmo3ForCausalLM(cfg).parameters())
        with open(os.path.join(path, "parameter_count.txt"), "w") as f:
            f.write(f"{count}\n")


# The files record() writes into a model directory (save_pretrained's, the shards of a
# sharded model, and the references). Stale ones go before a run; other files stay.
OWN_MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors",
                   "model.safetensors.index.json", "model-*-of-*.safetensors",
                   "reference.json", "reference.safetensors")


def remove_own_outputs():
    """Removes what this script wrote before, and only that (docs/architecture.md §10)."""
    for name in MODELS:
        d = os.path.join(OUT, name)
        if not os.path.isdir(d):
            continue
        for f in os.listdir(d):
            if any(fnmatch.fnmatch(f, pat) for pat in OWN_MODEL_FILES):
                os.remove(os.path.join(d, f))
    shutil.rmtree(os.path.join(OUT, "configs"), ignore_errors=True)
    if os.path.exists(os.path.join(OUT, "VERSIONS.json")):
        os.remove(os.path.join(OUT, "VERSIONS.json"))


def main():
    os.makedirs(OUT, exist_ok=True)
    remove_own_outputs()
    for i, (name, (kw, dtype, save_kw)) in enumerate(MODELS.items()):
        record(name, kw, dtype, save_kw, seed=1234 + i)
    released_configs()
    versions = {"python": sys.version.split()[0], "torch": torch.__version__,
                "transformers": transformers.__version__,
                "safetensors": safetensors.__version__, "numpy": np.__version__}
    with open(os.path.join(OUT, "VERSIONS.json"), "w") as f:
        json.dump(versions, f, indent=1)
    print(json.dumps(versions))


if __name__ == "__main__":
    main()
