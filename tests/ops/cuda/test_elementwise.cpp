// The CUDA element-wise and normalisation ops against ops::cpu:: (skipped, saying why,
// without a GPU): the split RMSNorm and its backward, RoPE, SwiGLU, add_inplace, AdamW
// and the embedding. docs/architecture.md §2, §10.
//
// Tolerances, per element from each op's error analysis (tests/ops/error_bounds.h), for
// the two backends together. Exact (0) where both do the same rounded operations in the
// same order: add_inplace, AdamW (explicitly rounded intrinsics on the GPU, no fma the
// CPU does not do), the embedding gather and its backward (same additions, same order).
// Sums of squares: 2·sum_error(d + 1) of each sum. RMSNorm apply: a few roundings and a
// reciprocal square root (CUDA within 2 ulp): 24u of each |y|. RMSNorm backward: dx =
// r·w·dy − x·r³·dot/d cancels, so its bound is relative to r·|w·dy| + |x|·r³·Σ|dy·w·x|/d,
// with the sums' errors; dw to Σ|dy·x·r|. RoPE: sin/cos within 2 ulp, so 16u of
// s·(|x₁| + |x₂|), the size of the rotated pair. SwiGLU: 16u of |out| (f32); with bf16
// activations silu(g) and the product are each rounded to bf16, u_bf16 each per backend,
// so 4·u_bf16 of |out|, and such flips must be rare (< 1% of the elements). Its backward:
// dgate = dy·u·σ·(1 + g·(1 − σ)) cancels near g ≈ −1.28: 24u of |dy·u|·σ·(1 + |g|·(1 − σ)).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "core/error.h"
#include "ops/adamw.h"
#include "ops/backward.h"
#include "ops/cpu/kernels.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops {
namespace {

using test::kU;

#ifdef OLMO2_HAVE_CUDA

Tensor randn(std::vector<int64_t> shape, uint64_t seed, DType dtype = DType::F32, float scale = 1.0f) {
  return test::random_tensor_of(std::move(shape), seed, dtype, scale);
}

// A host tensor, its device copy, and views of their first `cols` columns (rows strided
// when the allocation is wider). Comparisons use the whole allocations.
struct Pair {
  Tensor host, dev;
  int64_t cols;
  // A vector (vec, ids) is its whole view: cols() takes a matrix.
  TensorView h() const { return host.view().dim() == 1 ? host.view() : host.view().cols(0, cols); }
  TensorView d() const { return dev.view().dim() == 1 ? dev.view() : dev.view().cols(0, cols); }
  Tensor back() const { return test::to_host(dev.view()); }
};

Pair pair(int64_t rows, int64_t cols, uint64_t seed, DType dtype = DType::F32, int64_t pad = 0, float scale = 1.0f) {
  Pair p{randn({rows, cols + pad}, seed, dtype, scale), Tensor(), cols};
  p.dev = test::to_device(p.host.view());
  return p;
}
Pair vec(int64_t n, uint64_t seed, DType dtype = DType::F32) {
  Pair p{randn({n}, seed, dtype), Tensor(), n};
  p.dev = test::to_device(p.host.view());
  return p;
}
Pair ids(const std::vector<int32_t>& v) {
  Pair p{Tensor::zeros({static_cast<int64_t>(v.size())}, DType::I32), Tensor(), static_cast<int64_t>(v.size())};
  if (!v.empty()) std::memcpy(p.host.view().data(), v.data(), v.size() * sizeof(int32_t));
  p.dev = test::to_device(p.host.view());
  return p;
}
std::vector<int32_t> random_ids(int64_t n, int32_t lo, int32_t hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

const int64_t kRows[] = {1, 3, 17, 130};
const int64_t kWidths[] = {37, 1000, 2050};

std::string name(const char* op, int64_t rows, int64_t d, DType w = DType::F32) {
  return std::string(op) + " rows " + std::to_string(rows) + " d " + std::to_string(d) + " w " + dtype_name(w);
}

// Bounds over a whole [rows, width] allocation from per-element bounds of its first `cols`
// columns (`f(r, c)`); the padding must come back untouched (bound 0).
template <class F>
std::vector<double> bounds(const Pair& p, F f) {
  const int64_t rows = p.host.view().dim() == 2 ? p.host.view().size(0) : 1;
  const int64_t width = p.host.view().dim() == 2 ? p.host.view().size(1) : p.host.view().size(0);
  std::vector<double> b(static_cast<size_t>(rows * width), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < p.cols; ++c) b[static_cast<size_t>(r * width + c)] = f(r, c);
  return b;
}

// Bounds rel·|want| over a pair's first `cols` columns (want: the host side), the padding
// untouched.
std::vector<double> relative(const Pair& p, double rel) {
  const std::vector<double> v = test::dense(p.h());
  return bounds(p, [&](int64_t r, int64_t c) { return rel * std::fabs(v[static_cast<size_t>(r * p.cols + c)]); });
}

// Per-row sums of a dense [rows, d] product of the given arrays, and of its magnitude.
struct RowSums {
  std::vector<double> ss, dot, dot_mag, r;
};
RowSums row_sums(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& dy,
                 int64_t rows, int64_t d, double d_total, float eps) {
  RowSums s;
  for (int64_t t = 0; t < rows; ++t) {
    double ss = 0, dot = 0, mag = 0;
    for (int64_t i = 0; i < d; ++i) {
      const double xi = x[static_cast<size_t>(t * d + i)];
      ss += xi * xi;
      if (!dy.empty()) {
        const double g = dy[static_cast<size_t>(t * d + i)] * w[static_cast<size_t>(i)] * xi;
        dot += g, mag += std::fabs(g);
      }
    }
    s.ss.push_back(ss), s.dot.push_back(dot), s.dot_mag.push_back(mag);
    s.r.push_back(1.0 / std::sqrt(ss / d_total + eps));
  }
  return s;
}

TEST(CudaElementwise, RmsnormPartialsAndApply) {
  OLMO2_REQUIRE_GPU();
  for (int64_t rows : kRows)
    for (int64_t d : kWidths)
      for (DType wt : {DType::F32, DType::BF16}) {
        const std::string what = name("rmsnorm_partials/apply", rows, d, wt);
        const Pair x = pair(rows, d, 1, DType::F32, 3), w = vec(d, 2, wt);
        // sumsq as column 0 of a [rows, 2] tensor (strided), as parallel/tp_qk_norm.cpp uses it.
        const Pair stats = pair(rows, 2, 3);
        cpu::rmsnorm_partials(x.h(), stats.host.view().col(0));
        rmsnorm_partials(x.d(), stats.dev.view().col(0));
        test::expect_close(stats.host.view(), stats.back().view(),
                           bounds(stats, [&, sv = test::dense(stats.h())](int64_t r, int64_t c) {
                             return c == 0 ? 2 * test::sum_error(d + 1) * std::fabs(sv[size_t(r * 2)]) : 0.0;
                           }),
                           what + ": sumsq");
        // apply gets the CPU's sums on both sides.
        const Tensor ss = test::to_device(stats.host.view());
        for (int64_t d_total : {d, 3 * d}) {
          const Pair y = pair(rows, d, 4);
          cpu::rmsnorm_apply(x.h(), w.h(), stats.host.view().col(0), d_total, 1e-6f, y.h());
          test::poison(y.dev.view());
          rmsnorm_apply(x.d(), w.d(), ss.view().col(0), d_total, 1e-6f, y.d());
          test::expect_close(y.host.view(), y.back().view(),
                             relative(y, 24 * kU),
                             what + ": apply, d_total " + std::to_string(d_total));
        }
        // In place (y = x), the QK-norm's use.
        const Pair xi = pair(rows, d, 5);
        cpu::rmsnorm_apply(xi.h(), w.h(), stats.host.view().col(0), d, 1e-6f, xi.h());
        rmsnorm_apply(xi.d(), w.d(), ss.view().col(0), d, 1e-6f, xi.d());
        test::expect_close(xi.host.view(), xi.back().view(),
                           relative(xi, 24 * kU),
                           what + ": apply in place");
      }
}

TEST(CudaElementwise, RmsnormBackward) {
  OLMO2_REQUIRE_GPU();
  for (int64_t rows : {1, 3, 17, 130, 200})
    for (int64_t d : kWidths)
      for (DType wt : {DType::F32, DType::BF16})
        for (int alias : {0, 1, 2}) {  // dx separate, dx = dy, dx = x
          const std::string what = name("rmsnorm_backward", rows, d, wt) + " alias " + std::to_string(alias);
          const Pair x = pair(rows, d, 1, DType::F32, 2), w = vec(d, 2, wt), dy = pair(rows, d, 3);
          const Pair dx = pair(rows, d, 4), dw = vec(d, 5);
          const Pair& out = alias == 1 ? dy : alias == 2 ? x : dx;
          const std::vector<double> xd = test::dense(x.h()), wd = test::dense(w.h()), gd = test::dense(dy.h()),
                                    dw0 = test::dense(dw.h());
          const RowSums rs = row_sums(xd, wd, gd, rows, d, double(d), 1e-6f);
          const double e_dx = 2 * (2.5 * test::sum_error(d + 1) + 10 * kU);
          const std::vector<double> bdx = bounds(out, [&](int64_t t, int64_t i) {
            const size_t ti = static_cast<size_t>(t * d + i);
            const double r = rs.r[size_t(t)];
            return e_dx * (r * std::fabs(wd[size_t(i)] * gd[ti]) + std::fabs(xd[ti]) * r * r * r * rs.dot_mag[size_t(t)] / d);
          });
          const std::vector<double> bdw = bounds(dw, [&](int64_t, int64_t i) {
            double mag = std::fabs(dw0[size_t(i)]);
            for (int64_t t = 0; t < rows; ++t) mag += std::fabs(gd[size_t(t * d + i)] * xd[size_t(t * d + i)]) * rs.r[size_t(t)];
            return 2 * (test::sum_error(rows + 2) + 0.5 * test::sum_error(d + 1) + 4 * kU) * mag;
          });
          cpu::rmsnorm_backward(x.h(), w.h(), 1e-6f, dy.h(), out.h(), dw.h());
          rmsnorm_backward(x.d(), w.d(), 1e-6f, dy.d(), out.d(), dw.d());
          test::expect_close(out.host.view(), out.back().view(), bdx, what + ": dx");
          test::expect_close(dw.host.view(), dw.back().view(), bdw, what + ": dw");
        }
}

// The halves with global statistics, as parallel/tp_qk_norm.cpp calls them: rows of a
// [4, T] stats tensor, d_total above the local width, no dw.
TEST(CudaElementwise, RmsnormBackwardHalves) {
  OLMO2_REQUIRE_GPU();
  for (int64_t rows : kRows)
    for (DType wt : {DType::F32, DType::BF16}) {
      const int64_t d = 1000, d_total = 4000;
      const std::string what = name("rmsnorm_backward halves", rows, d, wt);
      const Pair x = pair(rows, d, 1), w = vec(d, 2, wt), dy = pair(rows, d, 3), st = pair(4, rows, 4);
      auto row = [&](bool gpu, int64_t r) { return (gpu ? st.dev : st.host).view().rows(r, r + 1).reshape({rows}); };
      const std::vector<double> xd = test::dense(x.h()), wd = test::dense(w.h()), gd = test::dense(dy.h());
      const RowSums rs = row_sums(xd, wd, gd, rows, d, double(d), 1e-6f);
      const std::vector<double> bst = bounds(st, [&](int64_t r, int64_t t) {
        const double e = 2 * test::sum_error(d + 1);
        return r == 0 ? e * rs.ss[size_t(t)] : r == 1 ? e * rs.dot_mag[size_t(t)] : 0.0;
      });
      cpu::rmsnorm_backward_partials(x.h(), w.h(), dy.h(), row(false, 0), row(false, 1));
      rmsnorm_backward_partials(x.d(), w.d(), dy.d(), row(true, 0), row(true, 1));
      test::expect_close(st.host.view(), st.back().view(), bst, what + ": partials");
      // Stand-in for the all-reduce: the other ranks' share, the same on both sides.
      for (int64_t t = 0; t < rows; ++t) st.host.f32()[t] *= 4.0f, st.host.f32()[rows + t] *= 4.0f;
      const Tensor stats_dev = test::to_device(st.host.view());
      auto drow = [&](int64_t r) { return stats_dev.view().rows(r, r + 1).reshape({rows}); };
      const Pair dx = pair(rows, d, 5), dw = vec(d, 6);
      // From identical statistics: only the row's own roundings (10u of each term) and dw's sum.
      const std::vector<double> dw0 = test::dense(dw.h());
      std::vector<double> r_of(static_cast<size_t>(rows)), c_mag(static_cast<size_t>(rows));
      for (int64_t t = 0; t < rows; ++t) {
        r_of[size_t(t)] = 1.0 / std::sqrt(double(st.host.f32()[t]) / d_total + 1e-6f);
        c_mag[size_t(t)] = std::pow(r_of[size_t(t)], 3) * std::fabs(double(st.host.f32()[rows + t])) / d_total;
      }
      const std::vector<double> bdx = bounds(dx, [&](int64_t t, int64_t i) {
        const size_t ti = static_cast<size_t>(t * d + i);
        return 2 * 10 * kU * (r_of[size_t(t)] * std::fabs(wd[size_t(i)] * gd[ti]) + std::fabs(xd[ti]) * c_mag[size_t(t)]);
      });
      const std::vector<double> bdw = bounds(dw, [&](int64_t, int64_t i) {
        double mag = std::fabs(dw0[size_t(i)]);
        for (int64_t t = 0; t < rows; ++t) mag += std::fabs(gd[size_t(t * d + i)] * xd[size_t(t * d + i)]) * r_of[size_t(t)];
        return 2 * (test::sum_error(rows + 2) + 4 * kU) * mag;
      });
      cpu::rmsnorm_backward_finish(x.h(), w.h(), 1e-6f, d_total, dy.h(), row(false, 0), row(false, 1), dx.h(), dw.h());
      rmsnorm_backward_finish(x.d(), w.d(), 1e-6f, d_total, dy.d(), drow(0), drow(1), dx.d(), dw.d());
      test::expect_close(dx.host.view(), dx.back().view(), bdx, what + ": dx");
      test::expect_close(dw.host.view(), dw.back().view(), bdw, what + ": dw");
      rmsnorm_backward_finish(x.d(), w.d(), 1e-6f, d_total, dy.d(), drow(0), drow(1), dx.d(), TensorView{});
      test::expect_close(dx.host.view(), dx.back().view(), bdx, what + ": dx without dw");
    }
}

// RoPE's bounds: 16u of scaling·(|x₁| + |x₂|) for each element of a rotated pair (x the
// op's input), the padding untouched.
std::vector<double> rope_bounds(const Pair& x, int64_t hd, double scaling) {
  const std::vector<double> v = test::dense(x.h());
  return bounds(x, [&](int64_t r, int64_t c) {
    const int64_t h = c / hd, i = c % hd, half = hd / 2, base = r * x.cols + h * hd;
    const double pair_size = std::fabs(v[size_t(base + i % half)]) + std::fabs(v[size_t(base + i % half + half)]);
    return 16 * kU * scaling * pair_size;
  });
}

TEST(CudaElementwise, RopeForwardAndBackward) {
  OLMO2_REQUIRE_GPU();
  for (int64_t rows : kRows)
    for (auto [heads, hd] : {std::pair{1, 2}, {3, 36}, {4, 64}, {2, 128}})
      for (float theta : {10000.0f, 500000.0f}) {
        const std::string what = "rope rows " + std::to_string(rows) + " heads " + std::to_string(heads) + " hd " +
                                 std::to_string(hd) + " theta " + std::to_string(theta);
        const Pair pos = ids(random_ids(rows, 0, 4096, 7));
        const Pair x = pair(rows, heads * hd, 1, DType::F32, 5);
        const RopeFrequencies f = RopeFrequencies::standard(theta, hd);
        const std::vector<double> b = rope_bounds(x, hd, 1.0);
        cpu::rope(x.h(), pos.h(), heads, hd, f);
        rope(x.d(), pos.d(), heads, hd, theta);
        test::expect_close(x.host.view(), x.back().view(), b, what);
        const std::vector<double> bb = rope_bounds(x, hd, 1.0);
        cpu::rope_backward(x.h(), pos.h(), heads, hd, f);
        rope_backward(x.d(), pos.d(), heads, hd, theta);
        test::expect_close(x.host.view(), x.back().view(), bb, what + " backward");
      }
}

// YaRN-like frequencies (not a power series) and a cos/sin scaling of 1.2
// (docs/architecture.md §3): the same scaled rotation as the CPU.
TEST(CudaElementwise, RopeWithScaledFrequencies) {
  OLMO2_REQUIRE_GPU();
  for (int64_t rows : kRows)
    for (auto [heads, hd] : {std::pair{3, 36}, {2, 128}}) {
      RopeFrequencies f;
      for (int i = 0; i < hd / 2; ++i) f.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / hd) / (i % 3 == 0 ? 8.0f : 1.0f));
      f.attention_scaling = 1.2f;
      const std::string what = "scaled rope rows " + std::to_string(rows) + " hd " + std::to_string(hd);
      const Pair pos = ids(random_ids(rows, 0, 4096, 8));
      const Pair x = pair(rows, heads * hd, 1, DType::F32, 6);
      const std::vector<double> b = rope_bounds(x, hd, f.attention_scaling);
      cpu::rope(x.h(), pos.h(), heads, hd, f);
      rope(x.d(), pos.d(), heads, hd, f);
      test::expect_close(x.host.view(), x.back().view(), b, what);
      const std::vector<double> bb = rope_bounds(x, hd, f.attention_scaling);
      cpu::rope_backward(x.h(), pos.h(), heads, hd, f);
      rope_backward(x.d(), pos.d(), heads, hd, f);
      test::expect_close(x.host.view(), x.back().view(), bb, what + " backward");
    }
}

