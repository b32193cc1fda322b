// Backend cases of attention (backend_case.h): causal attention with and without a
// sliding window, its max logit, paged attention over a shuffled block table and the
// backward. Bounds from attention's error analysis (tests/ops/attention_bounds.h), each
// backend within its bound of the exact result, the two within twice that. With bf16
// activations the inputs are multiples of 1/16 in [−2, 2], so every score is exact in
// fp32 in any order and both backends round the same bf16 scores. The max logit: one
// score's bound, 2·(sum_error(hd + 1) + u)·scale·Σ|q||k|, at the worst pair.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/cpu/kernels.h"
#include "ops/paged_attention.h"
#include "tests/ops/attention_bounds.h"
#include "tests/ops/backend_ops/backend_case.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops::test {
namespace {

struct Shape {
  int64_t t, past;
  int h, kv;
  int64_t hd, window;
  std::string name(const char* op) const {
    return std::string(op) + " T " + std::to_string(t) + " past " + std::to_string(past) + " H/KV " +
           std::to_string(h) + "/" + std::to_string(kv) + " hd " + std::to_string(hd) + " window " +
           std::to_string(window);
  }
};
const Shape kShapes[] = {{1, 0, 1, 1, 1, 0}, {7, 9, 4, 2, 24, 0}, {33, 5, 3, 1, 64, 6}, {5, 0, 2, 2, 128, 0}};

// Seeded values: N(0, 1), or multiples of 1/16 in [−2, 2] (bf16 activations).
Tensor values(std::vector<int64_t> shape, uint64_t seed, bool grid) {
  return grid ? random_grid_tensor(std::move(shape), seed) : random_tensor(std::move(shape), seed);
}

// q, k, v of one sequence: q [T, H·hd], k and v column slices of one [S, 2·KV·hd] tensor
// (strided rows, as a fused projection gives them).
struct Qkv {
  Tensor q, kv;
  TensorView k(const Tensor& t, const Shape& s) const { return t.view().cols(0, s.kv * s.hd); }
  TensorView v(const Tensor& t, const Shape& s) const { return t.view().cols(s.kv * s.hd, 2 * s.kv * s.hd); }
};
Qkv make_qkv(const Shape& s, uint64_t seed, bool grid) {
  return {values({s.t, s.h * s.hd}, seed, grid), values({s.t + s.past, 2 * s.kv * s.hd}, seed + 1, grid)};
}
AttentionExpected expected(const Qkv& x, const Shape& s, bool bf16, const Tensor* dout = nullptr) {
  const std::vector<double> g = dout ? dense(dout->view()) : std::vector<double>();
  return attention(dense(x.q.view()), dense(x.k(x.kv, s)), dense(x.v(x.kv, s)), s.t, s.t + s.past, s.h, s.kv, s.hd,
                   s.window, bf16, dout ? &g : nullptr);
}

OLMO2_OP_CASE(causal_attention) {
  for (const Shape& s : kShapes)
    for (DType act : {DType::F32, DType::BF16}) {
      const Qkv x = make_qkv(s, 20 + s.hd, act == DType::BF16);
      const Tensor dq = to_dev(x.q), dkv = to_dev(x.kv);
      Tensor out = host_poisoned({s.t, s.h * s.hd});
      const Tensor d_out = to_dev(out);
      cpu::causal_attention(x.q.view(), x.k(x.kv, s), x.v(x.kv, s), s.h, s.kv, out.view(), act, s.window);
      ops::causal_attention(dq.view(), x.k(dkv, s), x.v(dkv, s), s.h, s.kv, d_out.view(), act, s.window);
      expect_close(s.name("causal_attention") + " act " + dtype_name(act), out, d_out,
                   expected(x, s, act == DType::BF16).out.between_two());
    }
}

OLMO2_OP_CASE(causal_attention_max_logit) {
  for (const Shape& s : kShapes) {
    const Qkv x = make_qkv(s, 30 + s.hd, false);
    const std::vector<double> q = dense(x.q.view()), k = dense(x.k(x.kv, s));
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.hd));
    double bound = 0;
    for (int h = 0; h < s.h; ++h)
      for (int64_t t = 0; t < s.t; ++t)
        for (int64_t j = s.window > 0 ? std::max<int64_t>(0, s.past + t - s.window + 1) : 0; j <= s.past + t; ++j) {
          double mag = 0;
          for (int64_t d = 0; d < s.hd; ++d)
            mag += std::fabs(q[t * s.h * s.hd + h * s.hd + d] * k[j * s.kv * s.hd + h / (s.h / s.kv) * s.hd + d]);
          bound = std::max(bound, 2 * (sum_error(s.hd + 1) + kU) * scale * mag);
        }
    const Tensor dq = to_dev(x.q), dkv = to_dev(x.kv);
    expect_scalar(s.name("causal_attention_max_logit"),
                  cpu::causal_attention_max_logit(x.q.view(), x.k(x.kv, s), s.h, s.kv, s.window),
                  ops::causal_attention_max_logit(dq.view(), x.k(dkv, s), s.h, s.kv, s.window), bound);
  }
}

