// The fixed reduction tree over an element's 16 fp32 lanes, in registers, shared by
// every vector path of the batch-invariant f32 product and of the bf16 products: lanes
// j + j+8, then j + j+4, j + j+2, and 0 + 1 (docs/architecture.md §2). One definition,
// so that the paths cannot drift apart in the bits they give.
#pragma once

#include <immintrin.h>

namespace olmo2::ops::detail {

/// The tree over lanes 0-7 in `lo` and 8-15 in `hi` (AVX2 paths).
__attribute__((target("avx2"))) inline float reduce_lanes16(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(lo, hi);                                                 // j, j+8
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // j, j+4
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                 // j, j+2
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));                               // 0, 1
}

// (GCC 12 warns that its own _mm512_castps512_ps256 reads an uninitialized __Y; it does not.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/// The same tree over lanes 0-15 of one zmm (AVX-512 paths).
__attribute__((target("avx512f,avx512dq"))) inline float reduce_lanes16(__m512 v) {
  return reduce_lanes16(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}
#pragma GCC diagnostic pop

}  // namespace olmo2::ops::detail