// Every |cpu − gpu| within rel of its |cpu|, and fewer than `max_frac` elements differing.
void expect_rarely_different(const Tensor& want, const Tensor& got, double rel, double max_frac,
                             const std::string& what) {
  test::expect_close(want.view(), got.view(), rel, what);
  int64_t differ = 0;
  for (int64_t i = 0; i < want.numel(); ++i) differ += want.f32()[i] != got.f32()[i];
  EXPECT_LT(static_cast<double>(differ), max_frac * static_cast<double>(want.numel())) << what;
}

TEST(CudaElementwise, SwigluAndAdd) {
  OLMO2_REQUIRE_GPU();
  for (int64_t rows : kRows)
    for (int64_t d : kWidths)
      for (DType act : {DType::F32, DType::BF16}) {
        const std::string what = name("swiglu", rows, d) + " act " + dtype_name(act);
        const bool bf = act == DType::BF16;
        const Pair g = pair(rows, d, 1, DType::F32, 1, 3.0f), u = pair(rows, d, 2), out = pair(rows, d, 3, DType::F32, 1);
        cpu::swiglu(g.h(), u.h(), out.h(), act);
        swiglu(g.d(), u.d(), out.d(), act);
        expect_rarely_different(out.host, out.back(), bf ? 4 * test::kUBf16 + 32 * kU : 16 * kU, bf ? 0.01 : 1.0, what);
        const Pair y = pair(rows, d, 4, DType::F32, 2), x = pair(rows, d, 5, DType::F32, 2);
        cpu::add_inplace(y.h(), x.h(), act);
        add_inplace(y.d(), x.d(), act);
        test::expect_close(y.host.view(), y.back().view(), 0.0, what + ": add_inplace");
      }
}

