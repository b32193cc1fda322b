#!/usr/bin/env python3
"""Throughput of the `tokenizers` library (the reference) on a JSONL corpus, for
olmo2_tokenizer_bench: prints one JSON line {"threads", "mb_per_s", "tokens"}.
Usage: tokenizers_throughput.py TOKENIZER_JSON CORPUS_JSONL THREADS REPEATS
Threads: RAYON_NUM_THREADS (set before import) with encode_batch; 1 thread uses
encode_batch too, so both sides pay the same per-call overhead."""
import json
import os
import sys
import time

tok_path, corpus, threads, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.environ["RAYON_NUM_THREADS"] = str(threads)
os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
from tokenizers import Tokenizer  # noqa: E402

tok = Tokenizer.from_file(tok_path)
docs = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
nbytes = sum(len(d.encode("utf-8")) for d in docs)
best, tokens = float("inf"), 0
for _ in range(repeats):
    t0 = time.perf_counter()
    out = tok.encode_batch(docs, add_special_tokens=False)
    best = min(best, time.perf_counter() - t0)
    tokens = sum(len(e.ids) for e in out)
print(json.dumps({"threads": threads, "mb_per_s": nbytes / 1e6 / best, "tokens": tokens}))
