// The portable path of the paged attention's tile kernels: plain loops, one (row, key)
// dot or one row's axpy at a time, in the operation order every path keeps
// (ops/cpu/paged_attention_detail.h; docs/architecture.md §2, "Paged attention (CPU)").
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cpu/paged_attention_detail.h"
#include "ops/dtype.h"

namespace olmo2::ops::detail {
namespace {

// q · k over n elements in a fixed order: 8 independent partial sums (lane i % 8), the
// tail folded into the same lanes, combined pairwise. No reassociation and no fused
// multiply-add by the compiler (ISO C++ mode contracts nothing), so the result depends
// only on the two vectors and n.
inline float dot_fixed(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace

void attn_scores_portable(const AttnTile& t, float scale, bool bf16) {
  for (int r = 0; r < t.rows; ++r) {
    float* s = t.sc + r * t.sc_ld;
    for (int64_t j = t.j0; j < t.j1; ++j) {
      const float d = dot_fixed(t.q[r], t.k[j - t.j0], t.hd);
      // bf16: the reference's q·kᵀ is a bf16 tensor, scaled into another one.
      s[j - t.j0] = bf16 ? round_bf16(round_bf16(d) * scale) : d * scale;
    }
  }
}

void attn_row_scores_portable(const float* q, const float* k, int h0, int h1, int group, int64_t hd, float scale,
                              bool bf16, float* s, int64_t s_ld) {
  for (int h = h0; h < h1; ++h) {
    const float d = dot_fixed(q + h * hd, k + (h / group) * hd, hd);
    s[(h - h0) * s_ld] = bf16 ? round_bf16(round_bf16(d) * scale) : d * scale;
  }
}

void attn_row_pv_portable(const float* p, int64_t p_ld, const float* v, int h0, int h1, int group, int64_t hd,
                          float* o) {
  for (int h = h0; h < h1; ++h) {
    const float ph = p[(h - h0) * p_ld];
    const float* vh = v + (h / group) * hd;
    float* oh = o + h * hd;
    for (int64_t i = 0; i < hd; ++i) oh[i] += ph * vh[i];
  }
}

void attn_pv_portable(const AttnTile& t) {
  for (int r = 0; r < t.rows; ++r) {
    const float* p = t.sc + r * t.sc_ld - t.j0;
    float* o = t.o[r];
    std::fill(o, o + t.hd, 0.0f);
    for (int64_t j = t.first[r]; j < t.visible[r]; ++j) {
      const float* v = t.v[j - t.j0];
      for (int64_t i = 0; i < t.hd; ++i) o[i] += p[j] * v[i];
    }
  }
}

void attn_softmax_rows_portable(const AttnTile& t, bool bf16) {
  for (int r = 0; r < t.rows; ++r) {
    float* s = t.sc + r * t.sc_ld - t.j0;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = t.first[r]; j < t.visible[r]; ++j) mx = std::max(mx, s[j]);
    float sum = 0.0f;
    for (int64_t j = t.first[r]; j < t.visible[r]; ++j) {
      s[j] = std::exp(s[j] - mx);
      sum += s[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = t.first[r]; j < t.visible[r]; ++j) {
      s[j] *= inv;
      if (bf16) s[j] = round_bf16(s[j]);
    }
  }
}

}  // namespace olmo2::ops::detail
