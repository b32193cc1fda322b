// The AVX2 path of the paged attention's tile kernels (docs/architecture.md §2, "Paged
// attention (CPU)"). A dot's 8 lanes are one ymm: lane l accumulates elements l, l+8, … by one
// multiply and one add (never fused: the functions target avx2 without fma), the tail
// comes in by a masked load into lanes 0…, and the lanes are combined as the portable
// path's dot: the 128-bit halves added (l + l+4), then two horizontal adds. Register
// tiles run 4 rows × 2 keys of dots, and 2 rows × 32 elements of p·v, so each key and
// value row loaded serves several rows; every element still sees its own sequence of
// operations, so the bits are the portable path's (ops/cpu/paged_attention_detail.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cpu/code_path_choice.h"
#include "ops/cpu/paged_attention_detail.h"
#include "ops/dtype.h"

namespace olmo2::ops::detail {
namespace {

#define OLMO2_ATTN_AVX2 __attribute__((target("avx2")))

// Keys per p·v pass: the value rows of one pass (32 × hd floats) stay in L1 while every
// row block of the tile reads them.
constexpr int64_t kPvKeys = 32;

/// round_bf16 on 4 or 8 lanes: round to nearest even, NaN kept quiet (ops/dtype.h).
OLMO2_ATTN_AVX2 inline __m128 round_bf16_x4(__m128 x) {
  const __m128i u = _mm_castps_si128(x);
  const __m128i hi = _mm_set1_epi32(static_cast<int>(0xffff0000u));
  const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, _mm_set1_epi32(0x7fffffff)), _mm_set1_epi32(0x7f800000));
  const __m128i bias = _mm_add_epi32(_mm_set1_epi32(0x7fff), _mm_and_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(1)));
  const __m128i rounded = _mm_and_si128(_mm_add_epi32(u, bias), hi);
  const __m128i quiet = _mm_and_si128(_mm_or_si128(u, _mm_set1_epi32(0x00400000)), hi);
  return _mm_castsi128_ps(_mm_blendv_epi8(rounded, quiet, nan));
}
OLMO2_ATTN_AVX2 inline __m256 round_bf16_x8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i bias =
      _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(u, bias), hi);
  const __m256i quiet = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), hi);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, quiet, nan));
}

/// The 8 lanes' sum in the dot's order: l + l+4, then ((0+1) + (2+3)).
OLMO2_ATTN_AVX2 inline __m128 fold_halves(__m256 a) {
  return _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
}

