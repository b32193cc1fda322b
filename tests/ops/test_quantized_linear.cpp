// The quantized-weight products (ops/quantized_linear.h): quantize_weight against a plain
// reference written here (scales, bf16 rounding, half-even rounding, zero groups),
// dequantize_weight, linear_quantized against an f64 product of this file's own
// quantized activations and weights (the documented bound), batch and thread
// invariance, every path bitwise equal to the portable one, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/quantized_linear.h"
#include "ops/threads.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops {
namespace {

using test::random_tensor;

constexpr double kU = 1.0 / (1 << 24);  // f32 unit roundoff

// f32 → nearest bf16 value, ties to even (finite inputs): the reference's rounding.
float ref_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

// The reference quantization of one group: scale and values (the contract's words).
struct RefGroup {
  float s;
  std::vector<int> q;
};
RefGroup ref_quantize(const float* w, int64_t len, int qmax) {
  float amax = 0;
  for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(w[i]));
  RefGroup g{ref_bf16(amax / static_cast<float>(qmax)), {}};
  for (int64_t i = 0; i < len; ++i) {
    double r = g.s == 0 ? 0.0 : std::nearbyint(double(w[i] / g.s));  // w / s in f32, then half-even
    g.q.push_back(static_cast<int>(std::clamp(r, double(-qmax), double(qmax))));
  }
  return g;
}

// ŵ by the reference, [N, K] as doubles.
std::vector<double> ref_dequantized(const Tensor& w, QuantFormat f, int64_t group) {
  const int64_t n = w.shape()[0], k = w.shape()[1];
  std::vector<double> out(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < k / group; ++g) {
      const RefGroup rg = ref_quantize(w.f32() + r * k + g * group, group, f == QuantFormat::Int8 ? 127 : 7);
      for (int64_t i = 0; i < group; ++i) out[r * k + g * group + i] = double(rg.s) * rg.q[i];
    }
  return out;
}

// The reference's quantized activations: x̂ = d·q per block of 32 (d = F(amax / 127)).
std::vector<double> ref_activations(const float* x, int64_t k, std::vector<double>* err_bound) {
  std::vector<double> out(static_cast<size_t>(k));
  for (int64_t b = 0; b < k / 32; ++b) {
    const RefGroup g = [&] {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
      RefGroup r{amax / 127.0f, {}};
      for (int i = 0; i < 32; ++i)
        r.q.push_back(r.s == 0 ? 0 : static_cast<int>(std::nearbyint(double(x[b * 32 + i] / r.s))));
      return r;
    }();
    for (int i = 0; i < 32; ++i) {
      EXPECT_LE(std::abs(g.q[i]), 127);
      out[b * 32 + i] = double(g.s) * g.q[i];
      // |x − x̂| ≤ d·(1/2 + 128u): the rounding of x/d to an integer and of the quotient.
      if (err_bound) (*err_bound)[b * 32 + i] = double(g.s) * (0.5 + 128 * kU);
    }
  }
  return out;
}

Tensor product(const Tensor& x, const QuantizedWeight& w) {
  Tensor y = Tensor::zeros({x.shape()[0], w.n});
  linear_quantized(x.view(), w, y.view());
  return y;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, 4 * size_t(n)) == 0; }

struct Format {
  QuantFormat f;
  int64_t group;  // 0: K (one scale per output channel)
};
const Format kFormats[] = {{QuantFormat::Int8, 32}, {QuantFormat::Int8, 0}, {QuantFormat::Int8, 64},
                           {QuantFormat::Int4, 32}, {QuantFormat::Int4, 64}};

