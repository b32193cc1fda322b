// The bf16-weight products y = bf16(x)·wᵀ (ops::linear, ops::linear_batch_invariant),
// on every code path this CPU has (ops/bf16_gemm.h), each forced in turn: within the
// fp32 error bound of a double reference, x rounded to bf16 first, flushes as
// VDPBF16PS, bit-identical to the portable path, and bit-identical for a row whatever
// batch, position or thread count.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "ops/batch_invariant_gemm.h"
#include "ops/bf16_gemm.h"
#include "ops/cpu/bf16_gemm_detail.h"
#include "ops/gemm.h"
#include "ops/threads.h"
#include "tests/ops/bf16_tensor.h"

namespace olmo2::ops {

// gtest prints a path by its name.
void PrintTo(Bf16GemmPath path, std::ostream* os) { *os << bf16_gemm_path_name(path); }

namespace {

using test::lane_bound;
using test::random_bf16;
using test::random_tensor;
using test::same_bits;
using test::widen;

struct ThreadCountGuard {
  int saved = num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

// Each test runs once per path, that path forced; a path this CPU lacks is skipped.
class Bf16Product : public ::testing::TestWithParam<Bf16GemmPath> {
 protected:
  void SetUp() override {
    if (!bf16_gemm_path_available(GetParam()))
      GTEST_SKIP() << "this CPU lacks " << bf16_gemm_path_name(GetParam());
    set_bf16_gemm_path(GetParam());
  }
  void TearDown() override { reset_bf16_gemm_path(); }
};

INSTANTIATE_TEST_SUITE_P(Paths, Bf16Product,
                         ::testing::Values(Bf16GemmPath::Avx512Bf16, Bf16GemmPath::Avx2,
                                           Bf16GemmPath::Portable),
                         [](const auto& info) {
                           return std::string(bf16_gemm_path_name(info.param));
                         });

using Product = void (*)(const TensorView&, const TensorView&, const TensorView&);

void expect_near_reference(Product product, int64_t m, int64_t n, int64_t k, uint64_t seed) {
  SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
  const Tensor x = random_tensor({m, k}, seed), w = random_bf16({n, k}, seed + 1);
  Tensor y = Tensor::zeros({m, n});
  product(x.view(), w.view(), y.view());
  const test::Reference ref = test::bf16_product_reference(x, widen(w));
  for (int64_t i = 0; i < m * n; ++i) {
    const double bound = lane_bound(k, ref.abs_sum[static_cast<size_t>(i)]);
    ASSERT_NEAR(y.f32()[i], ref.value[static_cast<size_t>(i)], bound) << "element " << i;
  }
}

const int64_t kShapes[][3] = {{1, 7, 1},    {3, 5, 31},   {4, 9, 32},    {5, 6, 33},
                              {2, 3, 64},   {7, 11, 100}, {1, 17, 1024}, {3, 5, 1025},
                              {2, 4, 4103}, {9, 33, 2048}};

TEST_P(Bf16Product, LinearWithinLaneBoundOfReference) {
  uint64_t seed = 100;
  for (const auto& s : kShapes) expect_near_reference(linear, s[0], s[1], s[2], seed += 2);
}

TEST_P(Bf16Product, BatchInvariantWithinLaneBoundOfReference) {
  uint64_t seed = 200;
  for (const auto& s : kShapes)
    expect_near_reference(linear_batch_invariant, s[0], s[1], s[2], seed += 2);
}

// The path's bits against the portable path's, for x of scale 1 and w of `w_scale`.
void expect_portable_bits(int64_t m, int64_t n, int64_t k, uint64_t seed, float w_scale) {
  SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
  const Tensor x = random_tensor({m, k}, seed), w = random_bf16({n, k}, seed + 1, w_scale);
  Tensor y = Tensor::zeros({m, n}), ref = Tensor::zeros({m, n});
  linear_batch_invariant(x.view(), w.view(), y.view());
  detail::linear_bf16(x.view(), w.view(), ref.view(), Bf16GemmPath::Portable);
  for (int64_t i = 0; i < m * n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(y.f32()[i]), std::bit_cast<uint32_t>(ref.f32()[i]))
        << "element " << i << ": " << y.f32()[i] << " vs portable " << ref.f32()[i];
}

TEST_P(Bf16Product, SameBitsAsPortableForEveryEdgeTile) {
  // Every tile size up to 9 × 13 and K around the 32-element group.
  uint64_t seed = 700;
  for (int64_t k : {1, 31, 32, 33, 95})
    for (int64_t m = 1; m <= 9; ++m)
      for (int64_t n = 1; n <= 13; ++n) expect_portable_bits(m, n, k, seed += 2, 1.0f);
}

TEST_P(Bf16Product, SameBitsAsPortableAcrossKBlocks) {
  // K past the driver's K blocks (4096 on the avx512bf16 path, 8192 on avx2) with and
  // without a partial group; M = 37.
  uint64_t seed = 800;
  for (int64_t k : {1023, 1024, 1025, 2048, 2081, 4103, 9000})
    expect_portable_bits(5, 17, k, seed += 2, 1.0f);
  expect_portable_bits(1, 7, 17000, seed += 2, 1.0f);
  expect_portable_bits(37, 29, 300, seed += 2, 1.0f);
}

TEST_P(Bf16Product, SameBitsAsPortableNearTheSubnormals) {
  // w around 2⁻¹²²: some w are subnormal bf16 (read as zero), products and partial sums
  // cross 2⁻¹²⁶ (flushed) — where the paths would part if one flushed differently.
  uint64_t seed = 900;
  for (int64_t k : {64, 333, 2048}) expect_portable_bits(6, 13, k, seed += 2, 0x1p-122f);
}

TEST_P(Bf16Product, RoundsXToBf16First) {
  const int64_t m = 4, n = 6, k = 70;
  const Tensor x = random_tensor({m, k}, 300), w = random_bf16({n, k}, 301);
  Tensor xr = Tensor::zeros({m, k});
  for (int64_t i = 0; i < m * k; ++i) xr.f32()[i] = round_bf16(x.f32()[i]);
  for (Product product : {Product(linear), Product(linear_batch_invariant)}) {
    Tensor y = Tensor::zeros({m, n}), yr = Tensor::zeros({m, n});
    product(x.view(), w.view(), y.view());
    product(xr.view(), w.view(), yr.view());
    EXPECT_TRUE(same_bits(y.f32(), yr.f32(), m * n));
  }
}

TEST_P(Bf16Product, FlushesSubnormalsAsVdpbf16ps) {
  // 2⁻⁶⁸·2⁻⁶⁸ = 2⁻¹³⁶ is subnormal in fp32: flushed to +0 / −0 (FTZ). A subnormal bf16
  // weight reads as zero (DAZ): 1·2⁻¹³⁰ adds nothing.
  const int64_t k = 3;
  Tensor x = Tensor::zeros({1, k}), w = Tensor::zeros({2, k}, DType::BF16),
         y = Tensor::zeros({1, 2});
  auto* wb = static_cast<uint16_t*>(w.view().data());
  x.f32()[0] = 0x1p-68f, x.f32()[1] = -0x1p-68f, x.f32()[2] = 1.0f;
  wb[0] = f32_to_bf16(0x1p-68f), wb[1] = f32_to_bf16(0x1p-68f);  // row 0: +2⁻¹³⁶ − 2⁻¹³⁶ → 0
  wb[3] = f32_to_bf16(0x1p-68f), wb[5] = f32_to_bf16(0x1p-130f);  // row 1: 2⁻¹³⁶ + 1·subnormal
  for (Product product : {Product(linear), Product(linear_batch_invariant)}) {
    product(x.view(), w.view(), y.view());
    EXPECT_EQ(y.f32()[0], 0.0f);
    EXPECT_EQ(y.f32()[1], 0.0f);
  }
}

// Row r of x alone, as a 1 × N product.
std::vector<float> row_alone(const Tensor& x, int64_t r, const Tensor& w) {
  const int64_t k = x.shape()[1], n = w.shape()[0];
  std::vector<float> out(static_cast<size_t>(n));
  linear_batch_invariant(TensorView(x.f32() + r * k, DType::F32, {1, k}), w.view(),
                         TensorView(out.data(), DType::F32, {1, n}));
  return out;
}

TEST_P(Bf16Product, RowsAloneAndInAnyBatch) {
  // K, N: edges of the tiles and groups; K past the driver's K blocks.
  const int64_t shapes[][2] = {{128, 19}, {2048, 300}, {37, 19}, {1000, 64},
                               {1025, 7}, {4500, 5},   {9000, 3}};
  const int64_t batch_sizes[] = {1, 2, 3, 5, 7, 16, 17, 37, 64};
  uint64_t seed = 400;
  for (const auto& [k, n] : shapes) {
    const Tensor w = random_bf16({n, k}, ++seed), probe = random_tensor({1, k}, ++seed);
    const std::vector<float> alone = row_alone(probe, 0, w);
    for (int64_t m : batch_sizes) {
      SCOPED_TRACE("K=" + std::to_string(k) + " N=" + std::to_string(n) +
                   " M=" + std::to_string(m));
      Tensor x = random_tensor({m, k}, ++seed), y = Tensor::zeros({m, n});
      linear_batch_invariant(x.view(), w.view(), y.view());
      for (int64_t r = 0; r < m; ++r)
        EXPECT_TRUE(same_bits(y.f32() + r * n, row_alone(x, r, w).data(), n)) << "row " << r;
      for (int64_t pos : {int64_t{0}, m / 2, m - 1}) {
        std::memcpy(x.f32() + pos * k, probe.f32(), static_cast<size_t>(k) * sizeof(float));
        linear_batch_invariant(x.view(), w.view(), y.view());
        EXPECT_TRUE(same_bits(y.f32() + pos * n, alone.data(), n)) << "probe at " << pos;
      }
    }
  }
}

TEST_P(Bf16Product, SameBitsWithOneTwoThreeThreads) {
  ThreadCountGuard guard;
  for (const auto& [m, n, k] :
       {std::array<int64_t, 3>{17, 1000, 1100}, std::array<int64_t, 3>{1, 4099, 2048}}) {
    SCOPED_TRACE("M=" + std::to_string(m));
    const Tensor x = random_tensor({m, k}, 500), w = random_bf16({n, k}, 501);
    Tensor y1 = Tensor::zeros({m, n});
    set_num_threads(1);
    linear_batch_invariant(x.view(), w.view(), y1.view());
    for (int t : {2, 3}) {
      Tensor yt = Tensor::zeros({m, n});
      set_num_threads(t);
      linear_batch_invariant(x.view(), w.view(), yt.view());
      EXPECT_TRUE(same_bits(y1.f32(), yt.f32(), m * n)) << t << " threads";
    }
  }
}

TEST(Bf16ProductViews, StridedRowsAndRefusals) {
  const int64_t m = 3, k = 40, n = 5;
  Tensor big = random_tensor({m, k + 8}, 600), yb = Tensor::zeros({m, n + 3});
  const TensorView x(big.f32() + 3, DType::F32, {m, k}, {k + 8, 1}, Device::CPU);
  const TensorView y(yb.f32(), DType::F32, {m, n}, {n + 3, 1}, Device::CPU);
  Tensor xc = Tensor::zeros({m, k}), yc = Tensor::zeros({m, n});
  for (int64_t i = 0; i < m; ++i)
    std::memcpy(xc.f32() + i * k, big.f32() + 3 + i * (k + 8), k * sizeof(float));
  const Tensor w = random_bf16({n, k}, 601);
  linear_batch_invariant(x, w.view(), y);
  linear_batch_invariant(xc.view(), w.view(), yc.view());
  for (int64_t i = 0; i < m; ++i)
    EXPECT_TRUE(same_bits(yb.f32() + i * (n + 3), yc.f32() + i * n, n));
  Tensor bad_y = Tensor::zeros({m, n + 1}), xb = Tensor::zeros({m, k}, DType::BF16);
  for (Product product : {Product(linear), Product(linear_batch_invariant)}) {
    EXPECT_THROW(product(xc.view(), w.view(), bad_y.view()), ShapeError);
    EXPECT_THROW(product(xb.view(), w.view(), yc.view()), ShapeError);
    Tensor x0 = Tensor::zeros({0, k}), y0 = Tensor::zeros({0, n});
    EXPECT_NO_THROW(product(x0.view(), w.view(), y0.view()));
  }
  // K = 0: every output is +0.
  Tensor x0 = Tensor::zeros({2, 0}), w0 = Tensor::zeros({3, 0}, DType::BF16),
         y0 = random_tensor({2, 3}, 602);
  linear_batch_invariant(x0.view(), w0.view(), y0.view());
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y0.f32()[i], 0.0f);
}

}  // namespace
}  // namespace olmo2::ops
