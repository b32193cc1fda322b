// The bf16-weight products y = bf16(x)·wᵀ (ops::linear, ops::linear_batch_invariant):
// within the fp32 error bound of a double reference, x rounded to bf16 first, flushes
// as VDPBF16PS, and bit-identical for a row whatever batch, position or thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/batch_invariant_gemm.h"
#include "ops/gemm.h"
#include "ops/threads.h"
#include "tests/ops/bf16_tensor.h"

namespace olmo2::ops {
namespace {

using test::random_bf16;
using test::random_tensor;
using test::same_bits;
using test::widen;

struct ThreadCountGuard {
  int saved = num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

// The bound of the lane sequence: each lane adds ⌈K/32⌉·2 terms by fmas, then 4
// additions, so the error is within (K'/16 + 5)·2⁻²⁴·Σ|x·w| (K' = K rounded up to 32).
double lane_bound(int64_t k, double abs_sum) {
  const double kp = double((k + 31) / 32 * 32);
  return (kp / 16 + 5) * 0x1p-24 * abs_sum + 1e-30;
}

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

const int64_t kShapes[][3] = {{1, 7, 1},    {3, 5, 31},   {4, 9, 32},    {5, 6, 33},  {2, 3, 64},
                              {7, 11, 100}, {1, 17, 1024}, {3, 5, 1025}, {2, 4, 4103}, {9, 33, 2048}};

TEST(Bf16Product, LinearWithinLaneBoundOfReference) {
  uint64_t seed = 100;
  for (const auto& s : kShapes) expect_near_reference(linear, s[0], s[1], s[2], seed += 2);
}

TEST(Bf16Product, BatchInvariantWithinLaneBoundOfReference) {
  uint64_t seed = 200;
  for (const auto& s : kShapes) expect_near_reference(linear_batch_invariant, s[0], s[1], s[2], seed += 2);
}

TEST(Bf16Product, RoundsXToBf16First) {
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

TEST(Bf16Product, FlushesSubnormalsAsVdpbf16ps) {
  // 2⁻⁶⁸·2⁻⁶⁸ = 2⁻¹³⁶ is subnormal in fp32: flushed to +0 / −0 (FTZ). A subnormal bf16
  // weight reads as zero (DAZ): 1·2⁻¹³⁰ adds nothing.
  const int64_t k = 3;
  Tensor x = Tensor::zeros({1, k}), w = Tensor::zeros({2, k}, DType::BF16), y = Tensor::zeros({1, 2});
  auto* wb = static_cast<uint16_t*>(w.view().data());
  x.f32()[0] = 0x1p-68f, x.f32()[1] = -0x1p-68f, x.f32()[2] = 1.0f;
  wb[0] = f32_to_bf16(0x1p-68f), wb[1] = f32_to_bf16(0x1p-68f);   // row 0: +2⁻¹³⁶ − 2⁻¹³⁶ → 0
  wb[3] = f32_to_bf16(0x1p-68f), wb[5] = f32_to_bf16(0x1p-130f);  // row 1: 2⁻¹³⁶ + 1·subnormal
  for (Product product : {Product(linear), Product(linear_batch_invariant)}) {
    product(x.view(), w.view(), y.view());
    EXPECT_EQ(y.f32()[0], 0.0f);
    EXPECT_EQ(y.f32()[1], 0.0f);
  }
}

// Row r of x alone, as a 1 × N product.
std::vector<float> row_alone(Product product, const Tensor& x, int64_t r, const Tensor& w) {
  const int64_t k = x.shape()[1], n = w.shape()[0];
  std::vector<float> out(static_cast<size_t>(n));
  product(TensorView(x.f32() + r * k, DType::F32, {1, k}), w.view(), TensorView(out.data(), DType::F32, {1, n}));
  return out;
}

void expect_batch_invariant(Product product) {
  const int64_t shapes[][2] = {{128, 19}, {2048, 300}, {37, 19}, {1000, 64}};
  const int64_t batch_sizes[] = {1, 2, 3, 5, 7, 16, 17, 64};
  uint64_t seed = 400;
  for (const auto& [k, n] : shapes) {
    const Tensor w = random_bf16({n, k}, ++seed), probe = random_tensor({1, k}, ++seed);
    const std::vector<float> alone = row_alone(product, probe, 0, w);
    for (int64_t m : batch_sizes) {
      SCOPED_TRACE("K=" + std::to_string(k) + " N=" + std::to_string(n) + " M=" + std::to_string(m));
      Tensor x = random_tensor({m, k}, ++seed), y = Tensor::zeros({m, n});
      product(x.view(), w.view(), y.view());
      for (int64_t r = 0; r < m; ++r)
        EXPECT_TRUE(same_bits(y.f32() + r * n, row_alone(product, x, r, w).data(), n)) << "row " << r;
      for (int64_t pos : {int64_t{0}, m / 2, m - 1}) {
        std::memcpy(x.f32() + pos * k, probe.f32(), static_cast<size_t>(k) * sizeof(float));
        product(x.view(), w.view(), y.view());
        EXPECT_TRUE(same_bits(y.f32() + pos * n, alone.data(), n)) << "probe at " << pos;
      }
    }
  }
}

void expect_thread_invariant(Product product) {
  ThreadCountGuard guard;
  const int64_t m = 17, k = 1100, n = 1000;
  const Tensor x = random_tensor({m, k}, 500), w = random_bf16({n, k}, 501);
  Tensor y1 = Tensor::zeros({m, n});
  set_num_threads(1);
  product(x.view(), w.view(), y1.view());
  for (int t : {2, 3}) {
    Tensor yt = Tensor::zeros({m, n});
    set_num_threads(t);
    product(x.view(), w.view(), yt.view());
    EXPECT_TRUE(same_bits(y1.f32(), yt.f32(), m * n)) << t << " threads";
  }
}

TEST(Bf16Product, BatchInvariantRowsAloneAndInAnyBatch) { expect_batch_invariant(linear_batch_invariant); }
TEST(Bf16Product, BatchInvariantSameBitsWithOneTwoThreeThreads) { expect_thread_invariant(linear_batch_invariant); }

TEST(Bf16Product, StridedRowsAndRefusals) {
  const int64_t m = 3, k = 40, n = 5;
  Tensor big = random_tensor({m, k + 8}, 600), yb = Tensor::zeros({m, n + 3});
  const TensorView x(big.f32() + 3, DType::F32, {m, k}, {k + 8, 1}, Device::CPU);
  const TensorView y(yb.f32(), DType::F32, {m, n}, {n + 3, 1}, Device::CPU);
  Tensor xc = Tensor::zeros({m, k}), yc = Tensor::zeros({m, n});
  for (int64_t i = 0; i < m; ++i) std::memcpy(xc.f32() + i * k, big.f32() + 3 + i * (k + 8), k * sizeof(float));
  const Tensor w = random_bf16({n, k}, 601);
  linear_batch_invariant(x, w.view(), y);
  linear_batch_invariant(xc.view(), w.view(), yc.view());
  for (int64_t i = 0; i < m; ++i) EXPECT_TRUE(same_bits(yb.f32() + i * (n + 3), yc.f32() + i * n, n));
  Tensor bad_y = Tensor::zeros({m, n + 1}), xb = Tensor::zeros({m, k}, DType::BF16);
  for (Product product : {Product(linear), Product(linear_batch_invariant)}) {
    EXPECT_THROW(product(xc.view(), w.view(), bad_y.view()), ShapeError);
    EXPECT_THROW(product(xb.view(), w.view(), yc.view()), ShapeError);
    Tensor x0 = Tensor::zeros({0, k}), y0 = Tensor::zeros({0, n});
    EXPECT_NO_THROW(product(x0.view(), w.view(), y0.view()));
  }
  // K = 0: every output is +0.
  Tensor x0 = Tensor::zeros({2, 0}), w0 = Tensor::zeros({3, 0}, DType::BF16), y0 = random_tensor({2, 3}, 602);
  linear_batch_invariant(x0.view(), w0.view(), y0.view());
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y0.f32()[i], 0.0f);
}

}  // namespace
}  // namespace olmo2::ops
