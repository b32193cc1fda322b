// The AVX2 path of the quantized-weight products: the fixed sequence of
// ops/cpu/quantized_detail.h with 256-bit integer multiply-adds (docs/architecture.md
// §3.2, "Quantized weights"). A block's 32 products q_x·q_w come from the sign trick,
// maddubs(|q_w|, sign(q_x, q_w)) (u8 × s8 → pairs in int16, at most 2·127·127, so no
// saturation), then madd with ones (pairs of pairs → the eight int32 P[b][j], j = lane),
// exactly the integers of the definition. Lanes 0-7 of the definition's acc live in one
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

// The 32 signed values q_w of block b of a weight row (int8 bytes or int4 nibbles).
template <bool Int4>
OLMO2_AVX2 inline __m256i load_block(const uint8_t* row, int64_t b) {
  if constexpr (!Int4) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 32));
  } else {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 16));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
  }
}

// An MR × NR tile (rows i0… of the activations, weight rows n0…) over every block:
// acc[i][j][h] holds lanes 8h … 8h+7 of element (i, j).
template <bool Int4, int MR, int NR>
OLMO2_AVX2 void tile(const QuantizedActivations& a, const QuantizedWeight& w, const uint8_t* values,
                     int64_t row_bytes, int64_t i0, int64_t n0, float* y, int64_t ldy) {
  const int64_t blocks = a.blocks, per_group = w.group / kQuantBlock, groups = w.k / w.group;
  const uint16_t* scales = static_cast<const uint16_t*>(w.scales.view().data()) + n0 * groups;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR][NR][2];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
  auto step = [&](int64_t b, auto half) OLMO2_AVX2 {
    constexpr int h = decltype(half)::value;
    __m256i wv[NR], aw[NR];
    float s[NR];
    for (int j = 0; j < NR; ++j) {
      wv[j] = load_block<Int4>(values + (n0 + j) * row_bytes, b);
      aw[j] = _mm256_abs_epi8(wv[j]);
      const uint32_t bits = static_cast<uint32_t>(scales[j * groups + b / per_group]) << 16;
      __builtin_memcpy(&s[j], &bits, sizeof(float));
    }
    for (int i = 0; i < MR; ++i) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.row(i0 + i) + b * 32));
      const float dx = a.scales(i0 + i)[b];
      for (int j = 0; j < NR; ++j) {
        const __m256i p16 = _mm256_maddubs_epi16(aw[j], _mm256_sign_epi8(xv, wv[j]));
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        const float c = dx * s[j];
        acc[i][j][h] = _mm256_fmadd_ps(p, _mm256_set1_ps(c), acc[i][j][h]);
      }
    }
  };
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    step(b, std::integral_constant<int, 0>{});
    step(b + 1, std::integral_constant<int, 1>{});
  }
  if (b < blocks) step(b, std::integral_constant<int, 0>{});
  for (int i = 0; i < MR; ++i)
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
