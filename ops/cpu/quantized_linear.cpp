// The quantized-weight product's driver: argument checks, the activations' quantization
// and the split of N over threads; the per-path kernels compute the fixed sequence of
// ops/cpu/quantized_detail.h (docs/architecture.md §3.2, "Quantized weights").
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/cpu/quantized_detail.h"
#include "ops/quantized_linear.h"

namespace olmo2::ops {
namespace detail {
namespace {

// The weight rows of one N block should stay in a core's L2 while the rows of x pass
// over them; a multiple of every kernel's register tile of N rows. Only speed depends
// on it.
constexpr int64_t kWBlockBytes = 256 * 1024;
constexpr int64_t kNrMultiple = 8;

int64_t n_block(const QuantizedWeight& w, int threads) {
  const int64_t row_bytes = w.format == QuantFormat::Int8 ? w.k : w.k / 2;
  int64_t nb = std::clamp<int64_t>(kWBlockBytes / std::max<int64_t>(row_bytes, 1), kNrMultiple, 512);
  const int64_t per_thread = (w.n + 4 * threads - 1) / (4 * threads);
  nb = std::min(nb, std::max<int64_t>(per_thread, kNrMultiple));
  return (nb + kNrMultiple - 1) / kNrMultiple * kNrMultiple;
}

}  // namespace

void quantize_activations(const float* x, int64_t m, int64_t k, int64_t ldx, QuantizedActivations& out) {
  out.m = m, out.k = k, out.blocks = k / kQuantBlock;
  out.q.resize(static_cast<size_t>(m * k));
  out.d.resize(static_cast<size_t>(m * out.blocks));
  // Rows are independent: threads over them change no value.
#pragma omp parallel for schedule(static) if (m > 1 && m * k >= (int64_t{1} << 16))
  for (int64_t i = 0; i < m; ++i)
    for (int64_t b = 0; b < out.blocks; ++b) {
      const float* v = x + i * ldx + b * kQuantBlock;
      int8_t* q = out.q.data() + i * k + b * kQuantBlock;
      float amax = 0.0f;
      bool finite = true;
      for (int j = 0; j < kQuantBlock; ++j) {
        const float a = std::fabs(v[j]);
        finite = finite && a <= std::numeric_limits<float>::max();  // false for NaN and infinity
        amax = a > amax ? a : amax;
      }
      const float d = finite ? amax / 127.0f : NAN;
      out.d[i * out.blocks + b] = d;
      const bool zero = !finite || d == 0.0f;
      for (int j = 0; j < kQuantBlock; ++j) {
        // |x / d| ≤ 127·(1 + 2⁻²³) rounds to at most 127; the clamp only guards it.
        const float r = zero ? 0.0f : round_half_even_small(v[j] / d);
        q[j] = static_cast<int8_t>(std::min(std::max(r, -127.0f), 127.0f));
      }
    }
}

/// The CPU product behind ops::linear_quantized (ops/dispatch.cpp checks the device).
void linear_quantized_cpu(const TensorView& x, const QuantizedWeight& w, const TensorView& y) {
  OLMO2_CHECK(!w.empty() && w.values.device() == Device::CPU && w.scales.device() == Device::CPU,
              "linear_quantized: an empty or non-CPU quantized weight");
  OLMO2_CHECK(x.dim() == 2 && y.dim() == 2 && x.dtype() == DType::F32 && y.dtype() == DType::F32,
              "linear_quantized wants 2-d f32 x and y, got x ", x.shape_str(), " ", dtype_name(x.dtype()), " y ",
              y.shape_str(), " ", dtype_name(y.dtype()));
  const int64_t m = x.size(0);
  OLMO2_CHECK(x.size(1) == w.k && y.size(0) == m && y.size(1) == w.n, "linear_quantized: x ", x.shape_str(),
              " · w [", w.n, ", ", w.k, "]ᵀ -> y ", y.shape_str());
  OLMO2_CHECK(x.stride(1) == 1 && y.stride(1) == 1, "linear_quantized needs a contiguous last dimension");
  OLMO2_CHECK(w.k % kQuantBlock == 0 && w.group > 0 && w.k % w.group == 0 && w.group % kQuantBlock == 0,
              "linear_quantized: K ", w.k, " and group ", w.group, " are not a quantize_weight result");
  const QuantizedKernel kernel = quantized_kernel(quantized_path());
  if (m == 0) return;
  QuantizedActivations a;
  quantize_activations(x.f32(), m, w.k, x.stride(0), a);
  a.block_group.resize(static_cast<size_t>(a.blocks));
  for (int64_t b = 0; b < a.blocks; ++b) a.block_group[b] = static_cast<int32_t>(b * kQuantBlock / w.group);
  if (w.format == QuantFormat::Int4) {
    a.lane_offsets.resize(static_cast<size_t>(m * a.blocks * 8));
    for (int64_t i = 0; i < m * a.blocks * 8; ++i) {
      const int8_t* q = a.q.data() + 4 * i;  // rows are K = 32·blocks apart: lanes are consecutive
      a.lane_offsets[i] = -8 * (q[0] + q[1] + q[2] + q[3]);
    }
  }
  float* out = y.f32();
  const int64_t ldy = y.stride(0);
  const int64_t nb = n_block(w, omp_get_max_threads());
  const int64_t blocks = (w.n + nb - 1) / nb;
  const bool threads = blocks > 1 && m * w.n * w.k >= (int64_t{1} << 16);
#pragma omp parallel for schedule(dynamic, 1) if (threads)
  for (int64_t b = 0; b < blocks; ++b) kernel(a, w, b * nb, std::min(w.n, (b + 1) * nb), out, ldy);
}

}  // namespace detail
}  // namespace olmo2::ops
