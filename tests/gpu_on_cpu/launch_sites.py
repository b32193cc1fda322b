#!/usr/bin/env python3
"""launch_sites.py SOURCE_DIR COUNTS: every kernel launch site of the CUDA backend ran on the
SIMT executor (docs/architecture.md §10). SOURCE_DIR's ops/cuda/ sources are read for their
OLMO2_LAUNCH sites (file:line: a site shared by several ops or template instances counts
once); COUNTS is what the runs of backend_ops.sh appended with OLMO2_SIMT_STATS=COUNTS
(lines "launches<TAB>kernel at FILE:LINE", ops/simt/executor.h). Prints every site with its
launches and fails, naming them, when a site never ran, a recorded launch names no site of
the sources, or COUNTS is absent or empty (nothing launched on the executor)."""
import collections, re, sys
from pathlib import Path

source, counts_path = Path(sys.argv[1]), Path(sys.argv[2])
if not counts_path.is_file() or counts_path.stat().st_size == 0:
    sys.exit(f"{counts_path} is absent or empty: nothing was launched on the SIMT executor")

def kernel_of(text, open_paren):
    """The last argument of the macro call whose '(' is text[open_paren]: the kernel."""
    depth, args, arg = 0, [], ""
    for c in text[open_paren:]:
        if c == "(":
            depth += 1
            if depth == 1:
                continue
        elif c == ")":
            depth -= 1
            if depth == 0:
                return " ".join((args + [arg])[-1].split())
        elif c == "," and depth == 1 and arg.count("<") == arg.count(">"):
            args.append(arg)
            arg = ""
            continue
        arg += c
    return "?"


sites = {}  # (file, line) -> kernel expression as written
for f in sorted((source / "ops/cuda").iterdir()):
    if f.suffix not in (".cu", ".cuh", ".cpp", ".h"):
        continue
    text = f.read_text()
    for m in re.finditer(r"OLMO2_LAUNCH\(", text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if text[line_start:m.start()].lstrip().startswith(("#", "//")):
            continue  # the macro's definition or a comment
        sites[(f"ops/cuda/{f.name}", text.count("\n", 0, m.start()) + 1)] = kernel_of(text, m.end() - 1)

ran = collections.Counter()
for line in counts_path.read_text().splitlines():
    m = re.match(r"(\d+)\t(.*) at .*?(ops/cuda/[^:]+):(\d+)$", line)
    if not m:
        sys.exit(f"{counts_path}: unreadable line {line!r}")
    ran[(m.group(3), int(m.group(4)))] += int(m.group(1))

unknown = sorted(set(ran) - set(sites))
missing = sorted(set(sites) - set(ran))
for site in sorted(sites):
    print(f"{ran.get(site, 0):8d}  {site[0]}:{site[1]}  {sites[site]}")
print(f"{len(sites) - len(missing)} of {len(sites)} launch sites ran, {sum(ran.values())} launches")
if unknown:
    print("launches recorded at no OLMO2_LAUNCH of the sources (stale build?): " +
          ", ".join(f"{f}:{n}" for f, n in unknown))
if missing:
    print("launch sites that never ran on the executor: " + ", ".join(f"{f}:{n} ({sites[(f, n)]})" for f, n in missing))
sys.exit(1 if missing or unknown else 0)