/// Mask of the first n (0…7) lanes, for the tail of a dot.
OLMO2_ATTN_AVX2 inline __m256i first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// Scores of RB rows × KB keys (keys jj … jj+KB−1 of the tile), stored scaled.
template <int RB, int KB>
OLMO2_ATTN_AVX2 void score_block(const AttnTile& t, int r0, int64_t jj, float scale, bool bf16) {
  __m256 acc[RB][KB];
  const float* q[RB];
  const float* k[KB];
  for (int r = 0; r < RB; ++r) q[r] = t.q[r0 + r];
  for (int c = 0; c < KB; ++c) k[c] = t.k[jj - t.j0 + c];
  for (int r = 0; r < RB; ++r)
    for (int c = 0; c < KB; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= t.hd; i += 8) {
    __m256 kv[KB];
    for (int c = 0; c < KB; ++c) kv[c] = _mm256_loadu_ps(k[c] + i);
    for (int r = 0; r < RB; ++r) {
      __m256 qv = _mm256_loadu_ps(q[r] + i);
      asm("" : "+x"(qv));  // one load per q vector, kept in a register for every key
      for (int c = 0; c < KB; ++c) acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_mul_ps(qv, kv[c]));
    }
  }
  if (i < t.hd) {  // the tail into lanes 0 …; the masked lanes add +0 to a sum that is never −0
    const __m256i m = first_lanes(t.hd - i);
    __m256 kv[KB];
    for (int c = 0; c < KB; ++c) kv[c] = _mm256_maskload_ps(k[c] + i, m);
    for (int r = 0; r < RB; ++r) {
      const __m256 qv = _mm256_maskload_ps(q[r] + i, m);
      for (int c = 0; c < KB; ++c) acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_mul_ps(qv, kv[c]));
    }
  }
  const __m128 sc4 = _mm_set1_ps(scale);
  for (int r = 0; r < RB; ++r) {
    float* out = t.sc + (r0 + r) * t.sc_ld + (jj - t.j0);
    if constexpr (KB == 4) {
      const __m128 d = _mm_hadd_ps(_mm_hadd_ps(fold_halves(acc[r][0]), fold_halves(acc[r][1])),
                                   _mm_hadd_ps(fold_halves(acc[r][2]), fold_halves(acc[r][3])));
      _mm_storeu_ps(out, bf16 ? round_bf16_x4(_mm_mul_ps(round_bf16_x4(d), sc4)) : _mm_mul_ps(d, sc4));
    } else if constexpr (KB == 2 && RB % 2 == 0) {
      if (r % 2 == 1) continue;  // rows r and r+1 together: (r, j) (r, j+1) (r+1, j) (r+1, j+1)
      __m128 d = _mm_hadd_ps(_mm_hadd_ps(fold_halves(acc[r][0]), fold_halves(acc[r][1])),
                             _mm_hadd_ps(fold_halves(acc[r + 1][0]), fold_halves(acc[r + 1][1])));
      d = bf16 ? round_bf16_x4(_mm_mul_ps(round_bf16_x4(d), sc4)) : _mm_mul_ps(d, sc4);
      _mm_storel_pi(reinterpret_cast<__m64*>(out), d);
      _mm_storeh_pi(reinterpret_cast<__m64*>(out + t.sc_ld), d);
    } else {
      for (int c = 0; c < KB; ++c) {
        const __m128 h = fold_halves(acc[r][c]);
        const __m128 d = _mm_hadd_ps(_mm_hadd_ps(h, h), _mm_hadd_ps(h, h));
        out[c] = _mm_cvtss_f32(bf16 ? round_bf16_x4(_mm_mul_ps(round_bf16_x4(d), sc4)) : _mm_mul_ps(d, sc4));
      }
    }
  }
}

// Register tile of the scores: 4 rows × 2 keys, 8 accumulators; per step of 8 lanes six
// loads (each q and k vector once) feed 8 multiplies and 8 adds.
constexpr int kScoreRows = 4, kScoreKeys = 2;

template <int RB>
OLMO2_ATTN_AVX2 void score_rows(const AttnTile& t, int r0, int64_t jj, float scale, bool bf16) {
  if (jj + kScoreKeys <= t.j1) {
    score_block<RB, kScoreKeys>(t, r0, jj, scale, bf16);
  } else {
    for (; jj < t.j1; ++jj) score_block<RB, 1>(t, r0, jj, scale, bf16);
  }
}

/// o[r][e0 …] += p_rj · v_j[e0 …] for RB rows × CB·8 elements and keys [ja, jb), j
/// increasing, which every one of the rows sees; the accumulators live in o between calls.
template <int RB, int CB>
OLMO2_ATTN_AVX2 void pv_tile(const AttnTile& t, int r0, int64_t e0, int64_t ja, int64_t jb) {
  if (ja >= jb) return;
  __m256 acc[RB][CB];
  const float* p[RB];
  for (int r = 0; r < RB; ++r) {
    p[r] = t.sc + (r0 + r) * t.sc_ld - t.j0;
    for (int c = 0; c < CB; ++c) acc[r][c] = _mm256_loadu_ps(t.o[r0 + r] + e0 + 8 * c);
  }
  for (int64_t j = ja; j < jb; ++j) {
    const float* v = t.v[j - t.j0] + e0;
    __m256 vv[CB];
    for (int c = 0; c < CB; ++c) vv[c] = _mm256_loadu_ps(v + 8 * c);
    for (int r = 0; r < RB; ++r) {
      const __m256 pb = _mm256_broadcast_ss(p[r] + j);
      for (int c = 0; c < CB; ++c) acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_mul_ps(pb, vv[c]));
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int c = 0; c < CB; ++c) _mm256_storeu_ps(t.o[r0 + r] + e0 + 8 * c, acc[r][c]);
}

