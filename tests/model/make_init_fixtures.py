#!/usr/bin/env python3
"""Known answers of olmo2's deterministic initialisation, for tests/model/test_init.cpp.

A transcription, in pure Python (standard library only), of the algorithm that
runtime/model/init.h documents for init_value, written from that comment and from
core/hash.h's FNV-1a and SplitMix64 descriptions, not from the C++ code; and of
Parameter::global_index as runtime/model/parameters.h documents it (rows
[shard_begin, shard_end) of dimension shard_dim of the full tensor; rows past the full
size are vocab padding, index -1). docs/architecture.md §7 (training semantics: the
initial model is the same in every layout) and §10 (tests and fixtures).

Run from anywhere (no dependencies; deterministic, so a rerun rewrites the same bytes):
    python3 tests/model/make_init_fixtures.py
It rewrites tests/model/fixtures/init_known_answers.json:
  hashes        fnv1a64 of strings and splitmix64_mix of integers, as "0x…" hex
  values        {seed, name, g, std, value, attempts, first_z}: init_value(seed, name,
                g, std) as a double (JSON's shortest round-trip form), how many
                Box-Muller attempts it took (> 1: the first draws had |z| > 3 and were
                rejected) and the first attempt's z (what an implementation without the
                rejection would give, std * first_z)
  shards        a parameter held by one rank: {name, seed, std, full_shape, shard_dim,
                shard_begin, shard_end, local_shape, global_index: [...], f32: [...]},
                every local element's global index and its value rounded to f32 (0 on
                padding)
"""
import json
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "init_known_answers.json")

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # the SplitMix64 increment
ELEMENT = 0xD1B54A32D192ED03  # init.h: s = key XOR (g * ELEMENT)
MAX_ATTEMPTS = 64


def fnv1a64(s):
    """FNV-1a 64 of the UTF-8 bytes of s: offset basis 0xcbf29ce484222325, prime 0x100000001b3."""
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h ^= b
        h = (h * 0x100000001B3) & M64
    return h


def splitmix64_mix(z):
    """z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def draws(seed, name, g):
    """The Box-Muller z of each attempt j = 0, 1, … for element g of parameter name."""
    key = splitmix64_mix((seed ^ fnv1a64(name)) & M64)
    s = key ^ ((g * ELEMENT) & M64)

    def r(k):  # the k-th output (k = 1, 2, …) of SplitMix64 seeded with s
        return splitmix64_mix((s + k * GOLDEN) & M64)

    for j in range(MAX_ATTEMPTS):
        u1 = ((r(2 * j + 1) >> 11) + 1) * 2.0 ** -53  # (0, 1]
        u2 = (r(2 * j + 2) >> 11) * 2.0 ** -53  # [0, 1)
        yield math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def init_value(seed, name, g, std):
    """(value, attempts, first z): std * the first z with |z| <= 3, or 0 after 64 attempts."""
    first = None
    for j, z in enumerate(draws(seed, name, g)):
        if first is None:
            first = z
        if abs(z) <= 3.0:
            return std * z, j + 1, first
    return 0.0, MAX_ATTEMPTS, first


def f32(x):
    """x rounded to the nearest float32 (ties to even), back as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def global_index(full_shape, shard_dim, shard_begin, local_shape, i):
    """Index in the full row-major tensor of local element i; -1 on a padding row."""
    idx = []
    rest = i
    for n in reversed(local_shape):
        idx.append(rest % n)
        rest //= n
    idx.reverse()
    if shard_dim >= 0:
        idx[shard_dim] += shard_begin
        if idx[shard_dim] >= full_shape[shard_dim]:
            return -1
    g = 0
    for d, n in enumerate(full_shape):
        g = g * n + idx[d]
    return g


UP = "model.layers.0.mlp.up_proj.weight"
NAMES = [UP, "model.embed_tokens.weight", "lm_head.weight", "model.layers.17.self_attn.k_proj.weight"]
SEEDS = [0, 1234, 7, M64]  # M64: every bit of the seed takes part in seed XOR fnv1a64(name)
INDICES = [0, 1, 2, 3, 1000000007, (1 << 40) + 3]


def first_rejections(seed, name, want, at_least=1):
    """The first `want` indices g >= 0 whose value took more than `at_least` attempts."""
    found, g = [], 0
    while len(found) < want:
        _, attempts, _ = init_value(seed, name, g, 1.0)
        if attempts > at_least:
            found.append(g)
        g += 1
    return found


def value_entry(seed, name, g, std):
    v, attempts, first = init_value(seed, name, g, std)
    return {"seed": seed, "name": name, "g": g, "std": std, "value": v, "attempts": attempts, "first_z": first}


def shard_entry(name, seed, std, full_shape, shard_dim, begin, end, local_shape):
    n = 1
    for d in local_shape:
        n *= d
    gi = [global_index(full_shape, shard_dim, begin, local_shape, i) for i in range(n)]
    vals = [0.0 if g < 0 else f32(init_value(seed, name, g, std)[0]) for g in gi]
    return {"name": name, "seed": seed, "std": std, "full_shape": full_shape, "shard_dim": shard_dim,
            "shard_begin": begin, "shard_end": end, "local_shape": local_shape,
            "global_index": gi, "f32": vals}


def main():
    hashes = {
        "fnv1a64": {s: f"0x{fnv1a64(s):016x}" for s in ["", "a", "model.norm.weight", UP]},
        "splitmix64_mix": {f"0x{x:016x}": f"0x{splitmix64_mix(x):016x}" for x in [0, 1, GOLDEN, M64]},
    }
    values = []
    for seed in SEEDS:
        for name in NAMES:
            for g in INDICES:
                values.append(value_entry(seed, name, g, 0.02))
            for g in first_rejections(seed, name, 2):  # |z| > 3 on the first attempt
                values.append(value_entry(seed, name, g, 0.02))
    # Two attempts rejected in a row (probability 0.0027² per element), and other stds.
    for g in first_rejections(1234, UP, 1, at_least=2):
        values.append(value_entry(1234, UP, g, 0.02))
    for g in [5, 406]:
        values.append(value_entry(1234, UP, g, 1.0))
        values.append(value_entry(1234, UP, g, 0.5))
    assert sum(v["attempts"] > 1 for v in values) >= 2 * len(SEEDS) * len(NAMES)
    assert any(v["attempts"] > 2 for v in values)

    shards = [
        # Column shard of a row-parallel weight: columns [4, 8) of [6, 10].
        shard_entry("model.layers.2.self_attn.o_proj.weight", 42, 0.02, [6, 10], 1, 4, 8, [6, 4]),
        # Row shard of a column-parallel weight: rows [3, 6) of [8, 5].
        shard_entry("model.layers.1.mlp.gate_proj.weight", 9, 0.02, [8, 5], 0, 3, 6, [3, 5]),
        # Vocab shard with padding: vocab 5 padded to 8 over two ranks, this one rows [4, 8).
        shard_entry("lm_head.weight", 3, 0.02, [5, 4], 0, 4, 8, [4, 4]),
    ]
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8", newline="\n") as f:
        json.dump({"source": "tests/model/make_init_fixtures.py", "hashes": hashes, "values": values,
                   "shards": shards}, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(values)} values "
          f"({sum(v['attempts'] > 1 for v in values)} after a rejection), {len(shards)} shards")


if __name__ == "__main__":
    main()
