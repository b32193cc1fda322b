// The fused cross-entropy + Z-loss and its logit gradient on the CPU (ops/backward.h),
// for the whole vocabulary on one rank; the vocabulary-parallel one is
// ops/cpu/vocab_parallel_ce.cpp.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/backward.h"
#include "ops/cpu/checks.h"
#include "ops/cpu/fast_exp.h"
#include "ops/cpu/kernels.h"

namespace olmo2::ops {

CrossEntropySums cpu::cross_entropy_zloss(const TensorView& logits, const TensorView& targets_v, float z_coef,
                                          float scale, const TensorView& dlogits) {
  const bool want_grad = cross_entropy_check(logits, targets_v, dlogits);
  OLMO2_CHECK(logits.device() == Device::CPU, "cross_entropy_zloss: logits not on the CPU");
  const int32_t* targets = targets_v.i32();
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  check_target_values(targets, rows, vocab);
  double ce = 0.0, zsq = 0.0;
  int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : ce, zsq, count) if (rows * vocab > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float* x = logits.f32() + t * logits.stride(0);
    float* dx = want_grad ? dlogits.f32() + t * dlogits.stride(0) : nullptr;
    const int32_t tgt = targets[t];
    if (tgt == kIgnoreIndex) {
      if (dx) std::memset(dx, 0, sizeof(float) * vocab);
      continue;
    }
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, x[i]);
    const double x_tgt = x[tgt];  // read before dlogits (may alias) is written
    // One fp32 exp per element: kept in dx (if wanted) and summed in blocks of fp32
    // added into fp64.
    double sum = 0.0;
    for (int64_t b = 0; b < vocab; b += 256) {
      const int64_t e = std::min(vocab, b + 256);
      float part = 0.0f;
      if (dx) {  // in place on dx (a copy of the row unless dlogits aliases logits)
        if (dx != x) std::memcpy(dx + b, x + b, sizeof(float) * static_cast<size_t>(e - b));
#pragma omp simd reduction(+ : part)
        for (int64_t i = b; i < e; ++i) {
          dx[i] = cpu::fast_exp(dx[i] - mx);
          part += dx[i];
        }
      } else {
#pragma omp simd reduction(+ : part)
        for (int64_t i = b; i < e; ++i) part += cpu::fast_exp(x[i] - mx);
      }
      sum += part;
    }
    const double lse = static_cast<double>(mx) + std::log(sum);
    ce += lse - x_tgt;
    zsq += lse * lse;
    ++count;
    if (dx) {
      // softmax = exp(x − mx) / sum; dx = scale·(1 + 2·z·lse)·softmax − scale·onehot.
      const float coef = static_cast<float>(scale * (1.0 + 2.0 * z_coef * lse) / sum);
      for (int64_t i = 0; i < vocab; ++i) dx[i] *= coef;
      dx[tgt] -= scale;
    }
  }
  return CrossEntropySums{ce, zsq, count};
}

}  // namespace olmo2::ops
