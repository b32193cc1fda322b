// Backend cases of the tensor ops and the optimizer (backend_case.h): copies in every
// conversion and direction with strided views, fills, row gathers and scatters, rounding,
// scaling, the two fp64 reductions and AdamW. All but the reductions move or round values
// with the same correctly rounded operations on both backends: byte-exact. The reductions
// sum squares in fp64 in their own orders: n·2⁻⁵³ of the result each (the worst case;
// every term is positive).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/adamw.h"
#include "ops/cpu/kernels.h"
#include "ops/tensor_ops.h"
#include "tests/ops/backend_ops/backend_case.h"
#include "tests/ops/cuda/glue_test_util.h"

namespace olmo2::ops::test {
namespace {

struct Layout {
  std::vector<int64_t> shape, strides;
  int64_t offset;
};

OLMO2_OP_CASE(copy) {
  const std::vector<std::pair<DType, DType>> pairs = {
      {DType::F32, DType::F32},   {DType::F32, DType::BF16}, {DType::BF16, DType::F32}, {DType::BF16, DType::BF16},
      {DType::F16, DType::F32},   {DType::F16, DType::BF16}, {DType::I32, DType::I32},  {DType::U8, DType::U8}};
  // Contiguous; a transposed source (columns of a [7, 5] base); a 3-d source with a row gap.
  const std::vector<std::pair<Layout, std::vector<int64_t>>> layouts = {
      {{{37}, {}, 0}, {37}}, {{{5, 7}, {1, 5}, 0}, {7, 5}}, {{{2, 3, 5}, {20, 5, 1}, 3}, {2, 4, 5}}};
  for (const auto& [s, d] : pairs)
    for (const auto& [from, base_shape] : layouts)
      for (int dir = 0; dir < 3; ++dir) {  // host to device, device to device, device to host
        const std::string what = std::string("copy ") + dtype_name(s) + " to " + dtype_name(d) + " rank " +
                                 std::to_string(from.shape.size()) + " direction " + std::to_string(dir);
        const Tensor src = random_host(base_shape, s, 11), g_src = to_dev(src);
        Tensor want = host_poisoned(from.shape, d), host_dst = host_poisoned(from.shape, d);
        const Tensor g_dst = to_dev(want);
        cpu::copy(view_into(src, from.shape, from.strides, from.offset), want.view());
        if (dir == 0) ops::copy(view_into(src, from.shape, from.strides, from.offset), g_dst.view());
        if (dir == 1) ops::copy(view_into(g_src, from.shape, from.strides, from.offset), g_dst.view());
        if (dir == 2) ops::copy(view_into(g_src, from.shape, from.strides, from.offset), host_dst.view());
        if (dir == 2) expect_same(what, want, to_dev(host_dst));
        else expect_same(what, want, g_dst);
      }
}

OLMO2_OP_CASE(fill) {
  for (DType d : {DType::F32, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8})
    for (double value : {1.5, -0.0, 3.1e38, 1e-40, 7.0}) {
      if (d != DType::F32 && d != DType::BF16 && d != DType::F64 && value != 7.0) continue;  // integers: 7
      Tensor want = random_host({7, 9}, d, 12);
      const Tensor got = to_dev(want);
      cpu::fill(want.view().col(3), value);  // a strided column
      ops::fill(got.view().col(3), value);
      expect_same(std::string("fill ") + dtype_name(d) + " " + std::to_string(value), want, got);
    }
}

OLMO2_OP_CASE(gather_rows) {
  for (DType d : {DType::F32, DType::BF16, DType::I32, DType::I64, DType::U8}) {
    const Tensor src = random_host({11, 37}, d, 13), index = host_ints(7, 0, 11, 14);
    Tensor want = host_poisoned({7, 37}, d);
    const Tensor got = to_dev(want);
    cpu::gather_rows(src.view(), index.view(), want.view());
    ops::gather_rows(to_dev(src).view(), to_dev(index).view(), got.view());
    expect_same(std::string("gather_rows ") + dtype_name(d), want, got);
  }
}

OLMO2_OP_CASE(scatter_rows) {
  for (DType d : {DType::F32, DType::BF16, DType::I32, DType::I64}) {
    const Tensor src = random_host({7, 37}, d, 15);
    std::vector<int32_t> rows(11);
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), std::mt19937_64(16));
    Tensor index = Tensor::zeros({7}, DType::I32);
    std::copy(rows.begin(), rows.begin() + 7, index.i32());
    Tensor want = random_host({11, 37}, d, 17);
    const Tensor got = to_dev(want);
    cpu::scatter_rows(src.view(), index.view(), want.view());
    ops::scatter_rows(to_dev(src).view(), to_dev(index).view(), got.view());
    expect_same(std::string("scatter_rows ") + dtype_name(d), want, got);
  }
}

