// The ops that take a bf16 weight besides the products: embedding, RMSNorm's apply and
// backward halves, and linear_backward. Where the math is the same, a bf16 weight gives
// the bits of its f32 widening; the input gradient of linear_backward is held to its
// fp32 error bound against a double reference. And attention with bf16 activations,
// rounded where transformers' bf16 model rounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/embedding.h"
#include "ops/rmsnorm.h"
#include "tests/ops/bf16_tensor.h"

namespace olmo2::ops {
namespace {

using test::random_bf16;
using test::random_tensor;
using test::same_bits;
using test::widen;

TEST(Bf16Weights, EmbeddingWidensTheTableExactly) {
  const Tensor table = random_bf16({50, 24}, 1), wide = widen(table);
  std::vector<int32_t> ids = {3, 0, 49, 3, 17};
  Tensor out = Tensor::zeros({5, 24}), ref = Tensor::zeros({5, 24});
  embedding(host_view(ids), table.view(), out.view());
  embedding(host_view(ids), wide.view(), ref.view());
  EXPECT_TRUE(same_bits(out.f32(), ref.f32(), out.numel()));
  // The slice of ids 10 … 59: rows of other ranks are zeros.
  embedding_slice(host_view(ids), table.view(), 10, out.view());
  embedding_slice(host_view(ids), wide.view(), 10, ref.view());
  EXPECT_TRUE(same_bits(out.f32(), ref.f32(), out.numel()));
  ids[1] = 50;
  EXPECT_THROW(embedding(host_view(ids), table.view(), out.view()), InputError);
  Tensor f16 = Tensor::zeros({50, 24}, DType::F16), out_bf16 = Tensor::zeros({5, 24}, DType::BF16);
  ids[1] = 0;
  EXPECT_THROW(embedding(host_view(ids), f16.view(), out.view()), ShapeError);
  EXPECT_THROW(embedding(host_view(ids), table.view(), out_bf16.view()), ShapeError);
}

TEST(Bf16Weights, RmsnormApplyEqualsWidenedWeightsAndRmsnorm) {
  const int64_t t = 7, d = 40;
  const Tensor x = random_tensor({t, d}, 2), w = random_bf16({d}, 3), wf = widen(w);
  Tensor ss = Tensor::zeros({t}), y = Tensor::zeros({t, d}), yf = Tensor::zeros({t, d}), yn = Tensor::zeros({t, d});
  rmsnorm_partials(x.view(), ss.view());
  rmsnorm_apply(x.view(), w.view(), ss.view(), d, 1e-6f, y.view());
  rmsnorm_apply(x.view(), wf.view(), ss.view(), d, 1e-6f, yf.view());
  rmsnorm(x.view(), w.view(), 1e-6f, yn.view());
  EXPECT_TRUE(same_bits(y.f32(), yf.f32(), y.numel()));
  EXPECT_TRUE(same_bits(y.f32(), yn.f32(), y.numel()));
  // Under a split width (d_total > D) too.
  rmsnorm_apply(x.view(), w.view(), ss.view(), 3 * d, 1e-6f, y.view());
  rmsnorm_apply(x.view(), wf.view(), ss.view(), 3 * d, 1e-6f, yf.view());
  EXPECT_TRUE(same_bits(y.f32(), yf.f32(), y.numel()));
  const Tensor short_w = random_bf16({d - 1}, 4);
  EXPECT_THROW(rmsnorm_apply(x.view(), short_w.view(), ss.view(), d, 1e-6f, y.view()), ShapeError);
}

TEST(Bf16Weights, RmsnormBackwardEqualsWidenedWeights) {
  const int64_t t = 9, d = 48;
  const Tensor x = random_tensor({t, d}, 5), dy = random_tensor({t, d}, 6), w = random_bf16({d}, 7), wf = widen(w);
  Tensor dx = Tensor::zeros({t, d}), dxf = Tensor::zeros({t, d}), dw = Tensor::zeros({d}), dwf = Tensor::zeros({d});
  rmsnorm_backward(x.view(), w.view(), 1e-6f, dy.view(), dx.view(), dw.view());
  rmsnorm_backward(x.view(), wf.view(), 1e-6f, dy.view(), dxf.view(), dwf.view());
  EXPECT_TRUE(same_bits(dx.f32(), dxf.f32(), dx.numel()));
  EXPECT_TRUE(same_bits(dw.f32(), dwf.f32(), d));
  // The two halves on their own, with a global width.
  Tensor s = Tensor::zeros({t}), dot = Tensor::zeros({t}), sf = Tensor::zeros({t}), dotf = Tensor::zeros({t});
  rmsnorm_backward_partials(x.view(), w.view(), dy.view(), s.view(), dot.view());
  rmsnorm_backward_partials(x.view(), wf.view(), dy.view(), sf.view(), dotf.view());
  EXPECT_TRUE(same_bits(s.f32(), sf.f32(), t));
  EXPECT_TRUE(same_bits(dot.f32(), dotf.f32(), t));
  rmsnorm_backward_finish(x.view(), w.view(), 1e-6f, 2 * d, dy.view(), s.view(), dot.view(), dx.view(), dw.view());
  rmsnorm_backward_finish(x.view(), wf.view(), 1e-6f, 2 * d, dy.view(), sf.view(), dotf.view(), dxf.view(),
                          dwf.view());
  EXPECT_TRUE(same_bits(dx.f32(), dxf.f32(), dx.numel()));
  EXPECT_TRUE(same_bits(dw.f32(), dwf.f32(), d));
}

// dx = dy·w against a double reference within N·2⁻²⁴·Σ|dy·w| (fp32 accumulation of N
// terms in any order), across the panels of the widening (2048 rows × 256 columns).
TEST(Bf16Weights, LinearBackwardInputGradientWithinFp32Bound) {
  for (const auto [m, n, k] : {std::array<int64_t, 3>{5, 2100, 300}, {3, 17, 33}, {1, 64, 1}}) {
    SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
    const Tensor x = random_tensor({m, k}, 8), dy = random_tensor({m, n}, 9), w = random_bf16({n, k}, 10);
    const Tensor wf = widen(w);
    Tensor dx = Tensor::zeros({m, k}), dw = Tensor::zeros({n, k}), dwf = Tensor::zeros({n, k});
    linear_backward(x.view(), w.view(), dy.view(), dx.view(), dw.view(), false);
    linear_backward(x.view(), wf.view(), dy.view(), TensorView{}, dwf.view(), false);
    EXPECT_TRUE(same_bits(dw.f32(), dwf.f32(), dw.numel()));  // dw = dyᵀ·x does not read w
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < k; ++c) {
        double s = 0, a = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double p = double(dy.f32()[i * n + j]) * wf.f32()[j * k + c];
          s += p;
          a += std::fabs(p);
        }
        ASSERT_NEAR(dx.f32()[i * k + c], s, double(n) * 0x1p-24 * a) << "(" << i << ", " << c << ")";
      }
    // accumulate_dx adds the same product once more.
    Tensor dx2 = Tensor::zeros({m, k});
    linear_backward(x.view(), w.view(), dy.view(), dx2.view(), TensorView{}, false, false);
    linear_backward(x.view(), w.view(), dy.view(), dx2.view(), TensorView{}, false, true);
    for (int64_t i = 0; i < m * k; ++i)
      ASSERT_NEAR(dx2.f32()[i], 2.0 * dx.f32()[i], 1e-5 * (1.0 + std::fabs(dx.f32()[i]))) << i;
  }
  const Tensor x = random_tensor({2, 4}, 11), dy = random_tensor({2, 3}, 12), w = random_bf16({3, 4}, 13);
  Tensor bad = Tensor::zeros({2, 5});
  EXPECT_THROW(linear_backward(x.view(), w.view(), dy.view(), bad.view(), TensorView{}), ShapeError);
}

