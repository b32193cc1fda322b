// Placeholders for the CUDA ops of this group that are not written yet: each throws
// ShapeError naming the op, never a wrong result (docs/architecture.md §2). Delete a
// function here when its kernel lands in ops/cuda/.
#include "core/error.h"
#include "ops/cuda/kernels.h"

namespace olmo2::ops::cuda {

void linear(const TensorView& /*x*/, const TensorView& /*w*/, const TensorView& /*y*/) {
  OLMO2_THROW(ShapeError, "ops::linear has no cuda implementation yet");
}
void linear_batch_invariant(const TensorView& /*x*/, const TensorView& /*w*/, const TensorView& /*y*/) {
  OLMO2_THROW(ShapeError, "ops::linear_batch_invariant has no cuda implementation yet");
}
void linear_backward(const TensorView& /*x*/, const TensorView& /*w*/, const TensorView& /*dy*/, const TensorView& /*dx*/, const TensorView& /*dw*/, bool /*accumulate_dw*/, bool /*accumulate_dx*/) {
  OLMO2_THROW(ShapeError, "ops::linear_backward has no cuda implementation yet");
}

}  // namespace olmo2::ops::cuda
