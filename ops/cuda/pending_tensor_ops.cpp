// Placeholders for the CUDA ops of this group that are not written yet: each throws
// ShapeError naming the op, never a wrong result (docs/architecture.md §2). Delete a
// function here when its kernel lands in ops/cuda/.
#include "core/error.h"
#include "ops/cuda/kernels.h"

namespace olmo2::ops::cuda {

void copy(const TensorView& /*src*/, const TensorView& /*dst*/) {
  OLMO2_THROW(ShapeError, "ops::copy has no cuda implementation yet");
}
void fill(const TensorView& /*dst*/, double /*value*/) {
  OLMO2_THROW(ShapeError, "ops::fill has no cuda implementation yet");
}
void gather_rows(const TensorView& /*src*/, const TensorView& /*index*/, const TensorView& /*dst*/) {
  OLMO2_THROW(ShapeError, "ops::gather_rows has no cuda implementation yet");
}
void scatter_rows(const TensorView& /*src*/, const TensorView& /*index*/, const TensorView& /*dst*/) {
  OLMO2_THROW(ShapeError, "ops::scatter_rows has no cuda implementation yet");
}
void round_to(const TensorView& /*x*/, DType /*dtype*/) {
  OLMO2_THROW(ShapeError, "ops::round_to has no cuda implementation yet");
}
void scale(const TensorView& /*x*/, float /*factor*/) {
  OLMO2_THROW(ShapeError, "ops::scale has no cuda implementation yet");
}
double sum_squares(const TensorView& /*x*/, double /*start*/) {
  OLMO2_THROW(ShapeError, "ops::sum_squares has no cuda implementation yet");
}
double sum_row_norms(const TensorView& /*x*/) {
  OLMO2_THROW(ShapeError, "ops::sum_row_norms has no cuda implementation yet");
}

}  // namespace olmo2::ops::cuda
