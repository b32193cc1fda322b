// CUDA backward of causal attention (f32), deterministic and without atomics
// (docs/architecture.md §2). Two kernels, neither storing a T×S matrix:
//  1. rows: one block per (16 query rows, query head). Pass 1 over the keys finds each
//     row's softmax max m, sum l and D = Σ_s P_s·dP_s (running, rescaled as the max
//     grows); pass 2 recomputes P = exp(s − m)/l and dP = dO·vᵀ per key and
//     accumulates dq = Σ_s dS_s·k_s, dS = P ⊙ (dP − D)·scale. m, 1/l and D go to a
//     scratch buffer for kernel 2.
//  2. keys: one block per (16 keys, kv head). For each query head of the group and each
//     tile of 32 query rows that can see the keys, in that fixed order, it recomputes P
//     and dS (the same fp32 operations as kernel 1) and accumulates dv = Σ_t P·dO_t and
//     dk = Σ_t dS·q_t. Each output element is written once by one thread.
// Both kernels sum every dot product over d in increasing order with fmaf, and form the
// score, P and dS through the same three functions below, written with rounding
// intrinsics (__fmul_rn, __fsub_rn) that the compiler may not contract into an fma in
// one kernel and not the other: so kernel 2 recomputes kernel 1's probabilities bit for
// bit, and dq, dk and dv see the same P and dS.
// With a sliding window (docs/architecture.md §3) kernel 1 starts at the 32-aligned tile
// of its block's first visible key and a row skips the tiles wholly before its window;
// kernel 2 visits only the rows whose window holds one of its keys; P = dS = 0 elsewhere.
// Same math as ops::cpu::causal_attention_backward (D there is rowsum(P ⊙ dP)).
#include <cuda_runtime.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/backward.h"
#include "ops/cuda/attention_tile.cuh"
#include "ops/cuda/check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/runtime.h"
#include "ops/op_checks.h"

