// Placeholders for the CUDA ops of this group that are not written yet: each throws
// ShapeError naming the op, never a wrong result (docs/architecture.md §2). Delete a
// function here when its kernel lands in ops/cuda/.
#include "core/error.h"
#include "ops/cuda/kernels.h"

namespace olmo2::ops::cuda {

void causal_attention(const TensorView& /*q*/, const TensorView& /*k*/, const TensorView& /*v*/, int /*n_heads*/, int /*n_kv_heads*/, const TensorView& /*out*/, DType /*act*/) {
  OLMO2_THROW(ShapeError, "ops::causal_attention has no cuda implementation yet");
}
float causal_attention_max_logit(const TensorView& /*q*/, const TensorView& /*k*/, int /*n_heads*/, int /*n_kv_heads*/) {
  OLMO2_THROW(ShapeError, "ops::causal_attention_max_logit has no cuda implementation yet");
}
void paged_attention(const TensorView& /*q*/, const TensorView& /*k_pool*/, const TensorView& /*v_pool*/, int64_t /*block_size*/, const std::vector<PagedSequence>& /*sequences*/, int /*n_heads*/, int /*n_kv_heads*/, const TensorView& /*out*/, DType /*act*/) {
  OLMO2_THROW(ShapeError, "ops::paged_attention has no cuda implementation yet");
}
void causal_attention_backward(const TensorView& /*q*/, const TensorView& /*k*/, const TensorView& /*v*/, const TensorView& /*dout*/, int /*n_heads*/, int /*n_kv_heads*/, const TensorView& /*dq*/, const TensorView& /*dk*/, const TensorView& /*dv*/) {
  OLMO2_THROW(ShapeError, "ops::causal_attention_backward has no cuda implementation yet");
}

}  // namespace olmo2::ops::cuda
