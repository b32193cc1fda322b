"""llama.cpp's rows of bench/compare_pytorch.sh (bench/README.md, "Against PyTorch"):
runs llama-bench on one GGUF file and prints its figures as the bench's JSON lines.

    llama_cpp_rows.py --bench BIN/llama-bench --model FILE.gguf --format q8_0 \
        --precision int8 --threads 2 [--prefill 128,512] [--reps 3] \
        [--decode-prompt 128] [--decode-steps 64]

prefill: llama-bench -p T (one sequence of T tokens, its default batch sizes);
decode: llama-bench -n STEPS -d PROMPT (STEPS batch-1 generated tokens after a
PROMPT-token context, as our decode row measures). Each figure is llama-bench's mean over
--reps repetitions (after its warm-up run). Prints one JSON line per figure
("bench": "llama-bench", kind prefill/decode, tokens_per_s, precision, llama_type) and
a human line each; exits non-zero with llama-bench's error when it fails.
"""
import argparse
import json
import subprocess
import sys


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-3000:])
        sys.exit(f"llama_cpp_rows: {' '.join(cmd)} exited {p.returncode}")
    return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--format", required=True, help="the GGUF's weight type, e.g. bf16, q8_0, q4_k_m")
    ap.add_argument("--precision", required=True, help="the row it stands in: bf16, int8, int4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", default="128,512")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--decode-prompt", type=int, default=128)
    ap.add_argument("--decode-steps", type=int, default=64)
    a = ap.parse_args()
    common = [a.bench, "-m", a.model, "-t", str(a.threads), "-r", str(a.reps), "-o", "jsonl"]
    tests = []
    prefill = [t for t in a.prefill.split(",") if t]
    if prefill:
        tests += run(common + ["-p", ",".join(prefill), "-n", "0"])
    if a.decode_steps > 0:
        tests += run(common + ["-p", "0", "-n", str(a.decode_steps), "-d", str(a.decode_prompt)])
    for t in tests:
        base = {"bench": "llama-bench", "precision": a.precision, "llama_type": a.format,
                "model_type": t.get("model_type"), "model_size": t.get("model_size"),
                "threads": t.get("n_threads"), "build_commit": t.get("build_commit"),
                "cpu_info": t.get("cpu_info"), "runs_ts": t.get("samples_ts"),
                "tokens_per_s": t["avg_ts"], "stddev_tokens_per_s": t.get("stddev_ts")}
        if t["n_gen"] == 0:
            base.update(kind="prefill", tokens=t["n_prompt"])
            what = f"prefill T={t['n_prompt']}"
        else:
            base.update(kind="decode", steps=t["n_gen"], prompt=t.get("n_depth", 0))
            what = f"decode {t['n_gen']} steps after {t.get('n_depth', 0)}"
        print(f"  llama.cpp {a.format} {what}: {t['avg_ts']:.2f} tokens/s (model {t.get('model_type')},"
              f" {t.get('model_size', 0) / 1e9:.3f} GB)")
        print(json.dumps(base))


if __name__ == "__main__":
    main()
