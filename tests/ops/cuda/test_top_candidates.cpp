// The CUDA top_candidates against the CPU op (ops/top_candidates.h). Skips without a GPU.
//
// Tolerances: the candidates (columns, and values bit for bit) and the row max must be
// identical; the Σexp is an fp64 sum on both sides, in another order and with the
// device's exp (≤ 1 ulp in fp64), so its f32 rounding may differ by one ulp at most:
// within 2^-23 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/top_candidates.h"
#include "tests/ops/cuda/cuda_test_util.h"

#ifdef OLMO2_HAVE_CUDA
#include "ops/cuda/kernels.h"
#endif

namespace olmo2::ops {
namespace {

#ifdef OLMO2_HAVE_CUDA
struct Out {
  Tensor values, columns, stats;
};

/// rows × stride host logits over `real` real columns; the rest 1e30 (would win if read).
/// kind 0: N(0, 3); 1: integers in [−2, 2] with −0 and +0 (ties everywhere); 2: all
/// equal; 3: N(0, 3) rounded to bf16 (realistic ties) with some −∞; 4: N(0, 3) with some
/// NaN and +∞ (a NaN ranks below every number on both backends).
Tensor make_logits(int64_t rows, int64_t stride, int64_t real, int kind, uint64_t seed) {
  Tensor t = Tensor::zeros({rows, stride});
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> level(-2, 2);
  float* x = t.f32();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < stride; ++j) {
      float v = 1e30f;
      if (j < real) {
        if (kind == 0) v = normal(rng);
        if (kind == 1) v = static_cast<float>(level(rng)), v = (v == 0.0f && (j & 1)) ? -0.0f : v;
        if (kind == 2) v = 0.5f;
        if (kind == 3) {
          uint32_t b;
          const float f = normal(rng);
          std::memcpy(&b, &f, 4);
          b &= 0xffff0000u;
          std::memcpy(&v, &b, 4);
          if (rng() % 97 == 0) v = -INFINITY;
        }
        if (kind == 4) {
          v = normal(rng);
          if (rng() % 13 == 0) v = std::nanf("");
          if (rng() % 211 == 0) v = INFINITY;
        }
      }
      x[i * stride + j] = v;
    }
  }
  return t;
}

Out run_op(const TensorView& logits, int64_t real, int64_t k, Device device) {
  const int64_t rows = logits.size(0);
  Out o{k > 0 ? Tensor::zeros({rows, k}, DType::F32, device) : Tensor(),
        k > 0 ? Tensor::zeros({rows, k}, DType::I32, device) : Tensor(), Tensor::zeros({rows, 2}, DType::F32, device)};
  if (device == Device::CUDA) {
    if (k > 0) test::poison(o.values.view()), test::poison(o.columns.view());
    test::poison(o.stats.view());
  }
  const TensorView none;
  (device == Device::CUDA ? cuda::top_candidates : cpu::top_candidates)(
      logits, real, k > 0 ? o.values.view() : none, k > 0 ? o.columns.view() : none, o.stats.view());
  return o;
}

void expect_same_bits(const TensorView& want, const TensorView& got, const std::string& what) {
  ASSERT_EQ(want.bytes(), got.bytes()) << what;
  const auto* a = static_cast<const uint32_t*>(want.data());
  const auto* b = static_cast<const uint32_t*>(got.data());
  int64_t bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (a[i] != b[i] && bad++ < 5) ADD_FAILURE() << what << " element " << i << ": cpu " << a[i] << " gpu " << b[i];
  }
  EXPECT_EQ(bad, 0) << what;
}
#endif

TEST(CudaTopCandidates, EqualsTheCpuOpBitForBit) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  struct Case {
    int64_t rows, real, cols, stride;
  };
  // OLMo 2's slice (100278 real of 100352), one split over 2 ranks, small rows, a padded
  // row stride, a row narrower than k, and no real column at all.
  const Case cases[] = {{5, 100278, 100352, 100352}, {3, 50139, 50176, 50176}, {4, 1000, 1000, 1003},
                        {2, 37, 40, 40},              {2, 0, 8, 8}};
  uint64_t seed = 1;
  for (const Case& c : cases) {
    for (int kind = 0; kind < 5; ++kind) {
      for (const int64_t k : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{20}, int64_t{64}, int64_t{256}}) {
        const std::string what = "real " + std::to_string(c.real) + " kind " + std::to_string(kind) + " k " +
                                 std::to_string(k);
        const Tensor host = make_logits(c.rows, c.stride, c.real, kind, seed++);
        const TensorView hv(host.view().data(), DType::F32, {c.rows, c.cols}, {c.stride, 1}, Device::CPU);
        const Tensor dev = test::to_device(host.view());
        const TensorView dv(dev.view().data(), DType::F32, {c.rows, c.cols}, {c.stride, 1}, Device::CUDA);
        const Out want = run_op(hv, c.real, k, Device::CPU);
        const Out got = run_op(dv, c.real, k, Device::CUDA);
        if (k > 0) {
          expect_same_bits(want.columns.view(), test::to_host(got.columns.view()).view(), what + " columns");
          expect_same_bits(want.values.view(), test::to_host(got.values.view()).view(), what + " values");
        }
        const Tensor stats = test::to_host(got.stats.view());
        for (int64_t r = 0; r < c.rows; ++r) {
          const float* w = want.stats.f32() + 2 * r;
          const float* g = stats.f32() + 2 * r;
          EXPECT_EQ(std::memcmp(w, g, 4), 0) << what << " row " << r << " max: cpu " << w[0] << " gpu " << g[0];
          if (std::isnan(w[1])) {
            EXPECT_TRUE(std::isnan(g[1])) << what << " row " << r << " Σexp over a NaN";
          } else {
            EXPECT_NEAR(g[1], w[1], std::ldexp(static_cast<double>(w[1]), -23)) << what << " row " << r << " Σexp";
          }
        }
      }
    }
  }
#endif
}

TEST(CudaTopCandidates, RefusesKAboveTheDeviceLimit) {
  OLMO2_REQUIRE_GPU();
#ifdef OLMO2_HAVE_CUDA
  const int64_t k = kMaxDeviceTopCandidates + 1;
  const Tensor logits = Tensor::zeros({1, 1000}, DType::F32, Device::CUDA);
  const Tensor values = Tensor::zeros({1, k}, DType::F32, Device::CUDA);
  const Tensor columns = Tensor::zeros({1, k}, DType::I32, Device::CUDA);
  EXPECT_THROW(cuda::top_candidates(logits.view(), 1000, values.view(), columns.view(), TensorView()), ShapeError);
#endif
}

}  // namespace
}  // namespace olmo2::ops
