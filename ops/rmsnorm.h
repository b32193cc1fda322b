// RMSNorm, OLMo 2 form: fp32 statistics, weight multiplied before casting back; and its
// two halves, for a normalized width split over tensor-parallel ranks.
#pragma once

#include <cstdint>
#include <utility>

#include "ops/tensor.h"

namespace olmo2::ops {

/// y[t, :] = cast(w · x[t, :] / sqrt(mean(x[t, :]²) + eps)) for every row t.
/// x, y: [T, D], same dtype (f32 or bf16), y may alias x; w: [D], f32 or bf16.
/// Statistics and the product with w are fp32; the result is cast to x's dtype once.
/// Source: `Olmo2RMSNorm` in transformers (models/olmo2/modeling_olmo2.py).
/// Throws ShapeError on mismatched shapes, dtypes or devices.
void rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& y);

/// First half of rmsnorm for a row split over ranks: sumsq[t] = Σ_i x[t, i]², fp32,
/// summed in increasing i (the same operations as rmsnorm's statistics). x [T, D] f32;
/// sumsq [T] f32, may be strided (a column of a [T, 2] buffer). ShapeError otherwise.
void rmsnorm_partials(const TensorView& x, const TensorView& sumsq);

/// Second half: y[t, i] = w[i] · (x[t, i] · r_t), r_t = 1/sqrt(sumsq[t]/d_total + eps),
/// with the GLOBAL sums of squares (all-reduced over the ranks) and the global width
/// d_total ≥ D. With the local sums and d_total = D this is rmsnorm, bit for bit.
/// x, y [T, D] f32 (y may alias x); w [D] f32 or bf16; sumsq [T] f32 (may be strided).
/// Throws ShapeError on mismatched shapes or d_total < D.
void rmsnorm_apply(const TensorView& x, const TensorView& w, const TensorView& sumsq, int64_t d_total, float eps,
                   const TensorView& y);

/// Checks the shared contract of every rmsnorm backend; returns {T, D}.
std::pair<int64_t, int64_t> rmsnorm_check(const TensorView& x, const TensorView& w, const TensorView& y);

}  // namespace olmo2::ops
