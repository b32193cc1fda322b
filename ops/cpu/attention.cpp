#include "ops/attention.h"

#include "ops/cpu/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace olmo2::ops {

void cpu::causal_attention(const TensorView& q, const TensorView& k, const TensorView& v, int n_heads,
                      int n_kv_heads, const TensorView& out, DType act, int64_t window) {
  OLMO2_CHECK(q.dim() == 2 && k.dim() == 2 && v.dim() == 2 && out.dim() == 2,
              "attention wants 2-d views");
  OLMO2_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, "attention: heads ",
              n_heads, " kv heads ", n_kv_heads);
  const int64_t t_len = q.size(0), s_len = k.size(0);
  const int64_t hd = q.size(1) / n_heads;
  OLMO2_CHECK(q.size(1) == hd * n_heads && k.size(1) == hd * n_kv_heads &&
                  v.shape() == k.shape() && out.shape() == q.shape() && s_len >= t_len,
              "attention: q ", q.shape_str(), " k ", k.shape_str(), " v ", v.shape_str(), " out ",
              out.shape_str(), " heads ", n_heads, "/", n_kv_heads);
  OLMO2_CHECK(q.stride(1) == 1 && k.stride(1) == 1 && v.stride(1) == 1 && out.stride(1) == 1,
              "attention needs contiguous rows");
  OLMO2_CHECK(window >= 0, "attention: window ", window, " is negative (0 means no window)");
  if (t_len == 0) return;
  const int64_t past = s_len - t_len;
  const int group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Keys k0 … S−1 are the ones some query sees: with a window, the keys before the first
  // query's window are never read (0 without a window: today's products exactly).
  const int64_t k0 = window > 0 ? std::max<int64_t>(0, past + 1 - window) : 0;
  const int64_t n_keys = s_len - k0;
  // One head per OpenMP thread; the BLAS calls inside run single-threaded (OpenBLAS's
  // OpenMP build does not nest), so heads never wait on each other.
#pragma omp parallel if (static_cast<int64_t>(n_heads) * t_len * n_keys > 4096)
  {
    std::vector<float> scores(static_cast<size_t>(t_len * n_keys));
#pragma omp for schedule(static)
    for (int h = 0; h < n_heads; ++h) {
      const int kvh = h / group;
      const float* qh = q.f32() + h * hd;
      const float* kh = k.f32() + k0 * k.stride(0) + kvh * hd;
      const float* vh = v.f32() + k0 * v.stride(0) + kvh * hd;
      float* oh = out.f32() + h * hd;
      // scores[t, s − k0] = q_t · k_s
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t_len, n_keys, hd, 1.0f, qh, q.stride(0),
                  kh, k.stride(0), 0.0f, scores.data(), n_keys);
      for (int64_t t = 0; t < t_len; ++t) {
        float* row = scores.data() + t * n_keys;  // row[j]: key k0 + j
        const int64_t visible = past + t + 1 - k0;
        // Keys before the window get probability 0, as the reference's masked −∞ scores
        // do after exp (docs/architecture.md §3).
        const int64_t first = window > 0 ? std::max<int64_t>(0, past + t + 1 - window) - k0 : 0;
        for (int64_t s = 0; s < first; ++s) row[s] = 0.0f;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t s = first; s < visible; ++s) {
          // bf16: the reference's q·kᵀ is a bf16 tensor, scaled into another one.
          const float x = act == DType::BF16 ? round_bf16(round_bf16(row[s]) * scale) : row[s] * scale;
          row[s] = x;
          mx = std::max(mx, x);
        }
        float sum = 0.0f;
        for (int64_t s = first; s < visible; ++s) {
          row[s] = std::exp(row[s] - mx);
          sum += row[s];
        }
        const float inv = 1.0f / sum;
        for (int64_t s = first; s < visible; ++s) {
          row[s] *= inv;
          if (act == DType::BF16) row[s] = round_bf16(row[s]);
        }
        for (int64_t s = visible; s < n_keys; ++s) row[s] = 0.0f;
      }
      // out_t = Σ_s p[t, s] v_s
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t_len, hd, n_keys, 1.0f, scores.data(),
                  n_keys, vh, v.stride(0), 0.0f, oh, out.stride(0));
    }
  }
  if (act == DType::BF16) {
    for (int64_t t = 0; t < t_len; ++t) {
      round_to_dtype(out.f32() + t * out.stride(0), static_cast<size_t>(n_heads * hd), act);
    }
  }
}

float cpu::causal_attention_max_logit(const TensorView& q, const TensorView& k, int nh, int nkv, int64_t window) {
  OLMO2_CHECK(q.dim() == 2 && k.dim() == 2 && nh > 0 && nkv > 0 && nh % nkv == 0 && q.size(1) % nh == 0 &&
                  k.size(1) == q.size(1) / nh * nkv && k.size(0) >= q.size(0) && q.stride(1) == 1 &&
                  k.stride(1) == 1,
              "causal_attention_max_logit: q ", q.shape_str(), " k ", k.shape_str(), " heads ", nh, "/", nkv);
  OLMO2_CHECK(window >= 0, "causal_attention_max_logit: window ", window, " is negative (0 means no window)");
  const int64_t T = q.size(0), past = k.size(0) - T, hd = q.size(1) / nh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float best = -std::numeric_limits<float>::infinity();
  for (int h = 0; h < nh; ++h) {
    const int kvh = h / (nh / nkv);
    for (int64_t t = 0; t < T; ++t) {
      const float* qt = q.f32() + t * q.stride(0) + h * hd;
      const int64_t first = window > 0 ? std::max<int64_t>(0, past + t + 1 - window) : 0;
      for (int64_t j = first; j <= past + t; ++j) {
        const float* kj = k.f32() + j * k.stride(0) + kvh * hd;
        float d = 0;
        for (int64_t i = 0; i < hd; ++i) d += qt[i] * kj[i];
        best = std::max(best, d * scale);
      }
    }
  }
  return best;
}

}  // namespace olmo2::ops
