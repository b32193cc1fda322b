// CPU kernels against naive double-precision loops written from the formulas.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tests/ops/random_tensor.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"

namespace olmo2::ops {
namespace {

using ::testing::HasSubstr;

using test::random_tensor;

TEST(Linear, MatchesNaiveProductWithStridedRows) {
  const int64_t m = 7, k = 33, n = 19;
  Tensor big = random_tensor({m, k + 5}, 1);
  TensorView x(big.f32() + 2, DType::F32, {m, k}, {k + 5, 1}, Device::CPU);
  Tensor w = random_tensor({n, k}, 2), y = Tensor::zeros({m, n});
  linear(x, w.view(), y.view());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += double(x.f32()[i * (k + 5) + p]) * w.f32()[j * k + p];
      EXPECT_NEAR(y.f32()[i * n + j], s, 1e-4);
    }
  Tensor bad = Tensor::zeros({m, n + 1});
  EXPECT_THROW(linear(x, w.view(), bad.view()), ShapeError);
}

TEST(Embedding, GathersRowsAndRefusesOutOfRangeIds) {
  Tensor table = random_tensor({10, 4}, 3), out = Tensor::zeros({3, 4});
  const int32_t ids[3] = {9, 0, 9};
  embedding(host_view(ids), table.view(), out.view());
  EXPECT_EQ(out.f32()[0], table.f32()[36]);
  EXPECT_EQ(out.f32()[4], table.f32()[0]);
  const int32_t bad[3] = {1, 10, 2};
  try {
    embedding(host_view(bad), table.view(), out.view());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("token id 10"));
  }
}

TEST(RmsNorm, MatchesFormulaAndMultipliesWeightBeforeCast) {
  const int64_t t = 5, d = 48;
  Tensor x = random_tensor({t, d}, 4, 3.0f), w = random_tensor({d}, 5), y = Tensor::zeros({t, d});
  rmsnorm(x.view(), w.view(), 1e-6f, y.view());
  for (int64_t r = 0; r < t; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(x.f32()[r * d + i]) * x.f32()[r * d + i];
    const double inv = 1.0 / std::sqrt(ss / d + 1e-6);
    for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(y.f32()[r * d + i], w.f32()[i] * x.f32()[r * d + i] * inv, 1e-5);
  }
  // bf16 in, bf16 out: one rounding of w·x̂ (not of x̂ then of the product).
  Tensor xb = Tensor::zeros({1, 2}, DType::BF16), yb = Tensor::zeros({1, 2}, DType::BF16);
  Tensor wf = Tensor::zeros({2});
  auto* xbits = static_cast<uint16_t*>(xb.view().data());
  xbits[0] = f32_to_bf16(1.0f), xbits[1] = f32_to_bf16(1.0f);  // x̂ = 1 exactly
  wf.f32()[0] = 1.0f + std::ldexp(1.0f, -9), wf.f32()[1] = 3.0f;
  rmsnorm(xb.view(), wf.view(), 0.0f, yb.view());
  const auto* ybits = static_cast<const uint16_t*>(yb.view().data());
  EXPECT_EQ(bf16_to_f32(ybits[0]), round_bf16(1.0f + std::ldexp(1.0f, -9)));
  EXPECT_EQ(bf16_to_f32(ybits[1]), 3.0f);
}

TEST(RmsNorm, CaseC1UnsplitValues) {
  // docs/architecture.md §11.1 (whole-projection QK-norm split over TP ranks) on one rank:
  // [1, 2, 3, 4], weight 1, eps 0.
  Tensor x = Tensor::zeros({1, 4}), w = Tensor::zeros({4}), y = Tensor::zeros({1, 4});
  for (int i = 0; i < 4; ++i) x.f32()[i] = float(i + 1), w.f32()[i] = 1.0f;
  rmsnorm(x.view(), w.view(), 0.0f, y.view());
  const float expected[4] = {0.3651f, 0.7303f, 1.0954f, 1.4606f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y.f32()[i], expected[i], 1e-4);
}

