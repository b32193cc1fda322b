#!/usr/bin/env python3
"""Quality of quantized weights through `olmo2 serve` (bench/quantized_quality.sh).

For each format (bf16, --weights int8, --weights int4) one server is started on the
checkpoint, and through /v1/completions:
  - perplexity: every held-out document (up to --docs, each cut to --max-doc-tokens
    tokens) is sent with echo + logprobs + max_tokens 0; the prompt tokens' logprobs
    (the first is null) give exp(−mean logprob) over all of them;
  - greedy agreement: --prompts held-out prompts (each a document's first 12 tokens)
    get --new-tokens greedy tokens (temperature 0, ignore_eos); the agreement with bf16 is
    the fraction of prompts whose tokens equal bf16's, and the fraction of tokens equal up
    to the first difference (tokens after a difference are conditioned on other text).
The held-out text is tokenized by the server's /tokenize. Only the standard library:
urllib and subprocess."""
import argparse
import json
import math
import os
import subprocess
import sys
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def tokenize(base, text):
    return post(base + "/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]


def serve(args, extra, port_file):
    if os.path.exists(port_file):
        os.remove(port_file)
    cmd = [args.olmo2, "serve", "--model", args.model, "--port", "0", "--port-file", port_file,
           "--precision", "bf16", "--kv-cache-memory", "256MiB", "--max-batch-tokens", "1024"] + extra
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    start = time.time()
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.time() - start > 300:
            proc.kill()
            sys.exit("serve did not start: " + " ".join(cmd) + "\n" + (proc.stderr.read() or ""))
        time.sleep(0.2)
    time.sleep(0.2)
    with open(port_file) as f:
        address = f.read().split()[0]
    return proc, "http://" + address


def measure(args, docs, prompts, extra):
    proc, base = serve(args, extra, os.path.join(args.workdir, "port"))
    try:
        total, count = 0.0, 0
        for ids in docs:
            r = post(base + "/v1/completions", {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 0})
            for lp in r["choices"][0]["logprobs"]["token_logprobs"][1:]:
                total += lp
                count += 1
        outputs = []
        for i in range(0, len(prompts), 16):  # a batch of 16 prompts per request
            r = post(base + "/v1/completions", {"prompt": prompts[i:i + 16], "max_tokens": args.new_tokens,
                                                "temperature": 0, "ignore_eos": True, "logprobs": 0})
            choices = sorted(r["choices"], key=lambda c: c["index"])
            outputs += [c["logprobs"]["tokens"] for c in choices]
        return math.exp(-total / count), count, outputs
    finally:
        proc.terminate()
        proc.wait()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--olmo2", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--heldout", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--docs", type=int, default=200)
    p.add_argument("--max-doc-tokens", type=int, default=256)
    p.add_argument("--prompts", type=int, default=200)
    p.add_argument("--prompt-tokens", type=int, default=12)
    p.add_argument("--new-tokens", type=int, default=16)
    args = p.parse_args()
    texts = [json.loads(line)["text"] for line in open(args.heldout)]
    proc, base = serve(args, [], os.path.join(args.workdir, "port"))
    try:
        ids = [tokenize(base, t) for t in texts[:max(args.docs, 2 * args.prompts)]]
    finally:
        proc.terminate()
        proc.wait()
    docs = [d[:args.max_doc_tokens] for d in ids[:args.docs] if len(d) >= 2]
    prompts = [d[:args.prompt_tokens] for d in ids if len(d) >= args.prompt_tokens][:args.prompts]
    results = {}
    for name, extra in (("bf16", []), ("int8", ["--weights", "int8"]), ("int4", ["--weights", "int4"])):
        results[name] = measure(args, docs, prompts, extra)
        print(f"{name}: perplexity {results[name][0]:.3f} over {results[name][1]} held-out tokens", flush=True)
    ref = results["bf16"][2]
    for name in ("int8", "int4"):
        out = results[name][2]
        same = sum(a == b for a, b in zip(out, ref))
        prefix = 0
        for a, b in zip(out, ref):
            k = 0
            while k < len(a) and k < len(b) and a[k] == b[k]:
                k += 1
            prefix += k
        print(f"{name}: greedy agreement with bf16: {same}/{len(ref)} prompts identical over {args.new_tokens} "
              f"tokens; {prefix / (len(ref) * args.new_tokens):.1%} of tokens before the first difference")


if __name__ == "__main__":
    main()
