// The bf16-weight matrix products (ops::linear, ops::linear_backward and
// ops::linear_batch_invariant with a bf16 w): which CPU code path computes them, chosen
// once at run time from cpuid, and how to name or force it (docs/architecture.md §2,
// "bf16 products").
//
// Every path computes each element by the one operation sequence documented at
// ops::linear_batch_invariant (ops/batch_invariant_gemm.h): 16 fp32 lanes, each adding
// bf16 pairs by two fmas (odd element first) with DAZ/FTZ, then a fixed tree — what
// VDPBF16PS does per lane (Intel SDM Vol. 2, VDPBF16PS; Intel Intrinsics Guide,
// _mm512_dpbf16_ps). So the paths give the same bits, and the tests check that they do
// (ops_bf16_gemm_test); a CPU whose VDPBF16PS rounded otherwise would fail them.
//
// One more path, `onednn`, is oneDNN's bf16 matmul (AMX tiles where the CPU has them):
// it keeps no fixed operation sequence, so it computes only the products that need no
// batch invariance — ops::linear and ops::linear_backward with a bf16 w, which training
// (and generate) call — and never ops::linear_batch_invariant (serving).
#pragma once

#include <string>

namespace olmo2::ops {

/// A code path of the bf16 products.
enum class Bf16GemmPath {
  Avx512Bf16,  ///< VDPBF16PS on 512-bit vectors (cpuid avx512f, avx512bw, avx512dq, avx512vl,
               ///< avx512_bf16)
  Avx2,        ///< bf16 widened to fp32, 256-bit fmas under MXCSR DAZ|FTZ (cpuid avx2, fma)
  Portable,    ///< scalar std::fmaf with explicit flushes, any CPU
  OneDnn,      ///< oneDNN's bf16 matmul (its own ISA: AMX where it can); not batch-invariant,
               ///< so only for bf16_training_gemm_path's products
};

/// The path's name as OLMO2_BF16_GEMM spells it: "avx512bf16", "avx2", "portable",
/// "onednn".
const char* bf16_gemm_path_name(Bf16GemmPath path);

/// Whether this CPU can run `path` (cpuid, read once). Portable: always. OneDnn: where
/// oneDNN makes a bf16 matmul (oneDNN 2.6: avx512_core and newer, probed once).
bool bf16_gemm_path_available(Bf16GemmPath path);

/// The path of the batch-invariant bf16 products (ops::linear_batch_invariant): the one
/// set by set_bf16_gemm_path, else the one the environment variable OLMO2_BF16_GEMM names
/// (avx512bf16|avx2|portable|onednn, read once, at the first call), else the fastest this
/// CPU has (avx512bf16, then avx2, then portable) — and that fastest one wherever the
/// choice is onednn, which is never batch-invariant. Never OneDnn. Throws InputError
/// naming the value when OLMO2_BF16_GEMM names no path or one this CPU lacks (and again
/// at every later call).
Bf16GemmPath bf16_gemm_path();

/// The name of bf16_gemm_path(), for start-up logs and benchmark output.
const char* bf16_gemm_path_name();

/// The path of the bf16 products that need no batch invariance (ops::linear and
/// ops::linear_backward with a bf16 w: training's forward and backward, generate's
/// forward): the path set by set_bf16_gemm_path or named by OLMO2_BF16_GEMM (onednn
/// included), else OneDnn where oneDNN runs on AMX tiles (onednn_uses_amx()), else
/// bf16_gemm_path(). The same InputError as bf16_gemm_path for a bad OLMO2_BF16_GEMM.
Bf16GemmPath bf16_training_gemm_path();

/// The name of bf16_training_gemm_path(), for start-up logs and benchmark output; for
/// OneDnn with oneDNN's effective ISA, e.g. "onednn (avx512_core_amx)".
std::string bf16_training_gemm_path_description();

/// oneDNN's effective CPU ISA on this machine (dnnl::get_effective_cpu_isa(): cpuid, the
/// OS's AMX tile permission, ONEDNN_MAX_CPU_ISA), by oneDNN's name: "avx512_core_amx",
/// "avx512_core_bf16", "avx2", … Read once.
const char* onednn_cpu_isa_name();

/// Whether oneDNN's effective ISA includes AMX (avx512_core_amx; oneDNN asks Linux for
/// the tile data permission, arch_prctl ARCH_REQ_XCOMP_PERM, itself). Read once.
bool onednn_uses_amx();

/// Forces `path` for every later bf16 product, process-wide (for tests and benchmarks;
/// not to be changed while a product runs on another thread): OneDnn forces it on the
/// training products and leaves the batch-invariant ones on the fastest path. Throws
/// ShapeError when this CPU lacks it.
void set_bf16_gemm_path(Bf16GemmPath path);

/// Undoes set_bf16_gemm_path: back to OLMO2_BF16_GEMM or the detected path.
void reset_bf16_gemm_path();

}  // namespace olmo2::ops
