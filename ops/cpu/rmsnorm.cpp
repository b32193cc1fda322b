#include "ops/rmsnorm.h"

#include "ops/cpu/kernels.h"
#include "ops/cpu/weights.h"

#include <cmath>

namespace olmo2::ops {

std::pair<int64_t, int64_t> rmsnorm_check(const TensorView& x, const TensorView& w,
                                          const TensorView& y) {
  OLMO2_CHECK(x.dim() == 2 && y.dim() == 2 && w.dim() == 1, "rmsnorm: x ", x.shape_str(), " w ",
              w.shape_str(), " y ", y.shape_str());
  OLMO2_CHECK(x.shape() == y.shape() && w.size(0) == x.size(1), "rmsnorm: x ", x.shape_str(),
              " w ", w.shape_str(), " y ", y.shape_str());
  OLMO2_CHECK(x.dtype() == y.dtype() && x.dtype() != DType::F16 && w.dtype() != DType::F16,
              "rmsnorm dtypes x ", dtype_name(x.dtype()), " w ", dtype_name(w.dtype()), " y ",
              dtype_name(y.dtype()));
  OLMO2_CHECK(x.device() == y.device() && w.device() == x.device(), "rmsnorm: mixed devices");
  OLMO2_CHECK(x.stride(1) == 1 && y.stride(1) == 1 && w.stride(0) == 1,
              "rmsnorm needs contiguous rows");
  return {x.size(0), x.size(1)};
}

namespace {
template <typename T>
float load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, float>) return p[i];
  else return bf16_to_f32(p[i]);
}
template <typename T>
void store(T* p, int64_t i, float v) {
  if constexpr (std::is_same_v<T, float>) p[i] = v;
  else p[i] = f32_to_bf16(v);
}

template <typename T, typename W>
void rmsnorm_rows(const TensorView& x, const TensorView& w, float eps, const TensorView& y,
                  int64_t rows, int64_t d) {
  const auto* xp = static_cast<const T*>(x.data());
  const auto* wp = static_cast<const W*>(w.data());
  auto* yp = static_cast<T*>(y.data());
#pragma omp parallel for schedule(static) if (rows * d > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const T* xr = xp + t * x.stride(0);
    T* yr = yp + t * y.stride(0);
    float ss = 0.0f;
    for (int64_t i = 0; i < d; ++i) {
      const float v = load(xr, i);
      ss += v * v;
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) store(yr, i, load(wp, i) * (load(xr, i) * inv));
  }
}
}  // namespace

void cpu::rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& y) {
  const auto [rows, d] = rmsnorm_check(x, w, y);
  OLMO2_CHECK(x.device() == Device::CPU, "cpu::rmsnorm on a non-CPU view");
  const bool xf = x.dtype() == DType::F32, wf = w.dtype() == DType::F32;
  if (xf && wf) rmsnorm_rows<float, float>(x, w, eps, y, rows, d);
  else if (xf) rmsnorm_rows<float, uint16_t>(x, w, eps, y, rows, d);
  else if (wf) rmsnorm_rows<uint16_t, float>(x, w, eps, y, rows, d);
  else rmsnorm_rows<uint16_t, uint16_t>(x, w, eps, y, rows, d);
}

namespace {
void check_stats(const char* op, const TensorView& x, const TensorView& sumsq) {
  OLMO2_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.stride(1) == 1 && sumsq.dim() == 1 &&
                  sumsq.dtype() == DType::F32 && sumsq.size(0) == x.size(0),
              op, ": x ", x.shape_str(), " ", dtype_name(x.dtype()), ", sumsq ", sumsq.shape_str());
}
}  // namespace

void cpu::rmsnorm_partials(const TensorView& x, const TensorView& sumsq) {
  check_stats("rmsnorm_partials", x, sumsq);
  const int64_t rows = x.size(0), d = x.size(1);
  float* out = sumsq.f32();
#pragma omp parallel for schedule(static) if (rows * d > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x.f32() + t * x.stride(0);
    float ss = 0.0f;
    for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
    out[t * sumsq.stride(0)] = ss;
  }
}

void cpu::rmsnorm_apply(const TensorView& x, const TensorView& w, const TensorView& sumsq, int64_t d_total,
                        float eps, const TensorView& y) {
  const auto [rows, d] = rmsnorm_check(x, w, y);
  check_stats("rmsnorm_apply", x, sumsq);
  OLMO2_CHECK(x.dtype() == DType::F32 && d_total >= d && d_total > 0, "rmsnorm_apply: x ", dtype_name(x.dtype()),
              ", global width ", d_total, " for local width ", d);
  std::vector<float> w_widened;
  const float* wp = cpu::f32_weights(w, d, "rmsnorm_apply", &w_widened);
  const float* ss = sumsq.f32();
#pragma omp parallel for schedule(static) if (rows * d > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float inv = 1.0f / std::sqrt(ss[t * sumsq.stride(0)] / static_cast<float>(d_total) + eps);
    const float* xr = x.f32() + t * x.stride(0);
    float* yr = y.f32() + t * y.stride(0);
    for (int64_t i = 0; i < d; ++i) yr[i] = wp[i] * (xr[i] * inv);
  }
}

}  // namespace olmo2::ops
