#!/usr/bin/env python3
"""Named activations and steering of three tiny models, as transformers computes them, for
the tracing and intervention tests (docs/architecture.md §10).

Run by scripts/make_fixtures.sh after make_olmo3_fixtures.py (it reads the models that
make_fixtures.py and make_olmo3_fixtures.py committed and never rewrites them), or alone
with the reference environment's python (deterministic; rewrites only
tests/golden/fixtures/<model>/activations.{safetensors,json}):
    ATEN_CPU_CAPABILITY=avx2 /opt/olmo2-fixtures-venv/bin/python tests/golden/make_activation_fixtures.py

For each of mha-f32, gqa-f32 (Olmo2ForCausalLM) and olmo3-gqa-f32 (Olmo3ForCausalLM,
sliding and full layers, YaRN), in float32:
  * prompt_ids: PROMPT_LEN seeded ids below vocab_size − 2 (never eos or pad);
    greedy_ids: transformers' greedy continuation of GEN tokens (model.generate, no eos
    stop), checked against an argmax loop that recomputes the whole sequence;
    sequence_ids = prompt_ids + greedy_ids[:-1], the T positions a server feeds.
  * One forward over sequence_ids captures every named activation (the "keys" section of
    activations.json says what each one is and where it is taken) as read.<name>, float32,
    without the batch axis. The attention function's arguments and results come from a
    wrapper around the model's eager attention, registered with
    transformers.AttentionInterface under CAPTURE (its mask is eager's, registered with
    AttentionMaskInterface); everything else from forward hooks and pre-hooks.
  * Steering cases, each its own forward over sequence_ids with hooks that change the
    model: steer.<case>.logits [T, V], steer.<case>.layer_output (the last layer's output)
    [T, h], vector.<case> [h]; the json records each case's interventions in the API's
    shape and how far it moves the logits. add_layer_output also gets its own greedy
    continuation with the steering applied at every forward.
"""
import json
import os
import platform

import safetensors
import safetensors.torch
import torch
import transformers
from transformers import AttentionInterface, Olmo2ForCausalLM, Olmo3ForCausalLM
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.models.olmo2 import modeling_olmo2
from transformers.models.olmo3 import modeling_olmo3

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
MODELS = [("mha-f32", Olmo2ForCausalLM), ("gqa-f32", Olmo2ForCausalLM), ("olmo3-gqa-f32", Olmo3ForCausalLM)]
CAPTURE = "olmo2_fixture_capture"
PROMPT_LEN = 11
GEN = 6
SEED = 20260
RESIDUAL_TOL = 1e-5   # layer_input + attention_output + mlp_output vs layer_output
MIN_MOVE = 1e-2       # every steering case must move the logits at least this far

# Where each per-layer name is read (the json's "keys" section repeats these).
LAYER_KEYS = {
    "layer_input": ("[T, h]", "the decoder layer's input hidden_states (forward pre-hook on layers[i])"),
    "attention_queries": ("[H, T, hd]", "the query argument of the attention function: after q_norm and RoPE"),
    "attention_keys": ("[KV, T, hd]", "the key argument of the attention function: after k_norm and RoPE, "
                                      "not repeated over the query heads of a group"),
    "attention_values": ("[KV, T, hd]", "the value argument of the attention function, not repeated"),
    "attention_probabilities": ("[H, T, T]", "the attention weights the eager attention returns: softmax over "
                                             "keys (axis 2) of the scaled, masked scores; masked entries "
                                             "(future positions, outside a sliding window) are exactly 0"),
    "attention_head_outputs": ("[T, H, hd]", "the attention function's output: probabilities times values, "
                                             "per head"),
    "attention_premix": ("[T, H, hd]", "o_proj's input (forward pre-hook), reshaped to heads; equals "
                                       "attention_head_outputs"),
    "attention_output": ("[T, h]", "post_attention_layernorm's output: what is added to the residual"),
    "layer_mid": ("[T, h]", "the residual after attention: layer_input + attention_output (the mlp's input)"),
    "mlp_input": ("[T, h]", "the mlp's input (forward pre-hook on mlp); equals layer_mid: OLMo 2 and Olmo 3 "
                            "have no norm before the mlp"),
    "mlp_neurons": ("[T, inter]", "down_proj's input (forward pre-hook): silu(gate_proj(x)) * up_proj(x)"),
    "mlp_output": ("[T, h]", "post_feedforward_layernorm's output: what is added to the residual"),
    "layer_output": ("[T, h]", "the decoder layer's output hidden_states: layer_mid + mlp_output"),
}
MODEL_KEYS = {
    "token_embeddings": ("[T, h]", "embed_tokens' output"),
    "final_norm_output": ("[T, h]", "model.model.norm's output"),
    "lm_head_output": ("[T, V]", "lm_head's output"),
    "logits": ("[T, V]", "the logits the model returns"),
}


