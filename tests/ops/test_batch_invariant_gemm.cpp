// The batch-invariant product: accurate, and bit-identical for a row whatever batch,
// position, thread count or code path (avx512, avx2, portable) computes it; which path
// runs, OLMO2_BATCH_INVARIANT_GEMM's choice and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/batch_invariant_gemm.h"
#include "ops/cpu/batch_invariant_gemm_detail.h"
#include "ops/threads.h"
#include "core/error.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops {

// gtest prints a path by its name.
void PrintTo(BatchInvariantPath path, std::ostream* os) { *os << batch_invariant_path_name(path); }

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

// ---- every code path --------------------------------------------------------------

constexpr BatchInvariantPath kAll[] = {BatchInvariantPath::Avx512, BatchInvariantPath::Avx2,
                                       BatchInvariantPath::Portable};

// Runs the test on one path, forced for the public function too; skipped where the CPU
// lacks it.
class BatchInvariantEveryPath : public ::testing::TestWithParam<BatchInvariantPath> {
 protected:
  void SetUp() override {
    if (!batch_invariant_path_available(GetParam()))
      GTEST_SKIP() << "this CPU lacks " << batch_invariant_path_name(GetParam());
    set_batch_invariant_path(GetParam());
  }
  void TearDown() override { reset_batch_invariant_path(); }
};

INSTANTIATE_TEST_SUITE_P(Paths, BatchInvariantEveryPath, ::testing::ValuesIn(kAll),
                         [](const ::testing::TestParamInfo<BatchInvariantPath>& info) {
                           return std::string(batch_invariant_path_name(info.param));
                         });

// The path's bits against the portable path's, x with strided rows.
void expect_portable_bits(int64_t m, int64_t n, int64_t k, uint64_t seed) {
  SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
  Tensor big = random_tensor({m, k + 3}, seed);
  const TensorView x(big.f32() + 1, DType::F32, {m, k}, {k + 3, 1}, Device::CPU);
  Tensor w = random_tensor({n, k}, seed + 1);
  Tensor y = Tensor::zeros({m, n}), yp = Tensor::zeros({m, n});
  linear_batch_invariant(x, w.view(), y.view());
  detail::linear_batch_invariant_portable(x, w.view(), yp.view());
  for (int64_t i = 0; i < m * n; ++i)
    if (std::memcmp(y.f32() + i, yp.f32() + i, sizeof(float)) != 0) {
      ADD_FAILURE() << "element (" << i / n << ", " << i % n << "): " << y.f32()[i]
                    << " vs portable " << yp.f32()[i];
      return;
    }
}

TEST_P(BatchInvariantEveryPath, GivesThePortableBits) {
  EXPECT_EQ(batch_invariant_path(), GetParam());
  uint64_t seed = 100;
  // Every K % 16 tail with K < 16 and past it, on every edge of the 6 × 4 (avx512) and
  // 3 × 2 (avx2) tiles, M = 1 included.
  for (int64_t k = 0; k <= 40; ++k)
    for (const auto& [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {1, 9}, {5, 7}, {13, 11}})
      expect_portable_bits(m, n, k, seed += 2);
  // K across K blocks (512) with and without a tail; N across N blocks and threads.
  for (int64_t k : {200, 511, 512, 513, 1037, 2048})
    for (const auto& [m, n] : {std::pair<int64_t, int64_t>{1, 5}, {7, 6}, {12, 8}, {37, 301}})
      expect_portable_bits(m, n, k, seed += 2);
  // Random shapes.
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> small(1, 40), kdist(1, 1100);
  for (int trial = 0; trial < 40; ++trial)
    expect_portable_bits(small(rng), small(rng) * (trial % 4 == 0 ? 7 : 1), kdist(rng), seed += 2);
}

TEST_P(BatchInvariantEveryPath, RowIsBitIdenticalAloneAndInABatchOf37) {
  for (const auto& [k, n] : {std::pair<int64_t, int64_t>{37, 19}, {520, 130}, {1040, 23}}) {
    SCOPED_TRACE("K=" + std::to_string(k) + " N=" + std::to_string(n));
    const int64_t m = 37;
    Tensor x = random_tensor({m, k}, 200 + k), w = random_tensor({n, k}, 300 + n);
    Tensor y = Tensor::zeros({m, n});
    linear_batch_invariant(x.view(), w.view(), y.view());
    for (int64_t r = 0; r < m; ++r)
      EXPECT_TRUE(same_bits(y.f32() + r * n, row_alone(x, r, w).data(), n)) << "row " << r;
    // The last row has the portable path's bits too.
    Tensor yp = Tensor::zeros({1, n});
    detail::linear_batch_invariant_portable(TensorView(x.f32() + 36 * k, DType::F32, {1, k}),
                                            w.view(), yp.view());
    EXPECT_TRUE(same_bits(y.f32() + 36 * n, yp.f32(), n));
  }
}

