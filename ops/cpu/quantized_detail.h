// Internals of the quantized-weight products (ops/quantized_linear.h) shared by their
// files: the quantized activations, the per-path kernels and the fixed sequence every
// kernel computes (docs/architecture.md §3.2, "Quantized weights").
//
// The sequence for one element y[m, n] (K = 32·B, blocks b = 0 … B−1 of 32 along K):
//   x̂ = the activations of row m quantized per block (quantize_activations): int8
//       q_x[k] and one f32 scale d[b] per block
//   P[b][j] = Σ_{i<4} q_x[32b + 4j + i] · q_w[n, 32b + 4j + i]   (j < 8; exact int32)
//   c[b]    = F(d[b] · s[n, 32b / group])                         (s the bf16 scale as f32)
//   acc[0..15] = +0; for b = 0, 1, …, B−1 and j < 8:
//       acc[8·(b mod 2) + j] = F(float(P[b][j]) · c[b] + acc[8·(b mod 2) + j])   (one fma)
//   y[m, n] = the lane tree of ops/cpu/lane_tree.h over acc (j + j+8, j + j+4, j + j+2, 0 + 1)
// F rounds to nearest even once. float(P) is exact (|P| ≤ 4·127·127 < 2²⁴). The
// integer part is the same for every instruction sequence that computes it exactly
// (AVX2 maddubs + madd, AVX-512 VNNI vpdpbusd, scalar), and nothing else depends on M,
// the row's place in x, N's blocking or the thread count: the paths give the same bits
// and the product is batch-invariant by construction.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/quantized_linear.h"

namespace olmo2::ops::detail {

/// Elements per activation block (and the unit of the weights' int4 packing).
inline constexpr int64_t kQuantBlock = 32;

/// Rows of x quantized per block of 32 along K: q [m, k] int8, d [m, k/32] f32.
/// d = F(max|x_block| / 127); q = clamp(round_half_even(F(x / d)), −127, 127); a block
/// of zeros has d = 0 and q = 0; a block with a non-finite element has d = NaN (its
/// products then are NaN, as a float product would be) and q = 0.
struct QuantizedActivations {
  int64_t m = 0, k = 0, blocks = 0;
  std::vector<int8_t> q;
  std::vector<float> d;
  /// The weight's scale group of each block, 32b / group (filled by the driver for the
  /// weight of the product: no division in the kernels' loops).
  std::vector<int32_t> block_group;
  /// For int4 weights, −8 times each lane's sum of q_x, [m, blocks, 8]: lane j of block b
  /// is −8·Σ_{i<4} q_x[32b + 4j + i], so that Σ (u − 8)·q_x over a lane, u the stored
  /// nibble, is the lane's Σ u·q_x plus this (filled by the driver; empty for int8).
  std::vector<int32_t> lane_offsets;
  const int8_t* row(int64_t i) const { return q.data() + i * k; }
  const float* scales(int64_t i) const { return d.data() + i * blocks; }
};

/// Quantizes rows of x (f32, `ldx` floats apart) as QuantizedActivations says.
void quantize_activations(const float* x, int64_t m, int64_t k, int64_t ldx, QuantizedActivations& out);

/// A path's kernel: y[i, n] for every row i of `a` and n in [n0, n1) by the sequence
/// above (y row i at y + i·ldy).
using QuantizedKernel = void (*)(const QuantizedActivations& a, const QuantizedWeight& w, int64_t n0,
                                 int64_t n1, float* y, int64_t ldy);

void quantized_kernel_portable(const QuantizedActivations& a, const QuantizedWeight& w, int64_t n0,
                               int64_t n1, float* y, int64_t ldy);
void quantized_kernel_avx2(const QuantizedActivations& a, const QuantizedWeight& w, int64_t n0, int64_t n1,
                           float* y, int64_t ldy);
void quantized_kernel_avx512vnni(const QuantizedActivations& a, const QuantizedWeight& w, int64_t n0,
                                 int64_t n1, float* y, int64_t ldy);

/// The CPU product behind ops::linear_quantized (checks its arguments as the contract
/// says; ops/dispatch.cpp refuses other devices).
void linear_quantized_cpu(const TensorView& x, const QuantizedWeight& w, const TensorView& y);

/// v rounded to the nearest integer, ties to even, for |v| < 2²²: adding 1.5·2²³ leaves
/// no fraction bits, so the f32 addition rounds (round-to-nearest-even, the default mode
/// the project never changes) and the subtraction is exact. std::nearbyint gives the
/// same value but is a library call that saves the floating-point environment.
inline float round_half_even_small(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5·2²³
  return (v + kMagic) - kMagic;
}

/// The kernel of `path` (ShapeError when this CPU lacks it).
QuantizedKernel quantized_kernel(QuantizedPath path);

/// The bf16 scale s[n, g] of w as f32 (exact).
inline float quant_scale(const QuantizedWeight& w, int64_t n, int64_t g) {
  const uint16_t bits = static_cast<const uint16_t*>(w.scales.view().data())[n * (w.k / w.group) + g];
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

/// q_w[32b + t] (t < 32) of a weight row starting at `row` (the packing of
/// ops/cpu/quantized_weight.cpp).
inline int quant_weight_value(const QuantizedWeight& w, const uint8_t* row, int64_t b, int t) {
  if (w.format == QuantFormat::Int8) return static_cast<int8_t>(row[b * 32 + t]);
  if ((b | 1) < w.k / 32) {  // a block of a pair: block 2p low nibbles, 2p+1 high
    const uint8_t byte = row[(b >> 1) * 32 + t];
    return ((b & 1) ? (byte >> 4) : (byte & 0x0F)) - 8;
  }
  const uint8_t byte = row[b * 16 + (t & 15)];  // the lone last block
  return (t < 16 ? (byte & 0x0F) : (byte >> 4)) - 8;
}

/// The fixed lane tree over 16 f32 lanes (scalar form of ops/cpu/lane_tree.h).
inline float quant_reduce_lanes(const float* acc) {
  float s8[8], s4[4], s2[2];
  for (int j = 0; j < 8; ++j) s8[j] = acc[j] + acc[j + 8];
  for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
  for (int j = 0; j < 2; ++j) s2[j] = s4[j] + s4[j + 2];
  return s2[0] + s2[1];
}

}  // namespace olmo2::ops::detail
