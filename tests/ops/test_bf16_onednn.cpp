// The onednn path of the bf16 products (ops/bf16_gemm.h), forced: ops::linear and
// ops::linear_backward with a bf16 w within the bf16 products' error bound of a double
// reference, for odd shapes, strided rows, accumulation and 1 or 2 threads; operands
// rounded to bf16 first; the products really taken by oneDNN; and
// ops::linear_batch_invariant never taken by it.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/backward.h"
#include "ops/batch_invariant_gemm.h"
#include "ops/bf16_gemm.h"
#include "ops/cpu/bf16_gemm_detail.h"
#include "ops/gemm.h"
#include "ops/tensor_ops.h"
#include "ops/threads.h"
#include "tests/ops/bf16_tensor.h"

namespace olmo2::ops {
namespace {

using test::lane_bound;
using test::random_bf16;
using test::random_tensor;
using test::same_bits;
using test::widen;

class OneDnnProduct : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!bf16_gemm_path_available(Bf16GemmPath::OneDnn)) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU";
    set_bf16_gemm_path(Bf16GemmPath::OneDnn);
  }
  void TearDown() override {
    reset_bf16_gemm_path();
    set_num_threads(threads_);
  }
  int threads_ = num_threads();
};

// M = 1, 3, 17, 130; K and N not multiples of 16 (and a few that are).
const int64_t kShapes[][3] = {{1, 7, 1},     {3, 5, 33},    {17, 19, 100}, {130, 37, 257},
                              {1, 101, 2051}, {3, 33, 1025}, {17, 250, 64}, {130, 9, 4099}};

double row_bf16(const float* row, int64_t j) { return double(round_bf16(row[j])); }

// x [M, K] f32 as a view with row stride K + 3, and y [M, N] with row stride N + 5: the
// products must honour strided rows.
TEST_F(OneDnnProduct, LinearWithinLaneBoundOfReference) {
  uint64_t seed = 1000;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const auto& [m, n, k] : kShapes) {
      SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
                   " threads=" + std::to_string(threads));
      const Tensor xs = random_tensor({m, k + 3}, seed += 2), w = random_bf16({n, k}, seed + 1);
      Tensor ys = Tensor::zeros({m, n + 5});
      const TensorView x = xs.view().cols(0, k), y = ys.view().cols(0, n);
      linear(x, w.view(), y);
      const Tensor wf = widen(w);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0, a = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double t = row_bf16(xs.f32() + i * (k + 3), p) * wf.f32()[j * k + p];
            s += t, a += std::fabs(t);
          }
          ASSERT_NEAR(ys.f32()[i * (n + 5) + j], s, lane_bound(k, a)) << "y[" << i << ", " << j << "]";
        }
      for (int64_t i = 0; i < m; ++i)  // the columns past y's view are untouched
        for (int64_t j = n; j < n + 5; ++j) ASSERT_EQ(ys.f32()[i * (n + 5) + j], 0.0f);
    }
  }
}

