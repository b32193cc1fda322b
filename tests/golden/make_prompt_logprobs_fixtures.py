#!/usr/bin/env python3
"""Prompt log-probabilities of a tiny OLMo 2 model for tests/serve/test_engine_selection*.cpp.

Run by scripts/make_fixtures.sh after make_fixtures.py (it reads that script's
deep-gqa-f32 model), or alone with the reference environment's python (deterministic;
rewrites tests/golden/fixtures/deep-gqa-f32/prompt_logprobs.json and nothing else):
    /opt/olmo2-fixtures-venv/bin/python tests/golden/make_prompt_logprobs_fixtures.py

A prompt of PROMPT_LEN seeded random ids (below the model's eos and pad ids) goes through
transformers' Olmo2ForCausalLM (eager attention, fp32) once; torch.log_softmax of its
logits in float64 gives, for every position i, the log-probability of prompt token i+1
and the TOP most likely ids (position PROMPT_LEN−1's are those of the first generated
token: the greedy choice and the runner-up a logit_bias of −100 on it leaves). The
greedy continuation (GEN tokens, full recompute) is recorded too.

prompt_logprobs.json: prompt, target_logprobs [PROMPT_LEN−1] (position i: of prompt[i+1]),
top [PROMPT_LEN][TOP] of [id, logprob], greedy, versions.
"""
import json
import os
import platform

import torch
import transformers
from transformers import Olmo2ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "fixtures", "deep-gqa-f32")
PROMPT_LEN = 40  # longer than the tests' --max-batch-tokens: a chunked prefill
TOP = 3
GEN = 6


def main():
    model = Olmo2ForCausalLM.from_pretrained(MODEL, dtype=torch.float32, attn_implementation="eager").eval()
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(4242)
    prompt = torch.randint(0, vocab - 2, (PROMPT_LEN,), generator=gen)
    with torch.no_grad():
        logits = model(input_ids=prompt[None]).logits[0].float()
    lp = torch.log_softmax(logits.double(), dim=-1)
    targets = [float(lp[i, prompt[i + 1]]) for i in range(PROMPT_LEN - 1)]
    top = []
    for i in range(PROMPT_LEN):
        order = sorted(range(vocab), key=lambda j: (-float(logits[i, j]), j))[:TOP]
        top.append([[j, float(lp[i, j])] for j in order])
    greedy, cur = [], prompt.tolist()
    with torch.no_grad():
        for _ in range(GEN):
            nxt = int(torch.argmax(model(input_ids=torch.tensor([cur])).logits[0, -1]))
            greedy.append(nxt)
            cur.append(nxt)
    assert greedy[0] == top[-1][0][0]
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__}
    with open(os.path.join(MODEL, "prompt_logprobs.json"), "w") as f:
        json.dump({"prompt": prompt.tolist(), "target_logprobs": targets, "top": top, "greedy": greedy,
                   "versions": versions}, f, indent=1)
        f.write("\n")
    gaps = [t[0][1] - t[1][1] for t in top]
    print(f"prompt of {PROMPT_LEN}; greedy {greedy}; smallest top-1/top-2 gap {min(gaps):.3g}")


if __name__ == "__main__":
    main()
