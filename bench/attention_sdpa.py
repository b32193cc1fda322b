"""PyTorch's scaled_dot_product_attention(is_causal=True) on the shapes of
bench/attention_bench.cpp, one line per case in its format; bench/attention_vs_sdpa.sh
alternates the two (bench/README.md, "Prefill attention").

  attention_sdpa.py prefill T ACT [REPS] [HEADS] [KV_HEADS] [HD] --threads N
  attention_sdpa.py decode SEQS CTX ACT [REPS] [HEADS] [KV_HEADS] [HD] --threads N
"""
import argparse
import sys
import time

import torch


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["prefill", "decode"])
    p.add_argument("sizes", nargs="+")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    s = a.sizes
    if a.mode == "prefill":
        seqs, length, act, rest = 1, int(s[0]), s[1], s[2:]
    else:
        seqs, length, act, rest = int(s[0]), int(s[1]), s[2], s[3:]
    if act not in ("f32", "bf16"):
        print(f"attention_sdpa.py: ACT {act}: expected f32 or bf16", file=sys.stderr)
        return 1
    reps = int(rest[0]) if len(rest) > 0 else 3
    heads = int(rest[1]) if len(rest) > 1 else 16
    kv = int(rest[2]) if len(rest) > 2 else heads
    hd = int(rest[3]) if len(rest) > 3 else 128
    dtype = torch.bfloat16 if act == "bf16" else torch.float32
    g = torch.Generator().manual_seed(1)
    rows = length if a.mode == "prefill" else 1
    q = torch.randn(seqs, heads, rows, hd, generator=g).to(dtype)
    k = torch.randn(seqs, kv, length, hd, generator=g).to(dtype)
    v = torch.randn(seqs, kv, length, hd, generator=g).to(dtype)
    # Decode: one query sees every key (is_causal would align it with key 0).
    causal = a.mode == "prefill"
    gqa = {"enable_gqa": True} if kv != heads else {}

    def call():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)

    with torch.inference_mode():
        call()  # warm-up
        best_wall = best_cpu = float("inf")
        for _ in range(reps):
            c0, w0 = time.process_time(), time.perf_counter()
            call()
            best_wall = min(best_wall, time.perf_counter() - w0)
            best_cpu = min(best_cpu, time.process_time() - c0)
    pairs = sum(t + 1 for t in range(length)) if causal else seqs * length
    gflop = pairs * heads * hd * 4e-9
    key = f"T={length}" if causal else f"seqs={seqs}"
    print(f"sdpa {a.mode} {key} ctx={length} act={act} heads={heads}/{kv} hd={hd} threads={a.threads} "
          f"path=torch-{torch.__version__} wall_ms={best_wall * 1e3:.3f} cpu_ms={best_cpu * 1e3:.3f} "
          f"gflops={gflop / best_wall:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
