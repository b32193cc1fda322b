// The comparison helpers and the per-element error bounds the GPU op tests use
// (tests/ops/error_bounds.h, tests/ops/attention_bounds.h; docs/architecture.md §10):
//  - a comparison fails on any NaN or infinity the reference does not have at the same
//    place, wherever it is (the old helper lost a NaN followed by a finite element);
//  - an error at a small element fails against that element's own bound, where a bound
//    scaled by the largest element let it through;
//  - the bounds are not too tight: the CPU ops (one implementation) are within them of
//    the exact values, for the products, attention and its backward, and the dlogits;
//  - and not vacuous: an error of a few bounds, planted at the smallest elements, fails.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "ops/backward.h"
#include "ops/cpu/kernels.h"
#include "ops/gemm.h"
#include "tests/ops/attention_bounds.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN(), kInf = INFINITY;

TEST(WithinBounds, ANonFiniteValueFailsWhereverItIs) {
  const std::vector<double> want = {1, 2, 3, 4}, bound = {0.1, 0.1, 0.1, 0.1};
  for (size_t at = 0; at < want.size(); ++at) {
    for (double bad : {kNaN, kInf, -kInf}) {
      std::vector<double> got = want;
      got[at] = bad;
      EXPECT_FALSE(test::within_bounds(want, got, bound)) << "element " << at << " = " << bad;
      EXPECT_FALSE(test::within_bounds(got, want, bound)) << "reference element " << at << " = " << bad;
    }
  }
  // The same non-finite value at the same place passes; a different one fails.
  EXPECT_TRUE(test::within_bounds({kNaN, 1, kInf, -kInf}, {kNaN, 1, kInf, -kInf}, {0, 0, 0, 0}));
  EXPECT_FALSE(test::within_bounds({kInf}, {-kInf}, {1e300}));
  EXPECT_FALSE(test::within_bounds({kNaN}, {kInf}, {1e300}));
  EXPECT_FALSE(test::within_bounds({1, 2}, {1}, {1, 1}));  // sizes differ
}

TEST(WithinBounds, ASmallElementIsHeldToItsOwnBound) {
  // dlogits-like: one entry of size 1, the rest near 1e-7 of it. An error of 5e-6 at a
  // small entry passes "5e-5 of the largest" but not 1e-5 of the entry itself.
  const std::vector<double> want = {1.0, 1e-7, 2e-7};
  std::vector<double> got = want;
  got[2] += 5e-6;
  EXPECT_LE(std::fabs(got[2] - want[2]), 5e-5 * 1.0);  // the old rule let it through
  EXPECT_FALSE(test::within_bounds(want, got, test::relative_bounds(want, 1e-5)));
  EXPECT_TRUE(test::within_bounds(want, want, test::relative_bounds(want, 0.0)));
}

TEST(ExpectClose, FailsOnANaNFollowedByFiniteElements) {
  Tensor want = Tensor::zeros({5}), got = Tensor::zeros({5});
  for (int i = 0; i < 5; ++i) want.f32()[i] = got.f32()[i] = static_cast<float>(i + 1);
  got.f32()[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NONFATAL_FAILURE(test::expect_close(want.view(), got.view(), 1e-5, "nan in the middle"), "outside");
  got.f32()[1] = 2, want.f32()[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NONFATAL_FAILURE(test::expect_close(want.view(), got.view(), 1e-5, "nan in the reference"), "outside");
}

// x [m, k] with rows scaled by 2^(3·(r mod 5) − 6), as tests/ops/cuda/test_products.cpp.
Tensor scaled_rows(int64_t m, int64_t k, uint64_t seed) {
  Tensor t = test::random_tensor({m, k}, seed);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) t.f32()[r * k + c] *= std::ldexp(1.0f, int(3 * (r % 5) - 6));
  return t;
}

// |got − exact| ≤ bound everywhere, and the worst ratio, for the record.
void expect_within(const test::Expected& e, const TensorView& got, const std::string& what) {
  const std::vector<double> g = test::dense(got);
  const ::testing::AssertionResult r = test::within_bounds(e.exact, g, e.bound);
  EXPECT_TRUE(r) << what;
  if (r) std::printf("%s: %s\n", what.c_str(), r.message());
}

// An error of `times` bounds planted at the smallest |exact| element with a non-zero
// bound must fail. With `small`, that element's bound must also be far below the largest
// element (for ops without cancellation, where a bound scaled by the largest element
// would let the small elements go unchecked; attention's outputs cancel, and their
// bounds scale with Σ p·|v|, not |out|).
void expect_planted_error_caught(const test::Expected& e, const TensorView& got, double times, bool small = true) {
  std::vector<double> g = test::dense(got);
  size_t at = g.size();
  double largest = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    largest = std::max(largest, std::fabs(e.exact[i]));
    if (e.bound[i] > 0 && (at == g.size() || std::fabs(e.exact[i]) < std::fabs(e.exact[at]))) at = i;
  }
  ASSERT_LT(at, g.size());
  if (small) {
    EXPECT_LT(e.bound[at], 1e-5 * largest) << "the smallest element's bound is not small";
  }
  g[at] = e.exact[at] + times * e.bound[at];
  EXPECT_FALSE(test::within_bounds(e.exact, g, e.bound));
}

