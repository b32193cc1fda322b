#!/usr/bin/env python3
"""Token-selection fixture for tests/generation/test_logits_adjustments.cpp and
test_token_selection_mpi.cpp: vLLM's logits processors applied in PyTorch to random
logits, and the token our documented sampling draws from what they leave.

Run by scripts/make_fixtures.sh, or alone with the reference environment's python
(deterministic; rewrites tests/generation/fixtures/selection.* and nothing else):
    /opt/olmo2-fixtures-venv/bin/python tests/generation/make_selection_fixtures.py

Each row is one request on its own logits row (N(0, 2²) f32 from a seeded
torch.Generator, VOCAB ids). The adjustments follow vLLM's v1 Sampler, written here in
torch from its definitions, in its order and in f32:
  1. min_tokens: the banned ids (EOS, stop_token_ids) get −inf (MinTokensLogitsProcessor);
  2. logit_bias: logits[ids] += bias (LogitBiasLogitsProcessor);
  3. repetition penalty over prompt ∪ output ids: l / r where l > 0, else l · r (vLLM's
     CUDA kernel; its torch fallback multiplies by the f32 reciprocal instead);
  4. frequency: l −= f · count; 5. presence: l −= p · (count > 0), over the output ids
     (vllm/model_executor/layers/utils.py apply_penalties, bin counts by scatter_add).
Then the choice, as runtime/generation/sampling.h documents it: greedy = first argmax;
otherwise probabilities exp((l − max)/T) in float64 over the ids sorted most likely first
(lower id on ties), min_p (keep p ≥ min_p, p relative to the largest), top_k, top_p (the
smallest prefix whose share of the kept mass reaches top_p), and u = splitmix64 draw
(seed + (draw+1)·γ, top 53 bits / 2^53) times the kept mass: the first id whose
cumulative mass exceeds u. The script checks that u, top_p and min_p sit at least MARGIN
(relative) from every boundary, so the choice is not an accident of rounding. Reported
log-probabilities are torch.log_softmax of the raw logits in float64 (vLLM's default
"raw_logprobs"): the chosen id's and the `logprobs` most likely ids'. Target rows (prompt
logprobs) choose nothing: the target's raw log-probability and the top ids.

selection.safetensors (F32): logits [ROWS, VOCAB], adjusted [ROWS, VOCAB] (torch's
adjusted logits; the raw ones for rows without adjustments).
selection.json: vocab, the rows (request fields, expected id, logprob, top), versions.
"""
import json
import os
import platform

import safetensors
import safetensors.torch
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
VOCAB = 1000
MARGIN = 1e-7
MASK = (1 << 64) - 1