namespace olmo2::ops {
namespace {

using cuda::attention_detail::warp_max;
using cuda::attention_detail::warp_sum;

constexpr int kWarps = 4;
constexpr int kRowTile = 16;   // kernel 1: query rows per block (4 per warp)
constexpr int kKeyBlock = 16;  // kernel 2: keys per block (4 per warp)

// The scaled score of a (row, key) pair from its dot product.
__device__ __forceinline__ float scaled_score(float dot, float scale) { return __fmul_rn(dot, scale); }
// P = exp(s − m) · (1/l).
__device__ __forceinline__ float probability(float s, float row_max, float inv_sum) {
  return __fmul_rn(expf(__fsub_rn(s, row_max)), inv_sum);
}
// dS = P · (dP − D) · scale.
__device__ __forceinline__ float score_gradient(float p, float dp, float d, float scale) {
  return __fmul_rn(__fmul_rn(p, __fsub_rn(dp, d)), scale);
}

struct BackwardArgs {
  const float* q;
  int64_t q_ld;
  const float* k;
  int64_t k_ld;
  const float* v;
  int64_t v_ld;
  const float* dout;
  int64_t do_ld;
  float* dq;
  int64_t dq_ld;
  float* dk;
  int64_t dk_ld;
  float* dv;
  int64_t dv_ld;
  float* stats;  // [3][H][T]: m, 1/l, D
  int64_t t_len, s_len, past;
  int64_t window;  // 0: none; else row t sees keys past+t−window+1 … past+t
  int hd, n_heads, group;
  float scale;
};

// Loads rows [r0, r0+n) (up to `count`, zeros beyond n) of `count` rows × hd columns
// starting at column c0 of src into dst with row stride ld_dst.
__device__ inline void load_rows(float* dst, int ld_dst, const float* src, int64_t ld_src, int64_t r0, int64_t n,
                                 int count, int64_t c0, int hd) {
  for (int i = static_cast<int>(threadIdx.x); i < count * hd; i += blockDim.x) {
    const int r = i / hd, d = i % hd;
    dst[r * ld_dst + d] = r < n ? src[(r0 + r) * ld_src + c0 + d] : 0.0f;
  }
}

template <int NJ>
__global__ void __launch_bounds__(32 * kWarps) attention_bwd_rows_kernel(BackwardArgs a) {
  OLMO2_DYNAMIC_SHARED(float, smem);
  const int hd = a.hd, kp = hd + 1;
  float* qs = smem;                  // [16][hd]
  float* dos = qs + kRowTile * hd;   // [16][hd]
  float* ks = dos + kRowTile * hd;   // [32][hd+1]
  float* vs = ks + 32 * kp;          // [32][hd+1]
  const int h = static_cast<int>(blockIdx.y), kvh = h / a.group;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRowTile;
  const int64_t nrows = a.t_len - row0 < kRowTile ? a.t_len - row0 : kRowTile;
  const int wr0 = warp * 4;
  const int wrows = static_cast<int>(nrows - wr0 < 0 ? 0 : nrows - wr0 < 4 ? nrows - wr0 : 4);
  load_rows(qs, hd, a.q, a.q_ld, row0, nrows, kRowTile, static_cast<int64_t>(h) * hd, hd);
  load_rows(dos, hd, a.dout, a.do_ld, row0, nrows, kRowTile, static_cast<int64_t>(h) * hd, hd);
  const int64_t kend = a.past + row0 + nrows;
  const int64_t kfirst = a.window > 0 && a.past + row0 - a.window + 1 > 0 ? a.past + row0 - a.window + 1 : 0;

  float m[4], l[4], dsum[4], dq[4][NJ];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY, l[i] = 0.0f, dsum[i] = 0.0f;
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) dq[i][jj] = 0.0f;
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t k0 = kfirst / 32 * 32; k0 < kend; k0 += 32) {
      __syncthreads();
      const int64_t nk = kend - k0 < 32 ? kend - k0 : 32;
      load_rows(ks, kp, a.k, a.k_ld, k0, nk, 32, static_cast<int64_t>(kvh) * hd, hd);
      load_rows(vs, kp, a.v, a.v_ld, k0, nk, 32, static_cast<int64_t>(kvh) * hd, hd);
      __syncthreads();
      const int64_t key = k0 + lane;
      float sd[4] = {0.0f, 0.0f, 0.0f, 0.0f}, pd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int d = 0; d < hd; ++d) {
        const float kd = ks[lane * kp + d], vd = vs[lane * kp + d];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          sd[i] = fmaf(qs[(wr0 + i) * hd + d], kd, sd[i]);
          pd[i] = fmaf(dos[(wr0 + i) * hd + d], vd, pd[i]);
        }
      }
      float ds[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        ds[i] = 0.0f;
        const int64_t pos = a.past + row0 + wr0 + i;
        const int64_t lo = a.window > 0 ? pos - a.window + 1 : 0;  // the row's first key (may be < 0)
        // A tile wholly before the row's window adds nothing (and m may still be −∞).
        if (i >= wrows || k0 + 32 <= lo) continue;
        const float s = scaled_score(sd[i], a.scale);
        const float x = key <= pos && key >= lo ? s : -INFINITY;
        const float dp = pd[i];
        if (pass == 0) {
          const float mn = fmaxf(m[i], warp_max(x));
          const float corr = expf(m[i] - mn), e = expf(x - mn);
          l[i] = l[i] * corr + warp_sum(e);
          dsum[i] = dsum[i] * corr + warp_sum(e * dp);
          m[i] = mn;
        } else {
          const float p = probability(x, m[i], l[i]);  // l holds 1/l in pass 2
          ds[i] = score_gradient(p, dp, dsum[i], a.scale);  // dsum holds D in pass 2
        }
      }
      if (pass == 1) {
        const int cmax = static_cast<int>(nk);
        for (int c = 0; c < cmax; ++c) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (i >= wrows) continue;
            const float dsc = __shfl_sync(0xffffffffu, ds[i], c);
#pragma unroll
            for (int jj = 0; jj < NJ; ++jj) {
              const int d = lane + 32 * jj;
              if (d < hd) dq[i][jj] = fmaf(dsc, ks[c * kp + d], dq[i][jj]);
            }
          }
        }
      }
    }
    if (pass == 0) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        l[i] = 1.0f / l[i];
        dsum[i] *= l[i];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (i >= wrows) continue;
    const int64_t t = row0 + wr0 + i;
    float* dqr = a.dq + t * a.dq_ld + static_cast<int64_t>(h) * hd;
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) {
      const int d = lane + 32 * jj;
      if (d < hd) dqr[d] = dq[i][jj];
    }
    if (lane == 0) {
      const int64_t at = static_cast<int64_t>(h) * a.t_len + t, plane = static_cast<int64_t>(a.n_heads) * a.t_len;
      a.stats[at] = m[i], a.stats[plane + at] = l[i], a.stats[2 * plane + at] = dsum[i];
    }
  }
}

