// Host-side pieces of the CUDA losses (ops/cuda/loss_common.h).
#include "ops/cuda/loss_common.h"

#include "core/error.h"
#include "ops/backward.h"
#include "ops/cuda/check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"
#include "ops/op_checks.h"

namespace olmo2::ops::cuda {

std::vector<int32_t> targets_to_host(const TensorView& targets) {
  OLMO2_CHECK(targets.dim() == 1 && targets.dtype() == DType::I32 && targets.stride(0) == 1,
              "targets must be a contiguous 1-d i32 view, got ", targets.shape_str(), " ", dtype_name(targets.dtype()));
  std::vector<int32_t> host(static_cast<size_t>(targets.size(0)));
  if (!host.empty()) copy(targets, TensorView(host.data(), DType::I32, {targets.size(0)}, Device::CPU));
  return host;
}

void check_target_values(const std::vector<int32_t>& targets, int64_t vocab_size) {
  ops::check_target_values(targets.data(), static_cast<int64_t>(targets.size()), vocab_size);
}

RowSums::RowSums(int64_t rows, int per_row) : n_(static_cast<size_t>(rows) * static_cast<size_t>(per_row)) {
  p_ = static_cast<double*>(device_malloc(n_ * sizeof(double)));
}

RowSums::~RowSums() { device_free(p_); }

std::vector<double> RowSums::to_host() const {
  std::vector<double> h(n_);
  if (n_ == 0) return h;
  OLMO2_CUDA_CHECK(cudaMemcpyAsync(h.data(), p_, n_ * sizeof(double), cudaMemcpyDeviceToHost, compute_stream()));
  synchronize();
  return h;
}

}  // namespace olmo2::ops::cuda