def uniform_draw(seed, draw):
    z = (seed + (draw + 1) * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


def adjust(raw, case):
    """vLLM's processors on one row (f32), in its order."""
    x = raw.clone()
    if case["banned"]:
        x[torch.tensor(case["banned"])] = float("-inf")
    if case["logit_bias"]:
        ids = torch.tensor([i for i, _ in case["logit_bias"]])
        x[ids] += torch.tensor([b for _, b in case["logit_bias"]], dtype=torch.float32)
    prompt = torch.tensor(case["prompt"] or [VOCAB], dtype=torch.long)
    output = torch.tensor(case["output"] or [VOCAB], dtype=torch.long)
    prompt_mask = torch.zeros(VOCAB + 1, dtype=torch.long).scatter_add_(0, prompt, torch.ones_like(prompt))[:VOCAB] > 0
    counts = torch.zeros(VOCAB + 1, dtype=torch.long).scatter_add_(0, output, torch.ones_like(output))[:VOCAB]
    output_mask = counts > 0
    r = torch.tensor(case["repetition"], dtype=torch.float32)
    seen = prompt_mask | output_mask
    x = torch.where(seen, torch.where(x > 0, x / r, x * r), x)
    x = x - torch.tensor(case["frequency"], dtype=torch.float32) * counts.to(torch.float32)
    x = x - torch.tensor(case["presence"], dtype=torch.float32) * output_mask.to(torch.float32)
    return x


def choose(x, case):
    """The documented choice from adjusted logits x; returns (id, smallest relative margin)."""
    t = case["temperature"]
    if t == 0:
        return int(torch.argmax(x)), 1.0
    order = sorted(range(VOCAB), key=lambda i: (-float(x[i]), i))
    xd = x.double()
    mx = float(xd[order[0]])
    prob = [float(torch.exp((xd[i] - mx) / t)) for i in order]
    margin = 1.0
    keep = len(order)
    if case["min_p"] > 0:
        keep = sum(1 for p in prob if p >= case["min_p"])
        margin = min(margin, min(abs(p - case["min_p"]) / case["min_p"] for p in prob))
    if case["top_k"] > 0:
        keep = min(keep, case["top_k"])
    mass = sum(prob[:keep])
    if case["top_p"] < 1:
        cum = 0.0
        for i in range(keep):
            cum += prob[i] / mass
            margin = min(margin, abs(cum - case["top_p"]))
            if cum >= case["top_p"]:
                keep = i + 1
                break
        mass = sum(prob[:keep])
    u = uniform_draw(case["seed"], case["draw"]) * mass
    cum = 0.0
    pick = order[keep - 1]
    for i in range(keep):
        cum += prob[i]
        margin = min(margin, abs(u - cum) / mass)
        if u < cum:
            pick = order[i]
            break
    return pick, margin


def case(name, **kw):
    c = dict(name=name, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, seed=0, draws=[0], logprobs=0,
             logit_bias=[], presence=0.0, frequency=0.0, repetition=1.0, banned=[], prompt=[], output=[],
             target=-1, hot=[])
    c.update(kw)
    return c


# `hot`: ids whose raw logits are raised to 9, 8.5, 8, … (the most likely, in this order)
# so that the adjustments change the choice.
CASES = [
    case("greedy-bias", logprobs=3, hot=[123], logit_bias=[[5, 4.5], [123, -100.0], [640, 7.25]]),
    case("greedy-repetition", logprobs=2, hot=[77, 801, 5], repetition=1.7, prompt=[77, 3, 3, 950, 77],
         output=[801, 12]),
    case("greedy-frequency-presence", logprobs=4, hot=[42, 600, 8], frequency=0.9, presence=0.6,
         output=[42, 42, 42, 600, 7, 7]),
    case("greedy-min-tokens-ban", logprobs=2, hot=[998, 999, 10], banned=[998, 999]),
    case("greedy-everything", logprobs=5, hot=[302, 301, 300], banned=[302], logit_bias=[[301, -2.5], [450, 1.0]],
         repetition=1.3, frequency=0.4, presence=-0.3, prompt=[300, 9, 450], output=[301, 301, 888]),
    case("top-k-bias-presence", temperature=0.8, top_k=20, seed=11, draws=[0, 1, 2, 3], logprobs=2, hot=[250],
         logit_bias=[[3, 2.0], [250, -6.0]], presence=1.5, output=[3, 17]),
    case("top-p-repetition-below-1", temperature=1.0, top_p=0.9, seed=12, draws=[0, 1, 2], logprobs=5,
         repetition=0.7, prompt=[1, 2, 3, 4, 5, 600, 601], output=[700]),
    case("whole-vocab-frequency-bias", temperature=1.2, seed=13, draws=[0, 1, 2], logprobs=2, hot=[555],
         frequency=-0.5, logit_bias=[[555, -3.0], [999, 3.0]], output=[555, 555, 20, 20, 20]),
    case("min-p", temperature=1.0, min_p=0.1, seed=14, draws=[0, 1, 2, 3]),
    case("min-p-top-k-top-p", temperature=0.7, top_k=50, top_p=0.95, min_p=0.05, seed=15, draws=[0, 1, 2],
         logprobs=1),
    case("min-p-bias-whole-vocab", temperature=1.5, min_p=0.2, seed=16, draws=[0, 1, 2], logprobs=3,
         logit_bias=[[8, 5.0], [9, 5.0]], banned=[0, 1, 2]),
    case("target", target=731, logprobs=4),
    case("target-low-half-no-alternatives", target=17, logprobs=0),
    case("target-argmax", target=321, hot=[321], logprobs=2),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(2024)
    rows, logits, adjusted = [], [], []
    for c in CASES:
        for draw in c["draws"]:
            raw = torch.randn(VOCAB, generator=gen, dtype=torch.float32) * 2.0
            for k, h in enumerate(c["hot"]):
                raw[h] = 9.0 - 0.5 * k
            x = adjust(raw, c) if c["target"] < 0 else raw.clone()
            lp = torch.log_softmax(raw.double(), dim=0)
            order = sorted(range(VOCAB), key=lambda i: (-float(raw[i]), i))
            d = dict(c, draw=draw)
            if c["target"] >= 0:
                pick, margin = c["target"], 1.0
            else:
                pick, margin = choose(x, d)
            assert margin > MARGIN, (c["name"], draw, margin)
            d.pop("draws")
            d.pop("hot")
            d["prompt_ids"] = sorted(set(c["prompt"]))
            d["output_counts"] = [[i, c["output"].count(i)] for i in sorted(set(c["output"]))]
            d["expected_id"] = pick
            d["expected_logprob"] = float(lp[pick])
            d["expected_top"] = [[order[j], float(lp[order[j]])] for j in range(c["logprobs"])]
            d["raw_argmax"] = int(torch.argmax(raw))
            d["margin"] = margin
            rows.append(d)
            logits.append(raw)
            adjusted.append(x)
    safetensors.torch.save_file({"logits": torch.stack(logits), "adjusted": torch.stack(adjusted)},
                                os.path.join(OUT, "selection.safetensors"))
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "safetensors": safetensors.__version__}
    with open(os.path.join(OUT, "selection.json"), "w") as f:
        json.dump({"vocab": VOCAB, "rows": rows, "versions": versions}, f, indent=1)
        f.write("\n")
    print(f"{len(rows)} rows; smallest margin {min(r['margin'] for r in rows):.3g}")


if __name__ == "__main__":
    main()
