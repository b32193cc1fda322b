// Placeholders for the CUDA ops of this group that are not written yet: each throws
// ShapeError naming the op, never a wrong result (docs/architecture.md §2). Delete a
// function here when its kernel lands in ops/cuda/.
#include "core/error.h"
#include "ops/cuda/kernels.h"

namespace olmo2::ops::cuda {

CrossEntropySums cross_entropy_zloss(const TensorView& /*logits*/, const TensorView& /*targets*/, float /*z_coef*/, float /*scale*/, const TensorView& /*dlogits*/) {
  OLMO2_THROW(ShapeError, "ops::cross_entropy_zloss has no cuda implementation yet");
}
void check_targets(const TensorView& /*targets*/, int64_t /*vocab_size*/) {
  OLMO2_THROW(ShapeError, "ops::check_targets has no cuda implementation yet");
}
void vocab_parallel_ce_row_max(const TensorView& /*logits*/, int64_t /*real_cols*/, const TensorView& /*row_max*/) {
  OLMO2_THROW(ShapeError, "ops::vocab_parallel_ce_row_max has no cuda implementation yet");
}
void vocab_parallel_ce_partials(const TensorView& /*logits*/, int64_t /*real_cols*/, int64_t /*vocab_begin*/, const TensorView& /*targets*/, const TensorView& /*row_max*/, const TensorView& /*stats*/, const TensorView& /*dlogits*/) {
  OLMO2_THROW(ShapeError, "ops::vocab_parallel_ce_partials has no cuda implementation yet");
}
CrossEntropySums vocab_parallel_ce_finish(const TensorView& /*row_max*/, const TensorView& /*stats*/, const TensorView& /*targets*/, int64_t /*vocab_begin*/, int64_t /*real_cols*/, float /*z_coef*/, float /*scale*/, const TensorView& /*dlogits*/) {
  OLMO2_THROW(ShapeError, "ops::vocab_parallel_ce_finish has no cuda implementation yet");
}

}  // namespace olmo2::ops::cuda
