// The AVX-512 VNNI path of the quantized-weight products: the fixed sequence of
// ops/cpu/quantized_detail.h with vpdpbusd (docs/architecture.md §3.2, "Quantized
// weights"). One zmm holds two blocks b (even, lanes 0-7) and b+1 (odd, lanes 8-15):
// vpdpbusd(0, |q_w|, q_x negated where q_w < 0) sums four u8 × s8 products per int32
// lane without saturation — the eight P[b][j] then the eight P[b+1][j], the
// definition's integers — and one fma per lane adds float(P)·c into the element's one
// zmm of 16 lanes, lane 8·(b mod 2) + j as the definition says. An odd last block
// updates lanes 0-7 only (a masked fma keeps 8-15). The tree is ops/cpu/lane_tree.h's.
// Compiled with function target attributes (never per-file flags: ops/CMakeLists.txt);
// it runs only where cpuid reports avx512f/bw/dq/vl and avx512_vnni.
#include <immintrin.h>

#include <cstdint>

#include "ops/cpu/lane_tree.h"
#include "ops/cpu/quantized_detail.h"

// GCC 12 warns that its own _mm512_undefined_* arguments of _mm512_cvtepi32_ps,
// _mm512_inserti64x4, and _mm512_extractf32x8_ps are uninitialized;
// those lanes are never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace olmo2::ops::detail {
namespace {

#define OLMO2_AVX512VNNI \
  __attribute__((target("avx2,fma,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

// The 64 signed values of blocks b and b+1 (b even) of a weight row, in order: for
// int4 the pair's 32 bytes, block b in the low nibbles and b+1 in the high ones
// (ops/cpu/quantized_weight.cpp).
template <bool Int4>
OLMO2_AVX512VNNI inline __m512i load_pair(const uint8_t* row, int64_t b) {
  if constexpr (!Int4) {
    return _mm512_loadu_si512(row + b * 32);
  } else {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 16));
    const __m256i mask = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(v, mask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
    return _mm512_sub_epi8(_mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1), _mm512_set1_epi8(8));
  }
}

// The 32 signed values of the lone last block b of an odd count (int4: 16 bytes, the
// first 16 values low, the last 16 high).
template <bool Int4>
OLMO2_AVX512VNNI inline __m256i load_block(const uint8_t* row, int64_t b) {
  if constexpr (!Int4) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 32));
  } else {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 16));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
  }
}

OLMO2_AVX512VNNI inline float scale_of(const uint16_t* row_scales, int64_t g) {
  const uint32_t bits = static_cast<uint32_t>(row_scales[g]) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

// An MR × NR tile (activation rows i0…, weight rows n0…) over every block.
template <bool Int4, int MR, int NR>
OLMO2_AVX512VNNI void tile(const QuantizedActivations& a, const QuantizedWeight& w, const uint8_t* values,
                           int64_t row_bytes, int64_t i0, int64_t n0, float* y, int64_t ldy) {
  const int64_t blocks = a.blocks, groups = w.k / w.group;
  const uint16_t* scales = static_cast<const uint16_t*>(w.scales.view().data()) + n0 * groups;
  __m512 acc[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    __m512i aw[NR];
    __mmask64 neg[NR];
    __m512 sv[NR];  // the scales of blocks b (lanes 0-7) and b+1 (lanes 8-15)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m512i wv = load_pair<Int4>(values + (n0 + j) * row_bytes, b);
      aw[j] = _mm512_abs_epi8(wv);
      neg[j] = _mm512_movepi8_mask(wv);
      sv[j] = _mm512_insertf32x8(_mm512_set1_ps(scale_of(scales + j * groups, a.block_group[b])),
                                 _mm256_set1_ps(scale_of(scales + j * groups, a.block_group[b + 1])), 1);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = _mm512_loadu_si512(a.row(i0 + i) + b * 32);
      const __m512 dv = _mm512_insertf32x8(_mm512_set1_ps(a.scales(i0 + i)[b]),
                                           _mm256_set1_ps(a.scales(i0 + i)[b + 1]), 1);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        const __m512i sx = _mm512_mask_sub_epi8(xv, neg[j], _mm512_setzero_si512(), xv);
        const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), aw[j], sx));
        acc[i][j] = _mm512_fmadd_ps(p, _mm512_mul_ps(dv, sv[j]), acc[i][j]);  // c = F(d·s) per lane
      }
    }
  }
  if (b < blocks) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m256i wv = load_block<Int4>(values + (n0 + j) * row_bytes, b);
      const __m256i aw = _mm256_abs_epi8(wv);
      const float s = scale_of(scales + j * groups, a.block_group[b]);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.row(i0 + i) + b * 32));
        const __m256i p8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(xv, wv));
        const __m512 p = _mm512_cvtepi32_ps(_mm512_zextsi256_si512(p8));
        const float c = a.scales(i0 + i)[b] * s;
        acc[i][j] = _mm512_mask3_fmadd_ps(p, _mm512_set1_ps(c), acc[i][j], 0x00FF);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) y[(i0 + i) * ldy + n0 + j] = reduce_lanes16(acc[i][j]);
}

template <bool Int4, int MR>
OLMO2_AVX512VNNI void row_tiles(const QuantizedActivations& a, const QuantizedWeight& w, const uint8_t* values,
                                int64_t row_bytes, int64_t i0, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int NR = 4;
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) tile<Int4, MR, NR>(a, w, values, row_bytes, i0, n, y, ldy);
  for (; n < n1; ++n) tile<Int4, MR, 1>(a, w, values, row_bytes, i0, n, y, ldy);
}

template <bool Int4>
OLMO2_AVX512VNNI void kernel(const QuantizedActivations& a, const QuantizedWeight& w, int64_t n0, int64_t n1,
                             float* y, int64_t ldy) {
  const uint8_t* values = static_cast<const uint8_t*>(w.values.view().data());
  const int64_t row_bytes = Int4 ? w.k / 2 : w.k;
  int64_t i = 0;
  for (; i + 4 <= a.m; i += 4) row_tiles<Int4, 4>(a, w, values, row_bytes, i, n0, n1, y, ldy);
  for (; i < a.m; ++i) row_tiles<Int4, 1>(a, w, values, row_bytes, i, n0, n1, y, ldy);
}

}  // namespace

void quantized_kernel_avx512vnni(const QuantizedActivations& a, const QuantizedWeight& w, int64_t n0,
                                 int64_t n1, float* y, int64_t ldy) {
  if (w.format == QuantFormat::Int4)
    kernel<true>(a, w, n0, n1, y, ldy);
  else
    kernel<false>(a, w, n0, n1, y, ldy);
}

}  // namespace olmo2::ops::detail

#pragma GCC diagnostic pop