TEST(QuantizeWeight, MatchesThePlainReferenceWithZeroGroupsAndBf16Input) {
  for (const Format& fm : kFormats)
    for (DType dt : {DType::F32, DType::BF16}) {
      const int64_t n = 5, k = 192, group = fm.group ? fm.group : k;
      Tensor w = random_tensor({n, k}, 3, 0.1f);
      for (int64_t i = 0; i < group; ++i) w.f32()[2 * k + i] = 0.0f;  // a zero group in row 2
      for (int64_t i = 0; i < n * k; ++i) w.f32()[i] = dt == DType::BF16 ? ref_bf16(w.f32()[i]) : w.f32()[i];
      std::vector<uint16_t> bits(static_cast<size_t>(n * k));
      if (dt == DType::BF16) {
        for (int64_t i = 0; i < n * k; ++i) {
          uint32_t u;
          std::memcpy(&u, &w.f32()[i], 4);
          bits[i] = static_cast<uint16_t>(u >> 16);
        }
      }
      const TensorView wv = dt == DType::F32 ? w.view() : TensorView(bits.data(), DType::BF16, {n, k});
      const QuantizedWeight q = quantize_weight(wv, fm.f, group);
      const std::string what = std::string(quant_format_name(fm.f)) + " group " + std::to_string(group);
      ASSERT_EQ(q.n, n);
      ASSERT_EQ(q.k, k);
      ASSERT_EQ(q.group, group);
      EXPECT_EQ(q.bytes(), n * k / (fm.f == QuantFormat::Int8 ? 1 : 2) + 2 * n * (k / group)) << what;
      const std::vector<double> ref = ref_dequantized(w, fm.f, group);
      const Tensor dq = dequantize_weight(q);
      for (int64_t i = 0; i < n * k; ++i) ASSERT_EQ(double(dq.f32()[i]), ref[i]) << what << " element " << i;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t g = 0; g < k / group; ++g) {
          const uint16_t s = static_cast<const uint16_t*>(q.scales.view().data())[r * (k / group) + g];
          const RefGroup rg = ref_quantize(w.f32() + r * k + g * group, group, fm.f == QuantFormat::Int8 ? 127 : 7);
          uint32_t u = uint32_t(s) << 16;
          float sf;
          std::memcpy(&sf, &u, 4);
          EXPECT_EQ(sf, rg.s) << what << " scale of row " << r << " group " << g;
          if (r == 2 && g == 0) {
            EXPECT_EQ(sf, 0.0f) << what;
          }
        }
    }
}

TEST(QuantizeWeight, SameBytesWithOneOrTwoThreads) {
  const int saved = num_threads();
  Tensor w = random_tensor({37, 320}, 4, 0.1f);
  for (QuantFormat f : {QuantFormat::Int8, QuantFormat::Int4}) {
    set_num_threads(1);
    const QuantizedWeight one = quantize_weight(w.view(), f, 64);
    set_num_threads(2);
    const QuantizedWeight two = quantize_weight(w.view(), f, 64);
    EXPECT_EQ(std::memcmp(one.values.view().data(), two.values.view().data(), one.values.view().bytes()), 0)
        << quant_format_name(f);
    EXPECT_EQ(std::memcmp(one.scales.view().data(), two.scales.view().data(), one.scales.view().bytes()), 0)
        << quant_format_name(f);
  }
  set_num_threads(saved);
}

TEST(QuantizeWeight, RoundsHalfToEvenAndReachesQmax) {
  // amax 127 (int8) or 7 (int4): s = 1 exactly, so w/s = w and the ties are visible.
  for (QuantFormat f : {QuantFormat::Int8, QuantFormat::Int4}) {
    const float qmax = f == QuantFormat::Int8 ? 127.0f : 7.0f;
    std::vector<float> w(64, 0.0f);
    const float vals[] = {qmax, 2.5f, 3.5f, -2.5f, 0.5f, -0.5f, 1.5f, -qmax, 5.49f, -4.5f};
    const int want[] = {int(qmax), 2, 4, -2, 0, 0, 2, -int(qmax), 5, -4};
    for (int i = 0; i < 10; ++i) w[i] = w[40 + i] = vals[i];
    const Tensor dq = dequantize_weight(quantize_weight(TensorView(w.data(), DType::F32, {1, 64}), f, 32));
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(dq.f32()[i], float(want[i])) << quant_format_name(f) << " value " << vals[i];
      EXPECT_EQ(dq.f32()[40 + i], float(want[i])) << quant_format_name(f) << " value " << vals[i] << " (high half)";
    }
  }
}

