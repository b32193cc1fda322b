// The batch-invariant product: accurate, and bit-identical for a row whatever batch,
// position, thread count or code path computes it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/batch_invariant_gemm.h"
#include "ops/cpu/batch_invariant_gemm_detail.h"
#include "ops/threads.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops {
namespace {

using test::random_tensor;

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// Row r of x alone, as a 1 × N product.
std::vector<float> row_alone(const Tensor& x, int64_t r, const Tensor& w) {
  const int64_t k = x.shape()[1], n = w.shape()[0];
  std::vector<float> out(static_cast<size_t>(n));
  linear_batch_invariant(TensorView(x.f32() + r * k, DType::F32, {1, k}), w.view(),
                         TensorView(out.data(), DType::F32, {1, n}));
  return out;
}

// Restores the thread count a test changed, even when an expectation fails.
struct ThreadCountGuard {
  int saved = num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

TEST(LinearBatchInvariant, MatchesNaiveProductWithStridedRows) {
  const int64_t m = 7, k = 37, n = 19;
  Tensor big = random_tensor({m, k + 5}, 1);
  TensorView x(big.f32() + 2, DType::F32, {m, k}, {k + 5, 1}, Device::CPU);
  Tensor w = random_tensor({n, k}, 2), y = Tensor::zeros({m, n}), yp = Tensor::zeros({m, n});
  linear_batch_invariant(x, w.view(), y.view());
  detail::linear_batch_invariant_portable(x, w.view(), yp.view());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, s_abs = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double t = double(x.f32()[i * (k + 5) + p]) * w.f32()[j * k + p];
        s += t;
        s_abs += std::fabs(t);
      }
      EXPECT_NEAR(y.f32()[i * n + j], s, 1e-5 * s_abs) << "(" << i << ", " << j << ")";
      EXPECT_NEAR(yp.f32()[i * n + j], s, 1e-5 * s_abs) << "(" << i << ", " << j << ")";
    }
}

TEST(LinearBatchInvariant, RowIsBitIdenticalAloneAndInAnyBatch) {
  const int64_t shapes[][2] = {{128, 19}, {512, 128}, {2048, 1000}, {200, 128}, {37, 19}};
  const int64_t batch_sizes[] = {1, 2, 3, 5, 7, 16, 17, 48, 64, 100};
  uint64_t seed = 10;
  for (const auto& [k, n] : shapes) {
    Tensor w = random_tensor({n, k}, ++seed);
    Tensor probe = random_tensor({1, k}, ++seed);
    const std::vector<float> probe_alone = row_alone(probe, 0, w);
    for (int64_t m : batch_sizes) {
      SCOPED_TRACE("K=" + std::to_string(k) + " N=" + std::to_string(n) +
                   " M=" + std::to_string(m));
      Tensor x = random_tensor({m, k}, ++seed), y = Tensor::zeros({m, n});
      linear_batch_invariant(x.view(), w.view(), y.view());
      for (int64_t r = 0; r < m; ++r)
        EXPECT_TRUE(same_bits(y.f32() + r * n, row_alone(x, r, w).data(), n)) << "row " << r;
      // The same row at the start, the middle and the end of the batch.
      for (int64_t pos : {int64_t{0}, m / 2, m - 1}) {
        std::memcpy(x.f32() + pos * k, probe.f32(), static_cast<size_t>(k) * sizeof(float));
        linear_batch_invariant(x.view(), w.view(), y.view());
        EXPECT_TRUE(same_bits(y.f32() + pos * n, probe_alone.data(), n)) << "probe at " << pos;
      }
    }
  }
}

TEST(LinearBatchInvariant, SameBitsWithOneAndTwoThreads) {
  ThreadCountGuard guard;
  const int64_t m = 17, k = 520, n = 1000;
  Tensor x = random_tensor({m, k}, 30), w = random_tensor({n, k}, 31);
  Tensor y1 = Tensor::zeros({m, n}), y2 = Tensor::zeros({m, n});
  set_num_threads(1);
  linear_batch_invariant(x.view(), w.view(), y1.view());
  set_num_threads(2);
  linear_batch_invariant(x.view(), w.view(), y2.view());
  EXPECT_TRUE(same_bits(y1.f32(), y2.f32(), m * n));
}

