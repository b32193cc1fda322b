// The bf16-weight matrix products (ops::linear and ops::linear_batch_invariant with a
// bf16 w): which CPU code path computes them, chosen once at run time from cpuid, and
// how to name or force it (docs/architecture.md §2, "bf16 products").
//
// Every path computes each element by the one operation sequence documented at
// ops::linear_batch_invariant (ops/batch_invariant_gemm.h): 16 fp32 lanes, each adding
// bf16 pairs by two fmas (odd element first) with DAZ/FTZ, then a fixed tree — what
// VDPBF16PS does per lane (Intel SDM Vol. 2, VDPBF16PS; Intel Intrinsics Guide,
// _mm512_dpbf16_ps). So the paths give the same bits, and the tests check that they do
// (ops_bf16_gemm_test); a CPU whose VDPBF16PS rounded otherwise would fail them.
#pragma once

namespace olmo2::ops {

/// A code path of the bf16 products.
enum class Bf16GemmPath {
  Avx512Bf16,  ///< VDPBF16PS on 512-bit vectors (cpuid avx512f, avx512bw, avx512dq, avx512vl,
               ///< avx512_bf16)
  Avx2,        ///< bf16 widened to fp32, 256-bit fmas under MXCSR DAZ|FTZ (cpuid avx2, fma)
  Portable,    ///< scalar std::fmaf with explicit flushes, any CPU
};

/// The path's name as OLMO2_BF16_GEMM spells it: "avx512bf16", "avx2", "portable".
const char* bf16_gemm_path_name(Bf16GemmPath path);

/// Whether this CPU can run `path` (cpuid, read once). Portable: always. AMX is not a
/// path (not built: no AMX machine to test it on).
bool bf16_gemm_path_available(Bf16GemmPath path);

/// The path the bf16 products take now: the one set by set_bf16_gemm_path, else the
/// one the environment variable OLMO2_BF16_GEMM names (avx512bf16|avx2|portable, read
/// once, at the first call), else the fastest this CPU has (avx512bf16, then avx2,
/// then portable). Throws InputError naming the value when OLMO2_BF16_GEMM names no
/// path or one this CPU lacks (and again at every later call).
Bf16GemmPath bf16_gemm_path();

/// The name of bf16_gemm_path(), for start-up logs and benchmark output.
const char* bf16_gemm_path_name();

/// Forces `path` for every later bf16 product, process-wide (for tests and benchmarks;
/// not to be changed while a product runs on another thread). Throws ShapeError when
/// this CPU lacks it.
void set_bf16_gemm_path(Bf16GemmPath path);

/// Undoes set_bf16_gemm_path: back to OLMO2_BF16_GEMM or the detected path.
void reset_bf16_gemm_path();

}  // namespace olmo2::ops
