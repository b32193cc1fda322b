// Host-side pieces shared by the CUDA losses (ops/cuda/cross_entropy.cu,
// ops/cuda/vocab_parallel_ce.cu; docs/architecture.md §2).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/tensor.h"

namespace olmo2::ops::cuda {

/// Threads per block of the one-block-per-row loss kernels.
inline constexpr int kLossThreads = 512;

/// The values of a contiguous 1-d i32 view (device or host) on the host; waits for the
/// compute stream when the view is on the device.
std::vector<int32_t> targets_to_host(const TensorView& targets);

/// ops::check_target_values (ops/op_checks.h, the CPU's check) on a host copy of the
/// targets: InputError for the first target outside [0, vocab_size) and not ignored.
void check_target_values(const std::vector<int32_t>& targets, int64_t vocab_size);

/// `rows` × `per_row` fp64 results of a loss kernel, in device scratch from the caching
/// allocator (returned on destruction).
class RowSums {
 public:
  RowSums(int64_t rows, int per_row);
  ~RowSums();
  RowSums(const RowSums&) = delete;
  RowSums& operator=(const RowSums&) = delete;
  double* device() const { return p_; }
  /// The results on the host, row-major (waits for the compute stream).
  std::vector<double> to_host() const;

 private:
  double* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace olmo2::ops::cuda
