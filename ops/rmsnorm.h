// RMSNorm, OLMo 2 form: fp32 statistics, weight multiplied before casting back.
#pragma once

#include "ops/tensor.h"

namespace olmo2::ops {

/// y[t, :] = cast(w · x[t, :] / sqrt(mean(x[t, :]²) + eps)) for every row t.
/// x, y: [T, D], same dtype (f32 or bf16), y may alias x; w: [D], f32 or bf16.
/// Statistics and the product with w are fp32; the result is cast to x's dtype once.
/// Source: `Olmo2RMSNorm` in transformers (models/olmo2/modeling_olmo2.py).
/// Dispatches on the views' device. Throws ShapeError on mismatched shapes, dtypes or
/// devices.
void rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& y);

namespace cpu {
/// CPU implementation of ops::rmsnorm (same contract).
void rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& y);
}  // namespace cpu

namespace cuda {
/// CUDA implementation of ops::rmsnorm (same contract; views on Device::CUDA).
/// Throws Error in a build without CUDA or on a CUDA failure.
void rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& y);
}  // namespace cuda

/// Checks the shared contract of every rmsnorm backend; returns {T, D}.
std::pair<int64_t, int64_t> rmsnorm_check(const TensorView& x, const TensorView& w,
                                          const TensorView& y);

}  // namespace olmo2::ops
