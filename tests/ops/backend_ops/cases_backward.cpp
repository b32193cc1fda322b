// Backend cases of the backward ops (backend_case.h): the products' gradients, the
// embedding's, the RMSNorm backward whole and split, RoPE's and SwiGLU's. Bounds, for the
// two backends together:
//  - linear_backward: dx = dy·w sums N products, dw = dyᵀ·x sums M, onto the old values
//    when accumulating: sum_error(terms + 1) of the CPU op on |inputs| each;
//  - the embedding's: exact (the same additions in increasing i on both);
//  - RMSNorm: dx = r·g − x·r³·dot/D cancels, so it is bounded relative to the two terms'
//    magnitudes: 24u plus the sums' errors (sum_error(D + 1)) of r·|g| + |x|·r³·Σ|g·x|/D
//    each; dw (accumulated) sum_error(T + 2) of |dw₀| + Σ_t |dy·x|·r; the partial sums
//    sum_error(D + 1) of their terms' magnitudes;
//  - RoPE's: as the forward's (8u of the rotated pair each);
//  - SwiGLU's: dgate = dy·u·σ·(1 + g·(1 − σ)) cancels near g ≈ −1.28: 12u of
//    |dy·u|·σ·(1 + |g|·(1 − σ)) each; dup 8u of |dy·silu(g)| each.
#include <cmath>
#include <string>
#include <vector>

#include "ops/backward.h"
#include "ops/cpu/kernels.h"
#include "tests/ops/backend_ops/backend_case.h"

namespace olmo2::ops::test {
namespace {

OLMO2_OP_CASE(linear_backward) {
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape s : {Shape{1, 3, 1}, Shape{5, 33, 7}, Shape{17, 65, 130}})
    for (DType wt : {DType::F32, DType::BF16})
      for (int mode = 0; mode < 6; ++mode) {
        // Both overwritten; both accumulated; dw accumulated and dx overwritten (the model's
        // call) and the reverse; dx only; dw only.
        const bool acc_dw = mode == 1 || mode == 2, acc_dx = mode == 1 || mode == 3;
        const bool want_dx = mode != 5, want_dw = mode != 4;
        const std::string what = "linear_backward m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " +
                                 std::to_string(s.k) + " w " + dtype_name(wt) + " mode " + std::to_string(mode);
        const Tensor x = host_randn({s.m, s.k}, 1), w = host_randn({s.n, s.k}, 2, wt), dy = host_randn({s.m, s.n}, 3);
        Tensor dx = acc_dx ? host_randn({s.m, s.k}, 4) : host_poisoned({s.m, s.k});
        Tensor dw = acc_dw ? host_randn({s.n, s.k}, 5) : host_poisoned({s.n, s.k});
        const Tensor g_dx = to_dev(dx), g_dw = to_dev(dw);
        Tensor mdx = host_abs(dx), mdw = host_abs(dw);  // the magnitudes: the op on |inputs|
        cpu::linear_backward(host_abs(x).view(), host_abs(w).view(), host_abs(dy).view(), mdx.view(), mdw.view(), acc_dw,
                             acc_dx);
        cpu::linear_backward(x.view(), w.view(), dy.view(), want_dx ? dx.view() : TensorView(),
                             want_dw ? dw.view() : TensorView(), acc_dw, acc_dx);
        ops::linear_backward(to_dev(x).view(), to_dev(w).view(), to_dev(dy).view(),
                             want_dx ? g_dx.view() : TensorView(), want_dw ? g_dw.view() : TensorView(), acc_dw,
                             acc_dx);
        if (want_dx) expect_close(what + ": dx", dx, g_dx, scaled(mdx, 2 * sum_error(s.n + 2) * (1 + 1e-6)));
        else expect_same(what + ": dx untouched", dx, g_dx);
        if (want_dw) expect_close(what + ": dw", dw, g_dw, scaled(mdw, 2 * sum_error(s.m + 2) * (1 + 1e-6)));
        else expect_same(what + ": dw untouched", dw, g_dw);
      }
}

template <typename Op, typename Cpu>
void embedding_backward_case(const char* name, int64_t first, Op op, Cpu cpu_op) {
  for (int64_t h : {1, 65}) {
    const Tensor ids = host_ints(41, 0, 23, 6), dout = host_randn({41, h}, 7);  // ids repeat
    Tensor table = host_randn({17, h}, 8);
    const Tensor g_table = to_dev(table);
    cpu_op(ids.view(), dout.view(), first, table.view());
    op(to_dev(ids).view(), to_dev(dout).view(), first, g_table.view());
    expect_same(std::string(name) + " h " + std::to_string(h), table, g_table);
  }
}

OLMO2_OP_CASE(embedding_backward) {
  // Only ids < 17 fit the table: a table of 17 rows is the slice op's first 17; the whole
  // op takes ids in [0, 17).
  for (int64_t h : {1, 65}) {
    const Tensor ids = host_ints(41, 0, 17, 9), dout = host_randn({41, h}, 10);
    Tensor table = host_randn({17, h}, 11);
    const Tensor g_table = to_dev(table);
    cpu::embedding_backward(ids.view(), dout.view(), table.view());
    ops::embedding_backward(to_dev(ids).view(), to_dev(dout).view(), g_table.view());
    expect_same("embedding_backward h " + std::to_string(h), table, g_table);
  }
}

OLMO2_OP_CASE(embedding_slice_backward) {
  embedding_backward_case(
      "embedding_slice_backward", 5, [](auto&&... a) { ops::embedding_slice_backward(a...); },
      [](auto&&... a) { cpu::embedding_slice_backward(a...); });
}

// The RMSNorm backward's bounds (see the top): per element of dx [T, D] and of dw [D].
struct NormBounds {
  std::vector<double> dx, dw;
};
NormBounds norm_bounds(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dw0, float eps,
                       int64_t d_total, double sum_scale) {
  const int64_t T = x.shape()[0], D = x.shape()[1];
  const std::vector<double> xv = dense(x.view()), wv = dense(w.view()), g = dense(dy.view()), w0 = dense(dw0.view());
  NormBounds b{std::vector<double>(static_cast<size_t>(T * D)), std::vector<double>(static_cast<size_t>(D))};
  std::vector<double> dw_mag(static_cast<size_t>(D));
  for (int64_t i = 0; i < D; ++i) dw_mag[i] = std::isfinite(w0[i]) ? std::fabs(w0[i]) : 0.0;
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0, dot_mag = 0;
    for (int64_t i = 0; i < D; ++i) ss += xv[t * D + i] * xv[t * D + i] * sum_scale;
    for (int64_t i = 0; i < D; ++i) dot_mag += std::fabs(g[t * D + i] * wv[i] * xv[t * D + i]) * sum_scale;
    const double r = 1 / std::sqrt(ss / d_total + eps);
    for (int64_t i = 0; i < D; ++i) {
      const double mag = r * std::fabs(wv[i] * g[t * D + i]) + std::fabs(xv[t * D + i]) * r * r * r * dot_mag / d_total;
      b.dx[t * D + i] = 2 * (24 * kU + 2 * sum_error(d_total + 1)) * mag;
      dw_mag[i] += std::fabs(g[t * D + i] * xv[t * D + i]) * r;
    }
  }
  for (int64_t i = 0; i < D; ++i) b.dw[i] = 2 * (sum_error(T + 2) + 8 * kU) * dw_mag[i];
  return b;
}

