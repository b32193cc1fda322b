#!/usr/bin/env bash
# Bit-for-bit comparison of two olmo2 binaries (e.g. before and after a refactor): the
# same training runs (one process; tp 2 × pp 2; dp 2 with ZeRO-1; a resume) must write
# byte-identical checkpoints and the same step losses, and generation (greedy and
# sampled, one process and tp 2) the same tokens. Prints one line per check; exits 1 on
# any difference. Not a test: it needs two builds.
#   bench/compare_numerics.sh OLD/build/olmo2 NEW/build/olmo2 [WORKDIR]
set -euo pipefail
old=$1 new=$2 work=${3:-$(mktemp -d /tmp/olmo2-numerics.XXXXXX)}
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi="mpirun --oversubscribe --bind-to none"
mkdir -p "$work"
python3 - "$work" <<'PY'
import json, random, struct, sys
w = sys.argv[1]
json.dump({"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 509, "hidden_size": 64,
           "intermediate_size": 160, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "tie_word_embeddings": False, "eos_token_id": 508, "pad_token_id": 507}, open(f"{w}/config.json", "w"))
rng = random.Random(3)
ids = [rng.randrange(508) if rng.random() < 0.2 else (i * 7) % 61 for i in range(40000)]
header = "{'descr': '<u4', 'fortran_order': False, 'shape': (%d,), }" % len(ids)
header += " " * (63 - (10 + len(header)) % 64) + "\n"
with open(f"{w}/tokens.npy", "wb") as f:  # the .npy v1.0 layout
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack(f"<{len(ids)}I", *ids))
PY
fail=0
check() {  # name, then two files that must be identical
  if cmp -s "$2" "$3"; then echo "same   $1"; else echo "DIFFER $1"; fail=1; fi
}
train() {  # bin, out dir, launcher prefix, extra args
  local bin=$1 out=$2 pre=$3; shift 3
  rm -rf "$out"
  $pre "$bin" train --model-config "$work/config.json" --data "$work/tokens.npy" --seq-len 32 --global-batch 8 \
    --micro-batch 2 --steps 6 --lr 3e-3 --warmup-steps 2 --save-dir "$out" --log-format json "$@" \
    2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    d = json.loads(l); [d.pop(k) for k in ("step_time", "tokens_per_second")]; print(json.dumps(d, sort_keys=True))' \
    > "$out.log"
}
for layout in "one::" "tp2pp2:$mpi -np 4:--tp 2 --pp 2" "dp2zero1:$mpi -np 2:--dp 2 --zero-stage 1" \
              "tp2dp2:$mpi -np 4:--tp 2 --dp 2"; do
  name=${layout%%:*} rest=${layout#*:}; pre=${rest%%:*} args=${rest#*:}
  for side in old new; do bin=${!side}; train "$bin" "$work/$name-$side" "$pre" $args; done
  check "train $name: step losses and grad norms" "$work/$name-old.log" "$work/$name-new.log"
  for f in model.safetensors training_state.safetensors; do
    check "train $name: $f" "$work/$name-old/step-00000006/$f" "$work/$name-new/step-00000006/$f"
  done
done
for side in old new; do  # resume from step 6 to step 9 in the same layout
  bin=${!side}
  rm -rf "$work/resume-$side" && cp -r "$work/one-$side" "$work/resume-$side"
  "$bin" train --model-config "$work/config.json" --data "$work/tokens.npy" --seq-len 32 --global-batch 8 \
    --micro-batch 2 --steps 9 --lr 3e-3 --warmup-steps 2 --save-dir "$work/resume-$side" --resume auto >/dev/null 2>&1
done
check "resume: model.safetensors" "$work/resume-old/step-00000009/model.safetensors" "$work/resume-new/step-00000009/model.safetensors"
ckpt=step-00000006
for mode in "greedy:" "top-k:--temperature 0.8 --top-k 40 --seed 1" "top-p:--temperature 1.0 --top-p 0.9 --seed 2" \
            "whole:--temperature 1.3 --seed 3"; do
  name=${mode%%:*} args=${mode#*:}
  for launch in "one:" "tp2:$mpi -np 2"; do
    lname=${launch%%:*} pre=${launch#*:}; extra=""; [ "$lname" = tp2 ] && extra="--tp 2"
    for side in old new; do
      bin=${!side}
      $pre "$bin" generate --model "$work/one-old/$ckpt" --prompt-ids 5,17,33,2,9,61 --max-tokens 24 \
        --format json $extra $args 2>/dev/null | head -n 1 > "$work/gen-$name-$lname-$side.json"
    done
    check "generate $name $lname" "$work/gen-$name-$lname-old.json" "$work/gen-$name-$lname-new.json"
  done
done
exit $fail
