// Sliding-window causal attention (docs/architecture.md §3) on the CPU: the forward, its
// max logit and its backward against brute-force references with an explicit mask
// (tests/ops/window_reference.h) and finite differences; window 0 and windows covering
// the whole sequence are today's causal attention bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "ops/attention.h"
#include "ops/backward.h"
#include "tests/ops/finite_differences.h"
#include "tests/ops/random_tensor.h"
#include "tests/ops/window_reference.h"

namespace olmo2::ops {
namespace {

using test::masked_attention;
using test::random_tensor;
using ::testing::HasSubstr;
using Vec = std::vector<double>;

Vec to_d(const Tensor& t) { return Vec(t.f32(), t.f32() + t.numel()); }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.f32(), b.f32(), sizeof(float) * a.numel()) == 0;
}

struct Qkv {
  Tensor q, k, v;
  Qkv(int64_t t_len, int64_t s_len, int nh, int nkv, int64_t hd, uint64_t seed)
      : q(random_tensor({t_len, nh * hd}, seed)),
        k(random_tensor({s_len, nkv * hd}, seed + 1)),
        v(random_tensor({s_len, nkv * hd}, seed + 2)) {}
};

TEST(WindowAttention, MatchesExplicitMaskReference) {
  const int nh = 6, nkv = 2;
  const int64_t hd = 16;
  struct Case {
    int64_t t_len, s_len, window;
  };
  // Windows 1, a few, exactly S, beyond S; a cached prefix (T < S) with windows that end
  // inside the prefix; GQA 6/2 throughout.
  for (const Case c : {Case{9, 9, 1}, Case{9, 9, 3}, Case{9, 9, 9}, Case{9, 9, 40}, Case{5, 12, 2},
                       Case{5, 12, 6}, Case{1, 12, 4}, Case{40, 40, 7}}) {
    SCOPED_TRACE(testing::Message() << "T " << c.t_len << " S " << c.s_len << " window " << c.window);
    const Qkv x(c.t_len, c.s_len, nh, nkv, hd, 100 + c.window + c.s_len);
    Tensor out = Tensor::zeros({c.t_len, nh * hd});
    causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, out.view(), DType::F32, c.window);
    const Vec ref = masked_attention(to_d(x.q), to_d(x.k), to_d(x.v), c.t_len, c.s_len, nh, nkv, hd, c.window);
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out.f32()[i], ref[i], 2e-6) << "element " << i;
    // A window narrower than the context changes the result (the test can fail).
    if (c.window < c.s_len) {
      Tensor full = Tensor::zeros({c.t_len, nh * hd});
      causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, full.view());
      EXPECT_FALSE(same_bits(out, full));
    }
  }
}

TEST(WindowAttention, WindowOfOneReturnsTheOwnValueExactly) {
  const int nh = 4, nkv = 2;
  const int64_t hd = 8, t_len = 6, s_len = 10;
  const Qkv x(t_len, s_len, nh, nkv, hd, 7);
  Tensor out = Tensor::zeros({t_len, nh * hd});
  causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, out.view(), DType::F32, 1);
  for (int64_t t = 0; t < t_len; ++t)
    for (int h = 0; h < nh; ++h)
      for (int64_t i = 0; i < hd; ++i)
        ASSERT_EQ(out.f32()[(t * nh + h) * hd + i], x.v.f32()[((s_len - t_len + t) * nkv + h / 2) * hd + i]);
}