def register_capture(store):
    """Registers CAPTURE: each model's own eager attention, recording its arguments and
    results into store[layer_idx] (batch axis dropped) when store is enabled."""

    def wrapper(module, query, key, value, attention_mask, **kwargs):
        eager = MODULE_OF[type(module)].eager_attention_forward
        out, weights = eager(module, query, key, value, attention_mask, **kwargs)
        if store.get("on"):
            store[module.layer_idx] = {
                "attention_queries": query[0], "attention_keys": key[0], "attention_values": value[0],
                "attention_probabilities": weights[0], "attention_head_outputs": out[0]}
        return out, weights

    AttentionInterface.register(CAPTURE, wrapper)
    AttentionMaskInterface.register(CAPTURE, eager_mask)


MODULE_OF = {modeling_olmo2.Olmo2Attention: modeling_olmo2, modeling_olmo3.Olmo3Attention: modeling_olmo3}


def hidden(output):
    """A decoder layer's hidden states whether it returns a tensor or a tuple."""
    return output[0] if isinstance(output, tuple) else output


def greedy_loop(model, prompt, n):
    """Greedy continuation by argmax, recomputing the whole sequence each step; also the
    smallest gap between the best and second-best logit over the steps."""
    cur, out, gap = list(prompt), [], float("inf")
    with torch.no_grad():
        for _ in range(n):
            last = model(input_ids=torch.tensor([cur])).logits[0, -1]
            top2 = torch.topk(last, 2).values
            gap = min(gap, float(top2[0] - top2[1]))
            nxt = int(torch.argmax(last))
            out.append(nxt)
            cur.append(nxt)
    return out, gap


def greedy_generate(model, prompt, n):
    """transformers' greedy generation of exactly n tokens: no sampling, no eos stop (eos
    is not banned either: it is an ordinary token here)."""
    cfg = transformers.GenerationConfig(max_new_tokens=n, do_sample=False, eos_token_id=None,
                                        pad_token_id=model.config.pad_token_id)
    with torch.no_grad():
        ids = model.generate(torch.tensor([prompt]), generation_config=cfg)
    return ids[0, len(prompt):].tolist()


