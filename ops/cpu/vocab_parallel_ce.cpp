// The three local steps of the vocab-parallel cross-entropy + Z-loss (ops/backward.h);
// parallel/vocab_parallel_loss.cpp puts the two all-reduces between them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/backward.h"
#include "ops/cpu/fast_exp.h"
#include "ops/cpu/kernels.h"

namespace olmo2::ops {
namespace {
void check_logits(const TensorView& logits, int64_t real_cols) {
  OLMO2_CHECK(logits.dim() == 2 && logits.dtype() == DType::F32 && logits.stride(1) == 1,
              "vocab-parallel cross-entropy: logits must be a 2-d f32 view with contiguous rows, got ",
              logits.shape_str());
  OLMO2_CHECK(real_cols >= 0 && real_cols <= logits.size(1), "vocab-parallel cross-entropy: real columns ",
              real_cols, " outside [0, ", logits.size(1), "]");
}
void check_vector(const TensorView& v, int64_t rows, int64_t cols, const char* name) {
  OLMO2_CHECK(v.is_contiguous() && v.numel() == rows * cols && v.size(0) == rows, "vocab-parallel cross-entropy: ",
              name, " ", v.shape_str(), " for ", rows, " rows");
}
}  // namespace

void cpu::check_targets(const TensorView& targets_v, int64_t vocab_size) {
  OLMO2_CHECK(targets_v.dim() == 1 && targets_v.stride(0) == 1, "targets ", targets_v.shape_str());
  const int32_t* t = targets_v.i32();
  for (int64_t r = 0; r < targets_v.size(0); ++r) {
    if (t[r] != kIgnoreIndex && (t[r] < 0 || t[r] >= vocab_size)) {
      OLMO2_THROW(InputError, "target ", t[r], " at row ", r, " is outside the vocabulary [0, ", vocab_size,
                  ") and is not the ignore index ", kIgnoreIndex);
    }
  }
}

void cpu::vocab_parallel_ce_row_max(const TensorView& logits, int64_t real_cols, const TensorView& row_max) {
  check_logits(logits, real_cols);
  const int64_t rows = logits.size(0);
  check_vector(row_max, rows, 1, "row_max");
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
  check_logits(logits, real_cols);
  const int64_t rows = logits.size(0);
  check_vector(row_max, rows, 1, "row_max");
  check_vector(stats_v, rows, 2, "stats");
  check_vector(targets_v, rows, 1, "targets");
  const bool want_grad = !dlogits.empty();
  OLMO2_CHECK(!want_grad || dlogits.shape() == logits.shape(), "vocab-parallel cross-entropy: dlogits ",
              dlogits.shape_str(), " for logits ", logits.shape_str());
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
  check_vector(stats_v, rows, 2, "stats");
  check_vector(targets_v, rows, 1, "targets");
  const bool want_grad = !dlogits.empty();
  OLMO2_CHECK(!want_grad || (dlogits.dim() == 2 && dlogits.size(0) == rows && dlogits.size(1) >= real_cols &&
                             dlogits.stride(1) == 1),
              "vocab-parallel cross-entropy: dlogits ", dlogits.shape_str(), " for ", rows, " rows");
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