TEST(Rope, MatchesRotateHalfFormula) {
  const int heads = 3, hd = 8;
  Tensor x = random_tensor({4, heads * hd}, 6), orig = Tensor::zeros({4, heads * hd});
  std::copy(x.f32(), x.f32() + x.numel(), orig.f32());
  const int32_t pos[4] = {0, 1, 17, 4000};
  const double theta = 500000.0;
  rope(x.view(), host_view(pos), heads, hd, static_cast<float>(theta));
  for (int t = 0; t < 4; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        const double a = pos[t] / std::pow(theta, 2.0 * i / hd);
        const float* o = orig.f32() + t * heads * hd + h * hd;
        const float* r = x.f32() + t * heads * hd + h * hd;
        EXPECT_NEAR(r[i], o[i] * std::cos(a) - o[i + hd / 2] * std::sin(a), 2e-4 * (1 + pos[t] / 1000.0));
        EXPECT_NEAR(r[i + hd / 2], o[i + hd / 2] * std::cos(a) + o[i] * std::sin(a), 2e-4 * (1 + pos[t] / 1000.0));
      }
  // Position 0 is the identity.
  for (int i = 0; i < heads * hd; ++i) EXPECT_EQ(x.f32()[i], orig.f32()[i]);
}

// Naive causal GQA attention in double.
std::vector<double> naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, int nh, int nkv,
                                    int64_t past) {
  const int64_t t_len = q.shape()[0], s_len = k.shape()[0], hd = q.shape()[1] / nh;
  std::vector<double> out(static_cast<size_t>(t_len * nh * hd), 0.0);
  for (int h = 0; h < nh; ++h) {
    const int kvh = h / (nh / nkv);
    for (int64_t t = 0; t < t_len; ++t) {
      std::vector<double> s(static_cast<size_t>(s_len));
      double mx = -1e300, sum = 0;
      const int64_t vis = past + t + 1;
      for (int64_t j = 0; j < vis; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < hd; ++i) dot += double(q.f32()[t * nh * hd + h * hd + i]) * k.f32()[j * nkv * hd + kvh * hd + i];
        s[j] = dot / std::sqrt(double(hd));
        mx = std::max(mx, s[j]);
      }
      for (int64_t j = 0; j < vis; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int64_t j = 0; j < vis; ++j)
        for (int64_t i = 0; i < hd; ++i) out[t * nh * hd + h * hd + i] += s[j] / sum * v.f32()[j * nkv * hd + kvh * hd + i];
    }
  }
  return out;
}

TEST(Attention, CausalGqaWithCachedPrefixMatchesNaive) {
  const int nh = 6, nkv = 2, hd = 16;
  const int64_t t_len = 5, s_len = 9;  // 4 cached positions + 5 new queries
  Tensor q = random_tensor({t_len, nh * hd}, 7), k = random_tensor({s_len, nkv * hd}, 8),
         v = random_tensor({s_len, nkv * hd}, 9), out = Tensor::zeros({t_len, nh * hd});
  causal_attention(q.view(), k.view(), v.view(), nh, nkv, out.view());
  const auto ref = naive_attention(q, k, v, nh, nkv, s_len - t_len);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(out.f32()[i], ref[i], 1e-5);
  EXPECT_THROW(causal_attention(q.view(), k.view(), v.view(), nh, 4, out.view()), ShapeError);
}

TEST(SwiGlu, SiluTimesUp) {
  Tensor g = random_tensor({3, 10}, 13, 4.0f), u = random_tensor({3, 10}, 14), o = Tensor::zeros({3, 10});
  swiglu(g.view(), u.view(), o.view());
  for (int i = 0; i < 30; ++i) {
    const double gi = g.f32()[i];
    EXPECT_NEAR(o.f32()[i], gi / (1 + std::exp(-gi)) * u.f32()[i], 1e-5);
  }
  add_inplace(o.view(), u.view());
  const double g0 = g.f32()[0];
  EXPECT_NEAR(o.f32()[0], g0 / (1 + std::exp(-g0)) * u.f32()[0] + u.f32()[0], 1e-5);
}

}  // namespace
}  // namespace olmo2::ops
