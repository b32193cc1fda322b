// The AVX2+FMA path of the bf16 product: each 32-bit word of bf16 data holds a pair,
// widened to fp32 as two vectors — the odd (high) elements by masking the low half,
// the even (low) ones by a shift — and added by two fp32 fmas, odd first, per lane: the
// lane sequence of docs/architecture.md §2 ("bf16 products"). The driver sets MXCSR's
// DAZ and FTZ, so the fmas flush as VDPBF16PS does and the bits are the other paths'.
// Lanes 0-7 of an element live in one ymm, lanes 8-15 in a second.
#include <immintrin.h>

#include <array>
#include <utility>

#include "ops/cpu/bf16_gemm_detail.h"
#include "ops/cpu/lane_tree.h"

namespace olmo2::ops::detail {
namespace {

#define OLMO2_AVX2 __attribute__((target("avx2,fma")))

// Register tile: 2 × 2 elements of two ymm each (8), the odd and even halves of two
// w vectors (4) and of one x vector (2): 14 of the 16 ymm.
constexpr int kMr = 2;
constexpr int kNr = 2;
// How far ahead each w row is prefetched (decode-sized products stream w from memory).
constexpr int kPrefetchBytes = 512;

OLMO2_AVX2 inline __m256 odd_half(__m256i v) {
  return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}
OLMO2_AVX2 inline __m256 even_half(__m256i v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}


template <int MR, int NR>
OLMO2_AVX2 void tile(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t groups,
                     float* acc, int64_t acc_ld, bool first, bool last, float* y, int64_t ldy) {
  __m256 a[MR][NR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j)
#pragma GCC unroll 2
      for (int c = 0; c < 2; ++c)
        a[i][j][c] =
            first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + i * acc_ld + j * 16 + 8 * c);
  for (int64_t g = 0; g < groups; ++g) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j)
      _mm_prefetch(reinterpret_cast<const char*>(w + j * ldw + g * kBf16Group) + kPrefetchBytes,
                   _MM_HINT_T0);
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const int64_t off = g * kBf16Group + 16 * c;
      __m256 wo[NR], we[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * ldw + off));
        wo[j] = odd_half(v), we[j] = even_half(v);
      }
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i * ldx + off));
        const __m256 xo = odd_half(v), xe = even_half(v);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) {
          a[i][j][c] = _mm256_fmadd_ps(xo, wo[j], a[i][j][c]);
          a[i][j][c] = _mm256_fmadd_ps(xe, we[j], a[i][j][c]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      if (last) {
        y[i * ldy + j] = reduce_lanes16(a[i][j][0], a[i][j][1]);
      } else {
        _mm256_storeu_ps(acc + i * acc_ld + j * 16, a[i][j][0]);
        _mm256_storeu_ps(acc + i * acc_ld + j * 16 + 8, a[i][j][1]);
      }
    }
}

template <int MR, int... NRs>
constexpr std::array<Bf16TileFn, sizeof...(NRs)> tile_row(std::integer_sequence<int, NRs...>) {
  return {&tile<MR, NRs + 1>...};
}
template <int... MRs>
constexpr std::array<std::array<Bf16TileFn, kNr>, sizeof...(MRs)> tile_table(
    std::integer_sequence<int, MRs...>) {
  return {tile_row<MRs + 1>(std::make_integer_sequence<int, kNr>())...};
}
constexpr auto kTiles = tile_table(std::make_integer_sequence<int, kMr>());

Bf16TileFn pick(int mr, int nr) { return kTiles[mr - 1][nr - 1]; }

}  // namespace

const Bf16Kernel& bf16_kernel_avx2() {
  static const Bf16Kernel k{kMr, kNr, &pick, true};
  return k;
}

}  // namespace olmo2::ops::detail