def capture(model, ids, store):
    """One forward over ids [T] with every named activation recorded; returns
    ({name: tensor}, returned logits [T, V])."""
    acts, handles = {}, []
    inner = model.model

    def keep(name, t):
        acts[name] = t.detach()[0].clone()

    def on(module, name, pre=False, transform=None):
        f = transform or (lambda t: t)
        if pre:
            handles.append(module.register_forward_pre_hook(lambda m, args: keep(name, f(args[0]))))
        else:
            handles.append(module.register_forward_hook(lambda m, args, out: keep(name, f(hidden(out)))))

    on(inner.embed_tokens, "token_embeddings")
    for i, layer in enumerate(inner.layers):
        p = f"layers.{i}."
        attn = layer.self_attn
        on(layer, p + "layer_input", pre=True)
        on(attn.o_proj, p + "attention_premix", pre=True,
           transform=lambda t, a=attn: t.reshape(*t.shape[:-1], -1, a.head_dim))
        on(layer.post_attention_layernorm, p + "attention_output")
        on(layer.mlp, p + "mlp_input", pre=True)
        on(layer.mlp.down_proj, p + "mlp_neurons", pre=True)
        on(layer.post_feedforward_layernorm, p + "mlp_output")
        on(layer, p + "layer_output")
    on(inner.norm, "final_norm_output")
    on(model.lm_head, "lm_head_output")
    store.clear()
    store["on"] = True
    try:
        with torch.no_grad():
            logits = model(input_ids=ids[None]).logits[0]
    finally:
        store["on"] = False
        for h in handles:
            h.remove()
    for i in range(len(inner.layers)):
        for name, t in store[i].items():
            acts[f"layers.{i}.{name}"] = t.detach().clone()
        acts[f"layers.{i}.layer_mid"] = acts[f"layers.{i}.mlp_input"].clone()
    acts["logits"] = logits.clone()
    return acts, logits


def add_hook(module, vector, coefficient, positions):
    """Forward hook adding coefficient × vector to module's output at positions ("all",
    a list of indices, or {"from": n}) of a forward that starts at position 0 (or, under
    generate's KV cache, continues from the cache length)."""
    state = {"offset": 0}

    def hook(m, args, out):
        h = hidden(out)
        t = h.shape[1]
        pos = torch.arange(state["offset"], state["offset"] + t)
        state["offset"] += t
        if positions == "all":
            mask = torch.ones(t, dtype=torch.bool)
        elif isinstance(positions, dict):
            mask = pos >= positions["from"]
        else:
            mask = torch.isin(pos, torch.tensor(positions))
        h = h + coefficient * mask[None, :, None].to(h.dtype) * vector
        return (h,) + tuple(out[1:]) if isinstance(out, tuple) else h

    return module.register_forward_hook(hook)


def ablate_hook(attn, head):
    """Forward pre-hook on o_proj zeroing head `head`'s columns of its input at every position."""
    hd = attn.head_dim

    def hook(m, args):
        x = args[0].clone()
        x[..., head * hd:(head + 1) * hd] = 0
        return (x,) + tuple(args[1:])

    return attn.o_proj.register_forward_pre_hook(hook)


def first_position(positions):
    """The first position an intervention's positions ("all", a list, {"from": n}) select."""
    if positions == "all":
        return 0
    return positions["from"] if isinstance(positions, dict) else min(positions)


def scaled_vector(gen, h, norm):
    v = torch.randn(h, generator=gen, dtype=torch.float32)
    return v * (norm / v.norm())


def mean_norm(t):
    return float(t.norm(dim=-1).mean())


