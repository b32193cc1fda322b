// Our own product y = x·wᵀ with a fixed summation order (docs/architecture.md §2,
// "Batch invariance on the GPU"): the serving product's fallback for a weight shape whose
// cuBLASLt algorithm cannot be pinned for every batch size. Internal to ops/cuda/.
#pragma once

#include <cstdint>

namespace olmo2::ops::cuda::detail {

/// y[m, n] = Σ_k x[m, k]·w[n, k] for m < rows_x, n < rows_w, each element summed by one
/// thread as acc = fmaf(x, w, acc) over k = 0, 1, …, K−1 in that order, from acc = 0:
/// the same bits for a row whatever the batch around it, its position in it, or the
/// launch shape. x: f32, or bf16 (then exact products in fp32) when `x_bf16`, row stride
/// ldx; w: f32, or bf16 when `w_bf16` (x is then bf16 too), row stride ldw; y f32 with
/// row stride ldy. On the compute stream; launch errors throw Error naming the kernel.
void fixed_order_product(const void* x, bool x_bf16, int64_t ldx, const void* w, bool w_bf16, int64_t ldw, float* y,
                         int64_t ldy, int64_t rows_x, int64_t rows_w, int64_t k);

}  // namespace olmo2::ops::cuda::detail