TEST(CudaElementwise, SwigluBackward) {
  OLMO2_REQUIRE_GPU();
  for (int64_t rows : kRows)
    for (int64_t d : kWidths)
      for (bool in_place : {false, true}) {
        const std::string what = name("swiglu_backward", rows, d) + (in_place ? " in place" : "");
        const Pair g = pair(rows, d, 1, DType::F32, 1, 3.0f), u = pair(rows, d, 2), dout = pair(rows, d, 3);
        const Pair dg0 = pair(rows, d, 4), du0 = pair(rows, d, 5);
        const Pair& dg = in_place ? g : dg0;
        const Pair& du = in_place ? u : du0;
        const std::vector<double> gv = test::dense(g.h()), uv = test::dense(u.h()), dv = test::dense(dout.h());
        auto sig = [&](int64_t r, int64_t c) { return 1.0 / (1.0 + std::exp(-gv[size_t(r * d + c)])); };
        const std::vector<double> bdg = bounds(dg, [&](int64_t r, int64_t c) {
          const size_t i = size_t(r * d + c);
          const double s = sig(r, c);
          return 24 * kU * std::fabs(dv[i] * uv[i]) * s * (1 + std::fabs(gv[i]) * (1 - s));
        });
        const std::vector<double> bdu = bounds(du, [&](int64_t r, int64_t c) {
          const size_t i = size_t(r * d + c);
          return 16 * kU * std::fabs(dv[i] * gv[i] * sig(r, c));
        });
        cpu::swiglu_backward(g.h(), u.h(), dout.h(), dg.h(), du.h());
        swiglu_backward(g.d(), u.d(), dout.d(), dg.d(), du.d());
        test::expect_close(dg.host.view(), dg.back().view(), bdg, what + ": dgate");
        test::expect_close(du.host.view(), du.back().view(), bdu, what + ": dup");
      }
}

