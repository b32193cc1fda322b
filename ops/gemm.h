// Matrix products (CPU: OpenBLAS sgemm).
#pragma once

#include "ops/tensor.h"

namespace olmo2::ops {

/// y[M, N] = x[M, K] · w[N, K]ᵀ — `torch.nn.Linear` without bias (weights stored
/// [out, in] as in HF checkpoints). All three are f32 CPU views whose last dimension
/// is contiguous; rows may be strided. Throws ShapeError on mismatched shapes.
void linear(const TensorView& x, const TensorView& w, const TensorView& y);

/// FLOPs of `linear` for the given sizes: 2·M·N·K.
inline double linear_flops(int64_t m, int64_t n, int64_t k) { return 2.0 * m * n * k; }

/// Measured FLOP/s of `linear` on n×n×n (the model's cblas_sgemm call) at the current
/// thread count: the best of `reps` timed runs after one warm-up, on fixed pseudo-random
/// data in [−1, 1). The sgemm peak that benchmarks and MFU are measured against.
double measure_linear_flops(int64_t n, int reps);

}  // namespace olmo2::ops