const int64_t kRows[] = {1, 3, 17};
const int64_t kWidths[] = {1, 37, 1000};

OLMO2_OP_CASE(rmsnorm_backward) {
  for (int64_t T : kRows)
    for (int64_t D : kWidths)
      for (DType wt : {DType::F32, DType::BF16}) {
        const std::string what =
            "rmsnorm_backward T " + std::to_string(T) + " D " + std::to_string(D) + " w " + dtype_name(wt);
        const Tensor x = host_randn({T, D}, 12, DType::F32, 3.0f), w = host_randn({D}, 13, wt), dy = host_randn({T, D}, 14);
        Tensor dx = host_poisoned({T, D}), dw = host_randn({D}, 15);
        const NormBounds b = norm_bounds(x, w, dy, dw, 1e-6f, D, 1.0);
        const Tensor g_dx = to_dev(dx), g_dw = to_dev(dw);
        cpu::rmsnorm_backward(x.view(), w.view(), 1e-6f, dy.view(), dx.view(), dw.view());
        ops::rmsnorm_backward(to_dev(x).view(), to_dev(w).view(), 1e-6f, to_dev(dy).view(), g_dx.view(), g_dw.view());
        expect_close(what + ": dx", dx, g_dx, b.dx);
        expect_close(what + ": dw", dw, g_dw, b.dw);
      }
}

OLMO2_OP_CASE(rmsnorm_backward_partials) {
  for (int64_t T : kRows)
    for (int64_t D : kWidths)
      for (DType wt : {DType::F32, DType::BF16}) {
        const std::string what =
            "rmsnorm_backward_partials T " + std::to_string(T) + " D " + std::to_string(D) + " w " + dtype_name(wt);
        const Tensor x = host_randn({T, D}, 16, DType::F32, 3.0f), w = host_randn({D}, 17, wt),
                     dy = host_randn({T, D}, 18);
        Tensor stats = host_poisoned({T, 2});  // sumsq and dot: the two strided columns of one buffer
        const Tensor g_stats = to_dev(stats);
        cpu::rmsnorm_backward_partials(x.view(), w.view(), dy.view(), stats.view().col(0), stats.view().col(1));
        ops::rmsnorm_backward_partials(to_dev(x).view(), to_dev(w).view(), to_dev(dy).view(), g_stats.view().col(0),
                                       g_stats.view().col(1));
        const std::vector<double> xv = dense(x.view()), wv = dense(w.view()), g = dense(dy.view());
        std::vector<double> bound(static_cast<size_t>(2 * T));
        for (int64_t t = 0; t < T; ++t) {
          double ss = 0, dot = 0;
          for (int64_t i = 0; i < D; ++i)
            ss += xv[t * D + i] * xv[t * D + i], dot += std::fabs(g[t * D + i] * wv[i] * xv[t * D + i]);
          bound[2 * t] = 2 * sum_error(D + 1) * ss, bound[2 * t + 1] = 2 * sum_error(D + 1) * dot;
        }
        expect_close(what, stats, g_stats, bound);
      }
}