TEST(CudaElementwise, AdamWBitForBit) {
  OLMO2_REQUIRE_GPU();
  for (int64_t n : {1, 1000, 100003})
    for (bool decayed : {false, true})
      for (bool small : {true, false}) {
        const std::string what = "adamw n " + std::to_string(n) + " decayed " + std::to_string(decayed) +
                                 " w1_small " + std::to_string(small);
        AdamWStep s;
        s.decay = 0.9999f, s.decayed = decayed, s.w1 = small ? 0.1f : 0.7f, s.w1_small = small;
        s.beta2 = 0.95f, s.w2 = 0.05f, s.bc2_sqrt = 0.3f, s.eps = 1e-8f, s.neg_step = -3e-4f;
        const Pair p = vec(n, 1), g = vec(n, 2), m = vec(n, 3), v = vec(n, 4);
        for (int64_t i = 0; i < n; ++i) v.host.f32()[i] *= v.host.f32()[i];  // a second moment is ≥ 0
        const Tensor v_dev = test::to_device(v.host.view());
        cpu::adamw_step(p.h(), g.h(), m.h(), v.h(), s);
        adamw_step(p.d(), g.d(), m.d(), v_dev.view(), s);
        test::expect_close(p.host.view(), p.back().view(), 0.0, what + ": param");
        test::expect_close(m.host.view(), m.back().view(), 0.0, what + ": exp_avg");
        test::expect_close(v.host.view(), test::to_host(v_dev.view()).view(), 0.0, what + ": exp_avg_sq");
      }
}