// dx = bf16(dy)·w and dw = bf16(dy)ᵀ·bf16(x), overwritten and accumulated.
TEST_F(OneDnnProduct, BackwardWithinLaneBoundOfReference) {
  uint64_t seed = 2000;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const auto& [m, n, k] : kShapes) {
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
                     " threads=" + std::to_string(threads) + (accumulate ? " accumulate" : ""));
        const Tensor x = random_tensor({m, k}, seed += 3), dy = random_tensor({m, n}, seed + 1),
                     w = random_bf16({n, k}, seed + 2);
        const Tensor dx0 = random_tensor({m, k}, seed + 4), dw0 = random_tensor({n, k}, seed + 5);
        Tensor dx = Tensor::zeros({m, k}), dw = Tensor::zeros({n, k});
        if (accumulate) copy(dx0.view(), dx.view()), copy(dw0.view(), dw.view());
        linear_backward(x.view(), w.view(), dy.view(), dx.view(), dw.view(), accumulate, accumulate);
        const Tensor wf = widen(w);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t p = 0; p < k; ++p) {
            double s = accumulate ? dx0.f32()[i * k + p] : 0.0, a = 0;
            for (int64_t j = 0; j < n; ++j) {
              const double t = row_bf16(dy.f32() + i * n, j) * wf.f32()[j * k + p];
              s += t, a += std::fabs(t);
            }
            // One more rounding when the product is added to dx.
            ASSERT_NEAR(dx.f32()[i * k + p], s, lane_bound(n, a) + 0x1p-24 * std::fabs(s)) << "dx[" << i << ", " << p << "]";
          }
        for (int64_t j = 0; j < n; ++j)
          for (int64_t p = 0; p < k; ++p) {
            double s = accumulate ? dw0.f32()[j * k + p] : 0.0, a = 0;
            for (int64_t i = 0; i < m; ++i) {
              const double t = row_bf16(dy.f32() + i * n, j) * row_bf16(x.f32() + i * k, p);
              s += t, a += std::fabs(t);
            }
            ASSERT_NEAR(dw.f32()[j * k + p], s, lane_bound(m, a) + 0x1p-24 * std::fabs(s)) << "dw[" << j << ", " << p << "]";
          }
      }
    }
  }
}

// Every f32 operand is rounded to bf16 (nearest even) first: x in the forward, dy and x
// in the backward.
TEST_F(OneDnnProduct, RoundsOperandsToBf16First) {
  const int64_t m = 5, n = 7, k = 70;
  const Tensor x = random_tensor({m, k}, 300), dy = random_tensor({m, n}, 301), w = random_bf16({n, k}, 302);
  Tensor xr = Tensor::zeros({m, k}), dyr = Tensor::zeros({m, n});
  for (int64_t i = 0; i < m * k; ++i) xr.f32()[i] = round_bf16(x.f32()[i]);
  for (int64_t i = 0; i < m * n; ++i) dyr.f32()[i] = round_bf16(dy.f32()[i]);
  Tensor y = Tensor::zeros({m, n}), yr = Tensor::zeros({m, n});
  linear(x.view(), w.view(), y.view());
  linear(xr.view(), w.view(), yr.view());
  EXPECT_TRUE(same_bits(y.f32(), yr.f32(), m * n));
  Tensor dx = Tensor::zeros({m, k}), dxr = Tensor::zeros({m, k}), dw = Tensor::zeros({n, k}),
         dwr = Tensor::zeros({n, k});
  linear_backward(x.view(), w.view(), dy.view(), dx.view(), dw.view(), false);
  linear_backward(xr.view(), w.view(), dyr.view(), dxr.view(), dwr.view(), false);
  EXPECT_TRUE(same_bits(dx.f32(), dxr.f32(), m * k));
  EXPECT_TRUE(same_bits(dw.f32(), dwr.f32(), n * k));
}

// The forced path is really oneDNN: over K = 2048 its sums part from the lane sequence's
// in some last bits (a product that kept the avx512bf16/avx2/portable path would agree
// with linear_batch_invariant everywhere).
TEST_F(OneDnnProduct, LinearIsNotTheLaneSequence) {
  const int64_t m = 17, n = 101, k = 2048;
  const Tensor x = random_tensor({m, k}, 400), w = random_bf16({n, k}, 401);
  Tensor y = Tensor::zeros({m, n}), yi = Tensor::zeros({m, n});
  linear(x.view(), w.view(), y.view());
  linear_batch_invariant(x.view(), w.view(), yi.view());
  EXPECT_FALSE(same_bits(y.f32(), yi.f32(), m * n)) << "ops::linear did not take the onednn path";
}

