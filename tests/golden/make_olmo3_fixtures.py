#!/usr/bin/env python3
"""Golden fixtures for Olmo 3 (sliding-window attention, YaRN), made with transformers.

Run by scripts/make_fixtures.sh after make_fixtures.py and make_train_fixtures.py, or
alone with the reference environment's python:
    /opt/olmo2-fixtures-venv/bin/python tests/golden/make_olmo3_fixtures.py [TOKENIZER_JSON]
(TOKENIZER_JSON: the dolma2 tokenizer, default data/dolma2-tokenizer.json).
It rewrites the model directories of MODELS and TOKENIZER_MODEL under tests/golden/
fixtures/ (only the files it writes there; make_bf16_train_fixtures.py's beside them stay)
and records its versions in VERSIONS.json under "olmo3" (the rest of that file is
make_fixtures.py's and stays as it is).

Every model is a tiny random `Olmo3ForCausalLM` (eager attention) with both layer types
(docs/architecture.md §3 "Olmo 3"): a sliding_window shorter than the prompts, and YaRN on
the full-attention layers with original_max_position_embeddings below the prompts'
positions, so that both the window and the YaRN blend change the result. The RoPE
parameters are chosen so that the YaRN ramp has an extrapolated, a blended and an
interpolated frequency (checked below). One model's config.json is written in the
transformers 4.x spelling (rope_theta + rope_scaling), the others as transformers 5.24's
save_pretrained writes them (rope_parameters per layer type).

Per model directory, in the formats of make_fixtures.py / make_train_fixtures.py:
  config.json, generation_config.json, model.safetensors   (save_pretrained)
  reference.safetensors  ids.<b>, logits.<b> [T_b, V], hidden.<l>.<b> [T_b, h] (fp32)
                         of a right-padded batch of two sequences (LENGTHS)
  reference.json         prompt_ids (sequence 0), greedy_ids (GEN_TOKENS, full-recompute
                         argmax: positions run past original_max_position_embeddings and
                         the window slides), stop_eos_index, parameter_count, `rope`:
                         per layer type transformers' inv_freq and attention scaling, and
                         `max_logit_diff`: how far sequence 0's logits move without the
                         window or without YaRN (checked to dwarf the tests' bounds)
  train_reference.*      (TRAIN_MODELS only) loss and every parameter gradient, as
                         make_train_fixtures.py writes them for OLMo 2
TOKENIZER_MODEL is a dolma2-vocabulary model (tied embeddings, hidden size 8, fp32) without logits: its
reference.json holds a text prompt, the ids the dolma2 tokenizer gives it
(data/dolma2-tokenizer.json, the `tokenizers` library) and the greedy continuation, for
`olmo2 generate --prompt TEXT` with the tokenizer in the model directory.
"""
import fnmatch
import json
import os
import platform
import sys

import numpy as np
import safetensors.torch
import torch
import transformers
from transformers import Olmo3Config, Olmo3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "fixtures")
sys.path.insert(0, HERE)
from make_fixtures import forward_reference, randomize  # noqa: E402  (as the OLMo 2 fixtures)
from make_train_fixtures import write_train_reference  # noqa: E402

LENGTHS = (20, 13)  # both longer than every sliding window; 20 > original_max 16
GEN_TOKENS = 24     # greedy positions 20 … 43: past original_max, the window slides
S, F = "sliding_attention", "full_attention"


def yarn(theta, factor, **extra):
    return dict(rope_type="yarn", rope_theta=theta, factor=factor, original_max_position_embeddings=16, **extra)


MODELS = {
    # name: (config kwargs, dtype, spelling)
    # Transformers' default layer types (every 4th full); YaRN without attention_factor
    # (0.1·ln 4 + 1); sliding layers with their own θ.
    "olmo3-mha-f32": (dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=4, sliding_window=5,
                           rope_parameters={F: yarn(1000.0, 4.0), S: dict(rope_type="default", rope_theta=10000.0)}),
                      torch.float32, "v5"),
    # 6 layers (pp 4), 2 kv heads (replicated at tp 4), a vocab tp 4 pads; a custom layer
    # pattern (2 full, 4 sliding: 1 full KV group, 2 sliding ones); the transformers 4.x
    # spelling with attention_factor and beta_fast / beta_slow given. (rope_theta 500000:
    # transformers 5.24 gives 4.x-spelled sliding layers its default θ, 500000, whatever
    # rope_theta says, so only this value reads the same either way.)
    "olmo3-gqa-f32": (dict(vocab_size=202, hidden_size=64, intermediate_size=96, num_hidden_layers=6,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=6,
                           layer_types=[S, S, F, S, S, F]),
                      torch.float32, dict(rope_theta=500000.0,
                                          rope_scaling=dict(rope_type="yarn", factor=4.0,
                                                            original_max_position_embeddings=16,
                                                            attention_factor=1.25, beta_fast=16.0,
                                                            beta_slow=0.1))),
    # bf16; the full layer first; factor 8.
    "olmo3-gqa-bf16": (dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                            num_attention_heads=4, num_key_value_heads=2, sliding_window=7,
                            layer_types=[F, S, S, S],
                            rope_parameters={F: yarn(1000.0, 8.0), S: dict(rope_type="default", rope_theta=1000.0)}),
                       torch.bfloat16, "v5"),
}
TRAIN_MODELS = ("olmo3-mha-f32", "olmo3-gqa-f32")

