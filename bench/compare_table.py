"""The table of bench/compare_pytorch.sh (bench/README.md, "Against PyTorch"):

    compare_table.py RESULTS.jsonl MACHINE.txt

RESULTS holds the JSON lines of every run, each tagged with its side (ours, torch,
llama) and round. Each row is a figure's mean over the rounds, for ours, PyTorch and
llama.cpp (bf16 rows: its bf16 GGUF; int8: Q8_0; int4: Q4_K_M), and "ours ÷ best": ours
over the best of the others (above 1: ours is faster). Under each decode row of ours:
its % of the read-bandwidth bound (bytes read per token ÷ read bandwidth) and where the
step's time went. Then the paths each side ran.
"""
import json
import sys
from collections import defaultdict

SIDES = ("ours", "torch", "llama")
LLAMA_NAME = {"bf16": "bf16 GGUF", "int8": "Q8_0", "int4": "Q4_K_M"}

rows = [json.loads(l) for l in open(sys.argv[1])]
print()
print(open(sys.argv[2]).read().rstrip())
info = next((d for d in rows if d.get("kind") == "info"), {})
vals = defaultdict(lambda: {s: [] for s in SIDES})
order = []


def put(key, side, v):
    if key not in vals:
        order.append(key)
    vals[key][side].append(v)


# The MFU denominator, one for every row and both sides: the best fp32 2048^3 product
# measured in this run, OpenBLAS sgemm in our train runs or torch.mm.
ours_peak = max([d["sgemm_peak_gflops"] for d in rows if d.get("bench") == "olmo2_train_bench"] or [0])
torch_peak = next((d["mm_2048_fp32_gflops"] for d in rows if d.get("kind") == "info"), 0)
peak = max(ours_peak, torch_peak) if ours_peak else 0
decode_extra = defaultdict(list)  # row key -> our decode JSON lines
paths, llama_types = defaultdict(set), {}
for d in rows:
    k, side, p = d.get("kind"), d["side"], d.get("weights") or d.get("precision")
    if d.get("bench") == "olmo2_train_bench":
        k = "train"
    if k == "prefill":
        put(f"prefill T={d['tokens']} {p} (tokens/s)", side, d["tokens_per_s"])
    elif k == "decode":
        key = f"decode {d['steps']} steps {p} (tokens/s)"
        put(key, side, d["tokens_per_s"])
        if side == "ours":
            decode_extra[key].append(d)
    elif k == "train":
        label = d.get("label", d.get("size", d.get("config")))
        put(f"train {label} {p} (tokens/s)", side, d["tokens_per_s"])
        if peak:
            put(f"train {label} {p} (MFU %)", side, 100.0 * d["model_flops_per_step"] / d["step_s"] * 1e-9 / peak)
    if side == "ours" and "product_path" in d and p:
        paths[p].add(d["product_path"])
    if side == "llama" and k in ("prefill", "decode"):
        llama_types[d["llama_type"]] = d

mean = lambda v: sum(v) / len(v) if v else float("nan")
fmt = lambda x: f"{x:.4g}" if x == x else "-"
spread = lambda v: f"{min(v):.4g}..{max(v):.4g}" if len(v) > 1 else ""
print()
print(f"{'row':<36} {'ours':>9} {'PyTorch':>9} {'llama.cpp':>10} {'ours÷best':>10}   spread over rounds (ours; PyTorch; llama.cpp)")
for key in order:
    v = vals[key]
    m = {s: mean(v[s]) for s in SIDES}
    others = [m[s] for s in ("torch", "llama") if v[s]]
    ratio = m["ours"] / max(others) if v["ours"] and others and max(others) else float("nan")
    p = key.split()[-2]
    llama = fmt(m["llama"]) + (f" {LLAMA_NAME[p]}" if v["llama"] and p in LLAMA_NAME and p != "bf16" else "")
    print(f"{key:<36} {fmt(m['ours']):>9} {fmt(m['torch']):>9} {llama:>10} {fmt(ratio):>10}   "
          f"{spread(v['ours'])}; {spread(v['torch'])}; {spread(v['llama'])}")
    if key in decode_extra:
        ds = decode_extra[key]
        b = mean([x["bound_tokens_per_s"] for x in ds])
        if "read_bandwidth_bytes_per_s" in ds[0]:
            print(f"{'  ours, % of read-bandwidth bound':<36} {100 * m['ours'] / b:>8.1f}%"
                  f"   bound {b:.3g} tokens/s = {mean([x['read_bandwidth_bytes_per_s'] for x in ds]) * 1e-9:.1f} GB/s read"
                  f" / {mean([x['bytes_per_token'] for x in ds]) * 1e-9:.3f} GB per token"
                  f" ({ds[0]['weight_bytes_per_token'] * 1e-9:.3f} weights + {mean([x['kv_bytes_per_token'] for x in ds]) * 1e-6:.1f} MB KV)")
        if ds[-1].get("breakdown"):
            print(f"{'  ours, decode step':<36} {ds[-1]['breakdown']}")
print()
if peak:
    print(f"MFU = model FLOPs/s / {peak:.1f} GFLOP/s for every row and both sides: the best fp32 2048^3 product of"
          f" this run (OpenBLAS sgemm in our train runs {ours_peak:.1f}, torch.mm {torch_peak:.1f})")
for p in sorted(paths):
    print(f"ours, {p} products: {'; '.join(sorted(paths[p]))}")
if any("(Prescott)" in x for v in paths.values() for x in v):
    print("warning: OpenBLAS runs its Prescott (SSE3) kernels: it does not know this CPU. Its sgemm can then be several times"
          " slower than with OPENBLAS_CORETYPE=SkylakeX on an AVX-512 machine; the fp32 rows and the MFU peak"
          " measure that. Set OPENBLAS_CORETYPE to compare at the machine's level")
if info:
    bf = info.get("onednn_bf16_linear") or {}
    print(f"PyTorch {info['torch']}, transformers {info['transformers']}, {info['threads']} threads, ATen CPU "
          f"capability {info['cpu_capability']}; bf16 linear: oneDNN {bf.get('primitive') or 'not used'}"
          f" (isa {bf.get('isa') or '?'}); fp32 linear: {'MKL' if info.get('mkl') else 'BLAS'}"
          f"{' / oneDNN ' + info['onednn_fp32_linear']['primitive'] if info.get('onednn_fp32_linear') else ''};"
          f" torch.mm 2048^3: fp32 {info['mm_2048_fp32_gflops']:.1f}, bf16 {info['mm_2048_bf16_gflops']:.1f} GFLOP/s")
attn = sorted({d.get("attn") for d in rows if d["side"] == "torch" and d.get("attn")})
if attn:
    print(f"PyTorch attention: {', '.join(attn)}")
for t, d in sorted(llama_types.items()):
    print(f"llama.cpp {t}: llama-bench (build {d.get('build_commit')}), {d.get('model_type')},"
          f" {d.get('model_size', 0) / 1e9:.3f} GB, {d.get('threads')} threads, CPU {d.get('cpu_info')}")
print("ratios above 1: ours is faster")
