#!/usr/bin/env python3
"""The engine-level corpus test (ctest structured.corpus; docs/architecture.md §8, §10):
runs structured_corpus_walk (test_corpus.cpp) over tests/structured/corpus/ and judges
every output with the reference implementations (corpus.check: jsonschema, re.fullmatch,
membership). Fails when an entry does not compile (unless listed in corpus.REFUSED with the
reason the engine gives; such an entry that compiles fails too; corpus.PENDING
lists entries whose outputs are known to be wrong), when the engine breaks its own contract during a walk (see
test_corpus.cpp), or when an output does not satisfy its entry. Prints the pass counts
per corpus part. Exits 77 (skipped) without jsonschema, unless CI is set.

Usage: run_corpus.py --walker PATH --tokenizer PATH [--python PATH] [--out FILE] [--only PREFIX]
                     [--seeds S] [--slack K,K,...]
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "corpus"))
import corpus  # noqa: E402



def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--walker", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--out", help="keep the walks' JSON lines here")
    p.add_argument("--only", default="")
    p.add_argument("--seeds", default="2")
    p.add_argument("--slack", default="0,12")
    p.add_argument("--python", default="", help="an interpreter with jsonschema, used when this one lacks it")
    args = p.parse_args()
    try:
        import jsonschema  # noqa: F401
        corpus._format_checker()
    except (ImportError, RuntimeError) as e:
        if args.python and os.path.exists(args.python) and not os.environ.get("OLMO2_CORPUS_REEXEC"):
            os.environ["OLMO2_CORPUS_REEXEC"] = "1"
            os.execv(args.python, [args.python] + sys.argv)
        print(f"{'FAILED' if os.environ.get('CI') else 'SKIPPED'}: {e} (pip install jsonschema rfc3339-validator)")
        return 1 if os.environ.get("CI") else 77
    entries = {e["id"]: e for e in corpus.load() if e["id"].startswith(args.only)}
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or os.path.join(tmp, "walks.jsonl")
        t0 = time.time()
        subprocess.run([args.walker, corpus.HERE, args.tokenizer, out, "--seeds", args.seeds, "--slack", args.slack]
                       + (["--only", args.only] if args.only else []), check=True)
        print(f"walked in {time.time() - t0:.1f} s")
        with open(out, encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
    failures = []
    walks = collections.defaultdict(list)
    for line in lines:
        walks[line["id"]].append(line)
    passed = collections.Counter()
    total = collections.Counter()
    xfail = collections.Counter()
    for entry_id, entry in entries.items():
        part = corpus.group(entry_id)
        total[part] += 1
        got = walks.get(entry_id, [])
        reasons = []
        if not got:
            reasons.append("no walk")
        expected = corpus.REFUSED.get(entry_id)
        if expected is not None:
            if len(got) == 1 and "error" in got[0] and expected in got[0]["error"]:
                print(f"XFAIL {entry_id}: refused: " + got[0]["error"].replace("\n", "\\n"))
                xfail[part] += 1
                continue
            reasons.append(f"expected a refusal containing {expected!r}: remove it from corpus.REFUSED if it compiles now")
        for w in got:
            if "error" in w:
                reasons.append(f"does not compile: {w['error']} (at {w['path']})")
                continue
            if w["problem"]:
                reasons.append(f"seed {w['seed']} slack {w['slack']}: {w['problem']}")
                continue
            try:
                text = bytes.fromhex(w["output_hex"]).decode("utf-8")
            except UnicodeDecodeError:
                reasons.append(f"seed {w['seed']}: output is not UTF-8: {w['output_hex']}")
                continue
            reason = corpus.check(entry, text)
            if reason:
                reasons.append(f"seed {w['seed']} slack {w['slack']}: {reason}")
        pending = corpus.PENDING.get(entry_id)
        if pending and reasons:
            print(f"XFAIL {entry_id}: {pending} ({len(reasons)} walks fail)")
            xfail[part] += 1
        elif pending:
            failures.append((entry_id, [f"passes now: remove it from corpus.PENDING ({pending})"]))
        elif reasons:
            failures.append((entry_id, reasons))
        else:
            passed[part] += 1
    for entry_id, reasons in failures:
        print(f"FAIL {entry_id}: " + "\n    ".join(reasons[:3]) + (f"\n    (+{len(reasons) - 3} more)" if len(reasons) > 3 else ""))
    for part in sorted(total):
        print(f"{part:18s} {passed[part]:4d} / {total[part]:4d} entries pass, {xfail[part]} XFAIL (corpus.REFUSED, PENDING)")
    print(f"{'all':18s} {sum(passed.values()):4d} / {sum(total.values()):4d} entries pass "
          f"({sum(1 for line in lines if 'error' not in line)} walks)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
