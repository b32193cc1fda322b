// The AVX-512 register tiles of the fp32 batch-invariant product: one zmm of 16 fp32
// lanes per output element, lane l taking k ≡ l (mod 16), which is the lane sequence
// of ops/cpu/batch_invariant_gemm.cpp (docs/architecture.md §2, "Batch-invariant
// products") with one instruction where the AVX2 path needs two: each
// _mm512_fmadd_ps is sixteen independent fp32 fmas, the K % 16 tail is a masked fma
// (idle lanes keep their value exactly, a -0 included), and the reduction adds the same
// pairs in the same order (j + j+8, j + j+4, j + j+2, 0 + 1). So these tiles give the
// bits of the AVX2 and portable paths; the tests check that they do.
//
// Compiled for AVX-512 by per-function target attributes rather than per-source
// -mavx512* flags: such flags would also compile the inline functions of the headers
// included here for AVX-512, and the linker may keep those copies for the whole
// program, which would then fault on an AVX2-only CPU (see ops/CMakeLists.txt).
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "ops/cpu/batch_invariant_gemm_detail.h"
#include "ops/cpu/lane_tree.h"

namespace olmo2::ops::detail {
namespace {

#define OLMO2_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

constexpr int kLanes = 16;
// Register tile: kMr rows of x × kNr rows of w, one accumulator each (24 zmm), kNr w
// vectors and one x vector: 29 of the 32 zmm. A tall tile reads each w vector (which
// streams from L2) for more rows of x (which stay in L1).
constexpr int kMr = 6;
constexpr int kNr = 4;

// The tiles inline reduce_lanes16 (ops/cpu/lane_tree.h); GCC 12 warns that its own
// _mm512_castps512_ps256 reads an uninitialized __Y there; it does not.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// One MR × NR tile over K positions [0, len) of the block (BatchInvariantTileFn).
template <int MR, int NR>
OLMO2_AVX512 void tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t len,
                       float* acc, int64_t acc_ld, bool first, bool last, float* y, int64_t ldy) {
  __m512 a[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
      a[i][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + i * acc_ld + j * kLanes);
  int64_t p = 0;
  for (; p + kLanes <= len; p += kLanes) {
    __m512 wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_loadu_ps(w + j * ldw + p);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m512 xv = _mm512_loadu_ps(x + i * ldx + p);
      // Keep xv in a register: folded into each fma it would be loaded NR times.
      __asm__("" : "+v"(xv));
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) a[i][j] = _mm512_fmadd_ps(xv, wv[j], a[i][j]);
    }
  }
  if (p < len) {
    // The K % 16 tail: lanes below the remainder take one more fma; mask3 keeps the
    // others' accumulator bits (not an fma with zeros, which would turn -0 into +0).
    // Masked loads read nothing past the row.
    const __mmask16 mask = static_cast<__mmask16>((1u << (len - p)) - 1u);
    __m512 wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_ps(mask, w + j * ldw + p);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * ldx + p);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) a[i][j] = _mm512_mask3_fmadd_ps(xv, wv[j], a[i][j], mask);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      if (last)
        y[i * ldy + j] = reduce_lanes16(a[i][j]);
      else
        _mm512_storeu_ps(acc + i * acc_ld + j * kLanes, a[i][j]);
    }
}

#pragma GCC diagnostic pop

// The full tile and every smaller one for the M and N edges: they differ only in how
// many elements run side by side, never in an element's operations.
template <int MR, int... NRs>
constexpr std::array<BatchInvariantTileFn, sizeof...(NRs)> tile_row(
    std::integer_sequence<int, NRs...>) {
  return {&tile<MR, NRs + 1>...};
}
template <int... MRs>
constexpr std::array<std::array<BatchInvariantTileFn, kNr>, sizeof...(MRs)> tile_table(
    std::integer_sequence<int, MRs...>) {
  return {tile_row<MRs + 1>(std::make_integer_sequence<int, kNr>())...};
}
constexpr auto kTiles = tile_table(std::make_integer_sequence<int, kMr>());

BatchInvariantTileFn pick(int mr, int nr) { return kTiles[mr - 1][nr - 1]; }

}  // namespace

const BatchInvariantKernel& batch_invariant_kernel_avx512() {
  // Half of a core's L2 for the w block (measured on a 2 MB L2: K = 8192 runs ~1.4×
  // faster than with the AVX2 path's 256 KB, K = 2048 the same); 256 KB when unknown.
  static const BatchInvariantKernel k{
      kMr, kNr, &pick, std::clamp<int64_t>(sysconf(_SC_LEVEL2_CACHE_SIZE) / 2, 256 * 1024, 1024 * 1024)};
  return k;
}

}  // namespace olmo2::ops::detail
