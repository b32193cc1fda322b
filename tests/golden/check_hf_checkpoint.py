#!/usr/bin/env python3
"""Checks that transformers loads a checkpoint written by olmo2 (runtime/train/checkpoint.h).

Usage (with /opt/olmo2-fixtures-venv/bin/python, torch + transformers 5.x):

  check_hf_checkpoint.py CHECKPOINT_DIR [--ids 1,2,3] [--logits FILE.safetensors]
                         [--key logits] [--tolerance 1e-4] [--max-shard-bytes N]

Loads CHECKPOINT_DIR with AutoConfig and AutoModelForCausalLM.from_pretrained in
float32 and fails (exit 1) when transformers reports missing, unexpected or
mismatched keys, or the config is not an Olmo2Config (Olmo3Config when config.json
says model_type olmo3). Then runs the ids (default
1,2,3) and prints the logits' shape and summary; with --logits, prints the max
absolute difference against tensor --key (default "logits", shape [T, V]) of that
file and exits 1 when it is above --tolerance. With --max-shard-bytes, also checks
that model.safetensors.index.json splits the state dict exactly as
huggingface_hub.split_torch_state_dict_into_shards does at that size.

Example against the golden fixture's reference logits of sequence 0:

  IDS=$(python -c "from safetensors.torch import load_file as l; \\
        print(','.join(map(str, l('tests/golden/fixtures/gqa-f32/reference.safetensors')['ids.0'].tolist())))")
  check_hf_checkpoint.py DIR --ids $IDS \\
      --logits tests/golden/fixtures/gqa-f32/reference.safetensors --key logits.0
"""

import argparse
import json
import logging
import os
import sys
import warnings


def load_checked(ckpt, failures, attn_implementation=None, config_class="Olmo2Config"):
    """Loads `ckpt` with AutoConfig + AutoModelForCausalLM (float32) and appends to
    `failures` every problem transformers reports: a config that is not a
    `config_class` (Olmo2Config; Olmo3Config for an Olmo 3 checkpoint), missing /
    unexpected / mismatched keys, loading messages about them.
    Prints transformers' log lines and Python warnings. Returns (config, model) in
    eval mode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    tf_logger = logging.getLogger("transformers")
    handler = Collect(level=logging.WARNING)
    tf_logger.addHandler(handler)
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = AutoConfig.from_pretrained(ckpt)
        model, info = AutoModelForCausalLM.from_pretrained(
            ckpt, dtype=torch.float32, output_loading_info=True, **extra)
    tf_logger.removeHandler(handler)
    if type(config).__name__ != config_class:
        failures.append(f"{ckpt}: config is {type(config).__name__}, not {config_class}")
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(kind):
            failures.append(f"{ckpt}: {kind}: {sorted(map(str, info[kind]))}")
    for message in records:
        print(f"  transformers log: {message}")
        if any(w in message.lower() for w in ("missing", "unexpected", "not used", "newly initialized",
                                              "mismatch")):
            failures.append(f"{ckpt}: loading reported: {message}")
    for w in caught:
        print(f"  python warning: {w.category.__name__}: {w.message}")
    model.eval()
    return config, model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint_dir")
    parser.add_argument("--ids", default="1,2,3", help="comma-separated token ids")
    parser.add_argument("--logits", help="safetensors file holding the expected logits")
    parser.add_argument("--key", default="logits", help="tensor name in --logits (default: logits)")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--max-shard-bytes", type=int,
                        help="check the shard split against huggingface_hub at this size")
    args = parser.parse_args()

    import torch
    import transformers

    failures = []
    with open(os.path.join(args.checkpoint_dir, "config.json")) as f:
        olmo3 = json.load(f).get("model_type") == "olmo3"
    config, model = load_checked(args.checkpoint_dir, failures,
                                 config_class="Olmo3Config" if olmo3 else "Olmo2Config")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print(f"config: {type(config).__name__}, model: {type(model).__name__}, dtype {config.dtype}")

    params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {params}")

    index_path = os.path.join(args.checkpoint_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        state = model.state_dict()
        total = sum(t.numel() * t.element_size() for t in state.values())
        print(f"index: {len(set(index['weight_map'].values()))} shards, "
              f"total_size {index['metadata']['total_size']} (state dict {total} bytes)")
        if index["metadata"]["total_size"] != total:
            failures.append("index total_size differs from the state dict's bytes")
        if set(index["weight_map"]) != set(state):
            failures.append("index weight_map names differ from the state dict")
        if args.max_shard_bytes:
            from huggingface_hub import split_torch_state_dict_into_shards
            split = split_torch_state_dict_into_shards(
                state, filename_pattern="model{suffix}.safetensors", max_shard_size=args.max_shard_bytes)
            if split.tensor_to_filename != index["weight_map"]:
                failures.append("shard split differs from huggingface_hub's")
            else:
                print(f"shard split identical to huggingface_hub's at {args.max_shard_bytes} bytes")
    elif args.max_shard_bytes:
        print("single file model.safetensors: no index to compare")

    ids = torch.tensor([[int(x) for x in args.ids.split(",") if x.strip()]], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    print(f"logits: shape {list(logits.shape)}, mean {logits.mean().item():.6g}, "
          f"std {logits.std().item():.6g}, max |x| {logits.abs().max().item():.6g}, "
          f"argmax {logits.argmax(-1).tolist()}")

    if args.logits:
        from safetensors.torch import load_file
        expected = load_file(args.logits)
        if args.key not in expected:
            failures.append(f"{args.logits} has no tensor {args.key} (has {sorted(expected)})")
        else:
            ref = expected[args.key].float()
            if list(ref.shape) != list(logits.shape):
                failures.append(f"{args.key} has shape {list(ref.shape)}, logits {list(logits.shape)}")
            else:
                diff = (logits - ref).abs().max().item()
                print(f"max abs diff vs {args.logits}:{args.key}: {diff:.3g}")
                if not diff <= args.tolerance:
                    failures.append(f"max abs diff {diff:.3g} > {args.tolerance:g}")

    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