OLMO2_OP_CASE(rmsnorm_backward_finish) {
  for (int64_t T : kRows)
    for (int64_t D : kWidths)
      for (DType wt : {DType::F32, DType::BF16}) {
        const std::string what =
            "rmsnorm_backward_finish T " + std::to_string(T) + " D " + std::to_string(D) + " w " + dtype_name(wt);
        const Tensor x = host_randn({T, D}, 19, DType::F32, 3.0f), w = host_randn({D}, 20, wt),
                     dy = host_randn({T, D}, 21);
        // The global sums as if another rank held half as many columns again (d_total 1.5·D).
        Tensor sumsq = Tensor::zeros({T}), dot = Tensor::zeros({T});
        cpu::rmsnorm_backward_partials(x.view(), w.view(), dy.view(), sumsq.view(), dot.view());
        for (int64_t t = 0; t < T; ++t) sumsq.f32()[t] *= 1.5f, dot.f32()[t] *= 1.5f;
        const int64_t d_total = D + D / 2;
        Tensor dx = host_poisoned({T, D}), dw = host_randn({D}, 22);
        const NormBounds b = norm_bounds(x, w, dy, dw, 1e-6f, d_total, 1.5);
        const Tensor g_dx = to_dev(dx), g_dw = to_dev(dw);
        cpu::rmsnorm_backward_finish(x.view(), w.view(), 1e-6f, d_total, dy.view(), sumsq.view(), dot.view(),
                                     dx.view(), dw.view());
        ops::rmsnorm_backward_finish(to_dev(x).view(), to_dev(w).view(), 1e-6f, d_total, to_dev(dy).view(),
                                     to_dev(sumsq).view(), to_dev(dot).view(), g_dx.view(), g_dw.view());
        expect_close(what + ": dx", dx, g_dx, b.dx);
        expect_close(what + ": dw", dw, g_dw, b.dw);
      }
}

OLMO2_OP_CASE(rope_backward) {
  for (int heads : {1, 3})
    for (int hd : {2, 6, 64})
      for (float scaling : {1.0f, 1.2f}) {
        const std::string what = "rope_backward heads " + std::to_string(heads) + " hd " + std::to_string(hd) +
                                 " scaling " + std::to_string(scaling);
        RopeFrequencies f = RopeFrequencies::standard(10000.0f, hd);
        f.attention_scaling = scaling;
        Tensor dy = host_randn({7, int64_t{heads} * hd}, 23);
        const Tensor pos = host_ints(7, 0, 4099, 24), g_dy = to_dev(dy);
        const std::vector<double> bound = rope_bounds(dy, hd, scaling);
        cpu::rope_backward(dy.view(), pos.view(), heads, hd, f);
        ops::rope_backward(g_dy.view(), to_dev(pos).view(), heads, hd, f);
        expect_close(what, dy, g_dy, bound);
      }
}

OLMO2_OP_CASE(swiglu_backward) {
  for (int64_t T : kRows)
    for (int64_t I : {int64_t{1}, int64_t{37}, int64_t{130}}) {
      const std::string what = "swiglu_backward T " + std::to_string(T) + " I " + std::to_string(I);
      const Tensor g = host_randn({T, I}, 25, DType::F32, 3.0f), u = host_randn({T, I}, 26), dy = host_randn({T, I}, 27);
      Tensor dg = host_poisoned({T, I}), du = host_poisoned({T, I});
      const Tensor g_dg = to_dev(dg), g_du = to_dev(du);
      cpu::swiglu_backward(g.view(), u.view(), dy.view(), dg.view(), du.view());
      ops::swiglu_backward(to_dev(g).view(), to_dev(u).view(), to_dev(dy).view(), g_dg.view(), g_du.view());
      std::vector<double> bg(static_cast<size_t>(T * I)), bu(bg.size());
      for (int64_t e = 0; e < T * I; ++e) {
        const double gv = g.f32()[e], s = 1 / (1 + std::exp(-gv)), d = dy.f32()[e];
        bg[e] = 2 * 12 * kU * std::fabs(d * u.f32()[e]) * s * (1 + std::fabs(gv) * (1 - s));
        bu[e] = 2 * 8 * kU * std::fabs(d * gv * s);
      }
      expect_close(what + ": dgate", dg, g_dg, bg);
      expect_close(what + ": dup", du, g_du, bu);
    }
}

}  // namespace
}  // namespace olmo2::ops::test
