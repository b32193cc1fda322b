// CUDA causal attention, its max logit and its backward against ops::cpu:: (skipped,
// saying why, without a GPU). docs/architecture.md §2, §10.
//
// Tolerances: per element, from attention's error analysis (tests/ops/attention_bounds.h),
// each backend within its bound of the exact result and the two within twice that. bf16
// act: the inputs are multiples of 1/16 in [−2, 2], so every q·k (≤ 256 products, each a
// multiple of 2⁻⁸, |sum| < 2¹¹) is exact in fp32 in any order and both backends round the
// same bf16 scores; what differs is each probability and output's bf16 rounding (one
// u_bf16 of Σ p·|v| and of |out| per backend). The max logit: one score, within the
// score's bound.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/cpu/kernels.h"
#include "tests/ops/attention_bounds.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops {
namespace {


// Seeded values: N(0, 1), or (quantized) multiples of 1/16 in [−2, 2].
Tensor values(std::vector<int64_t> shape, uint64_t seed, bool quantized) {
  return quantized ? test::random_grid_tensor(std::move(shape), seed) : test::random_tensor(std::move(shape), seed);
}

struct Case {
  int64_t t, past;
  int h, kv;
  int64_t hd;
  std::string name() const {
    return "T " + std::to_string(t) + " past " + std::to_string(past) + " H/KV " + std::to_string(h) + "/" +
           std::to_string(kv) + " hd " + std::to_string(hd);
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t t : {1, 7, 64, 300}) {
    for (auto [h, kv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{6, 1}}) {
      for (int64_t hd : {64, 128, 24}) out.push_back({t, hd == 24 ? 9 : 0, h, kv, hd});
    }
  }
  out.push_back({33, 40, 2, 1, 256});  // the largest head dim, a long cached prefix
  out.push_back({5, 0, 3, 3, 1});
  return out;
}

#ifdef OLMO2_HAVE_CUDA

// q, k, v as column slices of one fused [S, (H + 2·KV)·hd] tensor (rows strided), the
// layout of a fused qkv projection; q is its last T rows.
struct Qkv {
  Tensor host, dev;
  TensorView q(bool gpu, const Case& c) const { return cols(gpu, 0, c.h * c.hd).rows(c.past, c.past + c.t); }
  TensorView k(bool gpu, const Case& c) const { return cols(gpu, c.h * c.hd, (c.h + c.kv) * c.hd); }
  TensorView v(bool gpu, const Case& c) const { return cols(gpu, (c.h + c.kv) * c.hd, (c.h + 2 * c.kv) * c.hd); }
  TensorView cols(bool gpu, int64_t a, int64_t b) const { return (gpu ? dev : host).view().cols(a, b); }
  // The bound on the max logit between two backends: the largest bound of one score
  // scale·(q·k) over the pairs (2·(sum_error(hd + 1)·scale·Σ|q||k| + u·|s|)).
  double max_logit_tol(const Case& c, int64_t window) const {
    const std::vector<double> qd = test::dense(q(false, c)), kd = test::dense(k(false, c));
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.hd));
    double worst = 0;
    for (int h = 0; h < c.h; ++h)
      for (int64_t t = 0; t < c.t; ++t)
        for (int64_t j = window > 0 ? std::max<int64_t>(0, c.past + t - window + 1) : 0; j <= c.past + t; ++j) {
          double mag = 0;
          for (int64_t d = 0; d < c.hd; ++d)
            mag += std::fabs(qd[static_cast<size_t>(t * c.h * c.hd + h * c.hd + d)] *
                             kd[static_cast<size_t>(j * c.kv * c.hd + h / (c.h / c.kv) * c.hd + d)]);
          worst = std::max(worst, 2 * (test::sum_error(c.hd + 1) + test::kU) * scale * mag);
        }
    return worst;
  }
  // The exact results and bounds for this case (with the backward when dout is given).
  test::AttentionExpected expected(const Case& c, int64_t window, bool bf16, const Tensor* dout = nullptr) const {
    const std::vector<double> g = dout ? test::dense(dout->view()) : std::vector<double>();
    return test::attention(test::dense(q(false, c)), test::dense(k(false, c)), test::dense(v(false, c)), c.t,
                           c.t + c.past, c.h, c.kv, c.hd, window, bf16, dout ? &g : nullptr);
  }
};

Qkv make_qkv(const Case& c, uint64_t seed, bool quantized) {
  Qkv x;
  x.host = values({c.t + c.past, (c.h + 2 * c.kv) * c.hd}, seed, quantized);
  x.dev = test::to_device(x.host.view());
  return x;
}

