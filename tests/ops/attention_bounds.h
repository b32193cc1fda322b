// Exact values and per-element error bounds (tests/ops/error_bounds.h) for causal
// attention, its backward, and the cross-entropy gradients (docs/architecture.md §10,
// "Per-element bounds"). The error analysis, for one implementation in fp32:
//  - a score s = scale·(q·k) carries sum_error(hd + 1)·scale·Σ|q||k| + u·|s|;
//  - a probability p = exp(s − m)/l carries, relative to p: its own score's error, the
//    p-weighted mean of every score's error (through l), the fp32 subtraction s − m (u·|s
//    − m|), exp within 2 ulp (4u), the online softmax's rescalings (≤ 6u per tile of 32
//    keys, u per unit the running max moves), the sum l (sum_error(n)), and 1/l;
//  - out = Σ p·v then carries Σ ε_p·p·|v| + sum_error(n + 1)·Σ p·|v|; a bf16 run rounds p
//    and out to bf16 (u_bf16 each: u_bf16·(Σ p·|v| + |out|)), and rounds the scores the
//    same way on every implementation (the grid inputs make q·k exact), so the exact
//    reference rounds them too;
//  - the backward: dP = dO·vᵀ, D = Σ p·dP, dS = p·(dP − D)·scale, dq = dS·K, dk = dSᵀ·Q,
//    dv = Pᵀ·dO, each term's error from the errors of its factors plus its sum's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/dtype.h"
#include "tests/ops/error_bounds.h"

namespace olmo2::ops::test {

struct AttentionExpected {
  Expected out, dq, dk, dv;  // dq/dk/dv empty without dout
};

/// Causal attention of q [T, H·hd] over k, v [S, KV·hd] (S = past + T; row t sees keys
/// ≤ past + t, and with window > 0 only the last `window` of them), as dense row-major
/// doubles (dense()). `bf16` follows the bf16-activation rounding of the scores (inputs
/// must make q·k exact in fp32). With `dout` [T, H·hd] also the backward's dq, dk, dv
/// (f32 only). Exact values in double; bounds for one fp32 implementation.
inline AttentionExpected attention(const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, int64_t T, int64_t S, int heads, int kv_heads,
                                   int64_t hd, int64_t window, bool bf16, const std::vector<double>* dout = nullptr) {
  const int64_t past = S - T, qw = heads * hd, kw = kv_heads * hd;
  const int group = heads / kv_heads;
  const float scale_f = 1.0f / std::sqrt(static_cast<float>(hd));
  const double scale = scale_f;
  AttentionExpected r;
  r.out.exact.assign(static_cast<size_t>(T * qw), 0.0), r.out.bound = r.out.exact;
  std::vector<double> dk_acc, dk_mag, dv_acc, dv_mag;
  std::vector<int64_t> terms;
  if (dout) {
    r.dq.exact.assign(static_cast<size_t>(T * qw), 0.0), r.dq.bound = r.dq.exact;
    dk_acc.assign(static_cast<size_t>(S * kw), 0.0), dk_mag = dv_acc = dv_mag = dk_acc;
    r.dk.exact = r.dv.exact = dk_acc;
    terms.assign(static_cast<size_t>(S), 0);
  }
  std::vector<double> s, ds_err, p, eps, dp, ddp, ds;
  for (int h = 0; h < heads; ++h) {
    const int kvh = h / group;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t pos = past + t, lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0, n = pos - lo + 1;
      const double* qt = q.data() + t * qw + h * hd;
      s.assign(static_cast<size_t>(n), 0.0), ds_err = p = eps = s;
      double m = -INFINITY, lowest = INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        const double* kj = k.data() + (lo + j) * kw + kvh * hd;
        double dot = 0, mag = 0;
        for (int64_t d = 0; d < hd; ++d) dot += qt[d] * kj[d], mag += std::fabs(qt[d] * kj[d]);
        if (bf16) {
          s[j] = round_bf16(round_bf16(static_cast<float>(dot)) * scale_f);
        } else {
          s[j] = scale * dot;
          ds_err[j] = sum_error(hd + 1) * scale * mag + kU * std::fabs(s[j]);
        }
        m = std::max(m, s[j]), lowest = std::min(lowest, s[j]);
      }
      double l = 0, mean_err = 0;
      for (int64_t j = 0; j < n; ++j) l += (p[j] = std::exp(s[j] - m));
      for (int64_t j = 0; j < n; ++j) p[j] /= l, mean_err += p[j] * ds_err[j];
      const double tiles = static_cast<double>((n + 31) / 32);
      for (int64_t j = 0; j < n; ++j)
        eps[j] = ds_err[j] + mean_err + kU * (8 + 6 * tiles + 2 * std::fabs(s[j] - m) + (m - lowest)) + sum_error(n);
      for (int64_t d = 0; d < hd; ++d) {
        double o = 0, mag = 0, err = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double vj = v[static_cast<size_t>((lo + j) * kw + kvh * hd + d)];
          o += p[j] * vj, mag += p[j] * std::fabs(vj), err += eps[j] * p[j] * std::fabs(vj);
        }
        const size_t at = static_cast<size_t>(t * qw + h * hd + d);
        r.out.exact[at] = o;
        r.out.bound[at] = err + sum_error(n + 1) * mag;
        if (bf16) r.out.bound[at] = r.out.bound[at] * (1 + 2 * kUBf16) + kUBf16 * (mag + std::fabs(o));
      }
      if (!dout) continue;
      // The backward, f32.
      const double* gt = dout->data() + t * qw + h * hd;
      dp.assign(static_cast<size_t>(n), 0.0), ddp = ds = dp;
      double D = 0, dD = 0, pdp_mag = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double* vj = v.data() + (lo + j) * kw + kvh * hd;
        double mag = 0;
        for (int64_t d = 0; d < hd; ++d) dp[j] += gt[d] * vj[d], mag += std::fabs(gt[d] * vj[d]);
        ddp[j] = sum_error(hd + 1) * mag;
        D += p[j] * dp[j];
        dD += p[j] * (eps[j] * std::fabs(dp[j]) + ddp[j]);
        pdp_mag += p[j] * std::fabs(dp[j]);
      }
      dD += sum_error(n + 1) * pdp_mag;
      std::vector<double> ds_bound(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        ds[j] = p[j] * (dp[j] - D) * scale;
        ds_bound[j] = scale * p[j] * (eps[j] * std::fabs(dp[j] - D) + ddp[j] + dD) + 3 * kU * std::fabs(ds[j]);
      }
      for (int64_t d = 0; d < hd; ++d) {
        double g = 0, mag = 0, err = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double kd = k[static_cast<size_t>((lo + j) * kw + kvh * hd + d)];
          g += ds[j] * kd, mag += std::fabs(ds[j] * kd), err += ds_bound[j] * std::fabs(kd);
        }
        const size_t at = static_cast<size_t>(t * qw + h * hd + d);
        r.dq.exact[at] = g, r.dq.bound[at] = err + sum_error(n + 1) * mag;
      }
      for (int64_t j = 0; j < n; ++j) {
        ++terms[static_cast<size_t>(lo + j)];
        for (int64_t d = 0; d < hd; ++d) {
          const size_t at = static_cast<size_t>((lo + j) * kw + kvh * hd + d);
          r.dk.exact[at] += ds[j] * qt[d];
          dk_mag[at] += std::fabs(ds[j] * qt[d]), dk_acc[at] += ds_bound[j] * std::fabs(qt[d]);
          r.dv.exact[at] += p[j] * gt[d];
          dv_mag[at] += p[j] * std::fabs(gt[d]), dv_acc[at] += eps[j] * p[j] * std::fabs(gt[d]);
        }
      }
    }
  }
  if (dout) {
    r.dk.bound.resize(dk_acc.size()), r.dv.bound.resize(dv_acc.size());
    for (size_t at = 0; at < dk_acc.size(); ++at) {
      const double rel = sum_error(terms[at / static_cast<size_t>(kw)] + 1);
      r.dk.bound[at] = dk_acc[at] + rel * dk_mag[at];
      r.dv.bound[at] = dv_acc[at] + rel * dv_mag[at];
    }
  }
  return r;
}