TEST(CudaElementwise, EmbeddingForward) {
  OLMO2_REQUIRE_GPU();
  for (int64_t n : kRows)
    for (int64_t h : {37, 2050})
      for (DType tt : {DType::F32, DType::BF16}) {
        const std::string what = name("embedding", n, h, tt);
        const Pair table = pair(1000, h, 1, tt, 3), id = ids(random_ids(n, 0, 1000, 2));
        const Pair out = pair(n, h, 3, DType::F32, 1);
        cpu::embedding(id.h(), table.h(), out.h());
        embedding(id.d(), table.d(), out.d());
        test::expect_close(out.host.view(), out.back().view(), 0.0, what);
        // A slice of rows 300 … 699: the other ids give zero rows.
        const Pair slice_out = pair(n, h, 4);
        cpu::embedding_slice(id.h(), table.h().rows(300, 700), 300, slice_out.h());
        embedding_slice(id.d(), table.d().rows(300, 700), 300, slice_out.d());
        test::expect_close(slice_out.host.view(), slice_out.back().view(), 0.0, what + " slice");
      }
  const Pair table = pair(10, 4, 1), bad = ids({1, 2, 10}), out = pair(3, 4, 2);
  EXPECT_THROW(embedding(bad.d(), table.d(), out.d()), InputError);
  test::expect_close(out.host.view(), out.back().view(), 0.0, "embedding with a bad id writes nothing");
}