TEST(QuantizeWeight, RefusesBadGroupsShapesAndValues) {
  Tensor w = random_tensor({4, 128}, 5);
  EXPECT_THROW(quantize_weight(w.view(), QuantFormat::Int4, 128), InputError);
  EXPECT_THROW(quantize_weight(w.view(), QuantFormat::Int8, 48), InputError);
  EXPECT_THROW(quantize_weight(w.view(), QuantFormat::Int8, 0), InputError);
  EXPECT_THROW(quantize_weight(w.view(), QuantFormat::Int8, 96), InputError);  // does not divide 128
  try {
    quantize_weight(w.view(), QuantFormat::Int8, 48);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("group 48"), std::string::npos) << e.what();
  }
  Tensor odd = random_tensor({4, 100}, 5);
  EXPECT_THROW(quantize_weight(odd.view(), QuantFormat::Int8, 100), InputError);  // not a multiple of 32
  EXPECT_THROW(quantize_weight(w.view().reshape({512}), QuantFormat::Int8, 32), ShapeError);
  w.f32()[3 * 128 + 7] = NAN;
  try {
    quantize_weight(w.view(), QuantFormat::Int8, 32);
    ADD_FAILURE() << "a NaN weight was quantized";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 7]"), std::string::npos) << e.what();
  }
}

// y against the f64 product of this file's x̂ and ŵ: (B/2 + 6)·u·Σ|x̂ŵ| for the fp32
// sequence (B/2 fmas per lane, four tree additions, the rounded block scale), and
// against x·ŵᵀ with the activations' quantization error Σ d_b(1/2 + 128u)|ŵ| added.
TEST(LinearQuantized, WithinTheDocumentedBoundOfTheF64Product) {
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape s : {Shape{1, 7, 96}, Shape{3, 33, 160}, Shape{17, 9, 384}, Shape{64, 5, 192}})
    for (const Format& fm : kFormats) {
      const int64_t group = fm.group ? fm.group : s.k;
      if (s.k % group != 0) continue;
      Tensor x = random_tensor({s.m, s.k}, 7), w = random_tensor({s.n, s.k}, 8, 0.05f);
      for (int i = 0; i < 32; ++i) x.f32()[32 + i] = 0.0f;  // a zero block
      const QuantizedWeight q = quantize_weight(w.view(), fm.f, group);
      const Tensor y = product(x, q);
      const std::vector<double> wh = ref_dequantized(w, fm.f, group);
      const std::string what = std::string(quant_format_name(fm.f)) + " group " + std::to_string(group) + " m " +
                               std::to_string(s.m) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k);
      for (int64_t i = 0; i < s.m; ++i) {
        std::vector<double> ebound(static_cast<size_t>(s.k));
        const std::vector<double> xh = ref_activations(x.f32() + i * s.k, s.k, &ebound);
        for (int64_t j = 0; j < s.n; ++j) {
          double ref = 0, mag = 0, exact = 0, act = 0;
          for (int64_t p = 0; p < s.k; ++p) {
            ref += xh[p] * wh[j * s.k + p];
            mag += std::fabs(xh[p] * wh[j * s.k + p]);
            exact += double(x.f32()[i * s.k + p]) * wh[j * s.k + p];
            act += ebound[p] * std::fabs(wh[j * s.k + p]);
          }
          const double fbound = (double(s.k / 32) / 2 + 6) * kU * mag * (1 + 1e-9);
          const double got = y.f32()[i * s.n + j];
          ASSERT_LE(std::fabs(got - ref), fbound) << what << " y[" << i << ", " << j << "]";
          ASSERT_LE(std::fabs(got - exact), fbound + act) << what << " y[" << i << ", " << j << "] vs x·ŵ";
        }
      }
    }
}

TEST(LinearQuantized, BitIdenticalAloneInBatchesAndAcrossThreadCounts) {
  const int saved = num_threads();
  const int64_t m = 64, n = 37, k = 416;
  Tensor x = random_tensor({m, k}, 11), w = random_tensor({n, k}, 12, 0.05f);
  x.f32()[5 * k + 3] = NAN;  // a NaN stays in its row
  for (const Format& fm : {Format{QuantFormat::Int8, 32}, Format{QuantFormat::Int4, 32}}) {
    const QuantizedWeight q = quantize_weight(w.view(), fm.f, fm.group);
    set_num_threads(2);
    const Tensor full = product(x, q);
    for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(full.f32()[5 * n + j]));
    EXPECT_FALSE(std::isnan(full.f32()[6 * n]));
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (int64_t len : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{64}})
        for (int64_t start : {int64_t{0}, int64_t{6}, m - len})
          if (start + len <= m) {
            Tensor part = Tensor::zeros({len, n});
            linear_quantized(x.view().rows(start, start + len), q, part.view());
            for (int64_t r = 0; r < len; ++r)
              ASSERT_TRUE(same_bits(part.f32() + r * n, full.f32() + (start + r) * n, n))
                  << quant_format_name(fm.f) << " rows " << start << "+" << len << " row " << r << " threads "
                  << threads;
          }
    }
  }
  set_num_threads(saved);
}

