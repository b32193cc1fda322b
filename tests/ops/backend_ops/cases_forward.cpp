// Backend cases of the forward ops (backend_case.h): the products, the embedding, the
// RMSNorm family, RoPE, SwiGLU and the residual add. Bounds, for the two backends
// together (twice one backend's), from each op's error analysis:
//  - products: sum_error(K + 1)·Σ|x||w| each (error_bounds.h; the magnitudes are the
//    CPU product of |x| and |w|, a bf16 w taking bf16(x) on both sides);
//  - embedding and add_inplace: exact (a copy; one rounded addition);
//  - RMSNorm: the sum of squares' sum_error(D + 1) (all terms positive) halved by the
//    square root, plus a few roundings and a reciprocal square root within 2 ulp: 16u
//    of |y| each; a bf16 output may round the other way: one bf16 ulp (2·u_bf16);
//  - RoPE: cos and sin within 2 ulp, two products and a sum: 8u of (|x_i| + |x_partner|);
//  - SwiGLU: exp within 2 ulp and three roundings: 8u of |out| each; with bf16
//    activations two bf16 roundings that may each go the other way: 2·u_bf16 each.
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/batch_invariant_gemm.h"
#include "ops/cpu/kernels.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "tests/ops/backend_ops/backend_case.h"

namespace olmo2::ops::test {
namespace {

struct ProductShape {
  int64_t m, n, k;
};
const ProductShape kProducts[] = {{1, 3, 1}, {5, 33, 7}, {17, 65, 130}};

std::string shape_name(const char* op, const ProductShape& s, DType w) {
  return std::string(op) + " m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k) +
         " w " + dtype_name(w);
}

template <typename Op, typename Cpu>
void product_case(const char* name, Op op, Cpu cpu_op) {
  for (const ProductShape& s : kProducts)
    for (DType wt : {DType::F32, DType::BF16}) {
      const std::string what = shape_name(name, s, wt);
      const int64_t pad = 3;  // strided rows
      const Tensor x = host_randn({s.m, s.k + pad}, 1), w = host_randn({s.n, s.k}, 2, wt);
      Tensor y = host_poisoned({s.m, s.n + pad}), mag = Tensor::zeros({s.m, s.n});
      const Tensor dx = to_dev(x), dw = to_dev(w), dy = to_dev(y);
      cpu_op(first_cols(x, s.k), w.view(), first_cols(y, s.n));
      op(first_cols(dx, s.k), dw.view(), first_cols(dy, s.n));
      cpu_op(first_cols(host_abs(x), s.k), host_abs(w).view(), mag.view());
      std::vector<double> bound(static_cast<size_t>(s.m * (s.n + pad)), 0.0);
      const std::vector<double> m = scaled(mag, 2 * sum_error(s.k + 1) * (1 + 1e-6));
      for (int64_t r = 0; r < s.m; ++r)
        for (int64_t c = 0; c < s.n; ++c) bound[r * (s.n + pad) + c] = m[r * s.n + c];
      expect_close(what, y, dy, bound);
    }
}

OLMO2_OP_CASE(linear) { product_case("linear", ops::linear, cpu::linear); }
OLMO2_OP_CASE(linear_batch_invariant) {
  product_case("linear_batch_invariant", ops::linear_batch_invariant, cpu::linear_batch_invariant);
}

OLMO2_OP_CASE(embedding) {
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t h : {1, 65}) {
      const Tensor table = host_randn({37, h}, 3, dt), ids = host_ints(33, 0, 37, 4);
      Tensor out = host_poisoned({33, h});
      const Tensor d_out = to_dev(out);
      cpu::embedding(ids.view(), table.view(), out.view());
      ops::embedding(to_dev(ids).view(), to_dev(table).view(), d_out.view());
      expect_same(std::string("embedding ") + dtype_name(dt) + " h " + std::to_string(h), out, d_out);
    }
}

OLMO2_OP_CASE(embedding_slice) {
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t first : {0, 11}) {  // ids in [0, 37), the slice holds 20 of them
      const Tensor table = host_randn({20, 17}, 5, dt), ids = host_ints(29, 0, 37, 6);
      Tensor out = host_poisoned({29, 17});
      const Tensor d_out = to_dev(out);
      cpu::embedding_slice(ids.view(), table.view(), first, out.view());
      ops::embedding_slice(to_dev(ids).view(), to_dev(table).view(), first, d_out.view());
      expect_same(std::string("embedding_slice ") + dtype_name(dt) + " first " + std::to_string(first), out, d_out);
    }
}

const int64_t kRows[] = {1, 3, 17};
const int64_t kWidths[] = {1, 37, 1000};

