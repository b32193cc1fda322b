#include "ops/gemm.h"

#include "ops/cpu/bf16_gemm_detail.h"
#include "ops/cpu/kernels.h"
#include "ops/backward.h"
#include "ops/cpu/checks.h"
#include "ops/cpu/weights.h"

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

void cpu::linear_backward(const TensorView& x, const TensorView& w, const TensorView& dy,
                     const TensorView& dx, const TensorView& dw, bool accumulate_dw,
                     bool accumulate_dx) {
  detail::check_cpu_rows(x, "linear_backward", "x");
  const bool w_bf16 = w.dtype() == DType::BF16;
  if (w_bf16)
    OLMO2_CHECK(w.dim() == 2 && w.device() == Device::CPU && w.stride(1) == 1,
                "linear_backward: w must be a 2-d CPU view with contiguous rows, got ", w.shape_str());
  else
    detail::check_cpu_rows(w, "linear_backward", "w");
  detail::check_cpu_rows(dy, "linear_backward", "dy");
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  OLMO2_CHECK(w.size(1) == k && dy.size(0) == m && dy.size(1) == n, "linear_backward: x ",
              x.shape_str(), " w ", w.shape_str(), " dy ", dy.shape_str());
  // A bf16 w takes the training products' path (ops/bf16_gemm.h): onednn, or f32 sgemm.
  const bool onednn = w_bf16 && bf16_training_gemm_path() == Bf16GemmPath::OneDnn;
  if (!dx.empty()) {
    detail::check_cpu_same(x, dx, "linear_backward", "dx");
    if (m > 0 && k > 0) {
      if (n == 0) {
        if (!accumulate_dx)
          for (int64_t i = 0; i < m; ++i)
            std::memset(dx.f32() + i * dx.stride(0), 0, sizeof(float) * k);
      } else if (onednn) {
        detail::linear_dx_onednn(dy, w, dx, accumulate_dx);
      } else if (w_bf16) {
        detail::linear_dx_bf16(dy, w, dx, accumulate_dx);
      } else {
        // dx[M, K] = dy[M, N] · w[N, K]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, detail::blas_int(m), detail::blas_int(k), detail::blas_int(n), 1.0f, dy.f32(),
                    detail::blas_int(dy.stride(0)), w.f32(), detail::blas_int(w.stride(0)), accumulate_dx ? 1.0f : 0.0f,
                    dx.f32(), detail::blas_int(dx.stride(0)));
      }
    }
  }
  if (!dw.empty()) {
    detail::check_cpu_rows(dw, "linear_backward", "dw");
    OLMO2_CHECK(dw.shape() == w.shape(), "linear_backward: dw ", dw.shape_str(), " vs ", w.shape_str());
    if (n > 0 && k > 0) {
      if (m == 0) {
        if (!accumulate_dw)
          for (int64_t i = 0; i < n; ++i)
            std::memset(dw.f32() + i * dw.stride(0), 0, sizeof(float) * k);
      } else if (onednn) {
        detail::linear_dw_onednn(x, dy, dw, accumulate_dw);
      } else {
        // dw[N, K] (+)= dy[M, N]ᵀ · x[M, K]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, detail::blas_int(n), detail::blas_int(k), detail::blas_int(m), 1.0f, dy.f32(),
                    detail::blas_int(dy.stride(0)), x.f32(), detail::blas_int(x.stride(0)), accumulate_dw ? 1.0f : 0.0f,
                    dw.f32(), detail::blas_int(dw.stride(0)));
      }
    }
  }
}

}  // namespace olmo2::ops
