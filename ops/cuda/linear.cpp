// CUDA matrix products through cuBLASLt: linear, linear_batch_invariant and
// linear_backward with the CPU ops' contracts (ops/gemm.h, ops/batch_invariant_gemm.h,
// ops/backward.h; docs/architecture.md §2). All fp32 accumulation (CUBLAS_COMPUTE_32F,
// TF32 off); a bf16 w multiplies bf16(x) as the CPU does.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/convert_rows.h"
#include "ops/cuda/device_temp.h"
#include "ops/cuda/fixed_order_gemm.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/matmul.h"
#include "ops/cuda/runtime.h"

namespace olmo2::ops::cuda {
namespace {

using detail::AlgoChoice;
using detail::DeviceTemp;
using detail::MatOperand;

// A 2-d CUDA view with a contiguous last dimension and non-overlapping rows; `name`
// and `op` name it in the ShapeError.
void check_rows(const TensorView& t, const char* op, const char* name, bool bf16_ok) {
  OLMO2_CHECK(t.dim() == 2 && t.device() == Device::CUDA && t.stride(1) == 1 &&
                  (t.dtype() == DType::F32 || (bf16_ok && t.dtype() == DType::BF16)),
              op, ": ", name, " must be a 2-d ", bf16_ok ? "f32 or bf16" : "f32",
              " CUDA view with a contiguous last dimension, got ", t.shape_str(), " ", dtype_name(t.dtype()));
  OLMO2_CHECK(t.size(0) <= 1 || t.stride(0) >= t.size(1), op, ": ", name, " ", t.shape_str(), " has row stride ",
              t.stride(0), " (rows overlap)");
}

// The row stride as a cuBLAS leading dimension (≥ the row length, ≥ 1).
int64_t ld(const TensorView& t) { return t.size(0) > 1 ? t.stride(0) : std::max<int64_t>(t.size(1), 1); }

cudaDataType_t cuda_type(DType d) { return d == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// OLMO2_CUDA_BATCH_INVARIANT=kernel sends every batch-invariant product to the
// fixed-order kernel (the GPU check runs both paths); unset or "cublaslt": cuBLASLt
// wherever an algorithm can be pinned. Read once; another value is an InputError.
bool fixed_order_forced() {
  static const int forced = [] {
    const char* v = std::getenv("OLMO2_CUDA_BATCH_INVARIANT");
    if (!v || !*v || std::string(v) == "cublaslt") return 0;
    if (std::string(v) == "kernel") return 1;
    return -1;
  }();
  if (forced < 0) {
    OLMO2_THROW(InputError, "OLMO2_CUDA_BATCH_INVARIANT=", std::getenv("OLMO2_CUDA_BATCH_INVARIANT"),
                " is not one of: cublaslt, kernel");
  }
  return forced == 1;
}

// Writes zeros to the f32 rows of `t` (a strided 2-d view).
void zero_rows(const TensorView& t) {
  if (t.size(0) == 0 || t.size(1) == 0) return;
  const size_t width = static_cast<size_t>(t.size(1)) * sizeof(float);
  OLMO2_CUDA_CHECK(cudaMemset2DAsync(t.data(), static_cast<size_t>(ld(t)) * sizeof(float), 0, width,
                                     static_cast<size_t>(t.size(0)), compute_stream()));
}

// y = x·wᵀ (row-major) = Dᶜ[N, M] = Wᶜᵀ·Xᶜ (column-major); a bf16 w multiplies a bf16
// copy of x (rows padded to 8 elements, 16-byte aligned).
void product(const char* op, const TensorView& x, const TensorView& w, const TensorView& y, AlgoChoice choice) {
  OLMO2_CHECK(x.dim() == 2 && w.dim() == 2 && y.dim() == 2, op, " wants 2-d views, got x ", x.shape_str(), " w ",
              w.shape_str(), " y ", y.shape_str());
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  OLMO2_CHECK(w.size(1) == k && y.size(0) == m && y.size(1) == n, op, ": x ", x.shape_str(), " · w ", w.shape_str(),
              "ᵀ -> y ", y.shape_str());
  check_rows(x, op, "x", false);
  check_rows(w, op, "w", true);
  check_rows(y, op, "y", false);
  if (m == 0 || n == 0) return;
  if (k == 0) return zero_rows(y);
  const MatOperand a{w.data(), cuda_type(w.dtype()), k, n, ld(w), true};
  float* const d = static_cast<float*>(y.data());
  const bool bf16 = w.dtype() == DType::BF16;
  // The batch-invariant product takes our fixed-order kernel where cuBLASLt has no
  // algorithm that can be pinned for every batch size (decided once per weight shape,
  // so every batch size of that shape takes the same path).
  const bool own_kernel = choice == AlgoChoice::FixedPerA &&
                          (fixed_order_forced() ||
                           !detail::batch_invariant_algo_exists(a, MatOperand{nullptr, cuda_type(w.dtype())}, n, k));
  if (!bf16) {
    if (own_kernel) {
      detail::fixed_order_product(x.data(), false, ld(x), w.data(), false, ld(w), d, ld(y), m, n, k);
      return;
    }
    const MatOperand b{x.data(), CUDA_R_32F, k, m, ld(x), false};
    detail::matmul(a, b, d, n, m, ld(y), 0.0f, choice);
    return;
  }
  const int64_t ldt = (k + 7) / 8 * 8;
  const DeviceTemp xb(static_cast<size_t>(m * ldt) * 2);
  detail::round_rows_to_bf16(static_cast<const float*>(x.data()), ld(x), m, k, xb.get(), ldt);
  if (own_kernel) {
    detail::fixed_order_product(xb.get(), true, ldt, w.data(), true, ld(w), d, ld(y), m, n, k);
    return;
  }
  const MatOperand b{xb.get(), CUDA_R_16BF, k, m, ldt, false};
  detail::matmul(a, b, d, n, m, ld(y), 0.0f, choice);
}

// w rows widened to f32 per panel for dx = dy·w with a bf16 w: at most this many f32
// elements (64 MiB) per panel.
constexpr int64_t kPanelElements = int64_t{1} << 24;

}  // namespace

void linear(const TensorView& x, const TensorView& w, const TensorView& y) {
  product("linear", x, w, y, AlgoChoice::PerShape);
}

void linear_batch_invariant(const TensorView& x, const TensorView& w, const TensorView& y) {
  product("linear_batch_invariant", x, w, y, AlgoChoice::FixedPerA);
}

void linear_backward(const TensorView& x, const TensorView& w, const TensorView& dy, const TensorView& dx,
                     const TensorView& dw, bool accumulate_dw, bool accumulate_dx) {
  const char* op = "linear_backward";
  check_rows(x, op, "x", false);
  check_rows(w, op, "w", true);
  check_rows(dy, op, "dy", false);
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  OLMO2_CHECK(w.size(1) == k && dy.size(0) == m && dy.size(1) == n, op, ": x ", x.shape_str(), " w ", w.shape_str(),
              " dy ", dy.shape_str());
  const auto* dyp = static_cast<const float*>(dy.data());
  if (!dx.empty()) {
    check_rows(dx, op, "dx", false);
    OLMO2_CHECK(dx.shape() == x.shape(), op, ": dx ", dx.shape_str(), " vs ", x.shape_str());
    float* const d = static_cast<float*>(dx.data());
    if (m > 0 && k > 0) {
      if (n == 0) {
        if (!accumulate_dx) zero_rows(dx);
      } else if (w.dtype() == DType::F32) {
        // dxᶜ[K, M] = Wᶜ[K, N] · DYᶜ[N, M]
        detail::matmul({w.data(), CUDA_R_32F, k, n, ld(w), false}, {dyp, CUDA_R_32F, n, m, ld(dy), false}, d, k, m,
                       ld(dx), accumulate_dx ? 1.0f : 0.0f, AlgoChoice::PerShape);
      } else {
        // The same per panel of w's rows, each widened exactly to f32 first (dy is not
        // rounded); the panels after the first add to dx.
        const int64_t rows = std::max<int64_t>(1, std::min(n, kPanelElements / k));
        const DeviceTemp panel(static_cast<size_t>(rows * k) * sizeof(float));
        const auto* wp = static_cast<const char*>(w.data());
        for (int64_t n0 = 0; n0 < n; n0 += rows) {
          const int64_t nb = std::min(rows, n - n0);
          detail::widen_rows_to_f32(wp + n0 * ld(w) * 2, ld(w), nb, k, static_cast<float*>(panel.get()), k);
          detail::matmul({panel.get(), CUDA_R_32F, k, nb, k, false}, {dyp + n0, CUDA_R_32F, nb, m, ld(dy), false}, d, k,
                         m, ld(dx), (accumulate_dx || n0 > 0) ? 1.0f : 0.0f, AlgoChoice::PerShape);
        }
      }
    }
  }
  if (!dw.empty()) {
    check_rows(dw, op, "dw", false);
    OLMO2_CHECK(dw.shape() == w.shape(), op, ": dw ", dw.shape_str(), " vs ", w.shape_str());
    if (n > 0 && k > 0) {
      if (m == 0) {
        if (!accumulate_dw) zero_rows(dw);
      } else {
        // dwᶜ[K, N] = Xᶜ[K, M] · DYᶜ[N, M]ᵀ
        detail::matmul({x.data(), CUDA_R_32F, k, m, ld(x), false}, {dyp, CUDA_R_32F, n, m, ld(dy), true},
                       static_cast<float*>(dw.data()), k, n, ld(dw), accumulate_dw ? 1.0f : 0.0f,
                       AlgoChoice::PerShape);
      }
    }
  }
}

}  // namespace olmo2::ops::cuda
