#include "ops/rmsnorm.h"

#include "ops/cpu/kernels.h"
#include "ops/backward.h"
#include "ops/cpu/checks.h"
#include "ops/op_checks.h"
#include "ops/cpu/weights.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

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

namespace {
void check_stat(const TensorView& s, int64_t rows, const char* name) {
  OLMO2_CHECK(s.dim() == 1 && s.size(0) == rows && s.dtype() == DType::F32 && s.device() == Device::CPU,
              "rmsnorm_backward: ", name, " must be an f32 vector of ", rows, ", got ", s.shape_str());
}
}  // namespace

void cpu::rmsnorm_backward_partials(const TensorView& x, const TensorView& w, const TensorView& dy,
                                    const TensorView& sumsq_v, const TensorView& dot_v) {
  detail::check_cpu_rows(x, "rmsnorm_backward", "x");
  detail::check_cpu_same(x, dy, "rmsnorm_backward", "dy");
  const int64_t rows = x.size(0), d = x.size(1);
  std::vector<float> w_widened;
  const float* wp = cpu::f32_weights(w, d, "rmsnorm_backward", &w_widened);
  check_stat(sumsq_v, rows, "sumsq");
  check_stat(dot_v, rows, "dot");
  float* const sumsq = sumsq_v.f32();
  float* const dot = dot_v.f32();
  const int64_t ss_stride = sumsq_v.stride(0), dot_stride = dot_v.stride(0);
#pragma omp parallel for schedule(static) if (rows * d > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x.f32() + t * x.stride(0);
    const float* gr = dy.f32() + t * dy.stride(0);
    float ss = 0.0f, dt = 0.0f;
    for (int64_t i = 0; i < d; ++i) {
      ss += xr[i] * xr[i];
      dt += gr[i] * wp[i] * xr[i];
    }
    sumsq[t * ss_stride] = ss;
    dot[t * dot_stride] = dt;
  }
}

void cpu::rmsnorm_backward_finish(const TensorView& x, const TensorView& w, float eps, int64_t d_total,
                                  const TensorView& dy, const TensorView& sumsq_v, const TensorView& dot_v,
                                  const TensorView& dx, const TensorView& dw) {
  detail::check_cpu_rows(x, "rmsnorm_backward", "x");
  detail::check_cpu_same(x, dy, "rmsnorm_backward", "dy");
  detail::check_cpu_same(x, dx, "rmsnorm_backward", "dx");
  const int64_t rows = x.size(0), d = x.size(1);
  check_stat(sumsq_v, rows, "sumsq");
  check_stat(dot_v, rows, "dot");
  const float* const sumsq = sumsq_v.f32();
  const float* const dot = dot_v.f32();
  const int64_t ss_stride = sumsq_v.stride(0), dot_stride = dot_v.stride(0);
  std::vector<float> w_widened;
  const float* wp = cpu::f32_weights(w, d, "rmsnorm_backward", &w_widened);
  const bool want_dw = !dw.empty();
  if (want_dw) detail::check_cpu_vector(dw, d, "rmsnorm_backward", "dw");
  OLMO2_CHECK(d_total >= d && d_total > 0, "rmsnorm_backward: global width ", d_total,
              " below the local width ", d);
  const float inv_d = 1.0f / static_cast<float>(d_total);
  const bool par = rows * d > (1 << 14);
  const int n_threads = par ? omp_get_max_threads() : 1;
  // Per-thread partial weight gradients, summed after the loop (no races on dw).
  std::vector<float> dw_part(want_dw ? static_cast<size_t>(n_threads) * d : 0, 0.0f);
#pragma omp parallel num_threads(n_threads) if (par)
  {
    float* mine =
        want_dw ? dw_part.data() + static_cast<size_t>(omp_get_thread_num()) * d : nullptr;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < rows; ++t) {
      const float* xr = x.f32() + t * x.stride(0);
      const float* gr = dy.f32() + t * dy.stride(0);
      float* dr = dx.f32() + t * dx.stride(0);
      const float r = 1.0f / std::sqrt(sumsq[t * ss_stride] * inv_d + eps);
      const float c = r * r * r * dot[t * dot_stride] * inv_d;
      for (int64_t i = 0; i < d; ++i) {
        const float xi = xr[i], gi = gr[i];  // read before dx (may alias) is written
        if (mine) mine[i] += gi * xi * r;
        dr[i] = r * wp[i] * gi - xi * c;
      }
    }
  }
  if (want_dw) {
    float* dwp = dw.f32();
    for (int th = 0; th < n_threads; ++th)
      for (int64_t i = 0; i < d; ++i) dwp[i] += dw_part[static_cast<size_t>(th) * d + i];
  }
}

void cpu::rmsnorm_backward(const TensorView& x, const TensorView& w, float eps, const TensorView& dy,
                           const TensorView& dx, const TensorView& dw) {
  detail::check_cpu_rows(x, "rmsnorm_backward", "x");
  const int64_t rows = x.size(0);
  std::vector<float> sumsq(static_cast<size_t>(rows)), dot(static_cast<size_t>(rows));
  const TensorView s(sumsq.data(), DType::F32, {rows}), d(dot.data(), DType::F32, {rows});
  rmsnorm_backward_partials(x, w, dy, s, d);
  rmsnorm_backward_finish(x, w, eps, x.size(1), dy, s, d, dx, dw);
}

}  // namespace olmo2::ops