OLMO2_OP_CASE(round_to) {
  for (DType d : {DType::F32, DType::BF16}) {
    Tensor want = random_host({3, 37}, DType::F32, 18);  // ties to even, a subnormal, overflow, NaN
    const Tensor got = to_dev(want);
    cpu::round_to(want.view(), d);
    ops::round_to(got.view(), d);
    expect_same(std::string("round_to ") + dtype_name(d), want, got);
  }
}

OLMO2_OP_CASE(scale) {
  Tensor want = random_host({3, 37}, DType::F32, 19);
  const Tensor got = to_dev(want);
  cpu::scale(want.view(), 0.37f);
  ops::scale(got.view(), 0.37f);
  expect_same("scale", want, got);
}

OLMO2_OP_CASE(sum_squares) {
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{40001}}) {  // the last crosses fp64 chunks of 2^14
    const Tensor x = host_randn({n}, 20, DType::F32, 3.0f);
    const double want = cpu::sum_squares(x.view(), 2.5), got = ops::sum_squares(to_dev(x).view(), 2.5);
    expect_scalar("sum_squares n " + std::to_string(n), want, got, 2 * (n + 1) * 0x1p-53 * want);
  }
}

OLMO2_OP_CASE(sum_row_norms) {
  for (int64_t w : {int64_t{1}, int64_t{1000}}) {
    const Tensor x = host_randn({17, w}, 21, DType::F32, 3.0f);
    const double want = cpu::sum_row_norms(x.view()), got = ops::sum_row_norms(to_dev(x).view());
    expect_scalar("sum_row_norms w " + std::to_string(w), want, got, 2 * (w + 20) * 0x1p-53 * want);
  }
}

OLMO2_OP_CASE(adamw_step) {
  for (bool decayed : {false, true})
    for (bool w1_small : {true, false}) {
      AdamWStep st;
      st.decayed = decayed, st.decay = decayed ? 0.999f : 1.0f, st.w1_small = w1_small, st.w1 = w1_small ? 0.1f : 0.7f;
      st.bc2_sqrt = 0.3f, st.neg_step = -1e-3f;
      Tensor p = host_randn({37, 13}, 22), m = host_randn({37, 13}, 23, DType::F32, 0.1f);
      Tensor v = host_abs(host_randn({37, 13}, 24, DType::F32, 0.01f));
      const Tensor g = host_randn({37, 13}, 25), gp = to_dev(p), gm = to_dev(m), gv = to_dev(v);
      cpu::adamw_step(p.view(), g.view(), m.view(), v.view(), st);
      ops::adamw_step(gp.view(), to_dev(g).view(), gm.view(), gv.view(), st);
      const std::string what =
          std::string("adamw_step decayed ") + (decayed ? "1" : "0") + " w1_small " + (w1_small ? "1" : "0");
      expect_same(what + ": param", p, gp);
      expect_same(what + ": exp_avg", m, gm);
      expect_same(what + ": exp_avg_sq", v, gv);
    }
}

}  // namespace
}  // namespace olmo2::ops::test
