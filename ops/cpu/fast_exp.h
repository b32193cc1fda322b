// A vectorisable fp32 exp for the softmax-like loops (cross-entropy over a 100k
// vocabulary is the hottest non-GEMM loop of training). Internal to ops/cpu.
#pragma once

#include <bit>
#include <cstdint>

namespace olmo2::ops::cpu {

/// e^x for x ≤ 88 with ≈2 ulp relative error: x = n·ln2 + r, |r| ≤ ln2/2 (Cody–Waite
/// two-part ln2), e^r by its degree-6 Taylor polynomial (truncation < 1.2e-7
/// relative), times 2^n built in the exponent bits. Inputs below −87.3 are clamped
/// (result ~1e-38, not 0: negligible in a sum). NaN propagates. No calls, no
/// branches, so GCC vectorises loops of it.
inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187e-06f;
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  x = x < -87.3f ? -87.3f : x;
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

}  // namespace olmo2::ops::cpu
