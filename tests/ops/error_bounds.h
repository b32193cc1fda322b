// Per-element comparison of an op's result with a reference, with bounds from the op's
// rounding-error analysis (docs/architecture.md §10, "Per-element bounds").
//
// Every function here returns, per output element, the exact value (computed in double
// from the same inputs) and a bound on |implementation − exact| for ONE implementation
// that follows the op's documented order of fp32 operations loosely: any summation order,
// any blocking, libm functions within a few ulp. Two implementations (CPU and GPU) may
// then differ by twice the bound (`between_two`). The sums use the probabilistic bound
// of Higham & Mary ("A New Approach to Probabilistic Rounding Error Analysis", SIAM J.
// Sci. Comput. 41(5), 2019, Thm. 2.4): |ŝ − s| ≤ λ·√n·u·Σ|terms| except with probability
// at most about n·2·exp(−λ²/2); with λ = 8 that is 2.5e-14 per term, so a test over
// millions of elements does not flake, and the bound is still ~√n tighter than the
// worst case n·u·Σ|terms|. A bound scaled by the largest element instead would leave the
// small elements unchecked (an error of 5e-5·max passes at an element of 1e-7·max).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ops/dtype.h"
#include "ops/tensor.h"

namespace olmo2::ops::test {

constexpr double kU = 0x1p-24;       ///< fp32 unit roundoff
constexpr double kUBf16 = 0x1p-8;    ///< bf16 unit roundoff
constexpr double kSumLambda = 8.0;   ///< λ of the probabilistic sum bound

/// The relative bound on an fp32 sum of n terms, λ·√n·u: multiply by Σ|terms|.
inline double sum_error(int64_t n) { return kSumLambda * std::sqrt(static_cast<double>(std::max<int64_t>(n, 1))) * kU; }

/// Exact values and per-element error bounds of one implementation (same length).
struct Expected {
  std::vector<double> exact, bound;
  /// The bounds for a comparison of two implementations, each within `bound`.
  std::vector<double> between_two() const {
    std::vector<double> b = bound;
    for (double& x : b) x *= 2.0;
    return b;
  }
};

/// The elements of a host 1-d or 2-d f32/bf16 view (rows may be strided) as doubles in
/// row-major order.
inline std::vector<double> dense(const TensorView& v) {
  const int64_t rows = v.dim() == 2 ? v.size(0) : 1, cols = v.dim() == 2 ? v.size(1) : v.size(0);
  const int64_t rs = v.dim() == 2 ? v.stride(0) : 0, cs = v.dim() == 2 ? v.stride(1) : v.stride(0);
  std::vector<double> out(static_cast<size_t>(rows * cols));
  const size_t es = dtype_size(v.dtype());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float f;
      convert_to_f32(static_cast<const char*>(v.data()) + (r * rs + c * cs) * static_cast<int64_t>(es), v.dtype(), &f, 1);
      out[static_cast<size_t>(r * cols + c)] = f;
    }
  return out;
}

/// Passes when every got[i] is within bound[i] of want[i]. A non-finite value passes
/// only opposite the same non-finite value (NaN opposite NaN, an infinity opposite the
/// same infinity); anything else non-finite fails, wherever it is. The message names the
/// first failing element and the worst |got − want| / bound.
inline ::testing::AssertionResult within_bounds(const std::vector<double>& want, const std::vector<double>& got,
                                                const std::vector<double>& bound) {
  if (want.size() != got.size() || want.size() != bound.size())
    return ::testing::AssertionFailure() << "sizes differ: want " << want.size() << ", got " << got.size()
                                         << ", bounds " << bound.size();
  size_t bad = want.size(), worst_i = 0, failures = 0;
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double a = want[i], b = got[i];
    bool ok;
    double ratio = 0.0;
    if (!std::isfinite(a) || !std::isfinite(b)) {
      ok = (std::isnan(a) && std::isnan(b)) || (!std::isnan(a) && a == b);
      ratio = ok ? 0.0 : INFINITY;
    } else {
      const double d = std::fabs(a - b);
      ok = d <= bound[i];
      ratio = bound[i] > 0 ? d / bound[i] : (d > 0 ? INFINITY : 0.0);
    }
    if (ratio > worst || (i == 0 && ratio > 0)) worst = ratio, worst_i = i;
    if (!ok) {
      ++failures;
      if (bad == want.size()) bad = i;
    }
  }
  if (failures == 0)
    return ::testing::AssertionSuccess() << "worst |got − want| / bound " << worst << " at element " << worst_i;
  std::ostringstream m;
  m.precision(9);
  m << failures << " of " << want.size() << " elements outside their bounds; first: element " << bad << " want "
    << want[bad] << " got " << got[bad] << " bound " << bound[bad] << "; worst ratio " << worst << " at element "
    << worst_i << " (want " << want[worst_i] << ", got " << got[worst_i] << ", bound " << bound[worst_i] << ")";
  return ::testing::AssertionFailure() << m.str();
}

/// Bounds rel·|want_i| + abs: for ops whose every element is a few correctly rounded
/// operations on its own inputs, without cancellation (rel = 0, abs = 0: bit-exact).
inline std::vector<double> relative_bounds(const std::vector<double>& want, double rel, double abs = 0.0) {
  std::vector<double> b(want.size());
  for (size_t i = 0; i < want.size(); ++i) b[i] = std::isfinite(want[i]) ? rel * std::fabs(want[i]) + abs : 0.0;
  return b;
}

/// y[i, j] = Σ_p a(i, p)·b(p, j) for dense row-major A [m, k] (or Aᵀ stored [k, m] when
/// `a_trans`) and B [k, n] (or Bᵀ stored [n, k] when `b_trans`), fp32 products summed
/// in fp32 in any order: exact y and the bound sum_error(k + 1)·Σ_p |a||b| (the product
/// roundings count as one more term). `accumulate` (y += A·B onto `y0`) adds the old
/// value as a term. Shapes in elements; A, B as from dense().
inline Expected product(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t n, int64_t k,
                        bool a_trans, bool b_trans, const std::vector<double>* y0 = nullptr) {
  Expected e;
  e.exact.assign(static_cast<size_t>(m * n), 0.0);
  e.bound.assign(static_cast<size_t>(m * n), 0.0);
  const double rel = sum_error(k + (y0 ? 2 : 1));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = y0 ? (*y0)[static_cast<size_t>(i * n + j)] : 0.0, mag = std::fabs(s);
      for (int64_t p = 0; p < k; ++p) {
        const double x = a[static_cast<size_t>(a_trans ? p * m + i : i * k + p)];
        const double w = b[static_cast<size_t>(b_trans ? j * k + p : p * n + j)];
        s += x * w, mag += std::fabs(x * w);
      }
      e.exact[static_cast<size_t>(i * n + j)] = s;
      e.bound[static_cast<size_t>(i * n + j)] = rel * mag;
    }
  return e;
}

}  // namespace olmo2::ops::test