// bf16 activations in attention round where transformers' eager attention does:
// bf16(bf16(q·kᵀ) · scale) — the product is a bf16 tensor before it is scaled —, the
// softmax (fp32) to bf16, the output to bf16. head_dim 8: a scale that is not a power of
// two, where rounding the product first changes the result. The inputs are multiples of
// 1/64 in [−½, ½]: every product and sum is exact in f32, so the loop below
// equals the kernel bit for bit whatever the BLAS summation order.
TEST(Bf16Activations, AttentionRoundsTheScoresBeforeAndAfterTheScale) {
  const int nh = 2, nkv = 1;
  const int64_t hd = 8, t_len = 7;
  auto grid = [](std::vector<int64_t> shape, uint64_t seed) {
    Tensor t = random_tensor(shape, seed);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::round(std::clamp(t.f32()[i], -2.f, 2.f) * 16) / 64;
    return t;
  };
  const Tensor q = grid({t_len, nh * hd}, 21), k = grid({t_len, nkv * hd}, 22), v = grid({t_len, nkv * hd}, 23);
  Tensor out = Tensor::zeros({t_len, nh * hd});
  causal_attention(q.view(), k.view(), v.view(), nh, nkv, out.view(), DType::BF16);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // once: the kernel before scores were rounded ahead of the scale.
  auto reference = [&](bool round_product_first) {
    std::vector<float> o(static_cast<size_t>(t_len * nh * hd));
    for (int h = 0; h < nh; ++h)
      for (int64_t t = 0; t < t_len; ++t) {
        std::vector<float> p(static_cast<size_t>(t + 1));
        float mx = -INFINITY, sum = 0;
        for (int64_t s = 0; s <= t; ++s) {
          float d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q.f32()[t * nh * hd + h * hd + i] * k.f32()[s * hd + i];
          p[s] = round_bf16((round_product_first ? round_bf16(d) : d) * scale);
          mx = std::max(mx, p[s]);
        }
        for (float& x : p) sum += (x = std::exp(x - mx));
        const float inv = 1.0f / sum;
        for (float& x : p) x = round_bf16(x * inv);
        for (int64_t i = 0; i < hd; ++i) {
          float a = 0;
          for (int64_t s = 0; s <= t; ++s) a += p[s] * v.f32()[s * hd + i];
          o[t * nh * hd + h * hd + i] = round_bf16(a);
        }
      }
    return o;
  };
  const std::vector<float> twice = reference(true), once = reference(false);
  EXPECT_TRUE(same_bits(out.f32(), twice.data(), out.numel()));
  EXPECT_FALSE(same_bits(twice.data(), once.data(), out.numel())) << "the inputs do not tell the two apart";
}

}  // namespace
}  // namespace olmo2::ops
