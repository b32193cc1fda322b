#!/usr/bin/env bash
# The llama.cpp side of bench/compare_pytorch.sh (bench/README.md, "Against PyTorch"): a
# pinned llama.cpp source, built once in a cache folder outside the repository, and the
# bench's random checkpoint converted to GGUF and quantized.
#
#   bench/llama_cpp_setup.sh build             fetch, check and build; prints the bin folder
#   bench/llama_cpp_setup.sh gguf CKPT PY OUT  convert CKPT (an olmo2 checkpoint folder with
#                                              model.safetensors and config.json) to OUT/bf16.gguf,
#                                              OUT/q8_0.gguf and OUT/q4_k_m.gguf (once; kept
#                                              while the checkpoint is unchanged); PY: a Python
#                                              with torch and transformers (the bench venv)
#
# The source: the sdist of PyPI's llama-cpp-python LLAMA_CPP_PY_VERSION, which vendors
# llama.cpp's whole source tree (vendor/llama.cpp), fetched with pip and checked against
# LLAMA_CPP_PY_SHA256. Built with cmake, CPU only (-DGGML_NATIVE=ON: the instructions of this
# machine, no CUDA), the targets llama-bench and llama-quantize. The converter is that tree's
# convert_hf_to_gguf.py with the `gguf` Python package of the same tree (gguf-py, which the
# converter puts first on its path): PyPI's gguf 0.19.0, the version gguf-py names, lacks
# what this converter calls (gguf.LazyChunkedTensor), so the pinned source pins both. It
# runs with PY (torch, transformers, numpy, PyYAML, tqdm: the bench venv has them); nothing
# is installed into PY's environment.
#
# Environment: LLAMA_CPP_CACHE [~/.cache/olmo2-llama.cpp]; BUILD_JOBS [nproc].
set -euo pipefail

LLAMA_CPP_PY_VERSION=0.3.36
LLAMA_CPP_PY_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
ROOT=${LLAMA_CPP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/olmo2-llama.cpp}
CACHE=$ROOT/$LLAMA_CPP_PY_VERSION
SRC=$CACHE/src/llama_cpp_python-$LLAMA_CPP_PY_VERSION/vendor/llama.cpp
BIN=$CACHE/build/bin

die() { echo "llama_cpp_setup: $*" >&2; exit 1; }

fetch() {
  [ -f "$SRC/CMakeLists.txt" ] && return
  local tgz=$CACHE/dl/llama_cpp_python-$LLAMA_CPP_PY_VERSION.tar.gz
  mkdir -p "$CACHE/dl" "$CACHE/src"
  if [ ! -f "$tgz" ]; then
    echo "== fetching llama-cpp-python $LLAMA_CPP_PY_VERSION (sdist, PyPI) into $CACHE/dl" >&2
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
      -d "$CACHE/dl" "llama-cpp-python==$LLAMA_CPP_PY_VERSION" >&2 || die "pip download failed"
  fi
  local sum
  sum=$(sha256sum "$tgz" | cut -d' ' -f1)
  if [ "$sum" != "$LLAMA_CPP_PY_SHA256" ]; then
    rm -f "$tgz"
    die "sha256 of $tgz is $sum, expected $LLAMA_CPP_PY_SHA256 (removed; run again)"
  fi
  tar xzf "$tgz" -C "$CACHE/src"
  [ -f "$SRC/CMakeLists.txt" ] || die "$tgz has no vendor/llama.cpp"
}

build() {
  fetch
  if [ ! -x "$BIN/llama-bench" ] || [ ! -x "$BIN/llama-quantize" ]; then
    echo "== building llama.cpp (llama-cpp-python $LLAMA_CPP_PY_VERSION) in $CACHE/build" \
      "(log: $CACHE/build.log; once, about 10 minutes on 2 cores)" >&2
    if ! { cmake -S "$SRC" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DBUILD_SHARED_LIBS=OFF &&
      cmake --build "$CACHE/build" -j "${BUILD_JOBS:-$(nproc)}" --target llama-bench llama-quantize; } \
      > "$CACHE/build.log" 2>&1; then
      tail -20 "$CACHE/build.log" >&2
      die "the build failed (log: $CACHE/build.log)"
    fi
  fi
  echo "$BIN"
}

# gguf CKPT PY OUT
gguf() {
  local ckpt=$1 py=$2 out=$3
  build > /dev/null
  [ -f "$ckpt/config.json" ] || die "$ckpt/config.json not found"
  [ -f "$ckpt/tokenizer.json" ] || die "$ckpt/tokenizer.json not found (the converter needs the tokenizer)"
  "$py" -c 'import torch, transformers, numpy, yaml, tqdm' 2>/dev/null ||
    die "$py lacks one of torch, transformers, numpy, PyYAML, tqdm (the converter's needs)"
  # The converter reads the Hugging Face layout: config.json, model.safetensors, the
  # tokenizer; a folder of links beside the GGUF files keeps the checkpoint untouched.
  local key
  key=$(cat "$ckpt/config.json" "$ckpt"/*.safetensors | sha256sum | cut -c1-16)
  mkdir -p "$out"
  if [ "$(cat "$out/key" 2>/dev/null)" != "$key" ]; then
    rm -rf "$out/hf" "$out"/*.gguf
    mkdir -p "$out/hf"
    for f in "$ckpt"/*.safetensors "$ckpt"/config.json "$ckpt"/tokenizer.json; do
      ln -s "$(realpath "$f")" "$out/hf/$(basename "$f")"
    done
    [ -f "$ckpt/tokenizer_config.json" ] && ln -s "$(realpath "$ckpt/tokenizer_config.json")" "$out/hf/"
    [ -f "$out/hf/tokenizer_config.json" ] ||
      echo '{"tokenizer_class": "GPT2Tokenizer", "add_bos_token": false, "add_eos_token": false}' \
        > "$out/hf/tokenizer_config.json"
    echo "== converting $ckpt to $out/bf16.gguf (log: $out/convert.log)" >&2
    env -u NO_LOCAL_GGUF "$py" "$SRC/convert_hf_to_gguf.py" "$out/hf" --outtype bf16 \
      --outfile "$out/bf16.gguf" > "$out/convert.log" 2>&1 || { tail -20 "$out/convert.log" >&2; die "convert failed"; }
    for q in Q8_0 Q4_K_M; do
      local lq=${q,,}
      echo "== quantizing to $out/$lq.gguf" >&2
      "$BIN/llama-quantize" "$out/bf16.gguf" "$out/$lq.gguf" "$q" > "$out/quantize-$lq.log" 2>&1 ||
        { tail -20 "$out/quantize-$lq.log" >&2; die "llama-quantize $q failed"; }
    done
    echo "$key" > "$out/key"
  fi
  echo "$out"
}

case ${1:-} in
  build) build ;;
  gguf) [ $# -eq 4 ] || die "usage: $0 gguf CKPT PY OUT"; gguf "$2" "$3" "$4" ;;
  *) die "usage: $0 build | gguf CKPT PY OUT" ;;
esac
