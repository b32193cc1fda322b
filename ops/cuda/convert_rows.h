// Row-wise f32 ↔ bf16 conversions into temporaries for the CUDA products
// (ops/cuda/linear.cpp). Internal to ops/cuda/; enqueued on the compute stream.
#pragma once

#include <cstdint>

namespace olmo2::ops::cuda::detail {

/// out[r, c] = bf16(x[r, c]) (nearest even, NaN stays NaN, as ops/dtype.h f32_to_bf16)
/// for r < rows, c < cols: x f32 with row stride ldx, out bf16 with row stride ld_out.
void round_rows_to_bf16(const float* x, int64_t ldx, int64_t rows, int64_t cols, void* out, int64_t ld_out);

/// out[r, c] = f32(w[r, c]) (exact) for r < rows, c < cols: w bf16 with row stride ldw,
/// out f32 with row stride ld_out.
void widen_rows_to_f32(const void* w, int64_t ldw, int64_t rows, int64_t cols, float* out, int64_t ld_out);

}  // namespace olmo2::ops::cuda::detail
