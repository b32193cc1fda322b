// The helpers of the backend test's cases (backend_case.h).
#include "tests/ops/backend_ops/backend_case.h"

#include <cmath>
#include <cstring>
#include <random>

#include "ops/device_emulation.h"
#include "ops/dtype.h"
#include "ops/tensor_ops.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops::test {

std::map<std::string, OpCase>& op_cases() {
  static std::map<std::string, OpCase> cases;
  return cases;
}

RegisterOpCase::RegisterOpCase(const char* name, OpCase run) {
  if (!op_cases().emplace(name, run).second) ADD_FAILURE() << "two cases for op " << name;
}

bool device_is_emulated() { return device_emulated(); }

Tensor host_randn(std::vector<int64_t> shape, uint64_t seed, DType dtype, float scale) {
  return random_tensor_of(std::move(shape), seed, dtype, scale);
}

Tensor host_ints(int64_t n, int32_t lo, int32_t hi, uint64_t seed) {
  Tensor t = Tensor::zeros({n}, DType::I32);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  for (int64_t i = 0; i < n; ++i) t.i32()[i] = dist(rng);
  return t;
}

Tensor host_poisoned(std::vector<int64_t> shape, DType dtype) {
  Tensor t = Tensor::zeros(std::move(shape), dtype);
  std::memset(t.view().data(), 0xff, t.view().bytes());
  return t;
}

Tensor host_clone(const Tensor& t) {
  Tensor c = Tensor::zeros(t.shape(), t.dtype());
  if (t.view().bytes() > 0) std::memcpy(c.view().data(), t.view().data(), t.view().bytes());
  return c;
}

Tensor host_abs(const Tensor& x) {
  Tensor a = Tensor::zeros(x.shape(), x.dtype());
  std::memcpy(a.view().data(), x.view().data(), x.view().bytes());
  if (x.dtype() == DType::F32) {
    for (int64_t i = 0; i < a.numel(); ++i) a.f32()[i] = std::fabs(a.f32()[i]);
  } else {
    auto* p = static_cast<uint16_t*>(a.view().data());
    for (int64_t i = 0; i < a.numel(); ++i) p[i] &= 0x7fff;
  }
  return a;
}

Tensor to_dev(const Tensor& host) {
  Tensor d = Tensor::zeros(host.shape(), host.dtype(), Device::CUDA);
  ops::copy(host.view(), d.view());
  return d;
}

Tensor to_host_copy(const Tensor& dev) {
  Tensor h = Tensor::zeros(dev.shape(), dev.dtype());
  ops::copy(dev.view(), h.view());
  return h;
}

TensorView first_cols(const Tensor& t, int64_t cols) { return t.view().cols(0, cols); }

void expect_close(const std::string& what, const Tensor& want, const Tensor& got, std::vector<double> bound) {
  ASSERT_EQ(want.shape(), got.shape()) << what;
  ASSERT_EQ(got.device(), Device::CUDA) << what;
  if (device_is_emulated()) bound.assign(bound.size(), 0.0);
  const Tensor back = to_host_copy(got);
  const std::vector<double> a = dense(want.view().dim() <= 2 ? want.view() : want.view().reshape({want.numel()}));
  const std::vector<double> b = dense(back.view().dim() <= 2 ? back.view() : back.view().reshape({back.numel()}));
  EXPECT_TRUE(within_bounds(a, b, bound)) << what;
}

void expect_close(const std::string& what, const Tensor& want, const Tensor& got, double rel, double abs) {
  const std::vector<double> w = dense(want.view().dim() <= 2 ? want.view() : want.view().reshape({want.numel()}));
  expect_close(what, want, got, relative_bounds(w, rel, abs));
}

std::vector<double> scaled(const Tensor& mag, double scale) {
  std::vector<double> m = dense(mag.view().dim() <= 2 ? mag.view() : mag.view().reshape({mag.numel()}));
  for (double& x : m) x = std::isfinite(x) ? std::fabs(x) * scale : 0.0;
  return m;
}

std::vector<double> plus(std::vector<double> a, const std::vector<double>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) a[i] += b[i];
  return a;
}

void expect_same(const std::string& what, const Tensor& want, const Tensor& got) {
  ASSERT_EQ(want.shape(), got.shape()) << what;
  ASSERT_EQ(want.dtype(), got.dtype()) << what;
  const Tensor back = to_host_copy(got);
  const size_t es = dtype_size(want.dtype()), n = want.view().bytes();
  const auto* a = static_cast<const unsigned char*>(want.view().data());
  const auto* b = static_cast<const unsigned char*>(back.view().data());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) {
      ADD_FAILURE() << what << ": element " << i / es << " differs (byte " << i << ")";
      return;
    }
  }
}

std::vector<double> rope_bounds(const Tensor& x, int hd, double scale) {
  const std::vector<double> v = dense(x.view());
  std::vector<double> b(v.size());
  for (size_t e = 0; e < v.size(); ++e) {
    const size_t i = e % static_cast<size_t>(hd), half = static_cast<size_t>(hd / 2);
    const size_t partner = i < half ? e + half : e - half;
    b[e] = 16 * kU * scale * (std::fabs(v[e]) + std::fabs(v[partner]));
  }
  return b;
}

void expect_scalar(const std::string& what, double want, double got, double bound) {
  if (device_is_emulated()) bound = 0.0;
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what;
  } else if (!std::isfinite(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_LE(std::fabs(got - want), bound) << what << ": want " << want << " got " << got;
  }
}

}  // namespace olmo2::ops::test