/// pv_tile over rows r0 … r0+RB−1 and keys [ja, jb) ∩ each row's range: the keys every
/// row sees by the register tile, the rest (the causal diagonal, a window's edge) row by
/// row, before and after, so that each row still takes its keys in increasing j.
template <int RB, int CB>
OLMO2_ATTN_AVX2 void pv_block(const AttnTile& t, int r0, int64_t e0, int64_t ja, int64_t jb) {
  int64_t all_lo = ja, all_hi = jb;
  for (int r = 0; r < RB; ++r) all_lo = std::max(all_lo, t.first[r0 + r]), all_hi = std::min(all_hi, t.visible[r0 + r]);
  if (all_lo >= all_hi) {  // no key seen by every row
    for (int r = 0; r < RB; ++r)
      pv_tile<1, CB>(t, r0 + r, e0, std::max(ja, t.first[r0 + r]), std::min(jb, t.visible[r0 + r]));
    return;
  }
  for (int r = 0; r < RB; ++r) pv_tile<1, CB>(t, r0 + r, e0, std::max(ja, t.first[r0 + r]), all_lo);
  pv_tile<RB, CB>(t, r0, e0, all_lo, all_hi);
  for (int r = 0; r < RB; ++r) pv_tile<1, CB>(t, r0 + r, e0, all_hi, std::min(jb, t.visible[r0 + r]));
}

template <int RB>
OLMO2_ATTN_AVX2 void pv_rows(const AttnTile& t, int r0, int64_t ja, int64_t jb) {
  const int64_t vec = t.hd / 8 * 8;
  int64_t e = 0;
  for (; e + 32 <= vec; e += 32) pv_block<RB, 4>(t, r0, e, ja, jb);
  for (; e + 8 <= vec; e += 8) pv_block<RB, 1>(t, r0, e, ja, jb);
}

}  // namespace

bool attn_has_avx2() { return cpu_has_avx2_fma(); }

OLMO2_ATTN_AVX2 void attn_scores_avx2(const AttnTile& t, float scale, bool bf16) {
  if (t.rows == 1) {  // one row (a decode step): 4 keys at a time
    int64_t jj = t.j0;
    for (; jj + 4 <= t.j1; jj += 4) score_block<1, 4>(t, 0, jj, scale, bf16);
    for (; jj < t.j1; ++jj) score_block<1, 1>(t, 0, jj, scale, bf16);
    return;
  }
  for (int64_t jj = t.j0; jj < t.j1; jj += kScoreKeys) {
    int r = 0;
    for (; r + kScoreRows <= t.rows; r += kScoreRows) score_rows<kScoreRows>(t, r, jj, scale, bf16);
    for (; r + 2 <= t.rows; r += 2) score_rows<2>(t, r, jj, scale, bf16);
    if (r < t.rows) score_rows<1>(t, r, jj, scale, bf16);
  }
}

/// Dots of NH heads (each its own q and k slice) side by side; stored scaled like
/// score_block's.
template <int NH>
OLMO2_ATTN_AVX2 void row_dots(const float* const* q, const float* const* k, int64_t hd, float scale, bool bf16,
                              float* const* out) {
  __m256 acc[NH];
  for (int h = 0; h < NH; ++h) acc[h] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= hd; i += 8)
    for (int h = 0; h < NH; ++h)
      acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(_mm256_loadu_ps(q[h] + i), _mm256_loadu_ps(k[h] + i)));
  if (i < hd) {
    const __m256i m = first_lanes(hd - i);
    for (int h = 0; h < NH; ++h)
      acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(_mm256_maskload_ps(q[h] + i, m), _mm256_maskload_ps(k[h] + i, m)));
  }
  const __m128 sc4 = _mm_set1_ps(scale);
  for (int h = 0; h < NH; ++h) {
    const __m128 f = fold_halves(acc[h]);
    const __m128 d = _mm_hadd_ps(_mm_hadd_ps(f, f), _mm_hadd_ps(f, f));
    *out[h] = _mm_cvtss_f32(bf16 ? round_bf16_x4(_mm_mul_ps(round_bf16_x4(d), sc4)) : _mm_mul_ps(d, sc4));
  }
}