def read_checks(acts, cfg, logits, ref_capture, ref_eager):
    """The identities the captured names must satisfy; asserts them and returns their values."""
    L = cfg.num_hidden_layers

    def worst(pairs):
        return max(float((a - b).abs().max()) for a, b in pairs)

    a = acts
    layer = [lambda n, i=i: a[f"layers.{i}.{n}"] for i in range(L)]
    residual = worst((g("layer_input") + g("attention_output") + g("mlp_output"), g("layer_output")) for g in layer)
    mid = worst((g("layer_input") + g("attention_output"), g("layer_mid")) for g in layer)
    premix = worst((g("attention_premix"), g("attention_head_outputs")) for g in layer)
    chain = worst([(a["token_embeddings"], a["layers.0.layer_input"])]
                  + [(a[f"layers.{i}.layer_output"], a[f"layers.{i + 1}.layer_input"]) for i in range(L - 1)])
    probs = [g("attention_probabilities") for g in layer]
    prob_sums = max(float((p.sum(-1) - 1).abs().max()) for p in probs)
    future = max(float(p.triu(1).abs().max()) for p in probs)
    # Keys `sliding_window` or more positions back are outside a sliding layer's window.
    sliding = [i for i, kind in enumerate(getattr(cfg, "layer_types", None) or []) if kind == "sliding_attention"]
    outside = max([float(probs[i].tril(-cfg.sliding_window).abs().max()) for i in sliding], default=0.0)
    checks = {
        "residual_identity_max_abs": residual,
        "layer_mid_identity_max_abs": mid,
        "premix_vs_head_outputs_max_abs": premix,
        "layer_chain_max_abs": chain,
        "logits_vs_model_call_max_abs": float((logits - ref_capture).abs().max()),
        "logits_vs_eager_model_max_abs": float((logits - ref_eager).abs().max()),
        "lm_head_output_vs_logits_max_abs": float((a["lm_head_output"] - logits).abs().max()),
        "probabilities_row_sum_max_abs_error": prob_sums,
        "probabilities_future_max_abs": future,
        "probabilities_outside_window_max_abs": outside,
    }
    assert residual < RESIDUAL_TOL and mid < RESIDUAL_TOL, checks
    assert premix == 0 and chain == 0 and future == 0 and outside == 0, checks
    assert checks["logits_vs_model_call_max_abs"] == 0 and checks["logits_vs_eager_model_max_abs"] == 0, checks
    assert checks["lm_head_output_vs_logits_max_abs"] == 0 and prob_sums < 1e-5, checks
    return checks


def check_shapes(acts, dims):
    """Every per-layer name has the shape LAYER_KEYS documents."""
    for i in range(dims["L"]):
        for k, (shape, _) in LAYER_KEYS.items():
            want = [dims[s.strip()] for s in shape.strip("[]").split(",")]
            got = list(acts[f"layers.{i}.{k}"].shape)
            assert got == want, (i, k, got, want)


def steering_cases(acts, cfg, gen):
    """The cases: (name, interventions in the API's shape, vector or None). Each vector is
    seeded normal, scaled to the mean norm (over positions) of the activation it is added to."""
    last = cfg.num_hidden_layers - 1

    def vector(target):
        return scaled_vector(gen, cfg.hidden_size, mean_norm(acts[target]))

    v_layer = vector("layers.1.layer_output")
    v_attn = vector("layers.0.attention_output")
    v_mlp = vector(f"layers.{last}.mlp_output")
    add_layer = {"type": "add", "name": "layers.1.layer_output", "coefficient": 3.0, "positions": "all"}
    ablate = {"type": "ablate_head", "layer": 0, "head": 1, "positions": "all"}
    return [
        ("add_layer_output", [add_layer], v_layer),
        ("add_attention_output", [{"type": "add", "name": "layers.0.attention_output", "coefficient": -2.0,
                                   "positions": [2, 5, 9]}], v_attn),
        ("add_mlp_output", [{"type": "add", "name": f"layers.{last}.mlp_output", "coefficient": 1.5,
                             "positions": {"from": PROMPT_LEN}}], v_mlp),
        ("ablate_head", [ablate], None),
        ("combined", [add_layer, ablate], v_layer),
    ]


def apply(model, interventions, vector):
    """Registers the hooks that carry out interventions; returns their handles."""
    layers, hs = model.model.layers, []
    for iv in interventions:
        if iv["type"] == "ablate_head":
            hs.append(ablate_hook(layers[iv["layer"]].self_attn, iv["head"]))
            continue
        _, i, what = iv["name"].split(".")
        layer = layers[int(i)]
        module = {"layer_output": layer, "attention_output": layer.post_attention_layernorm,
                  "mlp_output": layer.post_feedforward_layernorm}[what]
        hs.append(add_hook(module, vector, iv["coefficient"], iv["positions"]))
    return hs


def steered(model, interventions, vector, fn):
    """fn() with interventions applied; the hooks are removed afterwards."""
    hs = apply(model, interventions, vector)
    try:
        with torch.no_grad():
            return fn()
    finally:
        for h in hs:
            h.remove()


