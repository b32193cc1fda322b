#include "ops/gemm.h"

#include "ops/cpu/bf16_gemm_detail.h"
#include "ops/cpu/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <random>

namespace olmo2::ops {

void cpu::linear(const TensorView& x, const TensorView& w, const TensorView& y) {
  if (w.dtype() == DType::BF16) return detail::linear_bf16_training(x, w, y);
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

double measure_linear_flops(int64_t n, int reps) {
  const Tensor x = Tensor::zeros({n, n}), w = Tensor::zeros({n, n}), y = Tensor::zeros({n, n});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Tensor* t : {&x, &w}) std::generate(t->f32(), t->f32() + t->numel(), [&] { return dist(rng); });
  linear(x.view(), w.view(), y.view());
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    linear(x.view(), w.view(), y.view());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return linear_flops(n, n, n) / best;
}

}  // namespace olmo2::ops
