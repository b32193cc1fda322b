#include "ops/backward.h"

#include "ops/cpu/kernels.h"

#include <cblas.h>
#include <omp.h>

#include "ops/cpu/bf16_gemm_detail.h"
#include "ops/cpu/fast_exp.h"
#include "ops/cpu/weights.h"
#include "ops/op_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace olmo2::ops {

namespace {
bool is_set(const TensorView& t) { return !t.empty(); }

// The shared checks (ops/op_checks.h) plus the CPU's device check.
void check_rows(const TensorView& t, const char* op, const char* name) {
  check_f32_rows(t, op, name);
  OLMO2_CHECK(t.device() == Device::CPU, op, ": ", name, " is not on the CPU");
}

void check_same(const TensorView& a, const TensorView& b, const char* op, const char* name) {
  check_same_f32_rows(a, b, op, name);
  OLMO2_CHECK(b.device() == Device::CPU, op, ": ", name, " is not on the CPU");
}

void check_vec(const TensorView& t, int64_t d, const char* op, const char* name) {
  OLMO2_CHECK(t.dim() == 1 && t.size(0) == d && t.dtype() == DType::F32 &&
                  t.device() == Device::CPU && t.stride(0) == 1,
              op, ": ", name, " must be a contiguous f32 CPU vector of ", d, ", got ",
              t.shape_str());
}

blasint bi(int64_t v) { return static_cast<blasint>(v); }
}  // namespace

// ---------------------------------------------------------------------------------------
void cpu::linear_backward(const TensorView& x, const TensorView& w, const TensorView& dy,
                     const TensorView& dx, const TensorView& dw, bool accumulate_dw,
                     bool accumulate_dx) {
  check_rows(x, "linear_backward", "x");
  const bool w_bf16 = w.dtype() == DType::BF16;
  if (w_bf16)
    OLMO2_CHECK(w.dim() == 2 && w.device() == Device::CPU && w.stride(1) == 1,
                "linear_backward: w must be a 2-d CPU view with contiguous rows, got ", w.shape_str());
  else
    check_rows(w, "linear_backward", "w");
  check_rows(dy, "linear_backward", "dy");
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  OLMO2_CHECK(w.size(1) == k && dy.size(0) == m && dy.size(1) == n, "linear_backward: x ",
              x.shape_str(), " w ", w.shape_str(), " dy ", dy.shape_str());
  // A bf16 w takes the training products' path (ops/bf16_gemm.h): onednn, or f32 sgemm.
  const bool onednn = w_bf16 && bf16_training_gemm_path() == Bf16GemmPath::OneDnn;
  if (is_set(dx)) {
    check_same(x, dx, "linear_backward", "dx");
    if (m > 0 && k > 0) {
      if (n == 0) {
        if (!accumulate_dx)
          for (int64_t i = 0; i < m; ++i)
            std::memset(dx.f32() + i * dx.stride(0), 0, sizeof(float) * k);
      } else if (onednn) {
        detail::linear_dx_onednn(dy, w, dx, accumulate_dx);
      } else if (w_bf16) {
        detail::linear_dx_bf16(dy, w, dx, accumulate_dx);
      } else {
        // dx[M, K] = dy[M, N] · w[N, K]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(m), bi(k), bi(n), 1.0f, dy.f32(),
                    bi(dy.stride(0)), w.f32(), bi(w.stride(0)), accumulate_dx ? 1.0f : 0.0f,
                    dx.f32(), bi(dx.stride(0)));
      }
    }
  }
  if (is_set(dw)) {
    check_rows(dw, "linear_backward", "dw");
    OLMO2_CHECK(dw.shape() == w.shape(), "linear_backward: dw ", dw.shape_str(), " vs ", w.shape_str());
    if (n > 0 && k > 0) {
      if (m == 0) {
        if (!accumulate_dw)
          for (int64_t i = 0; i < n; ++i)
            std::memset(dw.f32() + i * dw.stride(0), 0, sizeof(float) * k);
      } else if (onednn) {
        detail::linear_dw_onednn(x, dy, dw, accumulate_dw);
      } else {
        // dw[N, K] (+)= dy[M, N]ᵀ · x[M, K]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(n), bi(k), bi(m), 1.0f, dy.f32(),
                    bi(dy.stride(0)), x.f32(), bi(x.stride(0)), accumulate_dw ? 1.0f : 0.0f,
                    dw.f32(), bi(dw.stride(0)));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
namespace {
// dtable[ids[i] − first_id] += dout[i] for the ids in the table's range, in increasing i.
// Threads split the columns, so repeated ids never race; each thread walks all tokens.
void embedding_rows_backward(const char* op, const TensorView& ids, const TensorView& dout, int64_t first_id,
                             const TensorView& dtable, bool all_in_range) {
  embedding_backward_check(op, ids, dout, dtable);
  OLMO2_CHECK(dout.device() == Device::CPU && dtable.device() == Device::CPU, op, ": views not on the CPU");
  const int64_t n = ids.size(0), rows = dtable.size(0), h = dtable.size(1);
  const int32_t* id = ids.i32();
  if (all_in_range) check_token_ids(id, n, rows);
  const int64_t chunk = 256;
  const int64_t n_chunks = (h + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n * h > (1 << 16) && n_chunks > 1)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t lo = c * chunk, hi = std::min(h, lo + chunk);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = static_cast<int64_t>(id[i]) - first_id;
      if (r < 0 || r >= rows) continue;
      const float* src = dout.f32() + i * dout.stride(0);
      float* dst = dtable.f32() + r * dtable.stride(0);
      for (int64_t j = lo; j < hi; ++j) dst[j] += src[j];
    }
  }
}
}  // namespace