TEST_P(BatchInvariantEveryPath, SameBitsWithOneTwoAndThreeThreads) {
  ThreadCountGuard guard;
  const int64_t m = 23, k = 1030, n = 999;
  Tensor x = random_tensor({m, k}, 60), w = random_tensor({n, k}, 61);
  Tensor y1 = Tensor::zeros({m, n});
  set_num_threads(1);
  linear_batch_invariant(x.view(), w.view(), y1.view());
  for (int threads : {2, 3}) {
    Tensor yt = Tensor::zeros({m, n});
    set_num_threads(threads);
    linear_batch_invariant(x.view(), w.view(), yt.view());
    EXPECT_TRUE(same_bits(y1.f32(), yt.f32(), m * n)) << threads << " threads";
  }
}

TEST_P(BatchInvariantEveryPath, TailLanesKeepANegativeZero) {
  // As LinearBatchInvariant.TailLanesKeepANegativeZero, with tails of 1, 5 and 15 lanes
  // (K ≥ 16, so that every lane takes a product and is -0).
  for (int64_t k : {17, 21, 47}) {
    const int64_t m = 7, n = 5;
    Tensor x = Tensor::zeros({m, k}), w = Tensor::zeros({n, k}), y = Tensor::zeros({m, n});
    for (int64_t i = 0; i < m * k; ++i) x.f32()[i] = -1e-30f;
    for (int64_t i = 0; i < n * k; ++i) w.f32()[i] = 1e-30f;
    linear_batch_invariant(x.view(), w.view(), y.view());
    for (int64_t i = 0; i < m * n; ++i) EXPECT_TRUE(std::signbit(y.f32()[i])) << "K=" << k << " " << i;
  }
}

// ---- which path runs ---------------------------------------------------------------

using detail::choose_batch_invariant_path;

// Pretend CPUs for choose_batch_invariant_path.
bool every_path(BatchInvariantPath) { return true; }
bool avx2_cpu(BatchInvariantPath p) { return p != BatchInvariantPath::Avx512; }
bool plain_cpu(BatchInvariantPath p) { return p == BatchInvariantPath::Portable; }

