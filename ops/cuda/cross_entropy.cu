// CUDA fused cross-entropy + Z-loss and the target check (ops/backward.h; the CPU ops:
// ops/cpu/cross_entropy.cpp, ops/cpu/vocab_parallel_ce.cpp). One block per row: fp32 max and
// exponentials, the exp sum and the log-sum-exp in fp64, dlogits written on the device;
// the per-row losses come back to the host and are added in row order there.
//
// Differences from the CPU, within the tests' tolerance: the CPU's fast_exp (≈2 ulp)
// is expf here (≈2 ulp), and the exp sum is a tree of fp64 partials instead of fp32
// blocks of 256 added into fp64 (more accurate, not bit-equal).
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/backward.h"
#include "ops/cuda/check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/loss_common.h"
#include "ops/cuda/reduce.cuh"
#include "ops/cuda/runtime.h"
#include "ops/op_checks.h"

namespace olmo2::ops::cuda {
namespace {

/// Row t of logits [T, V]: out[2t] ← lse − x[target], out[2t + 1] ← lse²; dlogits row ←
/// scale·(1 + 2·z_coef·lse)·softmax − scale·onehot, or zeros (and out zeros) for an
/// ignored row. dlogits may alias logits: each thread writes only the columns it read.
__global__ void cross_entropy_kernel(const float* logits, int64_t x_stride, const int32_t* targets, float* dlogits,
                                     int64_t d_stride, int64_t vocab, float z_coef, float scale, double* out) {
  const int64_t t = blockIdx.x;
  const float* x = logits + t * x_stride;
  float* dx = dlogits ? dlogits + t * d_stride : nullptr;
  const int32_t tgt = targets[t];
  if (tgt == kIgnoreIndex) {
    if (dx) {
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) dx[i] = 0.0f;
    }
    if (threadIdx.x == 0) out[2 * t] = 0.0, out[2 * t + 1] = 0.0;
    return;
  }
  const double x_tgt = x[tgt];  // read by every thread before the reduction's barrier, so before any write
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) m = fmaxf(m, x[i]);
  m = detail::block_reduce(m, detail::Max{}, -INFINITY);
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float e = expf(x[i] - m);
    if (dx) dx[i] = e;
    sum += e;
  }
  sum = detail::block_reduce(sum, detail::Sum{}, 0.0);
  const double lse = static_cast<double>(m) + log(sum);
  if (threadIdx.x == 0) out[2 * t] = lse - x_tgt, out[2 * t + 1] = lse * lse;
  if (dx) {
    const float coef = static_cast<float>(scale * (1.0 + 2.0 * z_coef * lse) / sum);
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      float v = dx[i] * coef;
      if (i == tgt) v -= scale;
      dx[i] = v;
    }
  }
}

}  // namespace

void check_targets(const TensorView& targets, int64_t vocab_size) {
  check_targets_layout(targets);
  check_target_values(targets_to_host(targets), vocab_size);
}

CrossEntropySums cross_entropy_zloss(const TensorView& logits, const TensorView& targets, float z_coef, float scale,
                                     const TensorView& dlogits) {
  const bool want_grad = cross_entropy_check(logits, targets, dlogits);
  OLMO2_CHECK(logits.device() == Device::CUDA, "cross_entropy_zloss: logits not on the GPU");
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (rows == 0) return {};
  const std::vector<int32_t> tg = targets_to_host(targets);
  check_target_values(tg, vocab);  // before any write: the CPU's InputError
  RowSums out(rows, 2);
  OLMO2_LAUNCH(static_cast<unsigned>(rows), kLossThreads, 0, compute_stream(), cross_entropy_kernel)(
      static_cast<const float*>(logits.data()), logits.stride(0), static_cast<const int32_t*>(targets.data()),
      want_grad ? static_cast<float*>(dlogits.data()) : nullptr, want_grad ? dlogits.stride(0) : 0, vocab, z_coef,
      scale, out.device());
  OLMO2_CUDA_CHECK_LAUNCH("cross_entropy_kernel");
  const std::vector<double> h = out.to_host();
  CrossEntropySums sums;
  for (int64_t t = 0; t < rows; ++t) {
    if (tg[static_cast<size_t>(t)] == kIgnoreIndex) continue;
    sums.ce_sum += h[static_cast<size_t>(2 * t)];
    sums.z_sq_sum += h[static_cast<size_t>(2 * t + 1)];
    ++sums.count;
  }
  return sums;
}

}  // namespace olmo2::ops::cuda
