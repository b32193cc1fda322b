// Central-difference gradient checks shared by the ops' backward tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

namespace olmo2::ops::test {

/// Central differences (h = 1e-5, double) of `loss` at every element of `x`, compared
/// with the analytic float gradient within tol·(0.1 + |fd|).
inline void check_fd(std::vector<double> x, const std::function<double(const std::vector<double>&)>& loss,
                     const float* analytic, const char* what, double tol = 1e-3) {
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss(x);
    x[i] = x0 - h;
    const double lm = loss(x);
    x[i] = x0;
    const double fd = (lp - lm) / (2 * h);
    EXPECT_NEAR(analytic[i], fd, tol * (0.1 + std::abs(fd))) << what << " element " << i;
  }
}

}  // namespace olmo2::ops::test