OLMO2_OP_CASE(rmsnorm) {
  for (int64_t T : kRows)
    for (int64_t D : kWidths)
      for (DType xt : {DType::F32, DType::BF16})
        for (DType wt : {DType::F32, DType::BF16}) {
          const std::string what = "rmsnorm T " + std::to_string(T) + " D " + std::to_string(D) + " x " +
                                   dtype_name(xt) + " w " + dtype_name(wt);
          const Tensor x = host_randn({T, D}, 7, xt, 3.0f), w = host_randn({D}, 8, wt);
          Tensor y = host_poisoned({T, D}, xt);
          const Tensor dy = to_dev(y);
          cpu::rmsnorm(x.view(), w.view(), 1e-6f, y.view());
          ops::rmsnorm(to_dev(x).view(), to_dev(w).view(), 1e-6f, dy.view());
          const double rel = 2 * (sum_error(D + 1) / 2 + 16 * kU) + (xt == DType::BF16 ? 2 * kUBf16 : 0.0);
          expect_close(what, y, dy, rel);
        }
}

OLMO2_OP_CASE(rmsnorm_partials) {
  for (int64_t T : kRows)
    for (int64_t D : kWidths) {
      const std::string what = "rmsnorm_partials T " + std::to_string(T) + " D " + std::to_string(D);
      const Tensor x = host_randn({T, D}, 9, DType::F32, 3.0f);
      Tensor stats = host_poisoned({T, 2});  // the sums in column 0 (strided), column 1 untouched
      const Tensor d_stats = to_dev(stats);
      cpu::rmsnorm_partials(x.view(), stats.view().col(0));
      ops::rmsnorm_partials(to_dev(x).view(), d_stats.view().col(0));
      expect_close(what, stats, d_stats, 2 * sum_error(D + 1));
    }
}

OLMO2_OP_CASE(rmsnorm_apply) {
  for (int64_t T : kRows)
    for (int64_t D : kWidths)
      for (DType wt : {DType::F32, DType::BF16}) {
        const std::string what =
            "rmsnorm_apply T " + std::to_string(T) + " D " + std::to_string(D) + " w " + dtype_name(wt);
        const Tensor x = host_randn({T, D}, 10, DType::F32, 3.0f), w = host_randn({D}, 11, wt);
        Tensor sumsq = Tensor::zeros({T});
        cpu::rmsnorm_partials(x.view(), sumsq.view());
        for (int64_t t = 0; t < T; ++t) sumsq.f32()[t] *= 1.5f;  // other ranks' share of d_total
        Tensor y = host_poisoned({T, D});
        const Tensor dy = to_dev(y);
        cpu::rmsnorm_apply(x.view(), w.view(), sumsq.view(), D + D / 2, 1e-6f, y.view());
        ops::rmsnorm_apply(to_dev(x).view(), to_dev(w).view(), to_dev(sumsq).view(), D + D / 2, 1e-6f, dy.view());
        expect_close(what, y, dy, 2 * 16 * kU);
      }
}

OLMO2_OP_CASE(rope) {
  for (int heads : {1, 3})
    for (int hd : {2, 6, 64})
      for (float scaling : {1.0f, 1.2f}) {
        const std::string what = "rope heads " + std::to_string(heads) + " hd " + std::to_string(hd) + " scaling " +
                                 std::to_string(scaling);
        RopeFrequencies f = RopeFrequencies::standard(500000.0f, hd);
        f.attention_scaling = scaling;
        const int64_t T = 7;
        Tensor x = host_randn({T, int64_t{heads} * hd}, 12);
        const Tensor pos = host_ints(T, 0, 4099, 13), dx = to_dev(x);
        const std::vector<double> bound = rope_bounds(x, hd, std::max(1.0f, scaling));
        cpu::rope(x.view(), pos.view(), heads, hd, f);
        ops::rope(dx.view(), to_dev(pos).view(), heads, hd, f);
        expect_close(what, x, dx, bound);
      }
}

OLMO2_OP_CASE(swiglu) {
  for (int64_t T : kRows)
    for (int64_t I : {int64_t{1}, int64_t{37}, int64_t{130}})
      for (DType act : {DType::F32, DType::BF16}) {
        const std::string what = "swiglu T " + std::to_string(T) + " I " + std::to_string(I) + " act " + dtype_name(act);
        const Tensor g = host_randn({T, I}, 14, DType::F32, 3.0f), u = host_randn({T, I}, 15);
        Tensor out = host_poisoned({T, I});
        const Tensor d_out = to_dev(out);
        cpu::swiglu(g.view(), u.view(), out.view(), act);
        ops::swiglu(to_dev(g).view(), to_dev(u).view(), d_out.view(), act);
        expect_close(what, out, d_out, 16 * kU + (act == DType::BF16 ? 4 * kUBf16 : 0.0));
      }
}

OLMO2_OP_CASE(add_inplace) {
  for (DType act : {DType::F32, DType::BF16}) {
    Tensor y = host_randn({17, 37}, 16);
    const Tensor x = host_randn({17, 37}, 17), dy = to_dev(y);
    cpu::add_inplace(y.view(), x.view(), act);
    ops::add_inplace(dy.view(), to_dev(x).view(), act);
    expect_same(std::string("add_inplace act ") + dtype_name(act), y, dy);
  }
}

}  // namespace
}  // namespace olmo2::ops::test
