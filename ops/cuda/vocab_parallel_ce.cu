// CUDA steps of the vocab-parallel cross-entropy + Z-loss (ops/backward.h; the CPU ops:
// ops/cpu/vocab_parallel_ce.cpp; the all-reduces between them are the caller's,
// parallel/vocab_parallel_loss.cpp). One block per row; fp32 max and exponentials, the
// exp sum in fp64 (a tree of partials; the CPU adds left to right) rounded to fp32 as
// on the CPU; the finishing log-sum-exp in fp64 and the loss sums added on the host in
// row order. expf stands in for the CPU's fast_exp (both ≈2 ulp).
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

__global__ void row_max_kernel(const float* logits, int64_t stride, int64_t real_cols, float* row_max) {
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * stride;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < real_cols; i += blockDim.x) m = fmaxf(m, x[i]);
  m = detail::block_reduce(m, detail::Max{}, -INFINITY);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__global__ void partials_kernel(const float* logits, int64_t x_stride, int64_t real_cols, int64_t vocab_begin,
                                const int32_t* targets, const float* row_max, float* stats, float* dlogits,
                                int64_t d_stride) {
  const int64_t t = blockIdx.x;
  const float* x = logits + t * x_stride;
  float* dx = dlogits ? dlogits + t * d_stride : nullptr;
  const float m = row_max[t];
  const int64_t tgt = targets[t];
  const bool held = tgt != kIgnoreIndex && tgt >= vocab_begin && tgt < vocab_begin + real_cols;
  const float x_tgt = held ? x[tgt - vocab_begin] : 0.0f;
  __syncthreads();  // every thread has read the target's logit before dlogits (may alias) is written
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < real_cols; i += blockDim.x) {
    const float e = expf(x[i] - m);
    if (dx) dx[i] = e;
    sum += e;
  }
  sum = detail::block_reduce(sum, detail::Sum{}, 0.0);
  if (threadIdx.x == 0) stats[2 * t] = static_cast<float>(sum), stats[2 * t + 1] = x_tgt;
}

/// out[3t .. 3t + 2] ← (lse − target logit, lse², 1) for a counted row, zeros for an
/// ignored one; dlogits row as the header says.
__global__ void finish_kernel(const float* row_max, const float* stats, const int32_t* targets, int64_t vocab_begin,
                              int64_t real_cols, float z_coef, float scale, float* dlogits, int64_t d_stride,
                              int64_t cols, double* out) {
  const int64_t t = blockIdx.x;
  float* dx = dlogits ? dlogits + t * d_stride : nullptr;
  const int64_t tgt = targets[t];
  if (tgt == kIgnoreIndex) {
    if (dx) {
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) dx[i] = 0.0f;
    }
    if (threadIdx.x == 0) out[3 * t] = 0.0, out[3 * t + 1] = 0.0, out[3 * t + 2] = 0.0;
    return;
  }
  const double sum = stats[2 * t];
  const double lse = static_cast<double>(row_max[t]) + log(sum);
  if (threadIdx.x == 0) {
    out[3 * t] = lse - static_cast<double>(stats[2 * t + 1]), out[3 * t + 1] = lse * lse, out[3 * t + 2] = 1.0;
  }
  if (!dx) return;
  const float coef = static_cast<float>(scale * (1.0 + 2.0 * z_coef * lse) / sum);
  const int64_t local = tgt - vocab_begin;  // the target's column when this rank holds it
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    float v = i < real_cols ? dx[i] * coef : 0.0f;
    if (i < real_cols && i == local) v -= scale;
    dx[i] = v;
  }
}

}  // namespace

void vocab_parallel_ce_row_max(const TensorView& logits, int64_t real_cols, const TensorView& row_max) {
  vocab_ce_check_logits(logits, real_cols);
  const int64_t rows = logits.size(0);
  vocab_ce_check_vector(row_max, rows, 1, "row_max", DType::F32);
  if (rows == 0) return;
  OLMO2_LAUNCH(static_cast<unsigned>(rows), kLossThreads, 0, compute_stream(), row_max_kernel)(
      static_cast<const float*>(logits.data()), logits.stride(0), real_cols, static_cast<float*>(row_max.data()));
  OLMO2_CUDA_CHECK_LAUNCH("row_max_kernel");
}

void vocab_parallel_ce_partials(const TensorView& logits, int64_t real_cols, int64_t vocab_begin,
                                const TensorView& targets, const TensorView& row_max, const TensorView& stats,
                                const TensorView& dlogits) {
  vocab_ce_check_logits(logits, real_cols);
  const int64_t rows = logits.size(0);
  vocab_ce_check_vector(row_max, rows, 1, "row_max", DType::F32);
  vocab_ce_check_vector(stats, rows, 2, "stats", DType::F32);
  vocab_ce_check_vector(targets, rows, 1, "targets", DType::I32);
  const bool want_grad = vocab_ce_check_partials_grad(dlogits, logits);
  if (rows == 0) return;
  OLMO2_LAUNCH(static_cast<unsigned>(rows), kLossThreads, 0, compute_stream(), partials_kernel)(
      static_cast<const float*>(logits.data()), logits.stride(0), real_cols, vocab_begin,
      static_cast<const int32_t*>(targets.data()), static_cast<const float*>(row_max.data()),
      static_cast<float*>(stats.data()), want_grad ? static_cast<float*>(dlogits.data()) : nullptr,
      want_grad ? dlogits.stride(0) : 0);
  OLMO2_CUDA_CHECK_LAUNCH("partials_kernel");
}

CrossEntropySums vocab_parallel_ce_finish(const TensorView& row_max, const TensorView& stats,
                                          const TensorView& targets, int64_t vocab_begin, int64_t real_cols,
                                          float z_coef, float scale, const TensorView& dlogits) {
  const int64_t rows = row_max.numel();
  vocab_ce_check_vector(row_max, rows, 1, "row_max", DType::F32);
  vocab_ce_check_vector(stats, rows, 2, "stats", DType::F32);
  vocab_ce_check_vector(targets, rows, 1, "targets", DType::I32);
  const bool want_grad = vocab_ce_check_finish_grad(dlogits, rows, real_cols);
  if (rows == 0) return {};
  RowSums out(rows, 3);
  OLMO2_LAUNCH(static_cast<unsigned>(rows), kLossThreads, 0, compute_stream(), finish_kernel)(
      static_cast<const float*>(row_max.data()), static_cast<const float*>(stats.data()),
      static_cast<const int32_t*>(targets.data()), vocab_begin, real_cols, z_coef, scale,
      want_grad ? static_cast<float*>(dlogits.data()) : nullptr, want_grad ? dlogits.stride(0) : 0,
      want_grad ? dlogits.size(1) : 0, out.device());
  OLMO2_CUDA_CHECK_LAUNCH("finish_kernel");
  const std::vector<double> h = out.to_host();
  CrossEntropySums sums;
  for (int64_t t = 0; t < rows; ++t) {
    const size_t at = static_cast<size_t>(3 * t);
    if (h[at + 2] == 0.0) continue;
    sums.ce_sum += h[at], sums.z_sq_sum += h[at + 1], ++sums.count;
  }
  return sums;
}

}  // namespace olmo2::ops::cuda