TEST(CudaElementwise, EmbeddingBackwardDeterministic) {
  OLMO2_REQUIRE_GPU();
  for (int64_t n : {1, 3, 17, 130, 3000})
    for (int64_t h : {37, 2050}) {
      const std::string what = name("embedding_backward", n, h);
      // Ids from a small range, so rows repeat many times.
      const Pair id = ids(random_ids(n, 0, 50, 7)), dout = pair(n, h, 1, DType::F32, 2);
      const Pair dtable = pair(50, h, 2, DType::F32, 1);
      cpu::embedding_backward(id.h(), dout.h(), dtable.h());
      embedding_backward(id.d(), dout.d(), dtable.d());
      test::expect_close(dtable.host.view(), dtable.back().view(), 0.0, what);
      const Pair slice = pair(20, h, 3);  // ids 10 … 29
      cpu::embedding_slice_backward(id.h(), dout.h(), 10, slice.h());
      embedding_slice_backward(id.d(), dout.d(), 10, slice.d());
      test::expect_close(slice.host.view(), slice.back().view(), 0.0, what + " slice");
    }
  const Pair bad = ids({0, -1}), dout = pair(2, 4, 1), dtable = pair(5, 4, 2);
  EXPECT_THROW(embedding_backward(bad.d(), dout.d(), dtable.d()), InputError);
  test::expect_close(dtable.host.view(), dtable.back().view(), 0.0, "a bad id writes nothing");
}

TEST(CudaElementwise, RefusesWhatTheCpuRefuses) {
  OLMO2_REQUIRE_GPU();
  const Pair xb = pair(3, 8, 1, DType::BF16), x = pair(3, 8, 2), pos = ids({0, 1, 2});
  EXPECT_THROW(swiglu(xb.d(), xb.d(), xb.d(), DType::F32), ShapeError);
  EXPECT_THROW(rope(x.d(), pos.d(), 2, 3, 1e4f), ShapeError);  // odd head_dim
  EXPECT_THROW(rmsnorm_partials(xb.d(), vec(3, 1).d()), ShapeError);
}

#else

TEST(CudaElementwise, RmsnormPartialsAndApply) { OLMO2_REQUIRE_GPU(); }

#endif

}  // namespace
}  // namespace olmo2::ops
