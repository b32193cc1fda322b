#!/usr/bin/env bash
# Makes the GPU check bundle (docs/guides/gpus.md; docs/architecture.md §10): everything the
# check on a bare GPU machine runs — olmo2, every gpu-labelled test binary, the GPU
# benchmarks — with every shared library they load that such a machine lacks (Open MPI
# relocatable under OPAL_PREFIX with mpirun, its plugins and help files; PMIx; OpenBLAS,
# oneDNN, Boost, libstdc++, …), so that it runs with only glibc, the NVIDIA driver, the
# CUDA 13 toolkit's cudart and cuBLAS(Lt), and NCCL found there. The repository's tree
# travels beside it (the fixtures are read from there).
#
#   scripts/gpu_bundle.sh DIR          makes DIR and DIR.tar.xz (xz -9, two 96 MiB blocks in parallel), prints the sizes
#
# Run after scripts/setup.sh on a machine with nvcc (the build must have the CUDA backend
# for sm_90, the H100/H200's architecture). On the GPU machine, from the repository root:
#   tar -xJf gpu-bundle.tar.xz && gpu-bundle/run.sh --out gpu-results
# Exit status: 0 made, 1 failed (the reason on stderr), 2 usage.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
[[ $# -eq 1 && $1 != -* ]] || { echo "usage: scripts/gpu_bundle.sh DIR" >&2; exit 2; }
DIR=$(realpath -m "$1")
BUILD=${OLMO2_BUNDLE_BUILD:-$REPO/build}
die() { echo "gpu_bundle: $*" >&2; exit 1; }

cache=$BUILD/CMakeCache.txt
[[ -f $cache ]] || die "no build in $BUILD (run scripts/setup.sh first)"
grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=.\+' "$cache" || die "$BUILD has no CUDA backend (nvcc was not found when it was configured)"

# What the check runs (scripts/gpu_bundle/run.sh names each).
BINARIES=(olmo2 olmo2_gpu_peaks olmo2_inference_bench olmo2_random_model olmo2_load_gen
  ops_cuda_backend_test ops_cuda_test ops_backend_ops_test golden_cuda_test train_gpu_test train_gpu_layouts_test
  launcher_serve_cuda_test launcher_train_cuda_test launcher_device_emulation_test parallel_device_communicator_mpi_test
  serve_engine_test serve_engine_sliding_test model_kv_cache_copy_test generation_token_selection_device_test)
cmake --build "$BUILD" -j"$(nproc)" --target "${BINARIES[@]}" >/dev/null || die "the build of the bundle's targets failed"
# The CUDA code must be compiled for the H100/H200's architecture, sm_90 (nvcc's flags).
archs=$(grep -rhoE 'code=\[?[a-z_0-9,]*sm_[0-9]+' "$BUILD"/ops/CMakeFiles/*/flags.make 2>/dev/null | grep -oE 'sm_[0-9]+' | sort -u | tr '\n' ' ')
[[ " $archs" == *" sm_90 "* ]] || die "$BUILD compiles its CUDA code for ${archs:-no architecture}, not sm_90"

rm -rf "$DIR" "$DIR.tar.xz"
mkdir -p "$DIR/bin" "$DIR/lib"
for b in "${BINARIES[@]}"; do
  path=$(find "$BUILD" -type f -name "$b" -perm -u+x -not -path '*/CMakeFiles/*' | head -n 1)
  [[ -n $path ]] || die "built $b but cannot find it under $BUILD"
  cp "$path" "$DIR/bin/$b"
done

# ---- Open MPI and PMIx, relocatable ---------------------------------------------------------
# Debian's layout under a prefix of /usr (ompi_info --path all): libraries and plugins under
# lib/x86_64-linux-gnu/openmpi/lib[/openmpi3], help files under share/openmpi. OPAL_PREFIX
# moves every one of them (run.sh sets it to DIR/ompi); PMIx likewise with
# PMIX_INSTALL_PREFIX (DIR/pmix). sysconfdir (/etc/openmpi) stays: an absent file is no error.
ARCH_DIR=lib/$(gcc -print-multiarch)
OMPI_LIBDIR=/usr/$ARCH_DIR/openmpi/lib
[[ -d $OMPI_LIBDIR/openmpi3 ]] || die "Open MPI's plugins are not in $OMPI_LIBDIR/openmpi3 (ompi_info --path all)"
mkdir -p "$DIR/ompi/bin" "$DIR/ompi/$ARCH_DIR/openmpi/lib/openmpi3" "$DIR/ompi/share"
cp /usr/bin/orterun /usr/bin/orted "$DIR/ompi/bin/"
ln -s orterun "$DIR/ompi/bin/mpirun"
cp -r /usr/share/openmpi "$DIR/ompi/share/openmpi"
PMIX_PREFIX=/usr/$ARCH_DIR/pmix2
mkdir -p "$DIR/pmix/lib/pmix"
[[ -d $PMIX_PREFIX/lib/pmix ]] && cp "$PMIX_PREFIX"/lib/pmix/*.so "$DIR/pmix/lib/pmix/"
[[ -d /usr/share/pmix ]] && cp -r /usr/share/pmix "$DIR/pmix/share"

# What a bare GPU machine has: glibc, the driver, the CUDA toolkit's runtime and cuBLAS,
# and NCCL (the toolkit's folder or the nvidia-nccl wheel).
PROVIDED='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libnvidia)'
# Libraries every ELF here needs, copied under their soname into DIR/lib (ldd gives the
# whole closure). A plugin of Open MPI's that needs more than that (UCX, libfabric,
# InfiniBand verbs, PSM, CUDA-aware pieces) is left out: ob1 over shared memory and TCP
# is what one node needs, and a missing component is silently not chosen.
needs() { ldd "$1" 2>/dev/null | awk '/=>/ { print $1, $3 } /not found/ { print $1, "NOTFOUND" }'; }
copy_needs() {
  local elf=$1 name path
  while read -r name path; do
    [[ $name =~ $PROVIDED ]] && continue
    [[ $path == NOTFOUND || ! -f $path ]] && die "$elf needs $name, which is not found here"
    [[ -f $DIR/lib/$name ]] || cp -L "$path" "$DIR/lib/$name"
  done < <(needs "$elf")
}
for e in "$DIR"/bin/* "$DIR/ompi/bin/orterun" "$DIR/ompi/bin/orted" "$DIR"/pmix/lib/pmix/*.so; do copy_needs "$e"; done
# Open MPI's own libraries (the plugins link them) and the plugins whose needs are met.
cp -L "$OMPI_LIBDIR"/libmca_common_sm.so* "$OMPI_LIBDIR"/libmca_common_monitoring.so* \
  "$OMPI_LIBDIR"/libmca_common_ompio.so* "$DIR/lib/" 2>/dev/null || true
allowed_extra='^(libevent|libhwloc|libpmix|libz\.so|libudev|libmca_common_(sm|monitoring|ompio)|libopen-|libmpi\.so|libmpi_cxx)'
kept=0 left=0
for p in "$OMPI_LIBDIR"/openmpi3/*.so; do
  ok=1
  while read -r name path; do
    [[ $name =~ $PROVIDED || -f $DIR/lib/$name || $name =~ $allowed_extra ]] || { ok=0; break; }
  done < <(needs "$p")
  if (( ok )); then
    cp "$p" "$DIR/ompi/$ARCH_DIR/openmpi/lib/openmpi3/"
    copy_needs "$p"
    kept=$((kept + 1))
  else
    left=$((left + 1))
  fi
done

# ---- the check itself, and what it is ------------------------------------------------------
cp scripts/gpu_bundle/run.sh "$DIR/run.sh"
cp scripts/gpu_bench.sh "$DIR/gpu_bench.sh"
chmod +x "$DIR/run.sh" "$DIR/gpu_bench.sh"
find "$DIR" -type f \( -path "$DIR/bin/*" -o -name '*.so*' -o -path "$DIR/ompi/bin/*" \) -exec strip --strip-unneeded {} + 2>/dev/null || true
{
  echo "olmo2 GPU check bundle"
  echo "commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) (Debian $(cat /etc/debian_version 2>/dev/null))"
  echo "cuda architectures: $archs"
  echo "open mpi plugins kept: $kept (left out for needs beyond the bundle: $left)"
  echo "binaries: ${BINARIES[*]}"
  echo "libraries: $(cd "$DIR/lib" && ls | tr '\n' ' ')"
} >"$DIR/MANIFEST"

tar -C "$(dirname "$DIR")" -cf - "$(basename "$DIR")" | xz -9 -T0 --block-size=96MiB >"$DIR.tar.xz"
unpacked=$(du -sm "$DIR" | cut -f1)
packed=$(stat -c %s "$DIR.tar.xz")
echo "gpu_bundle: $DIR ($unpacked MiB) and $DIR.tar.xz ($((packed / 1048576)).$(((packed % 1048576) * 10 / 1048576)) MiB packed: $packed bytes)"
(( packed <= 32 * 1048576 )) || die "the packed bundle is over 32 MiB"
