// Matrix products (CPU: OpenBLAS sgemm for f32 weights; the bf16 product of
// ops/batch_invariant_gemm.h for bf16 weights, docs/architecture.md §2).
#pragma once

#include "ops/tensor.h"

namespace olmo2::ops {

/// y[M, N] = x[M, K] · w[N, K]ᵀ — `torch.nn.Linear` without bias (weights stored
/// [out, in] as in HF checkpoints). x and y are f32 CPU views, w is f32 or bf16; each
/// has a contiguous last dimension, rows may be strided.
///  - f32 w: OpenBLAS sgemm (its summation order may change with M).
///  - bf16 w: y = bf16(x)·wᵀ with fp32 accumulation, as PyTorch's bf16 linear with a
///    bf16 input: x is rounded to bf16 (nearest even) first, a no-op for bf16-valued
///    activations. On bf16_training_gemm_path() (ops/bf16_gemm.h): by default computed
///    as `linear_batch_invariant` with a bf16 w (VDPBF16PS, AVX2 or portable: the same
///    operations and bits, so also batch-invariant); on the onednn path (AMX machines,
///    or OLMO2_BF16_GEMM=onednn) by a oneDNN bf16 matmul, NOT batch-invariant. Either
///    way |y − exact| ≤ (K'/16 + 5)·2⁻²⁴·Σ_k|x̂_k·w_k| with x̂ = bf16(x), K' = K rounded
///    up to 32, up to flushes below 2⁻¹²⁶ (tested; oneDNN documents no summation order).
///    InputError when OLMO2_BF16_GEMM names no path or one this CPU lacks.
/// Throws ShapeError on mismatched shapes, another dtype or a strided last dimension.
void linear(const TensorView& x, const TensorView& w, const TensorView& y);

/// FLOPs of `linear` for the given sizes: 2·M·N·K.
inline double linear_flops(int64_t m, int64_t n, int64_t k) { return 2.0 * m * n * k; }

/// Measured FLOP/s of `linear` on n×n×n (the model's cblas_sgemm call) at the current
/// thread count: the best of `reps` timed runs after one warm-up, on fixed pseudo-random
/// data in [−1, 1). The sgemm peak that benchmarks and MFU are measured against.
double measure_linear_flops(int64_t n, int reps);

}  // namespace olmo2::ops
