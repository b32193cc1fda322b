// The AVX512-BF16 path of the bf16 product: one zmm of 16 fp32 lanes per output element,
// VDPBF16PS adding a pair of bf16 products into each lane (the odd element first, DAZ/
// FTZ; Intel SDM Vol. 2, VDPBF16PS) — the lane sequence of docs/architecture.md §2
// ("bf16 products") as the instruction computes it. The reduction runs under the
// driver's MXCSR DAZ|FTZ, so it flushes as the portable path does.
#include <immintrin.h>

#include <array>
#include <utility>

#include "ops/cpu/bf16_gemm_detail.h"
#include "ops/cpu/lane_tree.h"

namespace olmo2::ops::detail {
namespace {

#define OLMO2_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

// Register tile: kMr × kNr accumulators (24 zmm) + kNr w vectors + one x vector.
constexpr int kMr = 4;
constexpr int kNr = 6;
// How far ahead each w row is prefetched: in decode-sized products w streams from memory
// once, and the hardware prefetchers alone leave about a tenth of the bandwidth unused.
constexpr int kPrefetchBytes = 512;

// The tiles inline reduce_lanes16 (ops/cpu/lane_tree.h); GCC 12 warns that its own
// _mm512_castps512_ps256 reads an uninitialized __Y there; it does not.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

template <int MR, int NR>
OLMO2_AVX512BF16 void tile(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                           int64_t groups, float* acc, int64_t acc_ld, bool first, bool last,
                           float* y, int64_t ldy) {
  __m512 a[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
      a[i][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + i * acc_ld + j * 16);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t off = g * kBf16Group;
    __m512bh wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      wv[j] = (__m512bh)_mm512_loadu_si512(w + j * ldw + off);
      _mm_prefetch(reinterpret_cast<const char*>(w + j * ldw + off) + kPrefetchBytes, _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + i * ldx + off);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) a[i][j] = _mm512_dpbf16_ps(a[i][j], xv, wv[j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      if (last)
        y[i * ldy + j] = reduce_lanes16(a[i][j]);
      else
        _mm512_storeu_ps(acc + i * acc_ld + j * 16, a[i][j]);
    }
}

#pragma GCC diagnostic pop

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

const Bf16Kernel& bf16_kernel_avx512bf16() {
  static const Bf16Kernel k{kMr, kNr, &pick, true};
  return k;
}

}  // namespace olmo2::ops::detail