void cpu::embedding_backward(const TensorView& ids, const TensorView& dout, const TensorView& dtable) {
  embedding_rows_backward("embedding_backward", ids, dout, 0, dtable, true);
}

void cpu::embedding_slice_backward(const TensorView& ids, const TensorView& dout, int64_t first_id,
                                   const TensorView& dtable) {
  embedding_rows_backward("embedding_slice_backward", ids, dout, first_id, dtable, false);
}

// ---------------------------------------------------------------------------------------
namespace {
void check_stat(const TensorView& s, int64_t rows, const char* name) {
  OLMO2_CHECK(s.dim() == 1 && s.size(0) == rows && s.dtype() == DType::F32 && s.device() == Device::CPU,
              "rmsnorm_backward: ", name, " must be an f32 vector of ", rows, ", got ", s.shape_str());
}
}  // namespace

void cpu::rmsnorm_backward_partials(const TensorView& x, const TensorView& w, const TensorView& dy,
                                    const TensorView& sumsq_v, const TensorView& dot_v) {
  check_rows(x, "rmsnorm_backward", "x");
  check_same(x, dy, "rmsnorm_backward", "dy");
  const int64_t rows = x.size(0), d = x.size(1);
  std::vector<float> w_widened;
  const float* wp = cpu::f32_weights(w, d, "rmsnorm_backward", &w_widened);
  check_stat(sumsq_v, rows, "sumsq");
  check_stat(dot_v, rows, "dot");
  float* const sumsq = sumsq_v.f32();
  float* const dot = dot_v.f32();
  const int64_t ss_stride = sumsq_v.stride(0), dot_stride = dot_v.stride(0);
#pragma omp parallel for schedule(static) if (rows * d > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x.f32() + t * x.stride(0);
    const float* gr = dy.f32() + t * dy.stride(0);
    float ss = 0.0f, dt = 0.0f;
    for (int64_t i = 0; i < d; ++i) {
      ss += xr[i] * xr[i];
      dt += gr[i] * wp[i] * xr[i];
    }
    sumsq[t * ss_stride] = ss;
    dot[t * dot_stride] = dt;
  }
}