TEST(CudaAttention, ForwardMatchesCpu) {
  OLMO2_REQUIRE_GPU();
  for (const Case& c : cases()) {
    for (DType act : {DType::F32, DType::BF16}) {
      const std::string what = c.name() + " act " + dtype_name(act);
      const Qkv x = make_qkv(c, 7 + c.t + c.hd, act == DType::BF16);
      Tensor want = Tensor::zeros({c.t, c.h * c.hd});
      cpu::causal_attention(x.q(false, c), x.k(false, c), x.v(false, c), c.h, c.kv, want.view(), act, 0);
      Tensor got = Tensor::zeros({c.t, c.h * c.hd}, DType::F32, Device::CUDA);
      test::poison(got.view());
      causal_attention(x.q(true, c), x.k(true, c), x.v(true, c), c.h, c.kv, got.view(), act);
      test::expect_close(want.view(), test::to_host(got.view()).view(),
                         x.expected(c, 0, act == DType::BF16).out.between_two(), what);
    }
  }
}

TEST(CudaAttention, MaxLogitMatchesCpu) {
  OLMO2_REQUIRE_GPU();
  for (const Case& c : cases()) {
    const Qkv x = make_qkv(c, 11 + c.t, false);
    const float want = cpu::causal_attention_max_logit(x.q(false, c), x.k(false, c), c.h, c.kv, 0);
    const float got = causal_attention_max_logit(x.q(true, c), x.k(true, c), c.h, c.kv);
    EXPECT_NEAR(got, want, x.max_logit_tol(c, 0)) << c.name();
  }
  const Qkv x = make_qkv({4, 0, 2, 2, 8}, 3, false);
  const Case none{0, 4, 2, 2, 8};  // T = 0: no pairs
  EXPECT_EQ(causal_attention_max_logit(x.q(true, none), x.k(true, none), 2, 2), -std::numeric_limits<float>::infinity());
}

TEST(CudaAttention, BackwardMatchesCpu) {
  OLMO2_REQUIRE_GPU();
  std::vector<Case> all = cases();
  all.push_back({0, 6, 2, 1, 32});  // T = 0: dk, dv zeroed
  for (const Case& c : all) {
    const Qkv x = make_qkv(c, 21 + c.t + c.h, false);
    Tensor dout = values({c.t, c.h * c.hd}, 5 + c.t, false);
    Tensor gdout = test::to_device(dout.view());
    const int64_t s = c.t + c.past;
    Tensor dq = Tensor::zeros({c.t, c.h * c.hd}), dk = Tensor::zeros({s, c.kv * c.hd}),
           dv = Tensor::zeros({s, c.kv * c.hd});
    cpu::causal_attention_backward(x.q(false, c), x.k(false, c), x.v(false, c), dout.view(), c.h, c.kv, dq.view(),
                                   dk.view(), dv.view(), 0);
    Tensor gdq = Tensor::zeros({c.t, c.h * c.hd}, DType::F32, Device::CUDA),
           gdk = Tensor::zeros({s, c.kv * c.hd}, DType::F32, Device::CUDA),
           gdv = Tensor::zeros({s, c.kv * c.hd}, DType::F32, Device::CUDA);
    for (const Tensor* g : {&gdq, &gdk, &gdv}) test::poison(g->view());  // overwritten, never accumulated
    causal_attention_backward(x.q(true, c), x.k(true, c), x.v(true, c), gdout.view(), c.h, c.kv, gdq.view(),
                              gdk.view(), gdv.view());
    const test::AttentionExpected e = x.expected(c, 0, false, &dout);
    test::expect_close(dq.view(), test::to_host(gdq.view()).view(), e.dq.between_two(), c.name() + " dq");
    test::expect_close(dk.view(), test::to_host(gdk.view()).view(), e.dk.between_two(), c.name() + " dk");
    test::expect_close(dv.view(), test::to_host(gdv.view()).view(), e.dv.between_two(), c.name() + " dv");
  }
}