TEST(WindowAttention, WindowZeroOrCoveringTheContextIsCausalAttentionBitForBit) {
  const int nh = 4, nkv = 1;
  const int64_t hd = 32, t_len = 7, s_len = 19;
  const Qkv x(t_len, s_len, nh, nkv, hd, 21);
  for (DType act : {DType::F32, DType::BF16}) {
    Tensor plain = Tensor::zeros({t_len, nh * hd});
    causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, plain.view(), act);
    for (int64_t window : {int64_t{0}, s_len, s_len + 5}) {
      Tensor w = Tensor::zeros({t_len, nh * hd});
      causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, w.view(), act, window);
      EXPECT_TRUE(same_bits(plain, w)) << dtype_name(act) << " window " << window;
    }
  }
  // The last query, at position 18, sees 19 keys: a window of 19 keeps them all (same
  // bits), 18 drops its key 0 and changes that row only.
  Tensor plain = Tensor::zeros({t_len, nh * hd}), w = Tensor::zeros({t_len, nh * hd});
  causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, plain.view());
  causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, w.view(), DType::F32, s_len);
  EXPECT_TRUE(same_bits(plain, w));
  causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, w.view(), DType::F32, s_len - 1);
  EXPECT_FALSE(same_bits(plain, w));
  // Only the last row changed: earlier rows see at most s_len − 1 keys.
  EXPECT_EQ(std::memcmp(plain.f32(), w.f32(), sizeof(float) * (t_len - 1) * nh * hd), 0);
}

TEST(WindowAttention, KeysBeforeTheFirstQuerysWindowAreNeverRead) {
  const int nh = 4, nkv = 2;
  const int64_t hd = 8, t_len = 3, s_len = 12, window = 4;  // the first query, at 9, sees 6 … 9
  Qkv x(t_len, s_len, nh, nkv, hd, 71);
  Tensor clean = Tensor::zeros({t_len, nh * hd}), poisoned = Tensor::zeros({t_len, nh * hd});
  causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, clean.view(), DType::F32, window);
  for (int64_t i = 0; i < 6 * nkv * hd; ++i) x.k.f32()[i] = x.v.f32()[i] = std::nanf("");
  causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, poisoned.view(), DType::F32, window);
  EXPECT_TRUE(same_bits(clean, poisoned));
}

TEST(WindowAttention, Bf16ActivationsRoundAsWithoutWindow) {
  const int nh = 4, nkv = 2;
  const int64_t hd = 16, t_len = 8, s_len = 20, window = 5;
  const Qkv x(t_len, s_len, nh, nkv, hd, 31);
  Tensor bf = Tensor::zeros({t_len, nh * hd}), f32 = Tensor::zeros({t_len, nh * hd});
  causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, bf.view(), DType::BF16, window);
  causal_attention(x.q.view(), x.k.view(), x.v.view(), nh, nkv, f32.view(), DType::F32, window);
  for (int64_t i = 0; i < bf.numel(); ++i) {
    ASSERT_EQ(bf.f32()[i], round_bf16(bf.f32()[i])) << "element " << i << " is not bf16";
    ASSERT_NEAR(bf.f32()[i], f32.f32()[i], 2e-2 + 2e-2 * std::abs(f32.f32()[i])) << "element " << i;
  }
}

TEST(WindowAttention, MaxLogitCountsOnlyTheWindowPairs) {
  const int nh = 4, nkv = 2;
  const int64_t hd = 8, t_len = 6, s_len = 10, window = 3;
  Qkv x(t_len, s_len, nh, nkv, hd, 41);
  // Key 0 aligned with every query of head 0 at 10× its size: the largest causal logit by
  // far, outside every window (the first query, at position 4, sees keys 2 … 4).
  for (int64_t i = 0; i < hd; ++i) x.k.f32()[i] = 10.0f * x.q.f32()[(t_len - 1) * nh * hd + i];
  double want_windowed = 0, want_causal = 0;
  masked_attention(to_d(x.q), to_d(x.k), to_d(x.v), t_len, s_len, nh, nkv, hd, window, &want_windowed);
  masked_attention(to_d(x.q), to_d(x.k), to_d(x.v), t_len, s_len, nh, nkv, hd, 0, &want_causal);
  const float windowed = causal_attention_max_logit(x.q.view(), x.k.view(), nh, nkv, window);
  const float causal = causal_attention_max_logit(x.q.view(), x.k.view(), nh, nkv);
  EXPECT_NEAR(windowed, want_windowed, 1e-5 * (1 + std::abs(want_windowed)));
  EXPECT_NEAR(causal, want_causal, 1e-5 * (1 + std::abs(want_causal)));
  EXPECT_LT(windowed + 1.0f, causal);
  EXPECT_EQ(causal_attention_max_logit(x.q.view(), x.k.view(), nh, nkv, s_len), causal);
}