// linear_batch_invariant never takes onednn: with it forced, the batch-invariant product
// keeps the fastest lane-sequence path (the same bits as forcing that path), and a row's
// bits do not depend on the batch.
TEST_F(OneDnnProduct, BatchInvariantProductNeverTakesIt) {
  const Bf16GemmPath fastest = detail::choose_bf16_gemm_path(nullptr, &bf16_gemm_path_available);
  EXPECT_EQ(bf16_gemm_path(), fastest);
  EXPECT_EQ(bf16_training_gemm_path(), Bf16GemmPath::OneDnn);
  const int64_t m = 37, n = 29, k = 1025;
  const Tensor x = random_tensor({m, k}, 500), w = random_bf16({n, k}, 501);
  Tensor y = Tensor::zeros({m, n}), ref = Tensor::zeros({m, n});
  linear_batch_invariant(x.view(), w.view(), y.view());
  detail::linear_bf16(x.view(), w.view(), ref.view(), fastest);
  EXPECT_TRUE(same_bits(y.f32(), ref.f32(), m * n));
  for (int64_t r : {int64_t{0}, int64_t{18}, m - 1}) {
    Tensor alone = Tensor::zeros({1, n});
    linear_batch_invariant(x.view().rows(r, r + 1), w.view(), alone.view());
    EXPECT_TRUE(same_bits(alone.f32(), y.f32() + r * n, n)) << "row " << r;
  }
}

TEST(OneDnnIsa, EffectiveIsaIsNamedAndAmxFollowsIt) {
  const std::string isa = onednn_cpu_isa_name();
  EXPECT_NE(isa, "other");
  EXPECT_EQ(onednn_uses_amx(), isa == "avx512_core_amx");
  // oneDNN 2.6's bf16 matmul needs avx512_core or newer.
  EXPECT_EQ(bf16_gemm_path_available(Bf16GemmPath::OneDnn), isa.rfind("avx512_core", 0) == 0);
  std::printf("[ onednn  ] effective ISA %s; training products' default path %s\n", isa.c_str(),
              std::getenv("OLMO2_BF16_GEMM") == nullptr ? bf16_training_gemm_path_description().c_str()
                                                        : "(OLMO2_BF16_GEMM set)");
}

// Without OLMO2_BF16_GEMM: the training products take onednn exactly where oneDNN uses
// AMX, else the batch-invariant product's path.
TEST(OneDnnChoice, DefaultIsOneDnnOnlyWithAmx) {
  if (std::getenv("OLMO2_BF16_GEMM") != nullptr) GTEST_SKIP() << "OLMO2_BF16_GEMM is set";
  EXPECT_NE(bf16_gemm_path(), Bf16GemmPath::OneDnn);
  EXPECT_EQ(bf16_training_gemm_path(), onednn_uses_amx() ? Bf16GemmPath::OneDnn : bf16_gemm_path());
  // A path named by the test override wins over the AMX default.
  set_bf16_gemm_path(Bf16GemmPath::Portable);
  EXPECT_EQ(bf16_training_gemm_path(), Bf16GemmPath::Portable);
  reset_bf16_gemm_path();
}

// Run by ctest with OLMO2_BF16_GEMM=onednn (tests/ops/CMakeLists.txt); skipped without it.
TEST(OneDnnChoice, EnvironmentNamesItForTrainingProductsOnly) {
  const char* env = std::getenv("OLMO2_BF16_GEMM");
  if (env == nullptr || std::string(env) != "onednn") GTEST_SKIP() << "OLMO2_BF16_GEMM is not onednn";
  if (!bf16_gemm_path_available(Bf16GemmPath::OneDnn)) {  // the variable is refused here
    EXPECT_THROW(bf16_training_gemm_path(), InputError);
    GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU";
  }
  EXPECT_EQ(bf16_training_gemm_path(), Bf16GemmPath::OneDnn);
  EXPECT_EQ(bf16_gemm_path(), detail::choose_bf16_gemm_path(nullptr, &bf16_gemm_path_available));
  EXPECT_EQ(bf16_training_gemm_path_description(), std::string("onednn (") + onednn_cpu_isa_name() + ")");
}

}  // namespace
}  // namespace olmo2::ops