template <int NJ>
__global__ void __launch_bounds__(32 * kWarps) attention_bwd_keys_kernel(BackwardArgs a) {
  OLMO2_DYNAMIC_SHARED(float, smem);
  const int hd = a.hd, qp = hd + 1;
  float* ks = smem;                   // [16][hd]
  float* vs = ks + kKeyBlock * hd;    // [16][hd]
  float* qs = vs + kKeyBlock * hd;    // [32][hd+1]
  float* dos = qs + 32 * qp;          // [32][hd+1]
  float* row_m = dos + 32 * qp;       // [32] each
  float* row_il = row_m + 32;
  float* row_d = row_il + 32;
  const int kvh = static_cast<int>(blockIdx.y);
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kKeyBlock;
  const int64_t nkeys = a.s_len - k0 < kKeyBlock ? a.s_len - k0 : kKeyBlock;
  const int kw0 = warp * 4;
  const int wkeys = static_cast<int>(nkeys - kw0 < 0 ? 0 : nkeys - kw0 < 4 ? nkeys - kw0 : 4);
  load_rows(ks, hd, a.k, a.k_ld, k0, nkeys, kKeyBlock, static_cast<int64_t>(kvh) * hd, hd);
  load_rows(vs, hd, a.v, a.v_ld, k0, nkeys, kKeyBlock, static_cast<int64_t>(kvh) * hd, hd);

  float dk[4][NJ], dv[4][NJ];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) dk[i][jj] = dv[i][jj] = 0.0f;
  }
  const int64_t plane = static_cast<int64_t>(a.n_heads) * a.t_len;
  const int64_t t_first = k0 - a.past > 0 ? k0 - a.past : 0;  // the first row that sees key k0
  // One past the last row that sees one of the block's keys (its last key, k0+nkeys−1).
  const int64_t t_stop = a.window > 0 && k0 + nkeys - 1 + a.window - a.past < a.t_len
                             ? k0 + nkeys - 1 + a.window - a.past
                             : a.t_len;
  for (int h = kvh * a.group; h < (kvh + 1) * a.group; ++h) {
    for (int64_t t0 = t_first; t0 < t_stop; t0 += 32) {
      const int64_t nt = a.t_len - t0 < 32 ? a.t_len - t0 : 32;
      __syncthreads();
      load_rows(qs, qp, a.q, a.q_ld, t0, nt, 32, static_cast<int64_t>(h) * hd, hd);
      load_rows(dos, qp, a.dout, a.do_ld, t0, nt, 32, static_cast<int64_t>(h) * hd, hd);
      if (threadIdx.x < 32) {
        const int64_t at = static_cast<int64_t>(h) * a.t_len + t0 + threadIdx.x;
        const bool ok = static_cast<int64_t>(threadIdx.x) < nt;
        row_m[threadIdx.x] = ok ? a.stats[at] : 0.0f;
        row_il[threadIdx.x] = ok ? a.stats[plane + at] : 0.0f;
        row_d[threadIdx.x] = ok ? a.stats[2 * plane + at] : 0.0f;
      }
      __syncthreads();
      const int64_t t = t0 + lane;
      float sd[4] = {0.0f, 0.0f, 0.0f, 0.0f}, pd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int d = 0; d < hd; ++d) {
        const float qd = qs[lane * qp + d], od = dos[lane * qp + d];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          sd[i] = fmaf(qd, ks[(kw0 + i) * hd + d], sd[i]);
          pd[i] = fmaf(od, vs[(kw0 + i) * hd + d], pd[i]);
        }
      }
      float p[4], ds[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        p[i] = ds[i] = 0.0f;
        if (i >= wkeys) continue;
        const int64_t key = k0 + kw0 + i;
        const float s = scaled_score(sd[i], a.scale), dp = pd[i];
        if (t < a.t_len && key <= a.past + t && (a.window == 0 || key > a.past + t - a.window)) {
          p[i] = probability(s, row_m[lane], row_il[lane]);
          ds[i] = score_gradient(p[i], dp, row_d[lane], a.scale);
        }
      }
      for (int r = 0; r < static_cast<int>(nt); ++r) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (i >= wkeys) continue;
          const float pr = __shfl_sync(0xffffffffu, p[i], r), dsr = __shfl_sync(0xffffffffu, ds[i], r);
