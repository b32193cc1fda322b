// The three local steps of the vocab-parallel cross-entropy + Z-loss (ops/backward.h);
// parallel/vocab_parallel_loss.cpp puts the two all-reduces between them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/backward.h"
#include "ops/cpu/fast_exp.h"
#include "ops/cpu/kernels.h"
#include "ops/op_checks.h"

namespace olmo2::ops {
void cpu::check_targets(const TensorView& targets_v, int64_t vocab_size) {
  check_targets_layout(targets_v);
  check_target_values(targets_v.i32(), targets_v.size(0), vocab_size);
}

void cpu::vocab_parallel_ce_row_max(const TensorView& logits, int64_t real_cols, const TensorView& row_max) {
  vocab_ce_check_logits(logits, real_cols);
  const int64_t rows = logits.size(0);
  vocab_ce_check_vector(row_max, rows, 1, "row_max", DType::F32);
  float* mx = row_max.f32();
  for (int64_t t = 0; t < rows; ++t) {
    const float* x = logits.f32() + t * logits.stride(0);
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < real_cols; ++i) m = std::max(m, x[i]);
    mx[t] = m;
  }
}

void cpu::vocab_parallel_ce_partials(const TensorView& logits, int64_t real_cols, int64_t vocab_begin,
                                     const TensorView& targets_v, const TensorView& row_max,
                                     const TensorView& stats_v, const TensorView& dlogits) {
  vocab_ce_check_logits(logits, real_cols);
  const int64_t rows = logits.size(0);
  vocab_ce_check_vector(row_max, rows, 1, "row_max", DType::F32);
  vocab_ce_check_vector(stats_v, rows, 2, "stats", DType::F32);
  vocab_ce_check_vector(targets_v, rows, 1, "targets", DType::I32);
  const bool want_grad = vocab_ce_check_partials_grad(dlogits, logits);
  const int32_t* targets = targets_v.i32();
  const float* mx = row_max.f32();
  float* stats = stats_v.f32();
#pragma omp parallel for schedule(static) if (rows * real_cols > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float* x = logits.f32() + t * logits.stride(0);
    float* dx = want_grad ? dlogits.f32() + t * dlogits.stride(0) : nullptr;
    const float m = mx[t];
    const int32_t tgt = targets[t];
    stats[2 * t + 1] = 0.0f;
    if (tgt != kIgnoreIndex && tgt >= vocab_begin && tgt < vocab_begin + real_cols) {
      stats[2 * t + 1] = x[tgt - vocab_begin];
    }
    double sum = 0;
    for (int64_t i = 0; i < real_cols; ++i) {
      const float e = cpu::fast_exp(x[i] - m);
      if (dx) dx[i] = e;
      sum += e;
    }
    stats[2 * t] = static_cast<float>(sum);
  }
}

CrossEntropySums cpu::vocab_parallel_ce_finish(const TensorView& row_max, const TensorView& stats_v,
                                               const TensorView& targets_v, int64_t vocab_begin, int64_t real_cols,
                                               float z_coef, float scale, const TensorView& dlogits) {
  const int64_t rows = row_max.numel();
  vocab_ce_check_vector(row_max, rows, 1, "row_max", DType::F32);
  vocab_ce_check_vector(stats_v, rows, 2, "stats", DType::F32);
  vocab_ce_check_vector(targets_v, rows, 1, "targets", DType::I32);
  const bool want_grad = vocab_ce_check_finish_grad(dlogits, rows, real_cols);
  const int64_t cols = want_grad ? dlogits.size(1) : 0;
  const int32_t* targets = targets_v.i32();
  const float* mx = row_max.f32();
  const float* stats = stats_v.f32();
  double ce = 0, zsq = 0;
  int64_t count = 0;
  for (int64_t t = 0; t < rows; ++t) {
    float* dx = want_grad ? dlogits.f32() + t * dlogits.stride(0) : nullptr;
    const int32_t tgt = targets[t];
    if (tgt == kIgnoreIndex) {
      if (dx) std::memset(dx, 0, sizeof(float) * static_cast<size_t>(cols));
      continue;
    }
    const double sum = stats[2 * t];
    const double lse = static_cast<double>(mx[t]) + std::log(sum);
    ce += lse - stats[2 * t + 1];
    zsq += lse * lse;
    ++count;
    if (dx) {
      const float coef = static_cast<float>(scale * (1.0 + 2.0 * z_coef * lse) / sum);
      for (int64_t i = 0; i < real_cols; ++i) dx[i] *= coef;
      std::memset(dx + real_cols, 0, sizeof(float) * static_cast<size_t>(cols - real_cols));
      if (tgt >= vocab_begin && tgt < vocab_begin + real_cols) dx[tgt - vocab_begin] -= scale;
    }
  }
  return CrossEntropySums{ce, zsq, count};
}

}  // namespace olmo2::ops