def run_case(model, seq, acts, logits, case, interventions, vector, tensors):
    """One steered forward over seq: stores steer.<case>.* (and vector.<case>) into tensors,
    returns the case's json entry."""
    layers = model.model.layers
    last = len(layers) - 1
    out = {}
    hs = apply(model, interventions, vector)
    # Registered after the steering hooks, so it sees the last layer's steered output.
    hs.append(layers[last].register_forward_hook(lambda m, a, o: out.__setitem__("h", hidden(o)[0].clone())))
    try:
        with torch.no_grad():
            steer_logits = model(input_ids=seq[None]).logits[0]
    finally:
        for h in hs:
            h.remove()
    diff = (steer_logits - logits).abs().max(dim=-1).values
    move = float(diff.max())
    assert move > MIN_MOVE, (case, move)
    # Causal: positions before the first steered one keep their logits bit for bit.
    first = min(first_position(iv["positions"]) for iv in interventions)
    assert all(float(d) == 0 for d in diff[:first]) and float(diff[first]) > 0, (case, diff)
    with torch.no_grad():  # the stored layer output is the one the steered logits come from
        assert torch.equal(model.lm_head(model.model.norm(out["h"])), steer_logits), case
    tensors[f"steer.{case}.logits"] = steer_logits.clone()
    tensors[f"steer.{case}.layer_output"] = out["h"].contiguous()
    entry = {"case": case, "interventions": interventions, "logits_max_abs_move": move,
             "logits_max_abs_move_per_position": [float(d) for d in diff],
             "first_moved_position": first,
             "layer_output_max_abs_move": float((out["h"] - acts[f"layers.{last}.layer_output"]).abs().max())}
    if vector is not None:
        tensors[f"vector.{case}"] = vector.clone()
        entry["vector_norm"] = float(vector.norm())
        entry["vector_norm_is_mean_norm_of"] = next(iv["name"] for iv in interventions if iv["type"] == "add")
    return entry


def keys_section(last):
    """The json's "keys": each stored tensor's shape and where it is taken."""
    keys = {"read.token_embeddings": "[T, h] " + MODEL_KEYS["token_embeddings"][1]}
    for k, (shape, meaning) in LAYER_KEYS.items():
        keys[f"read.layers.<i>.{k}"] = f"{shape} {meaning}"
    for k in ("final_norm_output", "lm_head_output", "logits"):
        keys[f"read.{k}"] = f"{MODEL_KEYS[k][0]} {MODEL_KEYS[k][1]}"
    keys["steer.<case>.logits"] = "[T, V] the logits of one forward over sequence_ids with the case's interventions"
    keys["steer.<case>.layer_output"] = f"[T, h] layers.{last}.layer_output (the last layer's) of that forward"
    keys["vector.<case>"] = ("[h] the case's steering vector (seeded normal, scaled so its norm is the mean over "
                             "positions of ‖activation‖ of the unsteered name it is added to); absent for ablate_head")
    return keys


INTERVENTIONS_MEANING = {
    "add": "the named activation becomes activation + coefficient * vector at the selected positions "
           "(positions index sequence_ids: \"all\", a list, or {\"from\": n} for n and after); "
           "everything downstream sees the changed value",
    "ablate_head": "head `head` of layer `layer`: its slice [head*hd, (head+1)*hd) of o_proj's input "
                   "(attention_head_outputs) is set to 0 at the selected positions, before o_proj",
}


