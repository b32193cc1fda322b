#include "ops/gemm.h"

#include <cblas.h>

namespace olmo2::ops {

void linear(const TensorView& x, const TensorView& w, const TensorView& y) {
  OLMO2_CHECK(x.dim() == 2 && w.dim() == 2 && y.dim() == 2, "linear wants 2-d views, got x ",
              x.shape_str(), " w ", w.shape_str(), " y ", y.shape_str());
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  OLMO2_CHECK(w.size(1) == k && y.size(0) == m && y.size(1) == n, "linear: x ", x.shape_str(),
              " · w ", w.shape_str(), "ᵀ -> y ", y.shape_str());
  OLMO2_CHECK(x.stride(1) == 1 && w.stride(1) == 1 && y.stride(1) == 1,
              "linear needs a contiguous last dimension");
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x.f32(),
              static_cast<blasint>(x.stride(0)), w.f32(), static_cast<blasint>(w.stride(0)), 0.0f,
              y.f32(), static_cast<blasint>(y.stride(0)));
}

}  // namespace olmo2::ops
