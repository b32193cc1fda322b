#!/usr/bin/env bash
# Regenerates every committed test fixture from the reference implementations
# (docs/architecture.md §10), in one go:
#   1. sets up the reference environment: a Python venv (default /opt/olmo2-fixtures-venv,
#      or $OLMO2_FIXTURES_VENV) with the versions pinned in
#      tests/golden/requirements-fixtures.txt (torch, transformers, tokenizers, safetensors,
#      numpy from PyPI; about 6 GB, installed once);
#   2. runs each fixture script, in the order their inputs need:
#        tests/golden/make_fixtures.py                   the tiny models, their logits, configs/
#        tests/golden/make_train_fixtures.py             loss and gradients of two of those models
#        tests/golden/make_olmo3_fixtures.py             Olmo 3 models (window, YaRN): logits, gradients
#        tests/golden/make_activation_fixtures.py        named activations and steering of mha-f32,
#                                                        gqa-f32, olmo3-gqa-f32 (reads those models)
#        tests/golden/make_bf16_train_fixtures.py        10 bf16 mixed-precision training steps (four models)
#        tests/golden/make_adamw_fixtures.py             torch.optim.AdamW steps (adamw/)
#        tests/golden/make_trained_checkpoint_fixture.py transformers on a checkpoint the program
#                                                        trained (trained/, trained-olmo3/;
#                                                        needs build/olmo2)
#        tests/golden/make_prompt_logprobs_fixtures.py   prompt log-probabilities of deep-gqa-f32
#        tests/generation/make_selection_fixtures.py     vLLM's logits processors, min_p, the draw
#        tests/tokenizer/make_tokenizer_fixtures.py      the `tokenizers` library on 5,387 strings
#        tests/model/make_init_fixtures.py               the documented init (pure Python)
#        tests/model/make_rope_fixtures.py               RoPE / YaRN frequencies (Olmo 3)
#        tests/model/make_olmo3_config_fixtures.py       Olmo 3 config.json as transformers writes it
#        tests/serve/fixtures/make_chat_template_fixtures.py  transformers' chat-template renderings
#        tests/serve/make_api_fixtures.py                token facts and a chat template for the API tests
#      Each script rewrites only its own files: one set can be regenerated alone without
#      touching the others;
#   3. prints what changed against the committed fixtures (git status / diff --stat).
# Every script is deterministic: two runs on one machine write the same bytes. Across
# machines, torch's CPU kernels are pinned to AVX2 (the level the fixtures were made at;
# ATen's and MKL's vector code), which makes the AdamW, tokenizer, init, config and model
# weight fixtures come back bit for bit on an AVX-512 machine too. The float32 forward and
# gradient references (reference.safetensors, train_reference.*) still differ in their last
# bits from one CPU to another (matrix-product blocking follows the CPU), and trained/
# holds what this machine's build of the program trained; both are far inside the tests'
# tolerances (docs/guides/testing.md, "Tolerances").
#
# Usage: scripts/make_fixtures.sh [--olmo2 build/olmo2] [--tokenizer data/dolma2-tokenizer.json]
set -euo pipefail
cd "$(dirname "$0")/.."

OLMO2=build/olmo2
TOKENIZER=data/dolma2-tokenizer.json
while [ $# -gt 0 ]; do
  case "$1" in
    --olmo2) OLMO2=$2; shift 2 ;;
    --tokenizer) TOKENIZER=$2; shift 2 ;;
    *) echo "usage: $0 [--olmo2 PATH] [--tokenizer PATH]" >&2; exit 2 ;;
  esac
done
[ -x "$OLMO2" ] || { echo "make_fixtures: $OLMO2 not found: build it first (cmake --build build --target olmo2)" >&2; exit 1; }
[ -f "$TOKENIZER" ] || { echo "make_fixtures: $TOKENIZER not found: scripts/fetch_data.py fetches it" >&2; exit 1; }

VENV=${OLMO2_FIXTURES_VENV:-/opt/olmo2-fixtures-venv}
REQ=tests/golden/requirements-fixtures.txt
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# pip only downloads what is missing or at another version.
"$VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary :all: -r "$REQ"
PY="$VENV/bin/python"
"$PY" - <<'EOF'
import platform, sys
import numpy, safetensors, tokenizers, torch, transformers
print(f"reference environment: python {platform.python_version()}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
      f"safetensors {safetensors.__version__}, numpy {numpy.__version__}")
if platform.python_version() != "3.11.7":
    print(f"note: the fixtures record python 3.11.7; VERSIONS.json files will say {platform.python_version()}",
          file=sys.stderr)
EOF

# torch's AVX2 kernels (what adamw.json records), ATen's and MKL's alike, one thread.
export ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
  TOKENIZERS_PARALLELISM=false
# Each script rewrites only its own files: a file that was there before a script ran and is
# gone after it was another script's output (or the script removed a stale one of its
# own, e.g. after a change of shard count: then commit the removal knowingly).
FIXTURE_DIRS=(tests/golden/fixtures tests/tokenizer/fixtures tests/model/fixtures tests/serve/fixtures
  tests/generation/fixtures tests/ops/fixtures)
run() {
  echo "== $*"
  local before after gone
  before=$(find "${FIXTURE_DIRS[@]}" -type f 2>/dev/null | sort)
  "$PY" "$@"
  after=$(find "${FIXTURE_DIRS[@]}" -type f 2>/dev/null | sort)
  gone=$(comm -23 <(echo "$before") <(echo "$after"))
  if [ -n "$gone" ]; then
    echo "make_fixtures: $1 removed files it did not write back:" >&2
    echo "$gone" >&2
    exit 1
  fi
}
run tests/golden/make_fixtures.py
run tests/golden/make_train_fixtures.py
run tests/golden/make_olmo3_fixtures.py "$TOKENIZER"
run tests/golden/make_activation_fixtures.py
run tests/golden/make_bf16_train_fixtures.py
run tests/golden/make_adamw_fixtures.py
run tests/golden/make_trained_checkpoint_fixture.py --olmo2 "$OLMO2"
run tests/golden/make_trained_checkpoint_fixture.py --olmo2 "$OLMO2" --model olmo3
run tests/golden/make_prompt_logprobs_fixtures.py
run tests/generation/make_selection_fixtures.py
run tests/tokenizer/make_tokenizer_fixtures.py "$TOKENIZER"
run tests/model/make_init_fixtures.py
run tests/model/make_rope_fixtures.py
run tests/model/make_olmo3_config_fixtures.py
run tests/ops/make_window_attention_fixtures.py
run tests/serve/fixtures/make_chat_template_fixtures.py "$TOKENIZER"
run tests/serve/make_api_fixtures.py "$TOKENIZER"

echo "== changes against the committed fixtures (git status; nothing listed: reproduced bit for bit)"
git status --short -- "${FIXTURE_DIRS[@]}"
git diff --stat -- "${FIXTURE_DIRS[@]}"
