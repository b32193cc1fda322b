// The portable path of the bf16 product: the operation sequence of
// docs/architecture.md §2 ("bf16 products") in scalar code — std::fmaf per bf16 pair,
// odd element first, with the DAZ and FTZ of VDPBF16PS done by hand, so that it gives
// the vector paths' bits on any CPU and under any MXCSR mode.
#include <cmath>
#include <cstring>

#include "ops/cpu/bf16_gemm_detail.h"

namespace olmo2::ops::detail {
namespace {

// A result whose magnitude is below the smallest normal, as a zero of its sign (FTZ;
// the test is after rounding, as x86 detects tininess).
inline float ftz(float v) {
  return std::fabs(v) < 0x1p-126f ? std::copysign(0.0f, v) : v;
}

inline float widen(uint16_t b) { return bf16_to_f32(bf16_daz(b)); }

void tile_portable(const uint16_t* x, int64_t, const uint16_t* w, int64_t, int64_t groups, float* acc, int64_t,
                   bool first, bool last, float* y, int64_t) {
  float lane[16];
  if (first)
    std::memset(lane, 0, sizeof lane);
  else
    std::memcpy(lane, acc, sizeof lane);
  for (int64_t g = 0; g < groups; ++g) {
    const uint16_t* xg = x + g * kBf16Group;
    const uint16_t* wg = w + g * kBf16Group;
    for (int j = 0; j < 16; ++j) {
      float a = std::fmaf(widen(xg[2 * j + 1]), widen(wg[2 * j + 1]), lane[j]);
      a = ftz(a);
      lane[j] = ftz(std::fmaf(widen(xg[2 * j]), widen(wg[2 * j]), a));
    }
  }
  if (!last) {
    std::memcpy(acc, lane, sizeof lane);
    return;
  }
  float s8[8], s4[4], s2[2];
  for (int j = 0; j < 8; ++j) s8[j] = ftz(lane[j] + lane[j + 8]);
  for (int j = 0; j < 4; ++j) s4[j] = ftz(s8[j] + s8[j + 4]);
  for (int j = 0; j < 2; ++j) s2[j] = ftz(s4[j] + s4[j + 2]);
  *y = ftz(s2[0] + s2[1]);
}

Bf16TileFn portable_tile(int, int) { return &tile_portable; }

}  // namespace

const Bf16Kernel& bf16_kernel_portable() {
  static const Bf16Kernel k{1, 1, &portable_tile, false};
  return k;
}

}  // namespace olmo2::ops::detail
