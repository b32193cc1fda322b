#!/usr/bin/env bash
# Peak resident memory and step time of `olmo2 train` under each --recompute mode (none,
# selective, full; docs/architecture.md §7 "Recomputation"), one process, the OLMo 2 1B
# width (hidden 2048, intermediate 8192, 16 heads, 16 kv heads) with LAYERS layers at
# sequence length SEQ, micro-batch 1. A benchmark, not a test. Usage (after scripts/setup.sh
# and building the olmo2 target):
#   bench/recompute_memory.sh [LAYERS] [SEQ] [VOCAB] [OLMO2_BINARY]
# Defaults: 2 layers, seq 2048, vocab 8192 (not the 1B's 100352: its embedding and lm_head
# alone take 6.6 GB of f32 training state — weights, gradients, two moments — which would
# hide the activations and not fit the ~6 GB this machine may use). Env: STEPS (default 3),
# THREADS (default 2). Prints per mode the peak RSS (/usr/bin/time's maximum resident set),
# the mean step_time of the steps after the first (the first allocates the moments) and the
# process's CPU seconds (user + system, the whole run: on a shared machine the wall time
# is noise, the CPU time much less), and checks that every mode logged the same losses,
# bit for bit. MALLOC_MMAP_THRESHOLD_ is fixed at 128 KiB (unless set): glibc's dynamic
# threshold would otherwise serve the 16 MB activations from a heap it does not give back,
# so the peak would be the allocator's, not the live tensors'. --peak-tflops 1 skips the
# start-up sgemm that MFU would measure.
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${1:-2}
seq=${2:-2048}
vocab=${3:-8192}
bin=${4:-build/olmo2}
steps=${STEPS:-3}
threads=${THREADS:-2}
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-131072}
work=$(mktemp -d /tmp/olmo2-recompute-XXXXXX)
trap 'rm -rf "$work"' EXIT
# The model's config.json and a token file of random ids below the vocabulary (an .npy of
# uint32, written by hand: no numpy needed).
python3 - "$layers" "$vocab" "$seq" "$steps" "$work" <<'PY'
import json, random, struct, sys
layers, vocab, seq, steps, work = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
c = json.load(open("tests/golden/fixtures/configs/OLMo-2-0425-1B/config.json"))
c.update(num_hidden_layers=layers, vocab_size=vocab, eos_token_id=vocab - 1, pad_token_id=vocab - 2,
         max_position_embeddings=max(4096, seq))
json.dump(c, open(f"{work}/config.json", "w"), indent=1)
n = seq * (steps + 1)
rng = random.Random(1)
header = "{'descr': '<u4', 'fortran_order': False, 'shape': (%d,), }" % n
header += " " * (63 - (10 + len(header)) % 64) + "\n"
with open(f"{work}/tokens.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack(f"<{n}I", *(rng.randrange(vocab - 2) for _ in range(n))))
PY
echo "OLMo 2 1B width, $layers layers, vocab $vocab, seq $seq, micro-batch 1, $steps steps, $threads threads"
printf '%-10s %14s %14s %10s\n' recompute "peak RSS (GB)" "step time (s)" "CPU (s)"
for mode in none selective full; do
  /usr/bin/time -f '%M %U %S' -o "$work/$mode.kib" "$bin" train --model-config "$work/config.json" --data "$work/tokens.npy" \
    --seq-len "$seq" --global-batch 1 --micro-batch 1 --steps "$steps" --threads "$threads" --recompute "$mode" \
    --peak-tflops 1 --log-format json > "$work/$mode.jsonl" 2> "$work/$mode.err" || { cat "$work/$mode.err"; exit 1; }
  python3 - "$mode" "$work" <<'PY'
import json, sys
mode, work = sys.argv[1], sys.argv[2]
steps = [json.loads(line) for line in open(f"{work}/{mode}.jsonl")]
later = [s["step_time"] for s in steps[1:]] or [steps[0]["step_time"]]
kib, user, system = open(f"{work}/{mode}.kib").read().split()[-3:]
print(f"{mode:<10} {int(kib) * 1024 / 1e9:14.3f} {sum(later) / len(later):14.2f} {float(user) + float(system):10.1f}")
PY
done
python3 - "$work" <<'PY'
import json, sys
losses = {m: [json.loads(l)["loss"] for l in open(f"{sys.argv[1]}/{m}.jsonl")] for m in ("none", "selective", "full")}
same = losses["selective"] == losses["none"] == losses["full"]
print("losses of the three modes bit-identical:", "yes" if same else f"NO {losses}")
sys.exit(0 if same else 1)
PY