#pragma unroll
          for (int jj = 0; jj < NJ; ++jj) {
            const int d = lane + 32 * jj;
            if (d < hd) {
              dv[i][jj] = fmaf(pr, dos[r * qp + d], dv[i][jj]);
              dk[i][jj] = fmaf(dsr, qs[r * qp + d], dk[i][jj]);
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (i >= wkeys) continue;
    const int64_t j = k0 + kw0 + i;
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) {
      const int d = lane + 32 * jj;
      if (d < hd) {
        a.dk[j * a.dk_ld + static_cast<int64_t>(kvh) * hd + d] = dk[i][jj];
        a.dv[j * a.dv_ld + static_cast<int64_t>(kvh) * hd + d] = dv[i][jj];
      }
    }
  }
}

template <class Kernel>
void launch(Kernel* kernel, const char* name, int64_t blocks, int heads, size_t smem, const BackwardArgs& a) {
  if (blocks == 0) return;
  if (smem > 48 * 1024) {
    OLMO2_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  OLMO2_LAUNCH(dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(heads)), 32 * kWarps, smem, cuda::compute_stream(), kernel)(a);
  OLMO2_CUDA_CHECK_LAUNCH(name);
}

template <int NJ>
void run_backward(const BackwardArgs& a, int n_kv_heads) {
  const size_t hd = static_cast<size_t>(a.hd);
  const size_t rows_smem = sizeof(float) * (2 * kRowTile * hd + 2 * 32 * (hd + 1));
  const size_t keys_smem = sizeof(float) * (2 * kKeyBlock * hd + 2 * 32 * (hd + 1) + 3 * 32);
  launch(&attention_bwd_rows_kernel<NJ>, "attention_bwd_rows_kernel", (a.t_len + kRowTile - 1) / kRowTile,
         a.n_heads, rows_smem, a);
  launch(&attention_bwd_keys_kernel<NJ>, "attention_bwd_keys_kernel", (a.s_len + kKeyBlock - 1) / kKeyBlock,
         n_kv_heads, keys_smem, a);
}

}  // namespace

void cuda::causal_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                     const TensorView& dout, int n_heads, int n_kv_heads, const TensorView& dq,
                                     const TensorView& dk, const TensorView& dv, int64_t window) {
  const char* op = "causal_attention_backward";
  const int64_t hd = attention_backward_check(q, k, v, dout, n_heads, n_kv_heads, dq, dk, dv);
  OLMO2_CHECK(q.device() == Device::CUDA, op, ": views not on the GPU");
  OLMO2_CHECK(window >= 0, op, ": window ", window, " is negative (0 means no window)");
  const int64_t t_len = q.size(0), s_len = k.size(0);
  OLMO2_CHECK(n_heads <= 65535, op, ": ", n_heads, " heads is above the grid limit");
  const int nj = attention_detail::dims_per_lane(hd, op);
  if (hd == 0 || s_len == 0) return;  // no elements to write

  BackwardArgs a{};
  a.q = static_cast<const float*>(q.data()), a.q_ld = q.stride(0);
  a.k = static_cast<const float*>(k.data()), a.k_ld = k.stride(0);
  a.v = static_cast<const float*>(v.data()), a.v_ld = v.stride(0);
  a.dout = static_cast<const float*>(dout.data()), a.do_ld = dout.stride(0);
  a.dq = static_cast<float*>(dq.data()), a.dq_ld = dq.stride(0);
  a.dk = static_cast<float*>(dk.data()), a.dk_ld = dk.stride(0);
  a.dv = static_cast<float*>(dv.data()), a.dv_ld = dv.stride(0);
  a.t_len = t_len, a.s_len = s_len, a.past = s_len - t_len, a.window = window;
  a.hd = static_cast<int>(hd), a.n_heads = n_heads, a.group = n_heads / n_kv_heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  OLMO2_CHECK((s_len + kKeyBlock - 1) / kKeyBlock <= std::numeric_limits<int32_t>::max(), op, ": too many keys");
  const size_t stats_floats = 3 * static_cast<size_t>(n_heads) * static_cast<size_t>(t_len);
  a.stats = static_cast<float*>(device_malloc(sizeof(float) * (stats_floats > 0 ? stats_floats : 1)));
  try {
    switch (nj) {
      case 1: run_backward<1>(a, n_kv_heads); break;
      case 2: run_backward<2>(a, n_kv_heads); break;
      case 4: run_backward<4>(a, n_kv_heads); break;
      default: run_backward<8>(a, n_kv_heads); break;
    }
  } catch (...) {
    device_free(a.stats);
    throw;
  }
  device_free(a.stats);
}

}  // namespace olmo2::ops
