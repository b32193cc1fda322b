// Backend cases of the losses and token selection (backend_case.h): the fused
// cross-entropy + Z-loss, the target check, the three vocab-parallel steps over two
// shards (the second with a padding column) and top_candidates. Bounds, for the two
// backends together:
//  - dlogits: attention_bounds.h's cross_entropy_dlogits (each softmax value carries its
//    exp's error, u·|x − max| and the sum's relative error);
//  - the loss sums: per counted row, lse carries the exp sum's relative error
//    (sum_error(257) + 8u) plus u·|lse|; ce_sum the sum of those, z_sq_sum 2·|lse| of each;
//  - the vocab-parallel exponentials: 2u·(5 + |x − max|) of each (exp within 2 ulp, the
//    fp32 subtraction); their fp64 sum the sum of those and one f32 rounding; row maxima,
//    target logits and top_candidates' values and columns exactly; the finishing step,
//    from identical inputs, 1e-9 of the sums (only fp64 log differs) and 3u of |coef·e|
//    (|dlogits| plus scale at the target) for dlogits; top_candidates' Σexp one f32
//    rounding (2u).
#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/backward.h"
#include "ops/cpu/kernels.h"
#include "ops/top_candidates.h"
#include "tests/ops/attention_bounds.h"
#include "tests/ops/backend_ops/backend_case.h"
#include "tests/ops/cuda/glue_test_util.h"