/// The fused cross-entropy + Z-loss gradient of logits x [T, V] (dense doubles) with
/// `targets` (kIgnoreIndex rows give 0): dlogits = scale·((1 + 2·z·lse)·softmax − onehot).
/// One implementation: exp within 2 ulp of fp32 x − max, the exp sum as fp32 blocks of
/// ≤ 256 added in any order (sum_error(257) relative), the coefficient rounded to fp32.
inline Expected cross_entropy_dlogits(const std::vector<double>& x, const std::vector<int32_t>& targets, int64_t V,
                                      double z, double scale, int32_t ignore_index) {
  const int64_t T = static_cast<int64_t>(targets.size());
  Expected e;
  e.exact.assign(static_cast<size_t>(T * V), 0.0), e.bound = e.exact;
  const double dsum = sum_error(257) + 5 * kU;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t tgt = targets[static_cast<size_t>(t)];
    if (tgt == ignore_index) continue;
    const double* xr = x.data() + t * V;
    const double m = *std::max_element(xr, xr + V);
    double sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(xr[i] - m);
    const double lse = m + std::log(sum), c = 1 + 2 * z * lse;
    for (int64_t i = 0; i < V; ++i) {
      const double p = std::exp(xr[i] - lse), want = scale * (c * p - (i == tgt ? 1.0 : 0.0));
      const double eps = kU * (9 + std::fabs(xr[i] - m)) + 2 * dsum + 2 * z * dsum / std::max(std::fabs(c), 1e-30);
      const size_t at = static_cast<size_t>(t * V + i);
      e.exact[at] = want;
      e.bound[at] = scale * std::fabs(c) * p * eps + kU * std::fabs(want) + (i == tgt ? kU * scale : 0.0);
    }
  }
  return e;
}

}  // namespace olmo2::ops::test