// The InputError message of choose_batch_invariant_path(env, available); "" when none.
std::string choice_error(const char* env, bool (*available)(BatchInvariantPath)) {
  try {
    choose_batch_invariant_path(env, available);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(BatchInvariantPath, NamesAndTheFastestDefault) {
  EXPECT_STREQ(batch_invariant_path_name(BatchInvariantPath::Avx512), "avx512");
  EXPECT_STREQ(batch_invariant_path_name(BatchInvariantPath::Avx2), "avx2");
  EXPECT_STREQ(batch_invariant_path_name(BatchInvariantPath::Portable), "portable");
  EXPECT_TRUE(batch_invariant_path_available(BatchInvariantPath::Portable));
  EXPECT_EQ(batch_invariant_path_available(BatchInvariantPath::Avx512),
            detail::batch_invariant_has_avx512());
  EXPECT_EQ(batch_invariant_path_available(BatchInvariantPath::Avx2),
            detail::batch_invariant_has_avx2_fma());
  for (const char* env : {static_cast<const char*>(nullptr), ""}) {
    EXPECT_EQ(choose_batch_invariant_path(env, every_path), BatchInvariantPath::Avx512);
    EXPECT_EQ(choose_batch_invariant_path(env, avx2_cpu), BatchInvariantPath::Avx2);
    EXPECT_EQ(choose_batch_invariant_path(env, plain_cpu), BatchInvariantPath::Portable);
  }
  if (std::getenv("OLMO2_BATCH_INVARIANT_GEMM") == nullptr) {
    const BatchInvariantPath fastest =
        choose_batch_invariant_path(nullptr, batch_invariant_path_available);
    EXPECT_EQ(batch_invariant_path(), fastest);
    EXPECT_STREQ(batch_invariant_path_name(), batch_invariant_path_name(fastest));
  }
  for (BatchInvariantPath p : kAll)
    EXPECT_EQ(choose_batch_invariant_path(batch_invariant_path_name(p), every_path), p);
  EXPECT_EQ(choose_batch_invariant_path("portable", plain_cpu), BatchInvariantPath::Portable);
  EXPECT_EQ(choose_batch_invariant_path("avx2", avx2_cpu), BatchInvariantPath::Avx2);
}

TEST(BatchInvariantPath, ABadValueIsAnInputErrorNamingIt) {
  for (const char* bad : {"avx-512", "AVX2", "avx512bf16", "avx2 ", "sse"}) {
    const std::string msg = choice_error(bad, every_path);
    EXPECT_NE(msg.find(std::string("OLMO2_BATCH_INVARIANT_GEMM=") + bad + ":"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("expected avx512, avx2 or portable"), std::string::npos) << msg;
  }
}

TEST(BatchInvariantPath, APathTheCpuLacksIsRefused) {
  EXPECT_EQ(choice_error("avx512", avx2_cpu),
            "OLMO2_BATCH_INVARIANT_GEMM=avx512: this CPU lacks the avx512 path");
  EXPECT_EQ(choice_error("avx2", plain_cpu),
            "OLMO2_BATCH_INVARIANT_GEMM=avx2: this CPU lacks the avx2 path");
  // On this CPU: every path it lacks is refused by the override and the entry points.
  Tensor x = random_tensor({2, 20}, 70), w = random_tensor({3, 20}, 71), y = Tensor::zeros({2, 3});
  for (BatchInvariantPath p : kAll) {
    if (batch_invariant_path_available(p)) continue;
    EXPECT_THROW(set_batch_invariant_path(p), ShapeError) << batch_invariant_path_name(p);
    EXPECT_THROW(detail::linear_batch_invariant(x.view(), w.view(), y.view(), p), ShapeError)
        << batch_invariant_path_name(p);
  }
  if (!detail::batch_invariant_has_avx512()) {
    EXPECT_THROW(detail::linear_batch_invariant_avx512(x.view(), w.view(), y.view()), ShapeError);
  }
  if (!detail::batch_invariant_has_avx2_fma()) {
    EXPECT_THROW(detail::linear_batch_invariant_avx2(x.view(), w.view(), y.view()), ShapeError);
  }
}

TEST(BatchInvariantPath, OverrideAndReset) {
  const BatchInvariantPath before =
      choose_batch_invariant_path(nullptr, batch_invariant_path_available);
  set_batch_invariant_path(BatchInvariantPath::Portable);
  EXPECT_EQ(batch_invariant_path(), BatchInvariantPath::Portable);
  EXPECT_STREQ(batch_invariant_path_name(), "portable");
  reset_batch_invariant_path();
  if (std::getenv("OLMO2_BATCH_INVARIANT_GEMM") == nullptr) {
    EXPECT_EQ(batch_invariant_path(), before);
  }
}

// Run by ctest with OLMO2_BATCH_INVARIANT_GEMM set to a bad value
// (tests/ops/CMakeLists.txt); skipped without it. Every f32 batch-invariant product
// refuses, naming the value, until a path is forced.
TEST(BatchInvariantPathEnvironment, ABadValueStopsEveryProduct) {
  const char* env = std::getenv("OLMO2_BATCH_INVARIANT_GEMM");
  if (env == nullptr || choice_error(env, batch_invariant_path_available).empty())
    GTEST_SKIP() << "OLMO2_BATCH_INVARIANT_GEMM is unset or valid";
  const std::string named = std::string("OLMO2_BATCH_INVARIANT_GEMM=") + env;
  for (int attempt = 0; attempt < 2; ++attempt) {  // the same error every time, not once
    try {
      batch_invariant_path();
      ADD_FAILURE() << "no InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  }
  Tensor x = random_tensor({2, 40}, 80), w = random_tensor({3, 40}, 81), y = Tensor::zeros({2, 3});
  EXPECT_THROW(linear_batch_invariant(x.view(), w.view(), y.view()), InputError);
  set_batch_invariant_path(BatchInvariantPath::Portable);
  EXPECT_NO_THROW(linear_batch_invariant(x.view(), w.view(), y.view()));
  reset_batch_invariant_path();
  EXPECT_THROW(linear_batch_invariant(x.view(), w.view(), y.view()), InputError);
}

}  // namespace
}  // namespace olmo2::ops
