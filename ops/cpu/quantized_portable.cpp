// The portable path of the quantized-weight products: the fixed sequence of
// ops/cpu/quantized_detail.h in scalar code (exact int32 block dot products, std::fmaf),
// any CPU (docs/architecture.md §3.2, "Quantized weights").
#include <cmath>
#include <cstdint>

#include "ops/cpu/quantized_detail.h"

namespace olmo2::ops::detail {
void quantized_kernel_portable(const QuantizedActivations& a, const QuantizedWeight& w, int64_t n0,
                               int64_t n1, float* y, int64_t ldy) {
  const uint8_t* values = static_cast<const uint8_t*>(w.values.view().data());
  const int64_t row_bytes = w.format == QuantFormat::Int8 ? w.k : w.k / 2;
  const int64_t blocks_per_group = w.group / kQuantBlock;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* wrow = values + n * row_bytes;
    for (int64_t i = 0; i < a.m; ++i) {
      const int8_t* xq = a.row(i);
      const float* d = a.scales(i);
      float acc[16] = {};
      for (int64_t b = 0; b < a.blocks; ++b) {
        const float c = d[b] * quant_scale(w, n, b / blocks_per_group);
        float* lanes = acc + 8 * (b & 1);
        for (int j = 0; j < 8; ++j) {
          int32_t p = 0;
          for (int t = 4 * j; t < 4 * j + 4; ++t) p += xq[b * 32 + t] * quant_weight_value(w, wrow, b, t);
          lanes[j] = std::fmaf(static_cast<float>(p), c, lanes[j]);
        }
      }
      y[i * ldy + n] = quant_reduce_lanes(acc);
    }
  }
}

}  // namespace olmo2::ops::detail
