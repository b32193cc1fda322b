#include "parallel/vocab_parallel_loss.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cpu/fast_exp.h"
#include "core/error.h"

namespace olmo2::parallel {

ops::CrossEntropySums vocab_parallel_cross_entropy(const TensorView& logits, int64_t vocab_begin,
                                                   int64_t real_cols, int64_t vocab_size,
                                                   const int32_t* targets, float z_coef, float scale,
                                                   const TensorView& dlogits, Communicator& tp) {
  OLMO2_CHECK(logits.dim() == 2 && logits.dtype() == DType::F32 && logits.stride(1) == 1,
                    "vocab_parallel_cross_entropy: logits must be a 2-D f32 view with contiguous rows");
  const int64_t rows = logits.size(0), cols = logits.size(1);
  const bool want_grad = !dlogits.empty();
  OLMO2_CHECK(!want_grad || dlogits.shape() == logits.shape(), "vocab_parallel_cross_entropy: dlogits shape");
  OLMO2_CHECK(real_cols >= 0 && real_cols <= cols, "vocab_parallel_cross_entropy: real_cols ", real_cols,
                    " outside [0, ", cols, "]");
  for (int64_t t = 0; t < rows; ++t) {
    if (targets[t] != ops::kIgnoreIndex && (targets[t] < 0 || targets[t] >= vocab_size)) {
      OLMO2_THROW(InputError, "target ", targets[t], " at row ", t, " is outside the vocabulary [0, ", vocab_size,
                  ") and is not the ignore index ", ops::kIgnoreIndex);
    }
  }
  std::vector<float> mx(static_cast<size_t>(rows), -std::numeric_limits<float>::infinity());
  for (int64_t t = 0; t < rows; ++t) {
    const float* x = logits.f32() + t * logits.stride(0);
    for (int64_t i = 0; i < real_cols; ++i) mx[static_cast<size_t>(t)] = std::max(mx[static_cast<size_t>(t)], x[i]);
  }
  tp.all_reduce_max(mx);
  std::vector<float> stats(static_cast<size_t>(2 * rows), 0.0f);  // (Σ exp, target logit) per row
#pragma omp parallel for schedule(static) if (rows * real_cols > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float* x = logits.f32() + t * logits.stride(0);
    float* dx = want_grad ? dlogits.f32() + t * dlogits.stride(0) : nullptr;
    const float m = mx[static_cast<size_t>(t)];
    const int32_t tgt = targets[t];
    if (tgt != ops::kIgnoreIndex && tgt >= vocab_begin && tgt < vocab_begin + real_cols) {
      stats[static_cast<size_t>(2 * t + 1)] = x[tgt - vocab_begin];
    }
    double sum = 0;
    for (int64_t i = 0; i < real_cols; ++i) {
      const float e = ops::cpu::fast_exp(x[i] - m);
      if (dx) dx[i] = e;
      sum += e;
    }
    stats[static_cast<size_t>(2 * t)] = static_cast<float>(sum);
  }
  tp.all_reduce_sum(stats);
  double ce = 0, zsq = 0;
  int64_t count = 0;
  for (int64_t t = 0; t < rows; ++t) {
    float* dx = want_grad ? dlogits.f32() + t * dlogits.stride(0) : nullptr;
    const int32_t tgt = targets[t];
    if (tgt == ops::kIgnoreIndex) {
      if (dx) std::memset(dx, 0, sizeof(float) * static_cast<size_t>(cols));
      continue;
    }
    const double sum = stats[static_cast<size_t>(2 * t)];
    const double lse = static_cast<double>(mx[static_cast<size_t>(t)]) + std::log(sum);
    ce += lse - stats[static_cast<size_t>(2 * t + 1)];
    zsq += lse * lse;
    ++count;
    if (dx) {
      const float coef = static_cast<float>(scale * (1.0 + 2.0 * z_coef * lse) / sum);
      for (int64_t i = 0; i < real_cols; ++i) dx[i] *= coef;
      std::memset(dx + real_cols, 0, sizeof(float) * static_cast<size_t>(cols - real_cols));
      if (tgt >= vocab_begin && tgt < vocab_begin + real_cols) dx[tgt - vocab_begin] -= scale;
    }
  }
  return ops::CrossEntropySums{ce, zsq, count};
}

}  // namespace olmo2::parallel
