// Quantizing and dequantizing weights for the quantized-weight products
// (ops/quantized_linear.h; docs/architecture.md §3.2, "Quantized weights").
//
// Byte layout of `values` (the kernels' own; callers treat it as opaque):
//  - int8: row-major [N, K], one two's-complement byte per weight, q in [−127, 127].
//  - int4: row-major [N, K/2], each weight stored as q + 8 (q in [−7, 7], so nibbles
//    1 … 15). Each pair of blocks of 32 along K (k = 64p … 64p+63) is 32 bytes: byte j
//    holds q[64p + j] in its low nibble and q[64p + 32 + j] in its high nibble. So one
//    32-byte load and a mask give block 2p in order, a shift and the mask block 2p+1:
//    no shuffle. When K/32 is odd, the last block (k = K−32 … K−1) is 16 bytes: byte j
//    holds q[K−32 + j] low and q[K−16 + j] high. Block b starts at byte 16b either way.
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "ops/cpu/quantized_detail.h"
#include "ops/dtype.h"
#include "ops/quantized_linear.h"

namespace olmo2::ops {
namespace {

int qmax_of(QuantFormat f) { return f == QuantFormat::Int8 ? 127 : 7; }

void check_group(QuantFormat format, int64_t k, int64_t group) {
  const bool int4 = format == QuantFormat::Int4;
  if (group <= 0 || group % detail::kQuantBlock != 0 || k % group != 0 || (int4 && group != 32 && group != 64))
    OLMO2_THROW(InputError, "quantize_weight: group ", group, " for ", quant_format_name(format), " with K = ", k,
                ": expected ", int4 ? "32 or 64" : "a multiple of 32 (or K itself)", " dividing K");
}

}  // namespace

const char* quant_format_name(QuantFormat f) { return f == QuantFormat::Int8 ? "int8" : "int4"; }

int64_t QuantizedWeight::bytes() const {
  return static_cast<int64_t>(values.view().bytes() + scales.view().bytes());
}

/// Per group of row n: amax = max |w| (exact in f32), s = bf16(F(amax / qmax)) rounded
/// to nearest even (ops/dtype.h f32_to_bf16), then q = clamp(round_half_even(F(w / s)),
/// −qmax, qmax) — the clamp matters when s rounded below amax / qmax. A group whose s is
/// zero (all zeros, or amax so small that s underflows) stores q = 0. InputError naming
/// the element for a NaN or infinite weight.
QuantizedWeight quantize_weight(const TensorView& w, QuantFormat format, int64_t group) {
  OLMO2_CHECK(w.dim() == 2 && (w.dtype() == DType::F32 || w.dtype() == DType::BF16) && w.device() == Device::CPU &&
                  w.is_contiguous(),
              "quantize_weight wants a contiguous 2-d f32 or bf16 CPU tensor, got ", w.shape_str(), " ",
              dtype_name(w.dtype()));
  const int64_t n = w.size(0), k = w.size(1);
  OLMO2_CHECK(n > 0 && k > 0, "quantize_weight: empty weight ", w.shape_str());
  check_group(format, k, group);
  const int qmax = qmax_of(format);
  QuantizedWeight out;
  out.format = format, out.n = n, out.k = k, out.group = group;
  const bool int4 = format == QuantFormat::Int4;
  out.values = Tensor::zeros({n, int4 ? k / 2 : k}, DType::U8);
  out.scales = Tensor::zeros({n, k / group}, DType::BF16);
  uint8_t* values = out.values.view().data_as<uint8_t>();
  uint16_t* scales = static_cast<uint16_t*>(out.scales.view().data());
  std::vector<float> row(static_cast<size_t>(k));
  std::vector<int8_t> q(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    if (w.dtype() == DType::F32) {
      std::memcpy(row.data(), w.f32() + r * k, sizeof(float) * static_cast<size_t>(k));
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(w.data()) + r * k;
      for (int64_t c = 0; c < k; ++c) row[c] = bf16_to_f32(src[c]);
    }
    for (int64_t g = 0; g < k / group; ++g) {
      float amax = 0.0f;
      for (int64_t c = g * group; c < (g + 1) * group; ++c) {
        if (!std::isfinite(row[c]))
          OLMO2_THROW(InputError, "quantize_weight: weight [", r, ", ", c, "] is ", row[c]);
        amax = std::fmax(amax, std::fabs(row[c]));
      }
      const uint16_t s_bits = f32_to_bf16(amax / static_cast<float>(qmax));
      const float s = bf16_to_f32(s_bits);
      scales[r * (k / group) + g] = s_bits;
      for (int64_t c = g * group; c < (g + 1) * group; ++c) {
        // |w / s| ≤ qmax·(1 + 2⁻⁸) after the bf16 rounding of s: far below 2²².
        float v = s == 0.0f ? 0.0f : detail::round_half_even_small(row[c] / s);
        v = std::fmin(std::fmax(v, static_cast<float>(-qmax)), static_cast<float>(qmax));
        q[c] = static_cast<int8_t>(v);
      }
    }
    if (!int4) {
      std::memcpy(values + r * k, q.data(), static_cast<size_t>(k));
      continue;
    }
    uint8_t* dst = values + r * (k / 2);
    int64_t b = 0;
    for (; b + 2 <= k / 32; b += 2)
      for (int j = 0; j < 32; ++j)
        dst[b * 16 + j] = static_cast<uint8_t>((q[b * 32 + j] + 8) | ((q[b * 32 + 32 + j] + 8) << 4));
    if (b < k / 32)
      for (int j = 0; j < 16; ++j)
        dst[b * 16 + j] = static_cast<uint8_t>((q[b * 32 + j] + 8) | ((q[b * 32 + 16 + j] + 8) << 4));
  }
  return out;
}

/// ŵ[n, k] = s[n, k / group] · q[n, k] in f32, exact: s has 8 significant bits and q at
/// most 7, and s·q is a multiple of s's last bit (so even a subnormal s loses nothing).
Tensor dequantize_weight(const QuantizedWeight& w) {
  OLMO2_CHECK(!w.empty() && w.values.device() == Device::CPU, "dequantize_weight: an empty or non-CPU weight");
  Tensor out = Tensor::zeros({w.n, w.k});
  float* y = out.f32();
  const uint8_t* values = w.values.view().data_as<uint8_t>();
  for (int64_t r = 0; r < w.n; ++r)
    for (int64_t c = 0; c < w.k; ++c) {
      const int q = detail::quant_weight_value(w, values + r * (w.format == QuantFormat::Int8 ? w.k : w.k / 2),
                                               c / 32, static_cast<int>(c % 32));
      y[r * w.k + c] = detail::quant_scale(w, r, c / w.group) * static_cast<float>(q);
    }
  return out;
}

}  // namespace olmo2::ops
