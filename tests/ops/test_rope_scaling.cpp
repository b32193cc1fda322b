// RoPE with given frequencies and a cos/sin scaling (ops::RopeFrequencies, YaRN-like;
// docs/architecture.md §3): the forward against the formula written out, its backward as
// its transpose, and plain RoPE's frequencies bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/backward.h"
#include "ops/rope.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops {
namespace {

using test::random_tensor;
using ::testing::HasSubstr;

// Frequencies no formula of ours makes: a blend of two geometric series, and s = 1.2.
RopeFrequencies yarn_like(int hd) {
  RopeFrequencies f;
  for (int i = 0; i < hd / 2; ++i) {
    const double ramp = std::clamp((i - 1.0) / 3.0, 0.0, 1.0);
    const double extrapolated = std::pow(10000.0, -2.0 * i / hd);
    f.inv_freq.push_back(static_cast<float>(extrapolated * (1 - ramp) + extrapolated / 8 * ramp));
  }
  f.attention_scaling = 1.2f;
  return f;
}

TEST(RopeFrequencies, StandardIsTodaysFormulaBitForBit) {
  for (int hd : {2, 8, 64, 128}) {
    const RopeFrequencies f = RopeFrequencies::standard(500000.0f, hd);
    ASSERT_EQ(f.inv_freq.size(), static_cast<size_t>(hd / 2));
    EXPECT_EQ(f.attention_scaling, 1.0f);
    for (int i = 0; i < hd / 2; ++i)
      EXPECT_EQ(f.inv_freq[static_cast<size_t>(i)],
                1.0f / std::pow(500000.0f, static_cast<float>(2 * i) / static_cast<float>(hd)));
  }
  EXPECT_THROW(RopeFrequencies::standard(10000.0f, 7), ShapeError);
}

TEST(RopeScaling, MatchesTheScaledRotationFormula) {
  const int heads = 3, hd = 16, rows = 5;
  const RopeFrequencies f = yarn_like(hd);
  Tensor x = random_tensor({rows, heads * hd}, 70);
  const std::vector<float> orig(x.f32(), x.f32() + x.numel());
  const int32_t pos[rows] = {0, 1, 37, 4000, 65000};
  rope(x.view(), host_view(pos), heads, hd, f);
  for (int t = 0; t < rows; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        // The angle is one f32 product (the op's contract); the rest in double.
        const double a = static_cast<float>(pos[t]) * f.inv_freq[static_cast<size_t>(i)];
        const double s = f.attention_scaling;
        const int64_t b = (t * heads + h) * hd;
        const double x1 = orig[b + i], x2 = orig[b + i + hd / 2];
        const double tol = 1e-6 * (1 + std::abs(x1) + std::abs(x2));
        EXPECT_NEAR(x.f32()[b + i], s * (x1 * std::cos(a) - x2 * std::sin(a)), tol) << "t " << t << " i " << i;
        EXPECT_NEAR(x.f32()[b + i + hd / 2], s * (x2 * std::cos(a) + x1 * std::sin(a)), tol) << "t " << t << " i " << i;
      }
  // Position 0: cos = 1, sin = 0, so each element is exactly f32(x · 1.2f).
  for (int i = 0; i < heads * hd; ++i) EXPECT_EQ(x.f32()[i], orig[i] * 1.2f) << "element " << i;
}

TEST(RopeScaling, BackwardIsTheTranspose) {
  const int heads = 2, hd = 8, rows = 4;
  const RopeFrequencies f = yarn_like(hd);
  const int32_t pos[rows] = {0, 5, 300, 9000};
  const Tensor x = random_tensor({rows, heads * hd}, 71), y = random_tensor({rows, heads * hd}, 72);
  Tensor rx = random_tensor({rows, heads * hd}, 71), bty = random_tensor({rows, heads * hd}, 72);
  rope(rx.view(), host_view(pos), heads, hd, f);
  rope_backward(bty.view(), host_view(pos), heads, hd, f);
  // <rope(x), y> = <x, rope_backward(y)>
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < x.numel(); ++i) lhs += double(rx.f32()[i]) * y.f32()[i], rhs += double(x.f32()[i]) * bty.f32()[i];
  EXPECT_NEAR(lhs, rhs, 1e-5 * (1 + std::abs(lhs)));
  // Rᵀ R = s² I: the backward of the forward is x times 1.44.
  rope_backward(rx.view(), host_view(pos), heads, hd, f);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(rx.f32()[i], 1.44 * x.f32()[i], 2e-6 * (1 + std::abs(x.f32()[i])));
}

TEST(RopeScaling, ScalingOneIsPlainRopeBitForBit) {
  const int heads = 4, hd = 32, rows = 6;
  const int32_t pos[rows] = {0, 1, 2, 100, 2047, 31000};
  Tensor a = random_tensor({rows, heads * hd}, 73), b = random_tensor({rows, heads * hd}, 73);
  RopeFrequencies f = RopeFrequencies::standard(10000.0f, hd);
  rope(a.view(), host_view(pos), heads, hd, 10000.0f);
  rope(b.view(), host_view(pos), heads, hd, f);
  EXPECT_EQ(std::memcmp(a.f32(), b.f32(), sizeof(float) * a.numel()), 0);
  rope_backward(a.view(), host_view(pos), heads, hd, 10000.0f);
  rope_backward(b.view(), host_view(pos), heads, hd, f);
  EXPECT_EQ(std::memcmp(a.f32(), b.f32(), sizeof(float) * a.numel()), 0);
}

TEST(RopeScaling, RefusesFrequenciesOfAnotherHeadDim) {
  const int32_t pos[2] = {0, 1};
  Tensor x = random_tensor({2, 16}, 74);
  RopeFrequencies f = RopeFrequencies::standard(10000.0f, 8);  // 4 entries for head_dim 16
  try {
    rope(x.view(), host_view(pos), 1, 16, f);
    ADD_FAILURE() << "4 frequencies for head_dim 16 accepted";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("4 inverse frequencies for head_dim 16"));
  }
  EXPECT_THROW(rope_backward(x.view(), host_view(pos), 1, 16, f), ShapeError);
}

}  // namespace
}  // namespace olmo2::ops