TEST(LinearBatchInvariant, PortablePathGivesTheAvx2Bits) {
  if (!detail::batch_invariant_has_avx2_fma()) GTEST_SKIP() << "this CPU lacks AVX2 or FMA";
  // Every K % 16 tail, K across K blocks (512), and every edge of the 3 × 2 tile.
  std::vector<int64_t> ks;
  for (int64_t k = 0; k <= 40; ++k) ks.push_back(k);
  for (int64_t k : {200, 511, 512, 513, 1037, 2048}) ks.push_back(k);
  uint64_t seed = 40;
  for (int64_t k : ks) {
    const int64_t m = 5, n = 7;
    SCOPED_TRACE("K=" + std::to_string(k));
    Tensor x = random_tensor({m, k}, ++seed), w = random_tensor({n, k}, ++seed);
    Tensor ya = Tensor::zeros({m, n}), yp = Tensor::zeros({m, n});
    detail::linear_batch_invariant_avx2(x.view(), w.view(), ya.view());
    detail::linear_batch_invariant_portable(x.view(), w.view(), yp.view());
    EXPECT_TRUE(same_bits(ya.f32(), yp.f32(), m * n));
  }
}

TEST(LinearBatchInvariant, TailLanesKeepANegativeZero) {
  // Each product underflows to -0, so by the lane rule every lane is -0 and so is the
  // sum. A tail that added fma(0, 0, lane) to the idle lanes would make them +0.
  const int64_t m = 4, k = 17, n = 3;
  Tensor x = Tensor::zeros({m, k}), w = Tensor::zeros({n, k});
  for (int64_t i = 0; i < m * k; ++i) x.f32()[i] = -1e-30f;
  for (int64_t i = 0; i < n * k; ++i) w.f32()[i] = 1e-30f;
  Tensor y = Tensor::zeros({m, n}), yp = Tensor::zeros({m, n});
  linear_batch_invariant(x.view(), w.view(), y.view());
  detail::linear_batch_invariant_portable(x.view(), w.view(), yp.view());
  for (int64_t i = 0; i < m * n; ++i) {
    EXPECT_EQ(y.f32()[i], 0.0f);
    EXPECT_TRUE(std::signbit(y.f32()[i])) << i;
    EXPECT_TRUE(std::signbit(yp.f32()[i])) << i;
  }
}

TEST(LinearBatchInvariant, RefusesMismatchedShapesAndStridedColumns) {
  Tensor x = random_tensor({3, 8}, 50), w = random_tensor({5, 8}, 51);
  Tensor y = Tensor::zeros({3, 5}), bad_y = Tensor::zeros({3, 6}), bad_w = Tensor::zeros({5, 9});
  EXPECT_THROW(linear_batch_invariant(x.view(), w.view(), bad_y.view()), ShapeError);
  EXPECT_THROW(linear_batch_invariant(x.view(), bad_w.view(), y.view()), ShapeError);
  EXPECT_THROW(detail::linear_batch_invariant_portable(x.view(), bad_w.view(), y.view()),
               ShapeError);
  Tensor wide = random_tensor({3, 16}, 52);
  TensorView x_cols(wide.f32(), DType::F32, {3, 8}, {16, 2}, Device::CPU);
  EXPECT_THROW(linear_batch_invariant(x_cols, w.view(), y.view()), ShapeError);
  // No rows: nothing to do, no throw.
  Tensor x0 = Tensor::zeros({0, 8}), y0 = Tensor::zeros({0, 5});
  EXPECT_NO_THROW(linear_batch_invariant(x0.view(), w.view(), y0.view()));
}

}  // namespace
}  // namespace olmo2::ops