TEST(LinearQuantized, StridedRowsOfXAndYGiveTheContiguousBits) {
  const int64_t m = 5, n = 11, k = 128, pad = 7;
  Tensor wide = random_tensor({m, k + pad}, 31), w = random_tensor({n, k}, 32, 0.05f);
  Tensor x = Tensor::zeros({m, k}), y_wide = Tensor::zeros({m, n + pad});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) x.f32()[i * k + p] = wide.f32()[i * (k + pad) + pad + p];
  const QuantizedWeight q = quantize_weight(w.view(), QuantFormat::Int4, 64);
  const Tensor want = product(x, q);
  linear_quantized(wide.view().cols(pad, pad + k), q, y_wide.view().cols(0, n));
  for (int64_t i = 0; i < m; ++i)
    EXPECT_TRUE(same_bits(y_wide.f32() + i * (n + pad), want.f32() + i * n, n)) << "row " << i;
}

TEST(LinearQuantized, EveryAvailablePathGivesThePortableBits) {
  const int64_t k = 352;  // 11 blocks: an odd last block
  for (const Format& fm : kFormats) {
    const int64_t group = fm.group ? fm.group : k;
    if (k % group != 0) continue;
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{64}}) {
      Tensor x = random_tensor({m, k}, 21), w = random_tensor({13, k}, 22, 0.05f);
      const QuantizedWeight q = quantize_weight(w.view(), fm.f, group);
      set_quantized_path(QuantizedPath::Portable);
      const Tensor want = product(x, q);
      for (QuantizedPath p : {QuantizedPath::Avx2, QuantizedPath::Avx512Vnni}) {
        if (!quantized_path_available(p)) {
          std::printf("[ skipped  ] path %s: this CPU lacks it\n", quantized_path_name(p));
          continue;
        }
        set_quantized_path(p);
        const Tensor got = product(x, q);
        EXPECT_TRUE(same_bits(got.f32(), want.f32(), m * 13))
            << quantized_path_name(p) << " " << quant_format_name(fm.f) << " group " << group << " m " << m;
      }
      reset_quantized_path();
    }
  }
}

TEST(LinearQuantized, RefusesBadShapesDevicesAndMissingPaths) {
  Tensor x = random_tensor({2, 64}, 1), w = random_tensor({3, 64}, 2);
  const QuantizedWeight q = quantize_weight(w.view(), QuantFormat::Int8, 32);
  Tensor y = Tensor::zeros({2, 3}), bad_y = Tensor::zeros({2, 4}), bad_x = random_tensor({2, 96}, 1);
  EXPECT_THROW(linear_quantized(bad_x.view(), q, y.view()), ShapeError);
  EXPECT_THROW(linear_quantized(x.view(), q, bad_y.view()), ShapeError);
  EXPECT_THROW(linear_quantized(x.view(), QuantizedWeight{}, y.view()), ShapeError);
  const TensorView on_gpu(x.f32(), DType::F32, {2, 64}, Device::CUDA);
  try {
    linear_quantized(on_gpu, q, y.view());
    ADD_FAILURE() << "a GPU view was accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("CPU only"), std::string::npos) << e.what();
  }
  for (QuantizedPath p : {QuantizedPath::Avx2, QuantizedPath::Avx512Vnni}) {
    if (!quantized_path_available(p)) {
      EXPECT_THROW(set_quantized_path(p), ShapeError) << quantized_path_name(p);
    }
  }
}

// Run by ctest with OLMO2_QUANT_GEMM=bogus (tests/ops/CMakeLists.txt).
TEST(QuantizedPathEnvironment, ABogusNameIsRefusedNamingIt) {
  const char* env = std::getenv("OLMO2_QUANT_GEMM");
  if (env == nullptr || std::string(env) != "bogus") GTEST_SKIP() << "run with OLMO2_QUANT_GEMM=bogus";
  Tensor x = random_tensor({1, 32}, 1), w = random_tensor({2, 32}, 2), y = Tensor::zeros({1, 2});
  const QuantizedWeight q = quantize_weight(w.view(), QuantFormat::Int8, 32);
  try {
    linear_quantized(x.view(), q, y.view());
    ADD_FAILURE() << "OLMO2_QUANT_GEMM=bogus was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("OLMO2_QUANT_GEMM=bogus"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace olmo2::ops
