// Brute-force double-precision references for the sliding-window attention tests: every
// (query, key) pair is scored, then an explicit mask — transformers' sliding-window
// causal mask, kv_idx ≤ q_idx and kv_idx > q_idx − window (masking_utils.py), no window
// for 0 — sets the masked scores to −∞ before a softmax over the whole row.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace olmo2::ops::test {

/// Whether query position qp sees key position kp (transformers' mask, written out).
inline bool window_keeps(int64_t qp, int64_t kp, int64_t window) {
  return kp <= qp && (window == 0 || kp > qp - window);
}

/// Attention of T queries (the last T of S positions) over all S keys with the explicit
/// mask: q [T, H·hd], k, v [S, KV·hd] row-major, query head h uses kv head h/(H/KV).
/// Returns out [T, H·hd]; `max_logit` (if set) gets the largest kept scaled score.
inline std::vector<double> masked_attention(const std::vector<double>& q, const std::vector<double>& k,
                                            const std::vector<double>& v, int64_t t_len, int64_t s_len, int nh,
                                            int nkv, int64_t hd, int64_t window, double* max_logit = nullptr) {
  std::vector<double> out(static_cast<size_t>(t_len * nh * hd), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd)), inf = std::numeric_limits<double>::infinity();
  double best = -inf;
  for (int h = 0; h < nh; ++h) {
    const int kvh = h / (nh / nkv);
    for (int64_t t = 0; t < t_len; ++t) {
      const int64_t qp = s_len - t_len + t;
      std::vector<double> sc(static_cast<size_t>(s_len));
      double mx = -inf;
      for (int64_t j = 0; j < s_len; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += q[(t * nh + h) * hd + i] * k[(j * nkv + kvh) * hd + i];
        sc[j] = window_keeps(qp, j, window) ? d * scale : -inf;
        mx = std::max(mx, sc[j]);
      }
      best = std::max(best, mx);
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < s_len; ++j)
        for (int64_t i = 0; i < hd; ++i) out[(t * nh + h) * hd + i] += sc[j] / sum * v[(j * nkv + kvh) * hd + i];
    }
  }
  if (max_logit != nullptr) *max_logit = best;
  return out;
}

}  // namespace olmo2::ops::test
