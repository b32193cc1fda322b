// Internal entry points of the batch-invariant product, for its tests: the two paths
// that `linear_batch_invariant` chooses between, callable one by one.
#pragma once

#include "ops/tensor.h"

namespace olmo2::ops::detail {

/// Whether this CPU has AVX2 and FMA, i.e. whether `linear_batch_invariant` takes the
/// vector path.
bool batch_invariant_has_avx2_fma();

/// `linear_batch_invariant` on the portable path (std::fmaf on 16 lanes), whatever the
/// CPU. Same checks and same bits as the public function.
void linear_batch_invariant_portable(const TensorView& x, const TensorView& w, const TensorView& y);

/// `linear_batch_invariant` on the AVX2+FMA path. Throws ShapeError where the CPU
/// lacks AVX2 or FMA.
void linear_batch_invariant_avx2(const TensorView& x, const TensorView& w, const TensorView& y);

}  // namespace olmo2::ops::detail