OLMO2_ATTN_AVX2 void attn_row_scores_avx2(const float* q, const float* k, int h0, int h1, int group, int64_t hd,
                                          float scale, bool bf16, float* s, int64_t s_ld) {
  // One head after the other, as the one-row kernel: the key row is read front to back
  // (interleaving 4 heads' dots measured slower on a decode batch, which waits on memory).
  for (int h = h0; h < h1; ++h) {
    const float* qs[1] = {q + h * hd};
    const float* ks[1] = {k + (h / group) * hd};
    float* os[1] = {s + (h - h0) * s_ld};
    row_dots<1>(qs, ks, hd, scale, bf16, os);
  }
}

OLMO2_ATTN_AVX2 void attn_row_pv_avx2(const float* p, int64_t p_ld, const float* v, int h0, int h1, int group,
                                      int64_t hd, float* o) {
  const int64_t vec = hd / 8 * 8;
  for (int h = h0; h < h1; ++h) {
    const float ph = p[(h - h0) * p_ld];
    const __m256 pb = _mm256_set1_ps(ph);
    const float* vh = v + (h / group) * hd;
    float* oh = o + h * hd;
    int64_t i = 0;
    for (; i < vec; i += 8)
      _mm256_storeu_ps(oh + i, _mm256_add_ps(_mm256_loadu_ps(oh + i), _mm256_mul_ps(pb, _mm256_loadu_ps(vh + i))));
    for (; i < hd; ++i) oh[i] += ph * vh[i];
  }
}

OLMO2_ATTN_AVX2 void attn_pv_avx2(const AttnTile& t) {
  for (int r = 0; r < t.rows; ++r) std::fill(t.o[r], t.o[r] + t.hd, 0.0f);
  for (int64_t ja = t.j0; ja < t.j1; ja += kPvKeys) {
    const int64_t jb = std::min(ja + kPvKeys, t.j1);
    int r = 0;
    for (; r + 2 <= t.rows; r += 2) pv_rows<2>(t, r, ja, jb);
    if (r < t.rows) pv_rows<1>(t, r, ja, jb);
  }
  const int64_t vec = t.hd / 8 * 8;
  if (vec == t.hd) return;
  for (int r = 0; r < t.rows; ++r) {  // the elements past the last multiple of 8
    const float* p = t.sc + r * t.sc_ld - t.j0;
    for (int64_t j = t.first[r]; j < t.visible[r]; ++j) {
      const float* v = t.v[j - t.j0];
      for (int64_t i = vec; i < t.hd; ++i) t.o[r][i] += p[j] * v[i];
    }
  }
}

OLMO2_ATTN_AVX2 void attn_softmax_rows_avx2(const AttnTile& t, bool bf16) {
  for (int r = 0; r < t.rows; ++r) {
    float* s = t.sc + r * t.sc_ld - t.j0;
    const int64_t a = t.first[r], b = t.visible[r];
    // max(x, m) keeps m when x is NaN, as std::max(m, x) does; a zero's sign cannot
    // change s − max, so the lanes may be combined in any order.
    __m256 m8 = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t j = a;
    for (; j + 8 <= b; j += 8) m8 = _mm256_max_ps(_mm256_loadu_ps(s + j), m8);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m8);
    float mx = -std::numeric_limits<float>::infinity();
    for (float l : lanes) mx = std::max(mx, l);
    for (; j < b; ++j) mx = std::max(mx, s[j]);
    float sum = 0.0f;
    for (j = a; j < b; ++j) {
      s[j] = std::exp(s[j] - mx);
      sum += s[j];
    }
    const float inv = 1.0f / sum;
    const __m256 inv8 = _mm256_set1_ps(inv);
    for (j = a; j + 8 <= b; j += 8) {
      const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + j), inv8);
      _mm256_storeu_ps(s + j, bf16 ? round_bf16_x8(x) : x);
    }
    for (; j < b; ++j) {
      s[j] *= inv;
      if (bf16) s[j] = round_bf16(s[j]);
    }
  }
}

}  // namespace olmo2::ops::detail