void cpu::rmsnorm_backward_finish(const TensorView& x, const TensorView& w, float eps, int64_t d_total,
                                  const TensorView& dy, const TensorView& sumsq_v, const TensorView& dot_v,
                                  const TensorView& dx, const TensorView& dw) {
  check_rows(x, "rmsnorm_backward", "x");
  check_same(x, dy, "rmsnorm_backward", "dy");
  check_same(x, dx, "rmsnorm_backward", "dx");
  const int64_t rows = x.size(0), d = x.size(1);
  check_stat(sumsq_v, rows, "sumsq");
  check_stat(dot_v, rows, "dot");
  const float* const sumsq = sumsq_v.f32();
  const float* const dot = dot_v.f32();
  const int64_t ss_stride = sumsq_v.stride(0), dot_stride = dot_v.stride(0);
  std::vector<float> w_widened;
  const float* wp = cpu::f32_weights(w, d, "rmsnorm_backward", &w_widened);
  const bool want_dw = is_set(dw);
  if (want_dw) check_vec(dw, d, "rmsnorm_backward", "dw");
  OLMO2_CHECK(d_total >= d && d_total > 0, "rmsnorm_backward: global width ", d_total,
              " below the local width ", d);
  const float inv_d = 1.0f / static_cast<float>(d_total);
  const bool par = rows * d > (1 << 14);
  const int n_threads = par ? omp_get_max_threads() : 1;
  // Per-thread partial weight gradients, summed after the loop (no races on dw).
  std::vector<float> dw_part(want_dw ? static_cast<size_t>(n_threads) * d : 0, 0.0f);
#pragma omp parallel num_threads(n_threads) if (par)
  {
    float* mine =
        want_dw ? dw_part.data() + static_cast<size_t>(omp_get_thread_num()) * d : nullptr;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < rows; ++t) {
      const float* xr = x.f32() + t * x.stride(0);
      const float* gr = dy.f32() + t * dy.stride(0);
      float* dr = dx.f32() + t * dx.stride(0);
      const float r = 1.0f / std::sqrt(sumsq[t * ss_stride] * inv_d + eps);
      const float c = r * r * r * dot[t * dot_stride] * inv_d;
      for (int64_t i = 0; i < d; ++i) {
        const float xi = xr[i], gi = gr[i];  // read before dx (may alias) is written
        if (mine) mine[i] += gi * xi * r;
        dr[i] = r * wp[i] * gi - xi * c;
      }
    }
  }
  if (want_dw) {
    float* dwp = dw.f32();
    for (int th = 0; th < n_threads; ++th)
      for (int64_t i = 0; i < d; ++i) dwp[i] += dw_part[static_cast<size_t>(th) * d + i];
  }
}

void cpu::rmsnorm_backward(const TensorView& x, const TensorView& w, float eps, const TensorView& dy,
                           const TensorView& dx, const TensorView& dw) {
  check_rows(x, "rmsnorm_backward", "x");
  const int64_t rows = x.size(0);
  std::vector<float> sumsq(static_cast<size_t>(rows)), dot(static_cast<size_t>(rows));
  const TensorView s(sumsq.data(), DType::F32, {rows}), d(dot.data(), DType::F32, {rows});
  rmsnorm_backward_partials(x, w, dy, s, d);
  rmsnorm_backward_finish(x, w, eps, x.size(1), dy, s, d, dx, dw);
}

// ---------------------------------------------------------------------------------------
void cpu::rope_backward(const TensorView& dy, const TensorView& positions, int n_heads, int head_dim,
                        const RopeFrequencies& f) {
  // The rotation by −a is the forward at position −p: (−p)·f = −(p·f) exactly in fp32,
  // and cos/sin are even/odd, so this reuses the forward's angles bit for bit; the
  // scaled sine f32(sin(−a)·s) = −f32(sin(a)·s) too (rounding is symmetric), so this is
  // s times the inverse rotation, the forward's transpose.
  const int64_t rows = dy.dim() == 2 ? dy.size(0) : 0;
  OLMO2_CHECK(positions.dim() == 1 && positions.size(0) == rows && positions.stride(0) == 1,
              "rope_backward: positions ", positions.shape_str(), " for dy ", dy.shape_str());
  std::vector<int32_t> negated(static_cast<size_t>(rows));
  for (int64_t t = 0; t < rows; ++t) negated[static_cast<size_t>(t)] = -positions.i32()[t];
  cpu::rope(dy, TensorView(negated.data(), DType::I32, {rows}), n_heads, head_dim, f);
}

// ---------------------------------------------------------------------------------------
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
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(t_len), bi(s_len), bi(hd), 1.0f, qh,
                    bi(q.stride(0)), kh, bi(k.stride(0)), 0.0f, p.data(), bi(s_len));
        // dP[t, s] = dO_t · v_s
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(t_len), bi(s_len), bi(hd), 1.0f,
                    doh, bi(dout.stride(0)), vh, bi(v.stride(0)), 0.0f, dp.data(), bi(s_len));
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
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(t_len), bi(hd), bi(s_len), 1.0f,
                    dp.data(), bi(s_len), kh, bi(k.stride(0)), 0.0f, dqh, bi(dq.stride(0)));
        // dk_kvh += dSᵀ · Q_h
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(s_len), bi(hd), bi(t_len), 1.0f,
                    dp.data(), bi(s_len), qh, bi(q.stride(0)), 1.0f, dkh, bi(dk.stride(0)));
        // dv_kvh += Pᵀ · dO_h
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(s_len), bi(hd), bi(t_len), 1.0f,
                    p.data(), bi(s_len), doh, bi(dout.stride(0)), 1.0f, dvh, bi(dv.stride(0)));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