TEST(ErrorBounds, TheCpuProductsAreWithinThem) {
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{17, 2050, 130}, {3, 37, 1000}, {130, 64, 48}}) {
    const std::string what = "M " + std::to_string(m) + " K " + std::to_string(k) + " N " + std::to_string(n);
    const Tensor x = scaled_rows(m, k, 1), w = test::random_tensor({n, k}, 2);
    Tensor y = Tensor::zeros({m, n});
    cpu::linear(x.view(), w.view(), y.view());
    const test::Expected e = test::product(test::dense(x.view()), test::dense(w.view()), m, n, k, false, true);
    expect_within(e, y.view(), "linear " + what);
    expect_planted_error_caught(e, y.view(), 3);
    // The backward's dx = dy·w and dw = dyᵀ·x.
    const Tensor dy = scaled_rows(m, n, 3);
    Tensor dx = Tensor::zeros({m, k}), dw = Tensor::zeros({n, k});
    cpu::linear_backward(x.view(), w.view(), dy.view(), dx.view(), dw.view(), false, false);
    expect_within(test::product(test::dense(dy.view()), test::dense(w.view()), m, k, n, false, false), dx.view(),
                  "dx " + what);
    expect_within(test::product(test::dense(dy.view()), test::dense(x.view()), n, k, m, true, false), dw.view(),
                  "dw " + what);
  }
}

TEST(ErrorBounds, TheCpuAttentionIsWithinThem) {
  struct Case {
    int64_t t, past;
    int h, kv;
    int64_t hd, window;
  };
  for (const Case& c : {Case{64, 0, 4, 2, 64, 0}, Case{7, 40, 6, 1, 128, 0}, Case{70, 20, 4, 4, 24, 45}}) {
    const std::string what = "T " + std::to_string(c.t) + " past " + std::to_string(c.past) + " hd " +
                             std::to_string(c.hd) + " window " + std::to_string(c.window);
    const int64_t s = c.t + c.past;
    const Tensor q = test::random_tensor({c.t, c.h * c.hd}, 11), k = test::random_tensor({s, c.kv * c.hd}, 12),
                 v = test::random_tensor({s, c.kv * c.hd}, 13), g = test::random_tensor({c.t, c.h * c.hd}, 14);
    const std::vector<double> gd = test::dense(g.view());
    const test::AttentionExpected e = test::attention(test::dense(q.view()), test::dense(k.view()),
                                                      test::dense(v.view()), c.t, s, c.h, c.kv, c.hd, c.window, false, &gd);
    Tensor out = Tensor::zeros({c.t, c.h * c.hd});
    cpu::causal_attention(q.view(), k.view(), v.view(), c.h, c.kv, out.view(), DType::F32, c.window);
    expect_within(e.out, out.view(), "out " + what);
    expect_planted_error_caught(e.out, out.view(), 3, false);
    Tensor dq = Tensor::zeros({c.t, c.h * c.hd}), dk = Tensor::zeros({s, c.kv * c.hd}), dv = Tensor::zeros({s, c.kv * c.hd});
    cpu::causal_attention_backward(q.view(), k.view(), v.view(), g.view(), c.h, c.kv, dq.view(), dk.view(), dv.view(),
                                   c.window);
    expect_within(e.dq, dq.view(), "dq " + what);
    expect_within(e.dk, dk.view(), "dk " + what);
    expect_within(e.dv, dv.view(), "dv " + what);
    expect_planted_error_caught(e.dq, dq.view(), 3, false);
  }
  // bf16 activations, on the 1/16 grid that makes every score exact in fp32.
  const int64_t t = 33, s = 73, hd = 64;
  Tensor q = Tensor::zeros({t, 2 * hd}), k = Tensor::zeros({s, hd}), v = Tensor::zeros({s, hd});
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> grid(-32, 32);
  for (Tensor* x : {&q, &k, &v})
    for (int64_t i = 0; i < x->numel(); ++i) x->f32()[i] = grid(rng) / 16.0f;
  const test::AttentionExpected e =
      test::attention(test::dense(q.view()), test::dense(k.view()), test::dense(v.view()), t, s, 2, 1, hd, 0, true);
  Tensor out = Tensor::zeros({t, 2 * hd});
  cpu::causal_attention(q.view(), k.view(), v.view(), 2, 1, out.view(), DType::BF16, 0);
  expect_within(e.out, out.view(), "out bf16");
}

TEST(ErrorBounds, TheCpuDlogitsAreWithinThem) {
  const int64_t T = 4, V = 50304;
  const Tensor x = test::random_tensor({T, V}, 21, 3.0f);
  Tensor tg = Tensor::zeros({T}, DType::I32);
  const std::vector<int32_t> targets = {7, kIgnoreIndex, 50303, 1234};
  std::copy(targets.begin(), targets.end(), tg.i32());
  Tensor d = Tensor::zeros({T, V});
  const float z = 1e-4f, scale = 1.0f / 3;
  const test::Expected e = test::cross_entropy_dlogits(test::dense(x.view()), targets, V, z, scale, kIgnoreIndex);
  cpu::cross_entropy_zloss(x.view(), tg.view(), z, scale, d.view());
  expect_within(e, d.view(), "dlogits");
  expect_planted_error_caught(e, d.view(), 3);
}

}  // namespace
}  // namespace olmo2::ops
