// Internal pieces of the fp32 batch-invariant product (ops/cpu/batch_invariant_gemm*.cpp):
// the register tiles a vector path provides to the shared driver, and entry points that
// force a path, for the tests and benchmarks. The operation sequence every path follows
// is the one documented at ops::linear_batch_invariant (docs/architecture.md §2);
// ops/batch_invariant_gemm.h chooses the path.
#pragma once

#include <cstdint>

#include "ops/batch_invariant_gemm.h"
#include "ops/tensor.h"

namespace olmo2::ops::detail {

/// One register tile of MR rows of x × NR rows of w over K positions [k0, k0 + len) of
/// the product, k0 a multiple of 16 (so the block starts on lane 0): x and w point at
/// x[m0, k0] and w[n0, k0] (f32, row strides ldx, ldw in elements). `acc` keeps the
/// tile's 16 lanes between K blocks, element (i, j) at acc + i·acc_ld + j·16; `first`
/// starts them at +0 instead of reading acc, `last` reduces them by the fixed tree into
/// y[i·ldy + j] instead of writing acc.
using BatchInvariantTileFn = void (*)(const float* x, int64_t ldx, const float* w, int64_t ldw,
                                      int64_t len, float* acc, int64_t acc_ld, bool first,
                                      bool last, float* y, int64_t ldy);

/// A vector path's tiles: `tile(mr, nr)` for 1 ≤ mr ≤ max_mr, 1 ≤ nr ≤ max_nr (the edge
/// tiles differ only in how many elements run side by side, never in an element's
/// operations). `w_block_bytes`: how much of w (whole rows) the driver keeps in L2 while
/// the x tiles pass over it; only speed depends on it.
struct BatchInvariantKernel {
  int max_mr, max_nr;
  BatchInvariantTileFn (*tile)(int mr, int nr);
  int64_t w_block_bytes;
};

/// The AVX-512 tiles (ops/cpu/batch_invariant_gemm_avx512.cpp), 6 × 4 elements of one
/// zmm each. Only to be run where batch_invariant_path_available(Avx512) says so.
const BatchInvariantKernel& batch_invariant_kernel_avx512();

/// Whether this CPU has AVX2 and FMA (cpuid, read once), i.e. the avx2 path.
bool batch_invariant_has_avx2_fma();

/// Whether this CPU has AVX-512 F, BW, DQ and VL (cpuid, read once), i.e. the avx512 path.
bool batch_invariant_has_avx512();

/// The path OLMO2_BATCH_INVARIANT_GEMM = `env` selects on a CPU that has the paths
/// `available` says (batch_invariant_path's rule; tests pass other CPUs): with `env`
/// null or empty the fastest available one, else the one it names. InputError naming
/// the value when it names no path or one the CPU lacks.
BatchInvariantPath choose_batch_invariant_path(const char* env,
                                               bool (*available)(BatchInvariantPath));

/// `linear_batch_invariant` on the portable path (std::fmaf on 16 lanes), whatever the
/// CPU. Same checks and same bits as the public function.
void linear_batch_invariant_portable(const TensorView& x, const TensorView& w, const TensorView& y);

/// `linear_batch_invariant` on the AVX2+FMA path. Throws ShapeError where the CPU
/// lacks AVX2 or FMA.
void linear_batch_invariant_avx2(const TensorView& x, const TensorView& w, const TensorView& y);

/// `linear_batch_invariant` on the AVX-512 path. Throws ShapeError where the CPU lacks
/// AVX-512 F, BW, DQ or VL.
void linear_batch_invariant_avx512(const TensorView& x, const TensorView& w, const TensorView& y);

/// `linear_batch_invariant` (f32 w) on `path`; ShapeError when this CPU lacks it.
void linear_batch_invariant(const TensorView& x, const TensorView& w, const TensorView& y,
                            BatchInvariantPath path);

}  // namespace olmo2::ops::detail
