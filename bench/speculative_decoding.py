#!/usr/bin/env python3
"""Client side of bench/speculative_decoding.sh (bench/README.md, "Speculative decoding";
docs/architecture.md §8 for what the server does). Standard library only.

  head PROMPTS.json N OUT.json       the first N prompts
  prompts FORTUNES.jsonl OUT_DIR     writes the workloads (JSON lists of prompt strings):
                                     summarise.json, fortunes.json (held out), distill.json
  corpus PORT PROMPTS.json OUT.npy   the target's greedy continuations of the prompts, as
                                     `olmo2 train` reads data: prompt ids + output ids + EOS
                                     per document, uint32 .npy
  measure PORT PROMPTS.json OUT.jsonl LABEL...   one streamed greedy request at a time;
                                     appends one JSON line per request
  report RESULTS.jsonl               the markdown table of bench/README.md
"""
import http.client
import json
import statistics
import struct
import sys
import time

EOS = 100257  # dolma2's <|endoftext|>, what `olmo2 tokenize` puts after every document


def post(port, path, body, timeout=7200):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        raise SystemExit(f"POST {path}: HTTP {r.status}: {data[:500]!r}")
    return json.loads(data)


def counters(port):
    """The two speculation counters of GET /metrics (0 when the server has none)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    out = {"proposed": 0.0, "accepted": 0.0}
    for line in c.getresponse().read().decode().splitlines():
        name, _, value = line.partition(" ")
        if name == "olmo2_serve_spec_proposed_tokens_total":
            out["proposed"] = float(value)
        elif name == "olmo2_serve_spec_accepted_tokens_total":
            out["accepted"] = float(value)
    return out


def cmd_prompts(fortunes, out_dir, n_summarise=8, n_heldout=8, n_distill=2048):
    docs = [json.loads(line)["text"] for line in open(fortunes, encoding="utf-8")]
    docs = [d.strip() for d in docs if 80 <= len(d.strip()) <= 600]
    # Held-out fortunes come from the end, the distillation prompts from the start: the
    # draft never saw the measured prompts.
    heldout = docs[-n_heldout:]
    distill = [d[:160] for d in docs[:n_distill]]
    summarise = []
    for i in range(n_summarise):
        passage, j = "", len(docs) // 2 + 40 * i
        while len(passage) < 700:
            passage += docs[j] + "\n\n"
            j += 1
        summarise.append("Read the passage below.\n\nPassage:\n" + passage.strip() +
                         "\n\nSummarise the passage above, repeating its key sentences.\nSummary:")
    for name, prompts in (("summarise", summarise), ("fortunes", heldout), ("distill", distill)):
        with open(f"{out_dir}/{name}.json", "w", encoding="utf-8") as f:
            json.dump(prompts, f, indent=0)


def write_npy_u32(path, ids):
    header = "{'descr': '<u4', 'fortran_order': False, 'shape': (%d,), }" % len(ids)
    header += " " * (63 - (len(header) + 10) % 64) + "\n"  # 10-byte preamble, 64-aligned
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{len(ids)}I", *ids))


def cmd_corpus(port, prompts_file, out, max_tokens=96, batch=64):
    prompts = json.load(open(prompts_file, encoding="utf-8"))
    ids, t0 = [], time.time()
    for b in range(0, len(prompts), batch):
        chunk = [post(port, "/tokenize", {"prompt": p})["tokens"] for p in prompts[b:b + batch]]
        r = post(port, "/v1/completions", {"prompt": chunk, "max_tokens": max_tokens, "temperature": 0,
                                           "ignore_eos": True, "logprobs": 0,
                                           "return_tokens_as_token_ids": True})
        for ch in sorted(r["choices"], key=lambda c: c["index"]):
            out_ids = [int(t.split(":", 1)[1]) for t in ch["logprobs"]["tokens"]]
            ids += chunk[ch["index"]] + out_ids + [EOS]
        print(f"corpus: {b + len(chunk)}/{len(prompts)} prompts, {len(ids)} tokens, "
              f"{time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    write_npy_u32(out, ids)


def stream_one(port, prompt, max_tokens):
    """One streamed greedy request; client-side times (s) from the send."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=7200)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {r.read()[:500]!r}")
    ttft, events, text, usage = None, 0, [], None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            if ch.get("text"):
                if ttft is None:
                    ttft = time.perf_counter() - t0
                events += 1
                text.append(ch["text"])
    e2e = time.perf_counter() - t0
    return {"ttft_s": ttft, "e2e_s": e2e, "text_events": events, "text": "".join(text),
            "completion_tokens": usage["completion_tokens"], "prompt_tokens": usage["prompt_tokens"],
            "usage": usage}


