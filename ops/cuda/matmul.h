// One cuBLASLt product D = op(A)·op(B) + β·D in column-major terms, with fp32 output and
// fp32 accumulation, for the CUDA products (ops/cuda/linear.cpp; docs/architecture.md §2,
// "The device seam"). Internal to ops/cuda/.
#pragma once

#include <cublasLt.h>

#include <cstdint>

namespace olmo2::ops::cuda::detail {

/// A stored column-major matrix: `rows` × `cols` elements of `type` (CUDA_R_32F or
/// CUDA_R_16BF) at `ptr`, column c at ptr + c·ld (ld ≥ rows); used transposed when
/// `trans`. A row-major [r, c] view with row stride s is the column-major c × r matrix
/// with ld = s, so y = x·wᵀ maps to Dᶜ = Wᶜᵀ·Xᶜ (the usual transpose identity).
struct MatOperand {
  const void* ptr = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0;
  bool trans = false;
};

/// How the cuBLASLt algorithm of a product is chosen.
enum class AlgoChoice {
  /// The heuristic's first answer for this exact problem (sizes, leading dimensions,
  /// pointer alignments, β), found once and cached. Its summation order may change
  /// with any of them, e.g. split-K for a small batch.
  PerShape,
  /// One algorithm per (op(A) sizes, A's type, layout and alignment, B's type): found
  /// once for a reference problem with B's column count fixed (kInvariantRefCols),
  /// the minimum alignment for B and D, and then forced to one K split and no
  /// reduction scheme; kept only if cublasLtMatmulAlgoCheck accepts it for every
  /// column count of B from 1 to 4,096 and every 64th to 65,536; every later call uses
  /// it (Error when it does not apply). Each column of D is then computed by the same
  /// kernel, tile shape and K loop whatever B's column count is: batch invariance by
  /// construction (docs/architecture.md §2). Where no algorithm qualifies,
  /// batch_invariant_algo_exists() says so and the caller takes the fixed-order kernel
  /// (ops/cuda/fixed_order_gemm.h).
  FixedPerA,
};

/// B's column count (the batch M of linear_batch_invariant) of the reference problem
/// that FixedPerA chooses its algorithm for.
inline constexpr int64_t kInvariantRefCols = 128;

/// Whether FixedPerA has a pinned cuBLASLt algorithm for A (with d_rows = m and depth
/// k; B's type from `b`): chosen on first use and cached. Throws Error on a cuBLASLt
/// failure.
bool batch_invariant_algo_exists(const MatOperand& a, const MatOperand& b, int64_t m, int64_t k);

/// D[d_rows, d_cols] (f32, column-major, leading dimension d_ld) = op(A)·op(B) + β·D on
/// the compute stream, CUBLAS_COMPUTE_32F (no TF32: fp32 products for f32 inputs; exact
/// products and fp32 sums for bf16 inputs), with the cuBLASLt workspace of
/// ops/cuda/runtime.h. A and B have the same type. β = 0 does not read D (NaN in D is
/// overwritten). Descriptors, layouts and the algorithm are cached per problem
/// (thread-safe). Empty problems (a zero size) are the caller's to handle. Throws Error
/// naming the call on a cuBLASLt failure or when no algorithm exists.
void matmul(const MatOperand& a, const MatOperand& b, float* d, int64_t d_rows, int64_t d_cols, int64_t d_ld,
            float beta, AlgoChoice choice);

}  // namespace olmo2::ops::cuda::detail
