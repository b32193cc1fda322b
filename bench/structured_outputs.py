#!/usr/bin/env python3
"""Server-level cost of structured outputs (bench/structured_outputs.sh; bench/README.md,
"Structured outputs"; docs/architecture.md §8): against a running `olmo2 serve`, streamed
completions with and without a constraint, the modes alternating round after round:

  ttft      time to the first streamed token: plain; a schema never seen before (its
            compile included); the same schema again (the grammar cache's hit)
  step      decode ms per token (first to last streamed token over tokens − 1) at batch 1
            and batch B (B concurrent requests): plain, and the STEP_SCHEMA constraint
            (a string of at least 150 characters: no early EOS)

Prints one JSON object of medians. Standard library only.

Usage: structured_outputs.py BASE_URL [--rounds R] [--batch B] [--max-tokens N] [--modes plain,schema]
"""
import argparse
import concurrent.futures
import json
import statistics
import sys
import time
import urllib.request

PROMPT = "Write a short note about the weather in Lisbon:"
STEP_SCHEMA = {"type": "object", "properties": {"text": {"type": "string", "minLength": 150}},
               "required": ["text"], "additionalProperties": False}


def ttft_schema(i):
    """A schema of the corpus's function-calling kind whose canonical text differs per i."""
    return {"type": "object", "additionalProperties": False, "required": ["location", "unit", "days"],
            "properties": {"location": {"type": "string", "maxLength": 40},
                           "unit": {"enum": ["celsius", "fahrenheit", f"kelvin{i}"]},
                           "days": {"type": "integer", "minimum": 1, "maximum": 10 + i}}}


def stream(base, body):
    """(seconds to the first token, seconds from first to last, tokens) of a streamed completion."""
    request = urllib.request.Request(f"{base}/v1/completions", method="POST",
                                     data=json.dumps(dict(body, stream=True)).encode(),
                                     headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = last = None
    tokens = 0
    with urllib.request.urlopen(request, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                now = time.perf_counter()
                first = first or now
                last = now
                tokens += 1
    if first is None:
        raise RuntimeError(f"no token streamed for {body}")
    return first - t0, last - first, tokens


def body(max_tokens, schema=None):
    b = {"model": "bench", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0}
    if schema is not None:
        b["response_format"] = {"type": "json_schema", "json_schema": {"name": "bench", "schema": schema}}
    return b


def step_ms(base, batch, max_tokens, schema):
    with concurrent.futures.ThreadPoolExecutor(batch) as pool:
        runs = list(pool.map(lambda _: stream(base, body(max_tokens, schema)), range(batch)))
    return statistics.median(1000 * decode / max(tokens - 1, 1) for _, decode, tokens in runs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--modes", default="plain,schema", help="plain alone measures a build without constraints")
    args = p.parse_args()
    modes = args.modes.split(",")
    samples = {}

    def add(key, value):
        samples.setdefault(key, []).append(value)

    stream(args.base, body(4))  # warm up
    for r in range(args.rounds):
        add("ttft_plain_ms", 1000 * stream(args.base, body(1))[0])
        if "schema" in modes:
            add("ttft_new_schema_ms", 1000 * stream(args.base, body(1, ttft_schema(r)))[0])
            add("ttft_cached_schema_ms", 1000 * stream(args.base, body(1, ttft_schema(r)))[0])
        for batch in (1, args.batch):
            add(f"step_plain_b{batch}_ms", step_ms(args.base, batch, args.max_tokens, None))
            if "schema" in modes:
                add(f"step_schema_b{batch}_ms", step_ms(args.base, batch, args.max_tokens, STEP_SCHEMA))
    print(json.dumps({k: round(statistics.median(v), 3) for k, v in samples.items()} | {"rounds": args.rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
