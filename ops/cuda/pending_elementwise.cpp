// Placeholders for the CUDA ops of this group that are not written yet: each throws
// ShapeError naming the op, never a wrong result (docs/architecture.md §2). Delete a
// function here when its kernel lands in ops/cuda/.
#include "core/error.h"
#include "ops/cuda/kernels.h"

namespace olmo2::ops::cuda {

void embedding(const TensorView& /*ids*/, const TensorView& /*table*/, const TensorView& /*out*/) {
  OLMO2_THROW(ShapeError, "ops::embedding has no cuda implementation yet");
}
void embedding_slice(const TensorView& /*ids*/, const TensorView& /*table*/, int64_t /*first_id*/, const TensorView& /*out*/) {
  OLMO2_THROW(ShapeError, "ops::embedding_slice has no cuda implementation yet");
}
void embedding_backward(const TensorView& /*ids*/, const TensorView& /*dout*/, const TensorView& /*dtable*/) {
  OLMO2_THROW(ShapeError, "ops::embedding_backward has no cuda implementation yet");
}
void embedding_slice_backward(const TensorView& /*ids*/, const TensorView& /*dout*/, int64_t /*first_id*/, const TensorView& /*dtable*/) {
  OLMO2_THROW(ShapeError, "ops::embedding_slice_backward has no cuda implementation yet");
}
void rmsnorm_partials(const TensorView& /*x*/, const TensorView& /*sumsq*/) {
  OLMO2_THROW(ShapeError, "ops::rmsnorm_partials has no cuda implementation yet");
}
void rmsnorm_apply(const TensorView& /*x*/, const TensorView& /*w*/, const TensorView& /*sumsq*/, int64_t /*d_total*/, float /*eps*/, const TensorView& /*y*/) {
  OLMO2_THROW(ShapeError, "ops::rmsnorm_apply has no cuda implementation yet");
}
void rmsnorm_backward(const TensorView& /*x*/, const TensorView& /*w*/, float /*eps*/, const TensorView& /*dy*/, const TensorView& /*dx*/, const TensorView& /*dw*/) {
  OLMO2_THROW(ShapeError, "ops::rmsnorm_backward has no cuda implementation yet");
}
void rmsnorm_backward_partials(const TensorView& /*x*/, const TensorView& /*w*/, const TensorView& /*dy*/, const TensorView& /*sumsq*/, const TensorView& /*dot*/) {
  OLMO2_THROW(ShapeError, "ops::rmsnorm_backward_partials has no cuda implementation yet");
}
void rmsnorm_backward_finish(const TensorView& /*x*/, const TensorView& /*w*/, float /*eps*/, int64_t /*d_total*/, const TensorView& /*dy*/, const TensorView& /*sumsq*/, const TensorView& /*dot*/, const TensorView& /*dx*/, const TensorView& /*dw*/) {
  OLMO2_THROW(ShapeError, "ops::rmsnorm_backward_finish has no cuda implementation yet");
}
void rope(const TensorView& /*x*/, const TensorView& /*positions*/, int /*n_heads*/, int /*head_dim*/, float /*theta*/) {
  OLMO2_THROW(ShapeError, "ops::rope has no cuda implementation yet");
}
void rope_backward(const TensorView& /*dy*/, const TensorView& /*positions*/, int /*n_heads*/, int /*head_dim*/, float /*theta*/) {
  OLMO2_THROW(ShapeError, "ops::rope_backward has no cuda implementation yet");
}
void swiglu(const TensorView& /*gate*/, const TensorView& /*up*/, const TensorView& /*out*/, DType /*act*/) {
  OLMO2_THROW(ShapeError, "ops::swiglu has no cuda implementation yet");
}
void swiglu_backward(const TensorView& /*gate*/, const TensorView& /*up*/, const TensorView& /*dout*/, const TensorView& /*dgate*/, const TensorView& /*dup*/) {
  OLMO2_THROW(ShapeError, "ops::swiglu_backward has no cuda implementation yet");
}
void add_inplace(const TensorView& /*y*/, const TensorView& /*x*/, DType /*act*/) {
  OLMO2_THROW(ShapeError, "ops::add_inplace has no cuda implementation yet");
}
void adamw_step(const TensorView& /*param*/, const TensorView& /*grad*/, const TensorView& /*exp_avg*/, const TensorView& /*exp_avg_sq*/, const AdamWStep& /*step*/) {
  OLMO2_THROW(ShapeError, "ops::adamw_step has no cuda implementation yet");
}

}  // namespace olmo2::ops::cuda
