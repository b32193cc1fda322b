// The window and the RoPE frequencies through the dispatcher on Device::CUDA views: the
// emulated device (OLMO2_DEVICE_EMULATION=1, ctest's "ops_window_test.emulated." tests)
// runs the CPU kernels, so the results are the CPU's bit for bit; on a real GPU the CUDA
// kernels, within the per-element bounds of tests/ops/attention_bounds.h and, for RoPE,
// 16u of the rotated pair's size (docs/architecture.md §2, §10). Skipped, saying why,
// with neither.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/device_emulation.h"
#include "ops/paged_attention.h"
#include "ops/rope.h"
#include "ops/tensor_ops.h"
#include "tests/ops/attention_bounds.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops {
namespace {

using test::random_tensor;

Tensor on_device(const Tensor& host) {
  Tensor d = Tensor::zeros(host.shape(), host.dtype(), Device::CUDA);
  copy(host.view(), d.view());
  return d;
}

Tensor on_host(const Tensor& dev) {
  Tensor h = Tensor::zeros(dev.shape(), dev.dtype());
  copy(dev.view(), h.view());
  return h;
}

void expect_same(const Tensor& want, const Tensor& got, const std::vector<double>& bound, const std::string& what) {
  if (device_emulated()) {
    EXPECT_EQ(std::memcmp(want.f32(), got.f32(), sizeof(float) * want.numel()), 0) << what;
  } else {
    test::expect_close(want.view(), got.view(), bound, what);
  }
}

// RoPE between two backends: 16u of scaling·(|x₁| + |x₂|) per element of a pair.
std::vector<double> rope_bounds(const Tensor& x, int64_t hd, double scaling) {
  const int64_t half = hd / 2;
  std::vector<double> b(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t base = i - i % hd, j = i % hd % half;
    b[static_cast<size_t>(i)] = 16 * test::kU * scaling * (std::fabs(x.f32()[base + j]) + std::fabs(x.f32()[base + j + half]));
  }
  return b;
}

TEST(WindowOps, OnTheEmulatedDeviceAsOnTheCpu) {
  OLMO2_REQUIRE_DEVICE();
  const int nh = 4, nkv = 2;
  const int64_t hd = 16, t_len = 6, s_len = 20, window = 5;
  const Tensor q = random_tensor({t_len, nh * hd}, 81), k = random_tensor({s_len, nkv * hd}, 82),
               v = random_tensor({s_len, nkv * hd}, 83), r = random_tensor({t_len, nh * hd}, 84);
  const Tensor gq = on_device(q), gk = on_device(k), gv = on_device(v), gr = on_device(r);

  Tensor out = Tensor::zeros({t_len, nh * hd}), gout = Tensor::zeros({t_len, nh * hd}, DType::F32, Device::CUDA);
  causal_attention(q.view(), k.view(), v.view(), nh, nkv, out.view(), DType::F32, window);
  causal_attention(gq.view(), gk.view(), gv.view(), nh, nkv, gout.view(), DType::F32, window);
  const std::vector<double> rd = test::dense(r.view());
  const test::AttentionExpected e = test::attention(test::dense(q.view()), test::dense(k.view()), test::dense(v.view()),
                                                    t_len, s_len, nh, nkv, hd, window, false, &rd);
  expect_same(out, on_host(gout), e.out.between_two(), "causal_attention");
  const float ml = causal_attention_max_logit(q.view(), k.view(), nh, nkv, window);
  const float gml = causal_attention_max_logit(gq.view(), gk.view(), nh, nkv, window);
  EXPECT_NEAR(gml, ml, device_emulated() ? 0.0f : 1e-5f * std::abs(ml));

  Tensor dq = Tensor::zeros({t_len, nh * hd}), dk = Tensor::zeros({s_len, nkv * hd}), dv = Tensor::zeros({s_len, nkv * hd});
  Tensor gdq = Tensor::zeros({t_len, nh * hd}, DType::F32, Device::CUDA),
         gdk = Tensor::zeros({s_len, nkv * hd}, DType::F32, Device::CUDA),
         gdv = Tensor::zeros({s_len, nkv * hd}, DType::F32, Device::CUDA);
  causal_attention_backward(q.view(), k.view(), v.view(), r.view(), nh, nkv, dq.view(), dk.view(), dv.view(), window);
  causal_attention_backward(gq.view(), gk.view(), gv.view(), gr.view(), nh, nkv, gdq.view(), gdk.view(), gdv.view(),
                            window);
  expect_same(dq, on_host(gdq), e.dq.between_two(), "dq");
  expect_same(dk, on_host(gdk), e.dk.between_two(), "dk");
  expect_same(dv, on_host(gdv), e.dv.between_two(), "dv");

  // Paged: the keys in blocks of 4 in order, blocks 0 and 1 freed (the first row, at 14,
  // sees 10 … 14).
  std::vector<int32_t> table = {-1, -1, 2, 3, 4};
  Tensor pout = Tensor::zeros({t_len, nh * hd}), gpout = Tensor::zeros({t_len, nh * hd}, DType::F32, Device::CUDA);
  paged_attention(q.view(), k.view(), v.view(), 4, {{0, t_len, s_len - t_len, table}}, nh, nkv, pout.view(),
                  DType::F32, window);
  paged_attention(gq.view(), gk.view(), gv.view(), 4, {{0, t_len, s_len - t_len, table}}, nh, nkv, gpout.view(),
                  DType::F32, window);
  expect_same(pout, on_host(gpout), e.out.between_two(), "paged_attention");  // the same keys, in order

  RopeFrequencies f = RopeFrequencies::standard(10000.0f, hd);
  f.inv_freq[1] /= 4, f.attention_scaling = 1.2f;
  const int32_t positions[t_len] = {0, 3, 9, 100, 1000, 7};
  Tensor pos = Tensor::zeros({t_len}, DType::I32);
  std::memcpy(pos.view().data(), positions, sizeof(positions));
  const Tensor gpos = on_device(pos);
  Tensor x = random_tensor({t_len, nh * hd}, 85);
  Tensor gx = on_device(x);
  const std::vector<double> rb = rope_bounds(x, hd, f.attention_scaling);
  rope(x.view(), pos.view(), nh, static_cast<int>(hd), f);
  rope(gx.view(), gpos.view(), nh, static_cast<int>(hd), f);
  expect_same(x, on_host(gx), rb, "rope");
  const std::vector<double> rbb = rope_bounds(x, hd, f.attention_scaling);
  rope_backward(x.view(), pos.view(), nh, static_cast<int>(hd), f);
  rope_backward(gx.view(), gpos.view(), nh, static_cast<int>(hd), f);
  expect_same(x, on_host(gx), rbb, "rope_backward");
}

}  // namespace
}  // namespace olmo2::ops
