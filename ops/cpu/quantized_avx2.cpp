// The AVX2 path of the quantized-weight products: the fixed sequence of
// ops/cpu/quantized_detail.h with 256-bit integer multiply-adds (docs/architecture.md
// §3.2, "Quantized weights"). A block's 32 products q_x·q_w come from the sign trick,
// maddubs(|q_w|, sign(q_x, q_w)) (u8 × s8 → pairs in int16, at most 2·127·127, so no
// saturation), then madd with ones (pairs of pairs → the eight int32 P[b][j], j = lane),
// exactly the integers of the definition. int4 skips the sign trick: maddubs(u, q_x) on
// the stored nibbles u = q_w + 8, minus 8·Σ q_x per lane (QuantizedActivations). Lanes 0-7 of the definition's acc live in one
// ymm (even blocks), lanes 8-15 in another (odd blocks); one fma per lane and block, and
// the tree of ops/cpu/lane_tree.h. Built with target attributes (ops/CMakeLists.txt).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "ops/cpu/lane_tree.h"
#include "ops/cpu/quantized_detail.h"

namespace olmo2::ops::detail {
namespace {

#define OLMO2_AVX2 __attribute__((target("avx2,fma")))

// Block b of a weight row: int8, the 32 signed values q_w; int4, the 32 stored nibbles
// u = q_w + 8 (the packing of ops/cpu/quantized_weight.cpp): Part 0 the even block of a pair (low
// nibbles), 1 the odd one (high nibbles), 2 the lone last block of an odd count.
template <bool Int4, int Part>
OLMO2_AVX2 inline __m256i load_block(const uint8_t* row, int64_t b) {
  if constexpr (!Int4) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 32));
  } else if constexpr (Part < 2) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + (b >> 1) * 32));
    return _mm256_and_si256(Part == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
  } else {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 16));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
    return _mm256_set_m128i(hi, lo);
  }
}

// Block b of an MR × NR tile into lanes 8H … 8H+7 (acc[i][j][H], H = Part mod 2);
// inlined so that the accumulators stay in registers.
template <bool Int4, int MR, int NR, int Part>
OLMO2_AVX2 __attribute__((always_inline)) inline void block_step(
    __m256 (&acc)[MR][NR][2], const QuantizedActivations& a, const uint8_t* values, int64_t row_bytes,
    const uint16_t* scales, int64_t groups, int64_t i0, int64_t n0, int64_t b) {
  constexpr int H = Part % 2;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i wv[NR], aw[NR];
  __m256 s[NR];
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) {
    wv[j] = load_block<Int4, Part>(values + (n0 + j) * row_bytes, b);
    if constexpr (!Int4) aw[j] = _mm256_abs_epi8(wv[j]);
    // The bf16 scale to f32 in every lane: broadcast the 16 bits, shift them up.
    const __m256i bits = _mm256_set1_epi16(static_cast<int16_t>(scales[j * groups + a.block_group[b]]));
    s[j] = _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.row(i0 + i) + b * 32));
    const __m256 dx = _mm256_set1_ps(a.scales(i0 + i)[b]);
    __m256i off = _mm256_setzero_si256();
    if constexpr (Int4)
      off = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.lane_offsets.data() + ((i0 + i) * a.blocks + b) * 8));
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      __m256i p32;
      if constexpr (Int4) {  // Σ u·q_x − 8·Σ q_x: u ≤ 15, so the int16 pairs cannot saturate
        p32 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wv[j], xv), ones), off);
      } else {
        p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[j], _mm256_sign_epi8(xv, wv[j])), ones);
      }
      acc[i][j][H] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_mul_ps(dx, s[j]), acc[i][j][H]);  // c = F(d·s)
    }
  }
}

// An MR × NR tile (rows i0… of the activations, weight rows n0…) over every block:
// acc[i][j][h] holds lanes 8h … 8h+7 of element (i, j).
template <bool Int4, int MR, int NR>
OLMO2_AVX2 void tile(const QuantizedActivations& a, const QuantizedWeight& w, const uint8_t* values,
                     int64_t row_bytes, int64_t i0, int64_t n0, float* y, int64_t ldy) {
  const int64_t blocks = a.blocks, groups = w.k / w.group;
  const uint16_t* scales = static_cast<const uint16_t*>(w.scales.view().data()) + n0 * groups;
  __m256 acc[MR][NR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    block_step<Int4, MR, NR, 0>(acc, a, values, row_bytes, scales, groups, i0, n0, b);
    block_step<Int4, MR, NR, 1>(acc, a, values, row_bytes, scales, groups, i0, n0, b + 1);
  }
  if (b < blocks) block_step<Int4, MR, NR, 2>(acc, a, values, row_bytes, scales, groups, i0, n0, b);
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) y[(i0 + i) * ldy + n0 + j] = reduce_lanes16(acc[i][j][0], acc[i][j][1]);
}

template <bool Int4, int MR>
OLMO2_AVX2 void row_tiles(const QuantizedActivations& a, const QuantizedWeight& w, const uint8_t* values,
                          int64_t row_bytes, int64_t i0, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int NR = MR == 1 ? 4 : 2;
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) tile<Int4, MR, NR>(a, w, values, row_bytes, i0, n, y, ldy);
  for (; n < n1; ++n) tile<Int4, MR, 1>(a, w, values, row_bytes, i0, n, y, ldy);
}

template <bool Int4>
OLMO2_AVX2 void kernel(const QuantizedActivations& a, const QuantizedWeight& w, int64_t n0, int64_t n1,
                       float* y, int64_t ldy) {
  const uint8_t* values = static_cast<const uint8_t*>(w.values.view().data());
  const int64_t row_bytes = Int4 ? w.k / 2 : w.k;
  int64_t i = 0;
  for (; i + 2 <= a.m; i += 2) row_tiles<Int4, 2>(a, w, values, row_bytes, i, n0, n1, y, ldy);
  if (i < a.m) row_tiles<Int4, 1>(a, w, values, row_bytes, i, n0, n1, y, ldy);
}

}  // namespace

void quantized_kernel_avx2(const QuantizedActivations& a, const QuantizedWeight& w, int64_t n0, int64_t n1,
                           float* y, int64_t ldy) {
  if (w.format == QuantFormat::Int4)
    kernel<true>(a, w, n0, n1, y, ldy);
  else
    kernel<false>(a, w, n0, n1, y, ldy);
}

}  // namespace olmo2::ops::detail
