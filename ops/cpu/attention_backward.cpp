// The backward of causal attention on the CPU (ops/backward.h): the probabilities
// recomputed from q and k, then dv, dp, the softmax backward, dq and dk as sgemm
// products per head, as the forward's ops/cpu/attention.cpp computes them.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/backward.h"
#include "ops/cpu/checks.h"
#include "ops/cpu/fast_exp.h"
#include "ops/cpu/kernels.h"

namespace olmo2::ops {

void cpu::causal_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& dout, int n_heads, int n_kv_heads,
                               const TensorView& dq, const TensorView& dk, const TensorView& dv,
                               int64_t window) {
  const char* op = "causal_attention_backward";
  const int64_t hd = attention_backward_check(q, k, v, dout, n_heads, n_kv_heads, dq, dk, dv);
  OLMO2_CHECK(q.device() == Device::CPU, op, ": views not on the CPU");
  OLMO2_CHECK(window >= 0, op, ": window ", window, " is negative (0 means no window)");
  const int64_t t_len = q.size(0), s_len = k.size(0);
  for (int64_t s = 0; s < s_len; ++s) {
    std::memset(dk.f32() + s * dk.stride(0), 0, sizeof(float) * k.size(1));
    std::memset(dv.f32() + s * dv.stride(0), 0, sizeof(float) * k.size(1));
  }
  if (t_len == 0) return;
  const int64_t past = s_len - t_len;
  const int group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // One kv head per OpenMP thread: the query heads of a group add into the same dk/dv
  // columns, so they run sequentially on that thread (no races, no atomics).
#pragma omp parallel if (static_cast <int64_t>(n_heads) * t_len * s_len > 4096)
  {
    std::vector<float> p(static_cast<size_t>(t_len * s_len));
    std::vector<float> dp(static_cast<size_t>(t_len * s_len));
#pragma omp for schedule(static)
    for (int kvh = 0; kvh < n_kv_heads; ++kvh) {
      const float* kh = k.f32() + kvh * hd;
      const float* vh = v.f32() + kvh * hd;
      float* dkh = dk.f32() + kvh * hd;
      float* dvh = dv.f32() + kvh * hd;
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* qh = q.f32() + h * hd;
        const float* doh = dout.f32() + h * hd;
        float* dqh = dq.f32() + h * hd;
        // Recompute P exactly as the forward (f32 path).
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, detail::blas_int(t_len), detail::blas_int(s_len), detail::blas_int(hd), 1.0f, qh,
                    detail::blas_int(q.stride(0)), kh, detail::blas_int(k.stride(0)), 0.0f, p.data(), detail::blas_int(s_len));
        // dP[t, s] = dO_t · v_s
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, detail::blas_int(t_len), detail::blas_int(s_len), detail::blas_int(hd), 1.0f,
                    doh, detail::blas_int(dout.stride(0)), vh, detail::blas_int(v.stride(0)), 0.0f, dp.data(), detail::blas_int(s_len));
        for (int64_t t = 0; t < t_len; ++t) {
          float* row = p.data() + t * s_len;
          float* drow = dp.data() + t * s_len;
          const int64_t visible = past + t + 1;
          // Keys before the window (docs/architecture.md §3) have P = dS = 0.
          const int64_t first = window > 0 ? std::max<int64_t>(0, visible - window) : 0;
          for (int64_t s = 0; s < first; ++s) row[s] = drow[s] = 0.0f;
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t s = first; s < visible; ++s) {
            row[s] *= scale;
            mx = std::max(mx, row[s]);
          }
          float sum = 0.0f;
          for (int64_t s = first; s < visible; ++s) {
            row[s] = std::exp(row[s] - mx);
            sum += row[s];
          }
          const float inv = 1.0f / sum;
          float pdp = 0.0f;
          for (int64_t s = first; s < visible; ++s) {
            row[s] *= inv;
            pdp += row[s] * drow[s];
          }
          // dS (already multiplied by the score scale) replaces dP in place.
          for (int64_t s = first; s < visible; ++s) drow[s] = row[s] * (drow[s] - pdp) * scale;
          for (int64_t s = visible; s < s_len; ++s) row[s] = drow[s] = 0.0f;
        }
        // dq_h = dS · K_h
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, detail::blas_int(t_len), detail::blas_int(hd), detail::blas_int(s_len), 1.0f,
                    dp.data(), detail::blas_int(s_len), kh, detail::blas_int(k.stride(0)), 0.0f, dqh, detail::blas_int(dq.stride(0)));
        // dk_kvh += dSᵀ · Q_h
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, detail::blas_int(s_len), detail::blas_int(hd), detail::blas_int(t_len), 1.0f,
                    dp.data(), detail::blas_int(s_len), qh, detail::blas_int(q.stride(0)), 1.0f, dkh, detail::blas_int(dk.stride(0)));
        // dv_kvh += Pᵀ · dO_h
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, detail::blas_int(s_len), detail::blas_int(hd), detail::blas_int(t_len), 1.0f,
                    p.data(), detail::blas_int(s_len), doh, detail::blas_int(dout.stride(0)), 1.0f, dvh, detail::blas_int(dv.stride(0)));
      }
    }
  }
}

}  // namespace olmo2::ops