OLMO2_OP_CASE(paged_attention) {
  // Two sequences in a pool of 9 blocks of 5 rows (odd), their blocks shuffled; the
  // last row of q belongs to neither and must stay untouched.
  const int64_t bs = 5, blocks = 9;
  struct Seq {
    int64_t row_begin, rows, start;
    std::vector<int32_t> table;
  };
  const std::vector<Seq> seqs = {{0, 3, 7, {5, 2}}, {3, 4, 0, {8}}};
  for (const Shape& s : {Shape{0, 0, 4, 2, 24, 0}, Shape{0, 0, 3, 1, 64, 4}})
    for (DType act : {DType::F32, DType::BF16}) {
      const bool grid = act == DType::BF16;
      const int64_t T = 8, qw = s.h * s.hd, kw = s.kv * s.hd;
      const Tensor q = values({T, qw}, 40 + s.hd, grid), kp = values({blocks * bs, kw}, 41, grid),
                   vp = values({blocks * bs, kw}, 42, grid);
      std::vector<PagedSequence> ps;
      for (const Seq& q_seq : seqs) ps.push_back({q_seq.row_begin, q_seq.rows, q_seq.start, q_seq.table});
      Tensor out = host_poisoned({T, qw});
      const Tensor d_out = to_dev(out);
      cpu::paged_attention(q.view(), kp.view(), vp.view(), bs, ps, s.h, s.kv, out.view(), act, s.window);
      ops::paged_attention(to_dev(q).view(), to_dev(kp).view(), to_dev(vp).view(), bs, ps, s.h, s.kv, d_out.view(),
                           act, s.window);
      std::vector<double> bound(static_cast<size_t>(T * qw), 0.0);
      const std::vector<double> qd = dense(q.view()), kd = dense(kp.view()), vd = dense(vp.view());
      for (const Seq& sq : seqs) {  // each sequence as one causal attention over its gathered keys
        const int64_t S = sq.start + sq.rows;
        std::vector<double> k, v;
        for (int64_t p = 0; p < S; ++p) {
          const int64_t row = sq.table[static_cast<size_t>(p / bs)] * bs + p % bs;
          k.insert(k.end(), kd.begin() + row * kw, kd.begin() + (row + 1) * kw);
          v.insert(v.end(), vd.begin() + row * kw, vd.begin() + (row + 1) * kw);
        }
        const std::vector<double> qs(qd.begin() + sq.row_begin * qw, qd.begin() + (sq.row_begin + sq.rows) * qw);
        const std::vector<double> b =
            attention(qs, k, v, sq.rows, S, s.h, s.kv, s.hd, s.window, grid).out.between_two();
        std::copy(b.begin(), b.end(), bound.begin() + sq.row_begin * qw);
      }
      expect_close(s.name("paged_attention") + " act " + dtype_name(act), out, d_out, bound);
    }
}

OLMO2_OP_CASE(causal_attention_backward) {
  for (const Shape& s : kShapes) {
    const Qkv x = make_qkv(s, 50 + s.hd, false);
    const Tensor dout = values({s.t, s.h * s.hd}, 53, false);
    const int64_t S = s.t + s.past;
    Tensor dq = host_poisoned({s.t, s.h * s.hd}), dk = host_poisoned({S, s.kv * s.hd}),
           dv = host_poisoned({S, s.kv * s.hd});
    const Tensor g_dq = to_dev(dq), g_dk = to_dev(dk), g_dv = to_dev(dv), g_q = to_dev(x.q), g_kv = to_dev(x.kv);
    cpu::causal_attention_backward(x.q.view(), x.k(x.kv, s), x.v(x.kv, s), dout.view(), s.h, s.kv, dq.view(),
                                   dk.view(), dv.view(), s.window);
    ops::causal_attention_backward(g_q.view(), x.k(g_kv, s), x.v(g_kv, s), to_dev(dout).view(), s.h, s.kv,
                                   g_dq.view(), g_dk.view(), g_dv.view(), s.window);
    const AttentionExpected e = expected(x, s, false, &dout);
    const std::string what = s.name("causal_attention_backward");
    expect_close(what + ": dq", dq, g_dq, e.dq.between_two());
    expect_close(what + ": dk", dk, g_dk, e.dk.between_two());
    expect_close(what + ": dv", dv, g_dv, e.dv.between_two());
  }
}

}  // namespace
}  // namespace olmo2::ops::test