TOKENIZER_MODEL = "olmo3-tok-f32"
TOKENIZER_FILE = os.path.join(ROOT, "data", "dolma2-tokenizer.json")
TOKENIZER_KW = dict(vocab_size=100352, hidden_size=8, intermediate_size=32, num_hidden_layers=4,
                    num_attention_heads=1, num_key_value_heads=1, sliding_window=4, tie_word_embeddings=True,
                    rope_parameters={F: yarn(1000.0, 4.0), S: dict(rope_type="default", rope_theta=10000.0)})
TOKENIZER_PROMPT = "Olmo 3 slides its window over a long prompt, and the full layers see all of it: "
TOKENIZER_GEN = 12


def make_config(kw, dtype, spelling, eos, pad):
    cfg = Olmo3Config(max_position_embeddings=64, rms_norm_eps=1e-6, eos_token_id=eos, pad_token_id=pad,
                      bos_token_id=None, **({} if spelling == "v5" else spelling), **kw)
    cfg.dtype = dtype
    cfg._attn_implementation = "eager"
    return cfg


def rope_of(model):
    """transformers' inv_freq and attention scaling per layer type."""
    r = model.model.rotary_emb
    return {t: {"inv_freq": getattr(r, f"{t}_inv_freq").tolist(),
                "attention_scaling": float(getattr(r, f"{t}_attention_scaling")), "rope_type": r.rope_type[t]}
            for t in r.layer_types}


def check_yarn_ramp(name, model):
    """The YaRN full layers must blend: one frequency as plain RoPE (extrapolated), one
    divided by the factor (interpolated), one strictly between."""
    cfg = model.config
    p = cfg.rope_parameters[F]
    hd = cfg.hidden_size // cfg.num_attention_heads
    plain = 1.0 / (p["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float) / hd))
    got = model.model.rotary_emb.full_attention_inv_freq
    ratio = (plain / got).tolist()
    kinds = {"extrapolated": any(abs(x - 1) < 1e-6 for x in ratio),
             "interpolated": any(abs(x - p["factor"]) < 1e-4 for x in ratio),
             "blended": any(1 + 1e-3 < x < p["factor"] - 1e-3 for x in ratio)}
    assert all(kinds.values()), f"{name}: YaRN ramp {ratio} lacks {kinds}"
    assert p["rope_type"] == "yarn" and cfg.rope_parameters[S]["rope_type"] == "default"


def build(name, kw, dtype, spelling, seed, eos, pad):
    """Draws the weights, saves the model, and loads it back as a user would
    (from_pretrained in `dtype`: the parameters in dtype, the rotary buffers fp32)."""
    gen = torch.Generator().manual_seed(seed)
    cfg = make_config(kw, dtype, spelling, eos, pad)
    torch.manual_seed(seed)
    model = Olmo3ForCausalLM(cfg).to(dtype).eval()
    randomize(model, gen)
    path = os.path.join(OUT, name)
    model.save_pretrained(path, safe_serialization=True)
    if spelling != "v5":  # the 4.x spelling: rope_theta + rope_scaling, no rope_parameters
        with open(os.path.join(path, "config.json")) as f:
            js = json.load(f)
        del js["rope_parameters"]
        js.update(spelling)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(js, f, indent=2, sort_keys=True)
            f.write("\n")
    loaded = Olmo3ForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=dtype).eval()
    assert loaded.model.rotary_emb.full_attention_inv_freq.dtype == torch.float32
    for a, b in zip(model.parameters(), loaded.parameters()):
        assert torch.equal(a, b)
    if name in MODELS:
        check_yarn_ramp(name, loaded)
    if spelling != "v5":
        # The same configuration in the 5.x spelling gives the same frequencies.
        assert rope_of(Olmo3ForCausalLM(Olmo3Config(**cfg.to_dict()))) == rope_of(loaded), name
    return loaded, gen, path


def greedy(model, prompt, n):
    """Full-recompute argmax (as make_fixtures.py), checked against generate()'s cache."""
    out, cur = [], list(prompt)
    with torch.no_grad():
        for _ in range(n):
            nxt = int(torch.argmax(model(input_ids=torch.tensor([cur])).logits[0, -1]))
            out.append(nxt)
            cur.append(nxt)
        cached = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                                eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    assert cached == out, f"generate() with its cache {cached} differs from full recompute {out}"
    return out


def sensitivity(path, dtype, ids, logits):
    """How far transformers' logits of `ids` move without the window (sliding_window
    1000) and without YaRN (plain RoPE on the full layers): both must dwarf the tests'
    bounds (1e-4 fp32, 5e-2 bf16), or a forward that ignored one would pass."""
    cfg = Olmo3Config.from_pretrained(path)
    plain = {t: {"rope_type": "default", "rope_theta": p["rope_theta"]} for t, p in cfg.rope_parameters.items()}
    out = {}
    for what, change in (("no_window", {"sliding_window": 1000}), ("no_yarn", {"rope_parameters": plain})):
        m = Olmo3ForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=dtype, **change).eval()
        with torch.no_grad():
            out[what] = float((m(input_ids=ids[None]).logits[0].float() - logits).abs().max())
        assert out[what] > (0.5 if dtype == torch.bfloat16 else 1e-2), f"{path}: {what} moves the logits {out[what]}"
    return out


