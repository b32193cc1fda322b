#!/usr/bin/env python3
"""Olmo 3 config.json fixtures for olmo2's ModelConfig (docs/architecture.md §3).

Run with the pinned reference environment:
    /opt/olmo2-fixtures-venv/bin/python tests/model/make_olmo3_config_fixtures.py
Writes tests/model/fixtures/olmo3_configs.json: per case a config.json as a user may hand
olmo2 (`input`: transformers 4's spelling, 5's, or one that leaves fields to their
defaults) and `saved`: what transformers 5.24 makes of it — Olmo3Config.from_dict, then
the JSON save_pretrained writes (`to_json_string`, the difference from the defaults,
less `transformers_version`). The C++ test
reads `input` and requires ModelConfig::to_json to write `saved`'s values for every key
`saved` has, so transformers reads olmo2's config.json back as this same model. The
script checks that transformers reads `saved` back to itself.
"""
import json
import os

import transformers
from transformers import Olmo3Config

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "olmo3_configs.json")

# The released Olmo 3 7B config.json as allenai publishes it (transformers 4.57 field
# names; sizes as in tests/golden/fixtures/configs/olmo3-7b).
RELEASED_7B_4X = {
    "architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": None, "eos_token_id": 100257, "pad_token_id": 100277,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008,
    "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 8,
    "max_position_embeddings": 65536, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "rms_norm_eps": 1e-06, "rope_theta": 500000,
    "rope_scaling": {"attention_factor": 1.2079441541679836, "beta_fast": 32.0, "beta_slow": 1.0,
                     "factor": 8.0, "original_max_position_embeddings": 8192, "rope_type": "yarn"},
    "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "use_cache": True, "vocab_size": 100278,
}

TINY = {"architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "vocab_size": 128,
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
        "eos_token_id": 3, "pad_token_id": 1, "bos_token_id": None}

CASES = {
    "released-7b-transformers4": RELEASED_7B_4X,
    # transformers 5's spelling: RoPE nested per layer type, another layer pattern and θ.
    "tiny-transformers5": dict(TINY, layer_types=["sliding_attention", "full_attention"] * 2,
                               sliding_window=16,
                               rope_parameters={
                                   "full_attention": {"rope_type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 64,
                                                      "beta_fast": 16, "beta_slow": 2,
                                                      "rope_theta": 10000.0},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    # Everything left to Olmo3Config: every 4th layer full, window 4096, plain RoPE at 500000.
    "tiny-defaults": dict(TINY),
    # YaRN without original_max_position_embeddings (max_position_embeddings) or betas,
    # the old "type" key; sliding layers' RoPE left out.
    "tiny-yarn-defaults": dict(TINY, rope_parameters={"full_attention": {"type": "yarn", "factor": 2.0}}),
}


def main():
    cases = []
    for name, given in CASES.items():
        cfg = Olmo3Config.from_dict(json.loads(json.dumps(given)))
        saved = json.loads(cfg.to_json_string())  # save_pretrained: the diff against defaults
        saved.pop("transformers_version", None)
        again = json.loads(Olmo3Config.from_dict(json.loads(json.dumps(saved))).to_json_string())
        again.pop("transformers_version", None)
        assert again == saved, name
        cases.append({"name": name, "input": given, "saved": saved})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"transformers": transformers.__version__, "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