def make(name, cls, store, versions):
    """Writes activations.{safetensors,json} for the committed model tests/golden/fixtures/<name>."""
    path = os.path.join(FIXTURES, name)
    model = cls.from_pretrained(path, dtype=torch.float32, attn_implementation=CAPTURE).eval()
    plain = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    cfg = model.config
    gen = torch.Generator().manual_seed(SEED)
    prompt = torch.randint(0, cfg.vocab_size - 2, (PROMPT_LEN,), generator=gen).tolist()
    assert cfg.eos_token_id not in prompt and cfg.pad_token_id not in prompt

    greedy = greedy_generate(model, prompt, GEN)
    loop, gap = greedy_loop(plain, prompt, GEN)
    assert greedy == loop, (name, greedy, loop)
    seq = torch.tensor(prompt + greedy[:-1])

    acts, logits = capture(model, seq, store)
    with torch.no_grad():
        ref_capture = model(input_ids=seq[None]).logits[0]
        ref_eager = plain(input_ids=seq[None]).logits[0]
    dims = {"L": cfg.num_hidden_layers, "h": cfg.hidden_size, "H": cfg.num_attention_heads,
            "KV": cfg.num_key_value_heads, "hd": model.model.layers[0].self_attn.head_dim,
            "inter": cfg.intermediate_size, "V": cfg.vocab_size, "T": len(seq)}
    check_shapes(acts, dims)
    checks = read_checks(acts, cfg, logits, ref_capture, ref_eager)
    checks["greedy_generate_equals_argmax_loop"] = greedy == loop
    checks["greedy_smallest_top2_gap"] = gap

    tensors = {f"read.{k}": v.contiguous() for k, v in acts.items()}
    steering = []
    for case, interventions, vector in steering_cases(acts, cfg, gen):
        entry = run_case(model, seq, acts, logits, case, interventions, vector, tensors)
        if case == "add_layer_output":
            ids = steered(model, interventions, vector, lambda: greedy_generate(model, prompt, GEN))
            ids_loop, ids_gap = steered(model, interventions, vector, lambda: greedy_loop(model, prompt, GEN))
            assert ids == ids_loop, (name, ids, ids_loop)
            entry.update({"greedy_ids": ids, "greedy_differs_from_unsteered": ids != greedy,
                          "greedy_smallest_top2_gap": ids_gap})
        steering.append(entry)
    # Every hook is gone again: the model answers as before.
    with torch.no_grad():
        assert torch.equal(model(input_ids=seq[None]).logits[0], logits)

    meta = {
        "model": name,
        "architecture": cls.__name__,
        "attn_implementation": f"{CAPTURE}: transformers' eager attention wrapped to record its arguments",
        "dims": dims,
        "layer_types": getattr(cfg, "layer_types", None),
        "sliding_window": getattr(cfg, "sliding_window", None),
        "prompt_ids": prompt,
        "greedy_ids": greedy,
        "sequence_ids": seq.tolist(),
        "positions": {"prompt": list(range(PROMPT_LEN)), "generated": list(range(PROMPT_LEN, len(seq))),
                      "note": "sequence_ids[p] is fed at position p; the forward at position PROMPT_LEN-1 chooses "
                              "greedy_ids[0]; the last greedy id is never fed"},
        "seed": SEED,
        "checks": checks,
        "steering": steering,
        "interventions_meaning": INTERVENTIONS_MEANING,
        "keys": keys_section(cfg.num_hidden_layers - 1),
        "dtype": "float32, every tensor; no batch axis",
        "versions": versions,
    }
    out_st = os.path.join(path, "activations.safetensors")
    safetensors.torch.save_file(dict(sorted(tensors.items())), out_st, metadata={"format": "pt"})
    with open(os.path.join(path, "activations.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    moves = ", ".join(f"{s['case']} {s['logits_max_abs_move']:.3g}" for s in steering)
    print(f"{name}: T {len(seq)}, greedy {greedy} (gap {gap:.3g}); residual {checks['residual_identity_max_abs']:.2g}; "
          f"{os.path.getsize(out_st)} bytes; moves: {moves}; steered greedy "
          f"{steering[0]['greedy_ids']} differs {steering[0]['greedy_differs_from_unsteered']}")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__, "safetensors": safetensors.__version__}
    store = {}
    register_capture(store)
    for name, cls in MODELS:
        make(name, cls, store, versions)


if __name__ == "__main__":
    main()
