// Each row's most likely columns and its softmax statistics (ops/top_candidates.h): the
// host half of token selection (docs/architecture.md §8).
#include "ops/top_candidates.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/cpu/kernels.h"

namespace olmo2::ops {
namespace {
struct Pair {
  float value;
  int32_t column;
};
/// Most likely first: the higher value, then the lower column; NaN below every number,
/// −∞ included (as the CUDA kernel's keys order it), so a NaN is chosen only when no
/// number is left.
bool more_likely_at(float av, int64_t ac, float bv, int64_t bc) {
  const bool an = std::isnan(av), bn = std::isnan(bv);
  if (an != bn) return bn;
  if (!an && av != bv) return av > bv;
  return ac < bc;
}
bool more_likely(const Pair& a, const Pair& b) { return more_likely_at(a.value, a.column, b.value, b.column); }
}  // namespace

TopCandidatesShape top_candidates_check(const TensorView& logits, int64_t real_cols, const TensorView& values,
                                        const TensorView& columns, const TensorView& stats) {
  if (logits.dim() != 2 || logits.dtype() != DType::F32 || logits.stride(1) != 1 || logits.stride(0) < logits.size(1)) {
    OLMO2_THROW(ShapeError, "top_candidates: logits must be a 2-d f32 view with contiguous rows, got ",
                logits.shape_str(), " ", dtype_name(logits.dtype()));
  }
  const int64_t rows = logits.size(0);
  if (real_cols < 0 || real_cols > logits.size(1)) {
    OLMO2_THROW(ShapeError, "top_candidates: real columns ", real_cols, " outside [0, ", logits.size(1), "]");
  }
  int64_t k = 0;
  if (!values.empty() || !columns.empty()) {
    if (values.dim() != 2 || values.size(0) != rows || values.dtype() != DType::F32 || !values.is_contiguous() ||
        columns.shape() != values.shape() || columns.dtype() != DType::I32 || !columns.is_contiguous()) {
      OLMO2_THROW(ShapeError, "top_candidates: values ", values.shape_str(), " ", dtype_name(values.dtype()),
                  " and columns ", columns.shape_str(), " ", dtype_name(columns.dtype()),
                  " must be contiguous [", rows, ", k] f32 and i32");
    }
    k = values.size(1);
  }
  if (!stats.empty() && (stats.dtype() != DType::F32 || !stats.is_contiguous() || stats.dim() != 2 ||
                         stats.size(0) != rows || stats.size(1) != 2)) {
    OLMO2_THROW(ShapeError, "top_candidates: stats ", stats.shape_str(), " ", dtype_name(stats.dtype()),
                " must be contiguous [", rows, ", 2] f32");
  }
  return {rows, k};
}

void cpu::top_candidates(const TensorView& logits, int64_t real_cols, const TensorView& values_v,
                         const TensorView& columns_v, const TensorView& stats_v) {
  const auto [rows, k] = top_candidates_check(logits, real_cols, values_v, columns_v, stats_v);
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t real = real_cols;
  float* values = k > 0 ? values_v.f32() : nullptr;
  int32_t* columns = k > 0 ? columns_v.i32() : nullptr;
  float* stats = stats_v.empty() ? nullptr : stats_v.f32();
  if (rows == 0 || (k == 0 && !stats)) return;
  const float* base = logits.f32();
#pragma omp parallel for schedule(dynamic)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = base + r * logits.stride(0);
    float* v = values ? values + r * k : nullptr;
    int32_t* c = columns ? columns + r * k : nullptr;
    for (int64_t j = 0; j < k; ++j) v[j] = ninf, c[j] = -1;
    if (stats) stats[2 * r] = ninf, stats[2 * r + 1] = 0.0f;
    if (real == 0) continue;
    // The most likely column: one scan (argmax, the first among equal maxima).
    int64_t best = 0;
    for (int64_t j = 1; j < real; ++j) {
      if (more_likely_at(x[j], j, x[best], best)) best = j;
    }
    if (k == 1) {
      v[0] = x[best], c[0] = static_cast<int32_t>(best);
    } else if (k > 1) {
      std::vector<Pair> p(static_cast<size_t>(real));
      for (int64_t j = 0; j < real; ++j) p[static_cast<size_t>(j)] = {x[j], static_cast<int32_t>(j)};
      const int64_t take = std::min(k, real);
      if (take * 4 >= real) {
        std::sort(p.begin(), p.end(), more_likely);  // introsort: much faster than a full heap sort
      } else {
        std::partial_sort(p.begin(), p.begin() + take, p.end(), more_likely);
      }
      for (int64_t j = 0; j < take; ++j) v[j] = p[static_cast<size_t>(j)].value, c[j] = p[static_cast<size_t>(j)].column;
    }
    if (stats) {
      float mx = x[best];
      for (int64_t j = 0; j < real; ++j) mx = std::max(mx, x[j]);
      double s = 0;
      for (int64_t j = 0; j < real; ++j) s += std::exp(static_cast<double>(x[j]) - mx);
      stats[2 * r] = mx, stats[2 * r + 1] = static_cast<float>(s);
    }
  }
}

}  // namespace olmo2::ops