def record(name, kw, dtype, spelling, seed):
    vocab = kw["vocab_size"]
    model, gen, path = build(name, kw, dtype, spelling, seed, eos=vocab - 2, pad=vocab - 1)
    seqs = [torch.randint(0, vocab - 2, (n,), generator=gen) for n in LENGTHS]
    tensors = forward_reference(model, seqs, vocab, dtype)
    safetensors.torch.save_file(tensors, os.path.join(path, "reference.safetensors"))

    prompt = seqs[0].tolist()
    out = greedy(model, prompt, GEN_TOKENS)
    k = next(i for i in range(1, len(out)) if out[i] not in out[:i])
    ref = {"prompt_ids": prompt, "greedy_ids": out, "stop_eos_index": k,
           "parameter_count": sum(p.numel() for p in model.parameters()), "rope": rope_of(model),
           "max_logit_diff": sensitivity(path, dtype, seqs[0], tensors["logits.0"])}
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"{name}: greedy {out}")
    return model


def record_gradients(name, model):
    """train_reference.* exactly as make_train_fixtures.py writes them for OLMo 2."""
    model = Olmo3ForCausalLM.from_pretrained(os.path.join(OUT, name), attn_implementation="eager",
                                             dtype=torch.float32)
    model.train()
    write_train_reference(name, model, os.path.join(OUT, name))


def record_tokenizer_model(seed, tokenizer_file):
    """The dolma2-vocabulary model and a text prompt's greedy continuation."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_file)
    model, _, path = build(TOKENIZER_MODEL, TOKENIZER_KW, torch.float32, "v5", seed, eos=100257, pad=100277)
    prompt = tok.encode(TOKENIZER_PROMPT, add_special_tokens=False).ids
    out = greedy(model, prompt, TOKENIZER_GEN)
    # The smallest top-1 / top-2 logit gap along the continuation: the f32 forward's
    # summation-order noise (~1e-6) cannot change the argmax when it is well above that.
    with torch.no_grad():
        lg = model(input_ids=torch.tensor([prompt + out[:-1]])).logits[0, len(prompt) - 1:].float()
    top2 = lg.topk(2, dim=-1).values
    gap = float((top2[:, 0] - top2[:, 1]).min())
    ref = {"prompt": TOKENIZER_PROMPT, "prompt_ids": prompt, "greedy_ids": out,
           "greedy_text": tok.decode(out, skip_special_tokens=False), "min_top2_gap": gap,
           "parameter_count": sum(p.numel() for p in model.parameters()), "rope": rope_of(model)}
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"{TOKENIZER_MODEL}: prompt {len(prompt)} ids, greedy {out}, smallest top-2 gap {gap:.3g}")


OWN_MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "reference.json",
                   "reference.safetensors", "train_reference.json", "train_reference.safetensors")


def remove_own_outputs():
    """Removes what this script wrote before, and only that (docs/architecture.md §10)."""
    for name in list(MODELS) + [TOKENIZER_MODEL]:
        d = os.path.join(OUT, name)
        if os.path.isdir(d):
            for f in os.listdir(d):
                if any(fnmatch.fnmatch(f, pat) for pat in OWN_MODEL_FILES):
                    os.remove(os.path.join(d, f))


def main():
    torch.set_num_threads(1)
    remove_own_outputs()
    for i, (name, (kw, dtype, spelling)) in enumerate(MODELS.items()):
        model = record(name, kw, dtype, spelling, seed=4321 + i)
        if name in TRAIN_MODELS:
            record_gradients(name, model)
    record_tokenizer_model(4321 + len(MODELS), sys.argv[1] if len(sys.argv) > 1 else TOKENIZER_FILE)
    path = os.path.join(OUT, "VERSIONS.json")
    with open(path) as f:
        versions = json.load(f)
    versions["olmo3"] = {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__, "safetensors": safetensors.__version__,
                         "numpy": np.__version__}
    with open(path, "w") as f:
        json.dump(versions, f, indent=1)
    print(json.dumps(versions["olmo3"]))


if __name__ == "__main__":
    main()