namespace olmo2::ops::test {
namespace {

/// T targets in [0, vocab), every fifth row (from the second) ignored.
Tensor make_targets(int64_t T, int64_t vocab, uint64_t seed) {
  Tensor t = host_ints(T, 0, static_cast<int32_t>(vocab), seed);
  for (int64_t i = 1; i < T; i += 5) t.i32()[i] = kIgnoreIndex;
  return t;
}

OLMO2_OP_CASE(cross_entropy_zloss) {
  const float z_coef = 1e-4f;
  for (auto [T, V] : {std::pair<int64_t, int64_t>{1, 1}, {3, 37}, {17, 1000}})
    for (int grad = 0; grad < 3; ++grad) {  // none, separate, in place
      const std::string what = "cross_entropy_zloss T " + std::to_string(T) + " V " + std::to_string(V) + " grad " +
                               std::to_string(grad);
      Tensor x = host_randn({T, V}, 1, DType::F32, 3.0f);
      const Tensor tg = make_targets(T, V, 2), g_x = to_dev(x), g_tg = to_dev(tg);
      const float scale = 1.0f / 7;
      const Expected e = cross_entropy_dlogits(dense(x.view()), std::vector<int32_t>(tg.i32(), tg.i32() + T), V, z_coef,
                                               scale, kIgnoreIndex);
      double ce_bound = 0, z_bound = 0;
      for (int64_t t = 0; t < T; ++t) {
        if (tg.i32()[t] == kIgnoreIndex) continue;
        double m = -INFINITY, sum = 0;
        for (int64_t i = 0; i < V; ++i) m = std::max(m, double(x.f32()[t * V + i]));
        for (int64_t i = 0; i < V; ++i) sum += std::exp(x.f32()[t * V + i] - m);
        const double lse = m + std::log(sum), dl = sum_error(257) + 8 * kU + kU * std::fabs(lse);
        ce_bound += 2 * dl, z_bound += 2 * 2 * std::fabs(lse) * dl;
      }
      Tensor d = grad == 1 ? host_poisoned({T, V}) : Tensor();
      const Tensor g_d = grad == 1 ? to_dev(d) : Tensor();
      const TensorView cpu_d = grad == 0 ? TensorView() : grad == 2 ? x.view() : d.view();
      const TensorView dev_d = grad == 0 ? TensorView() : grad == 2 ? g_x.view() : g_d.view();
      const CrossEntropySums want = cpu::cross_entropy_zloss(x.view(), tg.view(), z_coef, scale, cpu_d);
      const CrossEntropySums got = ops::cross_entropy_zloss(g_x.view(), g_tg.view(), z_coef, scale, dev_d);
      EXPECT_EQ(got.count, want.count) << what;
      expect_scalar(what + ": ce_sum", want.ce_sum, got.ce_sum, ce_bound);
      expect_scalar(what + ": z_sq_sum", want.z_sq_sum, got.z_sq_sum, z_bound);
      if (grad == 1) expect_close(what + ": dlogits", d, g_d, e.between_two());
      if (grad == 2) expect_close(what + ": dlogits in place", x, g_x, e.between_two());
    }
}

OLMO2_OP_CASE(check_targets) {
  const int64_t V = 10;
  const Tensor good = make_targets(7, V, 3);
  EXPECT_NO_THROW(cpu::check_targets(good.view(), V));
  EXPECT_NO_THROW(ops::check_targets(to_dev(good).view(), V));
  for (int32_t bad : {10, -5, 1 << 30}) {
    Tensor tg = make_targets(7, V, 3);
    tg.i32()[2] = bad;
    const std::string want = error_text<InputError>([&] { cpu::check_targets(tg.view(), V); });
    EXPECT_THAT(want, ::testing::HasSubstr("row 2")) << "check_targets bad " << bad;
    EXPECT_EQ(error_text<InputError>([&] { ops::check_targets(to_dev(tg).view(), V); }), want)
        << "check_targets bad " << bad;
  }
}

// The vocab-parallel shards of one case: V ids over two ranks of L = ⌈V/2⌉ columns.
struct Shards {
  int64_t T = 17, V = 75, L = 38;
  float z_coef = 1e-4f, scale = 1.0f / 13;
  Tensor tg = make_targets(T, V, 4);
  std::vector<Tensor> x;
  Shards() {
    x.push_back(host_randn({T, L}, 5, DType::F32, 3.0f));
    x.push_back(host_randn({T, L}, 6, DType::F32, 3.0f));
  }
  int64_t begin(int r) const { return r * L; }
  int64_t real(int r) const { return std::min(L, V - r * L); }
  Tensor global_max() const {
    Tensor m = Tensor::zeros({T}), part = Tensor::zeros({T});
    std::fill(m.f32(), m.f32() + T, -INFINITY);
    for (int r = 0; r < 2; ++r) {
      cpu::vocab_parallel_ce_row_max(x[r].view(), real(r), part.view());
      for (int64_t t = 0; t < T; ++t) m.f32()[t] = std::max(m.f32()[t], part.f32()[t]);
    }
    return m;
  }
};

OLMO2_OP_CASE(vocab_parallel_ce_row_max) {
  const Shards s;
  for (int r = 0; r < 2; ++r) {
    Tensor mx = host_poisoned({s.T});
    const Tensor g_mx = to_dev(mx);
    cpu::vocab_parallel_ce_row_max(s.x[r].view(), s.real(r), mx.view());
    ops::vocab_parallel_ce_row_max(to_dev(s.x[r]).view(), s.real(r), g_mx.view());
    expect_same("vocab_parallel_ce_row_max shard " + std::to_string(r), mx, g_mx);
  }
}

OLMO2_OP_CASE(vocab_parallel_ce_partials) {
  const Shards s;
  const Tensor mx = s.global_max(), g_mx = to_dev(mx), g_tg = to_dev(s.tg);
  for (int r = 0; r < 2; ++r)
    for (bool in_place : {false, true}) {
      const std::string what = "vocab_parallel_ce_partials shard " + std::to_string(r) + (in_place ? " in place" : "");
      Tensor stats = host_poisoned({s.T, 2}), x = host_clone(s.x[r]), e = host_poisoned({s.T, s.L});
      const Tensor g_stats = to_dev(stats), g_x = to_dev(x), g_e = to_dev(e);
      cpu::vocab_parallel_ce_partials(x.view(), s.real(r), s.begin(r), s.tg.view(), mx.view(), stats.view(),
                                      in_place ? x.view() : e.view());
      ops::vocab_parallel_ce_partials(g_x.view(), s.real(r), s.begin(r), g_tg.view(), g_mx.view(), g_stats.view(),
                                      in_place ? g_x.view() : g_e.view());
      std::vector<double> eb(static_cast<size_t>(s.T * s.L), 0.0), sb(static_cast<size_t>(s.T * 2), 0.0);
      for (int64_t t = 0; t < s.T; ++t) {
        for (int64_t i = 0; i < s.real(r); ++i) {
          const double d = std::fabs(double(s.x[r].f32()[t * s.L + i]) - mx.f32()[t]);
          const double b = 2 * kU * (5 + d) * std::exp(-d);
          eb[t * s.L + i] = b, sb[2 * t] += b;
        }
        sb[2 * t] += 2 * kU * std::fabs(stats.f32()[2 * t]);
      }
      expect_close(what + ": stats", stats, g_stats, sb);
      expect_close(what + ": exponentials", in_place ? x : e, in_place ? g_x : g_e, eb);
    }
}

OLMO2_OP_CASE(vocab_parallel_ce_finish) {
  const Shards s;
  const Tensor mx = s.global_max();
  Tensor stats = Tensor::zeros({s.T, 2});  // the all-reduced partials: the CPU's, the input of both
  std::vector<Tensor> e;
  for (int r = 0; r < 2; ++r) {
    Tensor part = Tensor::zeros({s.T, 2});
    e.push_back(Tensor::zeros({s.T, s.L}));
    cpu::vocab_parallel_ce_partials(s.x[r].view(), s.real(r), s.begin(r), s.tg.view(), mx.view(), part.view(),
                                    e.back().view());
    for (int64_t i = 0; i < 2 * s.T; ++i) stats.f32()[i] += part.f32()[i];
  }
  const Tensor g_mx = to_dev(mx), g_stats = to_dev(stats), g_tg = to_dev(s.tg);
  for (int r = 0; r < 2; ++r) {
    const std::string what = "vocab_parallel_ce_finish shard " + std::to_string(r);
    Tensor d = host_clone(e[r]);
    const Tensor g_d = to_dev(d);
    const CrossEntropySums want = cpu::vocab_parallel_ce_finish(mx.view(), stats.view(), s.tg.view(), s.begin(r),
                                                                s.real(r), s.z_coef, s.scale, d.view());
    const CrossEntropySums got = ops::vocab_parallel_ce_finish(g_mx.view(), g_stats.view(), g_tg.view(), s.begin(r),
                                                               s.real(r), s.z_coef, s.scale, g_d.view());
    std::vector<double> bound(static_cast<size_t>(s.T * s.L), 0.0);
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t i = 0; i < s.real(r); ++i) {
        const bool at_target = s.tg.i32()[t] == s.begin(r) + i;
        bound[t * s.L + i] = 2 * 3 * kU * (std::fabs(double(d.f32()[t * s.L + i])) + (at_target ? 2 * s.scale : 0.0));
      }
    EXPECT_EQ(got.count, want.count) << what;
    expect_scalar(what + ": ce_sum", want.ce_sum, got.ce_sum, 1e-9 * std::max(1.0, std::fabs(want.ce_sum)));
    expect_scalar(what + ": z_sq_sum", want.z_sq_sum, got.z_sq_sum, 1e-9 * std::max(1.0, std::fabs(want.z_sq_sum)));
    expect_close(what + ": dlogits", d, g_d, bound);
  }
}

OLMO2_OP_CASE(top_candidates) {
  const int64_t R = 5, V = 40, real = 37;
  Tensor logits = host_randn({R, V}, 7, DType::F32, 2.0f);
  logits.f32()[0 * V + 3] = logits.f32()[0 * V + 9] = 9.0f;  // a tie: the lower column first
  logits.f32()[1 * V + 4] = NAN;                               // ranks below every number
  logits.f32()[2 * V + 0] = -0.0f, logits.f32()[2 * V + 1] = 0.0f;
  logits.f32()[3 * V + 38] = 50.0f;  // padding: never chosen
  const Tensor g_logits = to_dev(logits);
  for (int64_t k : {0, 1, 4, 37, 40})
    for (bool with_stats : {false, true}) {
      if (k == 0 && !with_stats) continue;
      const std::string what = "top_candidates k " + std::to_string(k) + (with_stats ? " stats" : "");
      Tensor values = host_poisoned({R, k}), columns = host_poisoned({R, k}, DType::I32), stats = host_poisoned({R, 2});
      const Tensor g_values = to_dev(values), g_columns = to_dev(columns), g_stats = to_dev(stats);
      const auto view_or_empty = [&](const Tensor& t) { return k > 0 ? t.view() : TensorView(); };
      cpu::top_candidates(logits.view(), real, view_or_empty(values), view_or_empty(columns),
                          with_stats ? stats.view() : TensorView());
      ops::top_candidates(g_logits.view(), real, view_or_empty(g_values), view_or_empty(g_columns),
                          with_stats ? g_stats.view() : TensorView());
      if (k > 0) {
        expect_same(what + ": values", values, g_values);
        expect_same(what + ": columns", columns, g_columns);
      }
      std::vector<double> sb(static_cast<size_t>(2 * R), 0.0);
      for (int64_t r = 0; r < R; ++r) sb[2 * r + 1] = 2 * kU * std::fabs(stats.f32()[2 * r + 1]);
      if (with_stats) expect_close(what + ": stats", stats, g_stats, sb);
    }
}

}  // namespace
}  // namespace olmo2::ops::test
