#!/usr/bin/env python3
"""Golden training fixtures: loss and every parameter's gradient from transformers.

Run by scripts/make_fixtures.sh (the pinned reference environment, every fixture script
in order), or alone with that environment's python after make_fixtures.py:
    /opt/olmo2-fixtures-venv/bin/python tests/golden/make_train_fixtures.py
For each model directory in MODELS it writes, beside the model (and touches nothing else):
  train_reference.safetensors  `ids.<b>` and `labels.<b>` (int32) of a fixed batch of
                               sequences of different lengths, and per Z-loss
                               coefficient case `<case>.loss`, `<case>.ce`, `<case>.z`
                               (fp64 scalars as [1] tensors) and `<case>.grad.<name>`
                               for every parameter (fp32).
  train_reference.json         the cases and their coefficients.
Loss (docs/architecture.md §7): over all non-ignored targets of the batch,
    loss = Σ CE_t / N + coef · Σ logsumexp(logits_t)² / N,
computed here from the logits transformers returns (float64 for the sums), each
sequence run on its own (no padding), then loss.backward().
"""
import json
import os

import safetensors.torch
import torch
from transformers import Olmo2ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
MODELS = ("mha-f32", "gqa-f32")
LENGTHS = (12, 9, 5)
CASES = {"z1e-5": 1e-5, "z0.1": 0.1}  # the recipe's value, and one large enough to show


def batch(vocab, seed):
    g = torch.Generator().manual_seed(seed)
    ids, labels = [], []
    for b, n in enumerate(LENGTHS):
        x = torch.randint(0, vocab, (n,), generator=g, dtype=torch.int64)
        y = torch.cat([x[1:], torch.tensor([-100])])
        if b == 0:
            y[3] = -100  # an ignored position inside a sequence
        ids.append(x)
        labels.append(y)
    return ids, labels


def loss_and_grads(model, ids, labels, coef):
    model.zero_grad(set_to_none=True)
    ce_sum = torch.zeros((), dtype=torch.float64)
    z_sum = torch.zeros((), dtype=torch.float64)
    count = 0
    for x, y in zip(ids, labels):
        logits = model(input_ids=x[None]).logits[0].float()
        mask = y != -100
        lse = torch.logsumexp(logits, dim=-1)
        ce = torch.nn.functional.cross_entropy(logits, y, ignore_index=-100, reduction="none")
        ce_sum = ce_sum + ce[mask].double().sum()
        z_sum = z_sum + (lse[mask].double() ** 2).sum()
        count += int(mask.sum())
    ce = ce_sum / count
    z = coef * z_sum / count
    loss = ce + z
    loss.backward()
    grads = {n: p.grad.detach().clone().contiguous() for n, p in model.named_parameters()}
    return loss.item(), ce.item(), z.item(), grads


def write_train_reference(name, model, d):
    """train_reference.{safetensors,json} in `d`: the fixed batch's loss, cross-entropy,
    Z-loss and every parameter gradient of `model` (train mode, f32) per Z-loss case."""
    ids, labels = batch(model.config.vocab_size, seed=1234)
    tensors = {}
    for b, (x, y) in enumerate(zip(ids, labels)):
        tensors[f"ids.{b}"] = x.to(torch.int32)
        tensors[f"labels.{b}"] = y.to(torch.int32)
    meta = {"lengths": list(LENGTHS), "cases": {}}
    for case, coef in CASES.items():
        loss, ce, z, grads = loss_and_grads(model, ids, labels, coef)
        tensors[f"{case}.loss"] = torch.tensor([loss], dtype=torch.float64)
        tensors[f"{case}.ce"] = torch.tensor([ce], dtype=torch.float64)
        tensors[f"{case}.z"] = torch.tensor([z], dtype=torch.float64)
        for n, g in grads.items():
            tensors[f"{case}.grad.{n}"] = g.float()
        meta["cases"][case] = {"z_coef": coef, "loss": loss, "ce": ce, "z": z}
        print(f"{name} {case}: loss {loss:.6f} (ce {ce:.6f}, z {z:.3e}), {len(grads)} gradients")
    safetensors.torch.save_file(tensors, os.path.join(d, "train_reference.safetensors"))
    with open(os.path.join(d, "train_reference.json"), "w") as f:
        json.dump(meta, f, indent=1)


def main():
    torch.manual_seed(0)
    for name in MODELS:
        d = os.path.join(OUT, name)
        model = Olmo2ForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32)
        model.train()  # dropout is 0 in OLMo 2; train() only for the autograd path
        write_train_reference(name, model, d)


if __name__ == "__main__":
    main()
