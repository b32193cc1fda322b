// The vectorisable exp used by the cross-entropy kernel, against std::exp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "ops/cpu/fast_exp.h"
#include "tests/test_util.h"

namespace olmo2::ops::cpu {
namespace {

TEST(FastExp, RelativeErrorBelowThreeUlpsOverTheSoftmaxRange) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001f) {
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, ::olmo2::test::abs_diff(fast_exp(x), ref) / ref);
  }
  EXPECT_LT(worst, 3.6e-7);  // 3 ulps of fp32 (2^-23 ≈ 1.19e-7)
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", worst);
  RecordProperty("worst_relative_error", buf);
}

TEST(FastExp, EdgeValues) {
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_LT(fast_exp(-1000.0f), 1e-37f);
  EXPECT_GE(fast_exp(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace olmo2::ops::cpu