TEST(CudaAttention, BackwardIsDeterministic) {
  OLMO2_REQUIRE_GPU();
  const Case c{300, 20, 8, 2, 64};
  const Qkv x = make_qkv(c, 4, false);
  Tensor gdout = test::to_device(values({c.t, c.h * c.hd}, 9, false).view());
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    Tensor gdq = Tensor::zeros({c.t, c.h * c.hd}, DType::F32, Device::CUDA),
           gdk = Tensor::zeros({c.t + c.past, c.kv * c.hd}, DType::F32, Device::CUDA),
           gdv = Tensor::zeros({c.t + c.past, c.kv * c.hd}, DType::F32, Device::CUDA);
    causal_attention_backward(x.q(true, c), x.k(true, c), x.v(true, c), gdout.view(), c.h, c.kv, gdq.view(),
                              gdk.view(), gdv.view());
    std::vector<float> all;
    for (const Tensor* g : {&gdq, &gdk, &gdv}) {
      const std::vector<float> h = test::as_f32(test::to_host(g->view()).view());
      all.insert(all.end(), h.begin(), h.end());
    }
    runs.push_back(std::move(all));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

// Sliding windows (docs/architecture.md §3): 1, a few, one that ends inside a 32-key tile
// or on its edge, one longer than the context; with and without a cached prefix.
TEST(CudaAttention, WindowMatchesCpu) {
  OLMO2_REQUIRE_GPU();
  const std::vector<Case> shapes = {{70, 0, 4, 2, 64}, {9, 100, 8, 2, 128}, {1, 77, 6, 1, 24}, {300, 20, 4, 4, 64}};
  for (const Case& c : shapes) {
    for (int64_t window : {1, 5, 32, 45, 1000}) {
      const std::string what = c.name() + " window " + std::to_string(window);
      const int64_t s = c.t + c.past;
      for (DType act : {DType::F32, DType::BF16}) {
        const Qkv x = make_qkv(c, 31 + c.t + window, act == DType::BF16);
        Tensor want = Tensor::zeros({c.t, c.h * c.hd});
        cpu::causal_attention(x.q(false, c), x.k(false, c), x.v(false, c), c.h, c.kv, want.view(), act, window);
        Tensor got = Tensor::zeros({c.t, c.h * c.hd}, DType::F32, Device::CUDA);
        test::poison(got.view());
        causal_attention(x.q(true, c), x.k(true, c), x.v(true, c), c.h, c.kv, got.view(), act, window);
        test::expect_close(want.view(), test::to_host(got.view()).view(),
                           x.expected(c, window, act == DType::BF16).out.between_two(), what + " act " + dtype_name(act));
      }
      const Qkv x = make_qkv(c, 41 + c.t + window, false);
      const float want = cpu::causal_attention_max_logit(x.q(false, c), x.k(false, c), c.h, c.kv, window);
      EXPECT_NEAR(causal_attention_max_logit(x.q(true, c), x.k(true, c), c.h, c.kv, window), want,
                  x.max_logit_tol(c, window))
          << what;
      Tensor dout = values({c.t, c.h * c.hd}, 6 + window, false);
      Tensor gdout = test::to_device(dout.view());
      Tensor dq = Tensor::zeros({c.t, c.h * c.hd}), dk = Tensor::zeros({s, c.kv * c.hd}),
             dv = Tensor::zeros({s, c.kv * c.hd});
      cpu::causal_attention_backward(x.q(false, c), x.k(false, c), x.v(false, c), dout.view(), c.h, c.kv, dq.view(),
                                     dk.view(), dv.view(), window);
      Tensor gdq = Tensor::zeros({c.t, c.h * c.hd}, DType::F32, Device::CUDA),
             gdk = Tensor::zeros({s, c.kv * c.hd}, DType::F32, Device::CUDA),
             gdv = Tensor::zeros({s, c.kv * c.hd}, DType::F32, Device::CUDA);
      for (const Tensor* g : {&gdq, &gdk, &gdv}) test::poison(g->view());
      causal_attention_backward(x.q(true, c), x.k(true, c), x.v(true, c), gdout.view(), c.h, c.kv, gdq.view(),
                                gdk.view(), gdv.view(), window);
      const test::AttentionExpected e = x.expected(c, window, false, &dout);
      test::expect_close(dq.view(), test::to_host(gdq.view()).view(), e.dq.between_two(), what + " dq");
      test::expect_close(dk.view(), test::to_host(gdk.view()).view(), e.dk.between_two(), what + " dk");
      test::expect_close(dv.view(), test::to_host(gdv.view()).view(), e.dv.between_two(), what + " dv");
    }
  }
}

TEST(CudaAttention, RefusesWhatItCannotCompute) {
  OLMO2_REQUIRE_GPU();
  Tensor q = Tensor::zeros({4, 2 * 8}, DType::BF16, Device::CUDA), k = Tensor::zeros({4, 8}, DType::BF16, Device::CUDA);
  Tensor out = Tensor::zeros({4, 2 * 8}, DType::BF16, Device::CUDA);
  EXPECT_THROW(causal_attention(q.view(), k.view(), k.view(), 2, 1, out.view()), ShapeError);  // bf16 views
  Tensor wide = Tensor::zeros({2, 512}, DType::F32, Device::CUDA), o2 = Tensor::zeros({2, 512}, DType::F32, Device::CUDA);
  EXPECT_THROW(causal_attention(wide.view(), wide.view(), wide.view(), 1, 1, o2.view()), ShapeError);  // hd 512
  Tensor q3 = Tensor::zeros({4, 3 * 8}, DType::F32, Device::CUDA), k3 = Tensor::zeros({4, 2 * 8}, DType::F32, Device::CUDA),
         o3 = Tensor::zeros({4, 3 * 8}, DType::F32, Device::CUDA);
  EXPECT_THROW(causal_attention(q3.view(), k3.view(), k3.view(), 3, 2, o3.view()), ShapeError);  // H % KV
}

#endif

}  // namespace
}  // namespace olmo2::ops
