// bf16 as bits for the stand-ins of ops/simt/ (the device intrinsics, the cuBLASLt
// reference product, NCCL's bf16 reductions): what a GPU does, so every NaN rounds to the
// canonical 0x7fff, as the CUDA Math API's __float2bfloat16_rn. Header-only.
#pragma once

#include <bit>
#include <cstdint>

namespace olmo2::simt {

/// f32 → bf16 bits, round to nearest even; NaN → 0x7fff.
inline uint16_t bf16_round_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// bf16 bits → f32 (exact).
inline float bf16_widen_bits(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace olmo2::simt