void cpu::swiglu_backward(const TensorView& gate, const TensorView& up, const TensorView& dout,
                     const TensorView& dgate, const TensorView& dup) {
  check_rows(gate, "swiglu_backward", "gate");
  check_same(gate, up, "swiglu_backward", "up");
  check_same(gate, dout, "swiglu_backward", "dout");
  check_same(gate, dgate, "swiglu_backward", "dgate");
  check_same(gate, dup, "swiglu_backward", "dup");
  const int64_t rows = gate.size(0), cols = gate.size(1);
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float* g = gate.f32() + t * gate.stride(0);
    const float* u = up.f32() + t * up.stride(0);
    const float* d = dout.f32() + t * dout.stride(0);
    float* dg = dgate.f32() + t * dgate.stride(0);
    float* du = dup.f32() + t * dup.stride(0);
    for (int64_t i = 0; i < cols; ++i) {
      const float gi = g[i], ui = u[i], di = d[i];
      const float sig = 1.0f / (1.0f + std::exp(-gi));
      const float silu = gi * sig;
      dg[i] = di * ui * sig * (1.0f + gi * (1.0f - sig));
      du[i] = di * silu;
    }
  }
}

// ---------------------------------------------------------------------------------------
CrossEntropySums cpu::cross_entropy_zloss(const TensorView& logits, const TensorView& targets_v, float z_coef,
                                          float scale, const TensorView& dlogits) {
  const bool want_grad = cross_entropy_check(logits, targets_v, dlogits);
  OLMO2_CHECK(logits.device() == Device::CPU, "cross_entropy_zloss: logits not on the CPU");
  const int32_t* targets = targets_v.i32();
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  check_target_values(targets, rows, vocab);
  double ce = 0.0, zsq = 0.0;
  int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : ce, zsq, count) if (rows * vocab > (1 << 14))
  for (int64_t t = 0; t < rows; ++t) {
    const float* x = logits.f32() + t * logits.stride(0);
    float* dx = want_grad ? dlogits.f32() + t * dlogits.stride(0) : nullptr;
    const int32_t tgt = targets[t];
    if (tgt == kIgnoreIndex) {
      if (dx) std::memset(dx, 0, sizeof(float) * vocab);
      continue;
    }
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, x[i]);
    const double x_tgt = x[tgt];  // read before dlogits (may alias) is written
    // One fp32 exp per element: kept in dx (if wanted) and summed in blocks of fp32
    // added into fp64.
    double sum = 0.0;
    for (int64_t b = 0; b < vocab; b += 256) {
      const int64_t e = std::min(vocab, b + 256);
      float part = 0.0f;
      if (dx) {  // in place on dx (a copy of the row unless dlogits aliases logits)
        if (dx != x) std::memcpy(dx + b, x + b, sizeof(float) * static_cast<size_t>(e - b));
#pragma omp simd reduction(+ : part)
        for (int64_t i = b; i < e; ++i) {
          dx[i] = cpu::fast_exp(dx[i] - mx);
          part += dx[i];
        }
      } else {
#pragma omp simd reduction(+ : part)
        for (int64_t i = b; i < e; ++i) part += cpu::fast_exp(x[i] - mx);
      }
      sum += part;
    }
    const double lse = static_cast<double>(mx) + std::log(sum);
    ce += lse - x_tgt;
    zsq += lse * lse;
    ++count;
    if (dx) {
      // softmax = exp(x − mx) / sum; dx = scale·(1 + 2·z·lse)·softmax − scale·onehot.
      const float coef = static_cast<float>(scale * (1.0 + 2.0 * z_coef * lse) / sum);
      for (int64_t i = 0; i < vocab; ++i) dx[i] *= coef;
      dx[tgt] -= scale;
    }
  }
  return CrossEntropySums{ce, zsq, count};
}

}  // namespace olmo2::ops