def cmd_measure(port, prompts_file, out, workload, mode, rnd, max_tokens):
    prompts = json.load(open(prompts_file, encoding="utf-8"))
    with open(out, "a", encoding="utf-8") as f:
        for i, p in enumerate(prompts):
            before = counters(port)
            r = stream_one(port, p, max_tokens)
            after = counters(port)
            r.update(workload=workload, mode=mode, round=rnd, prompt=i,
                     proposed=after["proposed"] - before["proposed"],
                     accepted=after["accepted"] - before["accepted"])
            f.write(json.dumps(r) + "\n")
            f.flush()
            dec = r["completion_tokens"] - 1
            print(f"  {workload} {mode} round {rnd} prompt {i}: {dec / (r['e2e_s'] - r['ttft_s']):.2f} "
                  f"decode tok/s, TTFT {r['ttft_s']:.2f} s, accepted {r['accepted']:.0f}/{r['proposed']:.0f}",
                  file=sys.stderr, flush=True)


def decode_rate(rows):
    """Σ (completion_tokens − 1) / Σ (end-to-end − TTFT): tokens after the first, per second."""
    return sum(r["completion_tokens"] - 1 for r in rows) / sum(r["e2e_s"] - r["ttft_s"] for r in rows)


def cmd_report(results):
    rows = [json.loads(line) for line in open(results, encoding="utf-8")]
    keys = sorted({(r["workload"], r["mode"]) for r in rows}, key=lambda k: (k[0], k[1] != "plain", k[1]))
    rate = {}
    for wl, mode in keys:
        for rnd in sorted({r["round"] for r in rows}):
            sel = [r for r in rows if (r["workload"], r["mode"], r["round"]) == (wl, mode, rnd)]
            if sel:
                rate.setdefault((wl, mode), {})[rnd] = decode_rate(sel)
    print("| workload | mode | decode tok/s: median (range over rounds) | speed-up: ratio of medians "
          "(range of per-round ratios) | acceptance (accepted ÷ proposed) | tokens per target pass | "
          "text events per request | same text as plain |")
    print("|---|---|---|---|---|---|---|---|")
    for wl, mode in keys:
        per = rate[(wl, mode)]
        med = statistics.median(per.values())
        sel = [r for r in rows if (r["workload"], r["mode"]) == (wl, mode)]
        base = rate.get((wl, "plain"), {})
        if mode == "plain" or not base:
            speed = "—"
        else:
            ratios = [per[k] / base[k] for k in per if k in base]
            speed = (f"{med / statistics.median(base.values()):.2f}× "
                     f"({min(ratios):.2f}–{max(ratios):.2f})")
        prop, acc = sum(r["proposed"] for r in sel), sum(r["accepted"] for r in sel)
        dec = sum(r["completion_tokens"] - 1 for r in sel)
        accept = f"{acc / prop:.3f} ({acc:.0f} / {prop:.0f})" if prop else "—"
        # Each target pass after the prefill yields its accepted drafts plus one token of its own.
        tpp = f"{dec / (dec - acc):.2f}" if mode != "plain" else "1"
        events = statistics.mean(r["text_events"] for r in sel)
        # Greedy answers do not depend on the round: every request of the prompt, plain ones
        # included, is compared with the first plain answer.
        plain_text = {}
        for r in rows:
            if (r["workload"], r["mode"]) == (wl, "plain"):
                plain_text.setdefault(r["prompt"], r["text"])
        cmp = [r["text"] == plain_text[r["prompt"]] for r in sel if r["prompt"] in plain_text]
        same = f"{sum(cmp)} of {len(cmp)}"
        print(f"| {wl} | {mode} | {med:.2f} ({min(per.values()):.2f}–{max(per.values()):.2f}) | {speed} | "
              f"{accept} | {tpp} | {events:.1f} | {same} |")
    n = {(r["round"]) for r in rows}
    print(f"\n{len(n)} rounds; {max(r['completion_tokens'] for r in rows)} tokens per request "
          f"(greedy, ignore_eos), streamed; decode tok/s = Σ(completion tokens − 1) ÷ Σ(end-to-end − TTFT).")


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "head":
        json.dump(json.load(open(args[0], encoding="utf-8"))[:int(args[1])], open(args[2], "w", encoding="utf-8"))
    elif cmd == "prompts":
        cmd_prompts(*args)
    elif cmd == "corpus":
        cmd_corpus(int(args[0]), args[1], args[2], int(args[3]), int(args[4]))
    elif cmd == "measure":
        cmd_measure(int(args[0]), args[1], args[2], args[3], args[4], int(args[5]), int(args[6]))
    elif cmd == "report":
        cmd_report(args[0])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