using test::check_fd;

TEST(WindowAttentionBackward, MatchesFiniteDifferencesOfTheMaskedReference) {
  const int nh = 4, nkv = 2;
  const int64_t hd = 4, t_len = 4, s_len = 7, window = 3;  // 3 cached positions
  const Qkv x(t_len, s_len, nh, nkv, hd, 51);
  const Tensor r = random_tensor({t_len, nh * hd}, 55);
  const Vec qv = to_d(x.q), kv = to_d(x.k), vv = to_d(x.v), R = to_d(r);
  Tensor dq = Tensor::zeros({t_len, nh * hd}), dk = random_tensor({s_len, nkv * hd}, 56),
         dv = random_tensor({s_len, nkv * hd}, 57);  // overwritten
  causal_attention_backward(x.q.view(), x.k.view(), x.v.view(), r.view(), nh, nkv, dq.view(), dk.view(), dv.view(),
                            window);
  auto L = [&](const Vec& a, const Vec& b, const Vec& c) {
    const Vec o = masked_attention(a, b, c, t_len, s_len, nh, nkv, hd, window);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * R[i];
    return s;
  };
  check_fd(qv, [&](const Vec& y) { return L(y, kv, vv); }, dq.f32(), "dq");
  check_fd(kv, [&](const Vec& y) { return L(qv, y, vv); }, dk.f32(), "dk");
  check_fd(vv, [&](const Vec& y) { return L(qv, kv, y); }, dv.f32(), "dv");
  // Key 0 is before every query's window (the first query, at 3, sees 1 … 3): exactly 0.
  for (int64_t i = 0; i < nkv * hd; ++i) {
    EXPECT_EQ(dk.f32()[i], 0.0f);
    EXPECT_EQ(dv.f32()[i], 0.0f);
  }
  // Window 0 and a window covering the context give the same bits.
  Tensor dq0 = Tensor::zeros({t_len, nh * hd}), dk0 = Tensor::zeros({s_len, nkv * hd}),
         dv0 = Tensor::zeros({s_len, nkv * hd});
  causal_attention_backward(x.q.view(), x.k.view(), x.v.view(), r.view(), nh, nkv, dq0.view(), dk0.view(),
                            dv0.view());
  causal_attention_backward(x.q.view(), x.k.view(), x.v.view(), r.view(), nh, nkv, dq.view(), dk.view(), dv.view(),
                            s_len);
  EXPECT_TRUE(same_bits(dq0, dq) && same_bits(dk0, dk) && same_bits(dv0, dv));
}

TEST(WindowAttention, RefusesANegativeWindowNamingIt) {
  const Qkv x(3, 3, 2, 1, 4, 61);
  Tensor out = Tensor::zeros({3, 8}), dk = Tensor::zeros({3, 4}), dv = Tensor::zeros({3, 4});
  try {
    causal_attention(x.q.view(), x.k.view(), x.v.view(), 2, 1, out.view(), DType::F32, -2);
    ADD_FAILURE() << "window -2 accepted";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("window -2"));
  }
  EXPECT_THROW(causal_attention_max_logit(x.q.view(), x.k.view(), 2, 1, -1), ShapeError);
  EXPECT_THROW(causal_attention_backward(x.q.view(), x.k.view(), x.v.view(), x.q.view(), 2, 1, out.view(),
                                         dk.view(), dv.view(), -1),
               ShapeError);
}

}  // namespace
}  // namespace olmo2::ops
