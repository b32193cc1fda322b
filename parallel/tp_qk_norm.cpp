#include "parallel/tp_qk_norm.h"

#include <cmath>
#include <vector>

namespace olmo2::parallel {

namespace {
float sum_squares(const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}
void scale_rows(const TensorView& x, const TensorView& w, const std::vector<float>& stats, int col,
                int64_t width, float eps) {
  const int64_t rows = x.size(0), n = x.size(1);
  const float* wp = w.f32();
#pragma omp parallel for schedule(static) if (rows * n > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float inv = 1.0f / std::sqrt(stats[static_cast<size_t>(2 * t + col)] / static_cast<float>(width) + eps);
    float* r = x.f32() + t * x.stride(0);
    for (int64_t i = 0; i < n; ++i) r[i] = wp[i] * (r[i] * inv);
  }
}
}  // namespace

void tp_qk_norm(const TensorView& q, const TensorView& w_q, int64_t q_width, const TensorView& k,
                const TensorView& w_k, int64_t k_width, bool k_counts, float eps, Communicator& tp) {
  OLMO2_CHECK(q.dim() == 2 && k.dim() == 2 && q.size(0) == k.size(0) && w_q.dim() == 1 &&
                  w_k.dim() == 1 && w_q.size(0) == q.size(1) && w_k.size(0) == k.size(1) &&
                  q.stride(1) == 1 && k.stride(1) == 1,
              "tp_qk_norm: q ", q.shape_str(), " w_q ", w_q.shape_str(), " k ", k.shape_str(), " w_k ",
              w_k.shape_str());
  OLMO2_CHECK(q_width >= q.size(1) && k_width >= k.size(1), "tp_qk_norm: global widths ", q_width,
              "/", k_width, " smaller than the local slices");
  const int64_t rows = q.size(0);
  std::vector<float> stats(static_cast<size_t>(2 * rows));
#pragma omp parallel for schedule(static) if (rows * q.size(1) > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    stats[static_cast<size_t>(2 * t)] = sum_squares(q.f32() + t * q.stride(0), q.size(1));
    stats[static_cast<size_t>(2 * t + 1)] = k_counts ? sum_squares(k.f32() + t * k.stride(0), k.size(1)) : 0.0f;
  }
  tp.all_reduce_sum(stats);
  scale_rows(q, w_q, stats, 0, q_width, eps);
  scale_rows(k, w_k, stats, 1, k_width, eps);
}

}  // namespace olmo2::parallel
