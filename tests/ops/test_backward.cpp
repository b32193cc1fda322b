// Backward kernels against central finite differences of double-precision reference
// forwards written from the formulas (loss = Σ out ⊙ R for a fixed random R). Each
// reference forward is first checked against the library's own f32 forward, so the
// gradients are tied to the conventions the forwards actually use.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "tests/ops/finite_differences.h"
#include "tests/ops/random_tensor.h"
#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/threads.h"

namespace olmo2::ops {
namespace {

using ::testing::HasSubstr;
using Vec = std::vector<double>;

using test::random_tensor;

Vec to_d(const Tensor& t) { return Vec(t.f32(), t.f32() + t.numel()); }

double dotp(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

using test::check_fd;

void expect_close(const float* got, const Vec& want, double tol, const char* what) {
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " element " << i;
}

// ---------------------------------------------------------------------------------------
TEST(LinearBackward, MatchesFiniteDifferencesAndAccumulates) {
  const int64_t m = 5, k = 7, n = 6;
  Tensor x = random_tensor({m, k}, 1), w = random_tensor({n, k}, 2), r = random_tensor({m, n}, 3);
  const Vec R = to_d(r);
  auto ref = [&](const Vec& xv, const Vec& wv) {
    double s = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double y = 0;
        for (int64_t p = 0; p < k; ++p) y += xv[i * k + p] * wv[j * k + p];
        s += y * R[i * n + j];
      }
    return s;
  };
  Tensor dx = Tensor::zeros({m, k}), dw = Tensor::zeros({n, k});
  for (int64_t i = 0; i < dw.numel(); ++i) dw.f32()[i] = 0.25f;  // accumulates on top
  linear_backward(x.view(), w.view(), r.view(), dx.view(), dw.view(), /*accumulate_dw=*/true);
  for (int64_t i = 0; i < dw.numel(); ++i) dw.f32()[i] -= 0.25f;
  const Vec xv = to_d(x), wv = to_d(w);
  check_fd(
      xv, [&](const Vec& v) { return ref(v, wv); }, dx.f32(), "dx");
  check_fd(
      wv, [&](const Vec& v) { return ref(xv, v); }, dw.f32(), "dw");

  // Overwrite mode for dw; accumulate mode for dx; skipping dx with an empty view.
  Tensor dw2 = random_tensor({n, k}, 9), dx2 = Tensor::zeros({m, k});
  for (int64_t i = 0; i < dx2.numel(); ++i) dx2.f32()[i] = 1.0f;
  linear_backward(x.view(), w.view(), r.view(), dx2.view(), dw2.view(), false, true);
  for (int64_t i = 0; i < dw2.numel(); ++i) EXPECT_NEAR(dw2.f32()[i], dw.f32()[i], 1e-5);
  for (int64_t i = 0; i < dx2.numel(); ++i) EXPECT_NEAR(dx2.f32()[i], dx.f32()[i] + 1.0f, 1e-5);
  linear_backward(x.view(), w.view(), r.view(), TensorView{}, dw2.view(), false);

  Tensor bad = Tensor::zeros({m, k + 1});
  EXPECT_THROW(linear_backward(x.view(), w.view(), r.view(), bad.view(), dw.view()), ShapeError);
}

// ---------------------------------------------------------------------------------------
TEST(EmbeddingBackward, ScatterAddsRepeatedRowsAndRefusesBadIds) {
  const int64_t vocab = 6, h = 5, n = 7;
  const int32_t ids[n] = {3, 0, 3, 5, 3, 1, 0};
  Tensor table = random_tensor({vocab, h}, 4), r = random_tensor({n, h}, 5);
  const Vec R = to_d(r);
  auto ref = [&](const Vec& tv) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < h; ++j) s += tv[ids[i] * h + j] * R[i * h + j];
    return s;
  };
  Tensor dtable = Tensor::zeros({vocab, h});
  for (int64_t i = 0; i < dtable.numel(); ++i) dtable.f32()[i] = -0.5f;
  embedding_backward(host_view(ids), r.view(), dtable.view());
  for (int64_t i = 0; i < dtable.numel(); ++i) dtable.f32()[i] += 0.5f;
  check_fd(to_d(table), ref, dtable.f32(), "dtable");
  for (int64_t j = 0; j < h; ++j) EXPECT_EQ(dtable.f32()[2 * h + j], 0.0f);  // unused row

  const int32_t bad[2] = {1, 6};
  try {
    embedding_backward(host_view(bad), r.view().rows(0, 2), dtable.view());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("token id 6"));
  }
}

// ---------------------------------------------------------------------------------------
Vec rmsnorm_ref(const Vec& x, const Vec& w, int64_t rows, int64_t d, double eps) {
  Vec y(x.size());
  for (int64_t t = 0; t < rows; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += x[t * d + i] * x[t * d + i];
    const double r = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t i = 0; i < d; ++i) y[t * d + i] = w[i] * x[t * d + i] * r;
  }
  return y;
}

TEST(RmsNormBackward, MatchesFiniteDifferencesAndTensorParallelSplit) {
  const int64_t rows = 4, d = 8;
  const float eps = 1e-6f;
  Tensor x = random_tensor({rows, d}, 6), w = random_tensor({d}, 7, 0.5f),
         r = random_tensor({rows, d}, 8);
  for (int64_t i = 0; i < d; ++i) w.f32()[i] += 1.0f;
  const Vec xv = to_d(x), wv = to_d(w), R = to_d(r);
  {
    Tensor y = Tensor::zeros({rows, d});
    rmsnorm(x.view(), w.view(), eps, y.view());
    expect_close(y.f32(), rmsnorm_ref(xv, wv, rows, d, eps), 1e-5, "forward");
  }
  Tensor dx = Tensor::zeros({rows, d}), dw = Tensor::zeros({d});
  for (int64_t i = 0; i < d; ++i) dw.f32()[i] = 2.0f;
  rmsnorm_backward(x.view(), w.view(), eps, r.view(), dx.view(), dw.view());
  for (int64_t i = 0; i < d; ++i) dw.f32()[i] -= 2.0f;
  check_fd(
      xv, [&](const Vec& v) { return dotp(rmsnorm_ref(v, wv, rows, d, eps), R); }, dx.f32(), "dx");
  check_fd(
      wv, [&](const Vec& v) { return dotp(rmsnorm_ref(xv, v, rows, d, eps), R); }, dw.f32(), "dw");

  // TP emulation: two column shards, partial sums added (the all-reduce), then finish.
  const int64_t half = d / 2;
  std::vector<float> ss(rows, 0.0f), dt(rows, 0.0f);
  for (int shard = 0; shard < 2; ++shard) {
    TensorView xs(x.f32() + shard * half, DType::F32, {rows, half}, {d, 1}, Device::CPU);
    TensorView rs(r.f32() + shard * half, DType::F32, {rows, half}, {d, 1}, Device::CPU);
    TensorView ws(w.f32() + shard * half, DType::F32, {half});
    std::vector<float> s1(rows), d1(rows);
    rmsnorm_backward_partials(xs, ws, rs, host_view(s1), host_view(d1));
    for (int64_t t = 0; t < rows; ++t) ss[t] += s1[t], dt[t] += d1[t];
  }
  Tensor dx_tp = Tensor::zeros({rows, d}), dw_tp = Tensor::zeros({d});
  for (int shard = 0; shard < 2; ++shard) {
    auto cols = [&](const Tensor& t) {
      return TensorView(t.f32() + shard * half, DType::F32, {rows, half}, {d, 1}, Device::CPU);
    };
    TensorView ws(w.f32() + shard * half, DType::F32, {half});
    TensorView dws(dw_tp.f32() + shard * half, DType::F32, {half});
    rmsnorm_backward_finish(cols(x), ws, eps, d, cols(r), host_view(ss), host_view(dt), cols(dx_tp), dws);
  }
  for (int64_t i = 0; i < rows * d; ++i) EXPECT_NEAR(dx_tp.f32()[i], dx.f32()[i], 1e-5);
  for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(dw_tp.f32()[i], dw.f32()[i], 1e-5);

  // dx may alias dy.
  Tensor g = Tensor::zeros({rows, d});
  for (int64_t i = 0; i < rows * d; ++i) g.f32()[i] = r.f32()[i];
  rmsnorm_backward(x.view(), w.view(), eps, g.view(), g.view(), TensorView{});
  for (int64_t i = 0; i < rows * d; ++i) EXPECT_NEAR(g.f32()[i], dx.f32()[i], 1e-6);

  Tensor bad = Tensor::zeros({d + 1});
  EXPECT_THROW(rmsnorm_backward(x.view(), bad.view(), eps, r.view(), dx.view(), dw.view()),
               ShapeError);
}

// ---------------------------------------------------------------------------------------
Vec rope_ref(const Vec& x, const int32_t* pos, int64_t rows, int heads, int hd, double theta) {
  Vec y(x.size());
  const int half = hd / 2;
  for (int64_t t = 0; t < rows; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < half; ++i) {
        const double a = pos[t] / std::pow(theta, 2.0 * i / hd);
        const int64_t b = t * heads * hd + h * hd;
        const double x1 = x[b + i], x2 = x[b + i + half];
        y[b + i] = x1 * std::cos(a) - x2 * std::sin(a);
        y[b + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
  return y;
}

TEST(RopeBackward, IsTheTransposedRotation) {
  const int64_t rows = 3;
  const int heads = 2, hd = 8;
  const float theta = 500000.0f;
  const int32_t pos[rows] = {0, 7, 1234};
  Tensor x = random_tensor({rows, heads * hd}, 10), r = random_tensor({rows, heads * hd}, 11);
  const Vec xv = to_d(x), R = to_d(r);
  {
    Tensor y = random_tensor({rows, heads * hd}, 10);
    rope(y.view(), host_view(pos), heads, hd, theta);
    expect_close(y.f32(), rope_ref(xv, pos, rows, heads, hd, theta), 1e-4, "forward");
    rope_backward(y.view(), host_view(pos), heads, hd, theta);  // inverse rotation restores x
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(y.f32()[i], x.f32()[i], 1e-5);
  }
  Tensor g = random_tensor({rows, heads * hd}, 11);
  rope_backward(g.view(), host_view(pos), heads, hd, theta);
  // rope is linear, so its gradient does not depend on x; FD at x still checks it.
  check_fd(
      xv, [&](const Vec& v) { return dotp(rope_ref(v, pos, rows, heads, hd, theta), R); }, g.f32(),
      "dx", 2e-3);
  EXPECT_THROW(rope_backward(g.view(), host_view(pos), heads, hd + 1, theta), ShapeError);
}

// ---------------------------------------------------------------------------------------
Vec attention_ref(const Vec& q, const Vec& k, const Vec& v, int64_t t_len, int64_t s_len, int nh,
                  int nkv, int hd) {
  Vec out(q.size(), 0.0);
  const int64_t past = s_len - t_len;
  const int group = nh / nkv;
  const double scale = 1.0 / std::sqrt(double(hd));
  for (int h = 0; h < nh; ++h) {
    const int kvh = h / group;
    for (int64_t t = 0; t < t_len; ++t) {
      const int64_t vis = past + t + 1;
      Vec sc(vis);
      double mx = -1e300;
      for (int64_t s = 0; s < vis; ++s) {
        double a = 0;
        for (int i = 0; i < hd; ++i)
          a += q[t * nh * hd + h * hd + i] * k[s * nkv * hd + kvh * hd + i];
        sc[s] = a * scale;
        mx = std::max(mx, sc[s]);
      }
      double sum = 0;
      for (auto& e : sc) sum += (e = std::exp(e - mx));
      for (int64_t s = 0; s < vis; ++s)
        for (int i = 0; i < hd; ++i)
          out[t * nh * hd + h * hd + i] += sc[s] / sum * v[s * nkv * hd + kvh * hd + i];
    }
  }
  return out;
}

TEST(AttentionBackward, GqaWithCachedPrefixMatchesFiniteDifferences) {
  const int64_t t_len = 3, s_len = 5;  // two cached prefix positions
  const int nh = 4, nkv = 2, hd = 4;
  Tensor q = random_tensor({t_len, nh * hd}, 12), k = random_tensor({s_len, nkv * hd}, 13),
         v = random_tensor({s_len, nkv * hd}, 14), r = random_tensor({t_len, nh * hd}, 15);
  const Vec qv = to_d(q), kv = to_d(k), vv = to_d(v), R = to_d(r);
  {
    Tensor out = Tensor::zeros({t_len, nh * hd});
    causal_attention(q.view(), k.view(), v.view(), nh, nkv, out.view());
    expect_close(out.f32(), attention_ref(qv, kv, vv, t_len, s_len, nh, nkv, hd), 1e-5, "forward");
  }
  Tensor dq = Tensor::zeros({t_len, nh * hd}), dk = random_tensor({s_len, nkv * hd}, 16),
         dv = random_tensor({s_len, nkv * hd}, 17);  // overwritten, not accumulated
  causal_attention_backward(q.view(), k.view(), v.view(), r.view(), nh, nkv, dq.view(), dk.view(),
                            dv.view());
  auto L = [&](const Vec& a, const Vec& b, const Vec& c) {
    return dotp(attention_ref(a, b, c, t_len, s_len, nh, nkv, hd), R);
  };
  check_fd(
      qv, [&](const Vec& x) { return L(x, kv, vv); }, dq.f32(), "dq");
  check_fd(
      kv, [&](const Vec& x) { return L(qv, x, vv); }, dk.f32(), "dk");
  check_fd(
      vv, [&](const Vec& x) { return L(qv, kv, x); }, dv.f32(), "dv");

  Tensor bad = Tensor::zeros({s_len, nkv * hd + 1});
  EXPECT_THROW(causal_attention_backward(q.view(), k.view(), v.view(), r.view(), nh, nkv, dq.view(),
                                         bad.view(), dv.view()),
               ShapeError);
  EXPECT_THROW(causal_attention_backward(q.view(), k.view(), v.view(), r.view(), nh, 3, dq.view(),
                                         dk.view(), dv.view()),
               ShapeError);
}

// ---------------------------------------------------------------------------------------
TEST(SwigluBackward, MatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 6;
  Tensor g = random_tensor({rows, cols}, 18, 2.0f), u = random_tensor({rows, cols}, 19),
         r = random_tensor({rows, cols}, 20);
  const Vec gv = to_d(g), uv = to_d(u), R = to_d(r);
  auto ref = [&](const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] / (1 + std::exp(-a[i])) * b[i] * R[i];
    return s;
  };
  {
    Tensor out = Tensor::zeros({rows, cols});
    swiglu(g.view(), u.view(), out.view());
    Vec want(gv.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = gv[i] / (1 + std::exp(-gv[i])) * uv[i];
    expect_close(out.f32(), want, 1e-5, "forward");
  }
  Tensor dg = Tensor::zeros({rows, cols}), du = Tensor::zeros({rows, cols});
  swiglu_backward(g.view(), u.view(), r.view(), dg.view(), du.view());
  check_fd(
      gv, [&](const Vec& x) { return ref(x, uv); }, dg.f32(), "dgate");
  check_fd(
      uv, [&](const Vec& x) { return ref(gv, x); }, du.f32(), "dup");
  // In place: dgate over gate, dup over up.
  swiglu_backward(g.view(), u.view(), r.view(), g.view(), u.view());
  for (int64_t i = 0; i < g.numel(); ++i) {
    EXPECT_EQ(g.f32()[i], dg.f32()[i]);
    EXPECT_EQ(u.f32()[i], du.f32()[i]);
  }
}

// ---------------------------------------------------------------------------------------
TEST(CrossEntropyZLoss, MatchesC2Numbers) {
  Tensor logits = Tensor::zeros({1, 8});
  for (int i = 0; i < 8; ++i) logits.f32()[i] = 0.5f * i;
  const int32_t tgt[1] = {2};
  Tensor d = Tensor::zeros({1, 8});
  const CrossEntropySums s = cross_entropy_zloss(logits.view(), host_view(tgt), 1e-4f, 1.0f, d.view());
  EXPECT_EQ(s.count, 1);
  EXPECT_NEAR(s.ce_sum + 1.0, 4.414267, 1e-5);  // log Z
  EXPECT_NEAR(s.ce_sum, 3.414267, 1e-5);
  EXPECT_NEAR(1e-4 * s.z_sq_sum, 0.0019486, 1e-7);
  EXPECT_NEAR(std::sqrt(s.z_sq_sum), 4.414267, 1e-5);
}

TEST(CrossEntropyZLoss, GradientMatchesFiniteDifferencesAndIgnoresRows) {
  const int64_t rows = 4, vocab = 7;
  const int32_t tgt[rows] = {3, kIgnoreIndex, 0, 6};
  const float coef = 0.01f, scale = 1.0f / 3.0f;  // large coef so the z-term is visible
  Tensor logits = random_tensor({rows, vocab}, 21, 2.0f);
  auto ref = [&](const Vec& x, double* ce, double* zsq) {
    *ce = *zsq = 0;
    for (int64_t t = 0; t < rows; ++t) {
      if (tgt[t] == kIgnoreIndex) continue;
      double mx = -1e300, sum = 0;
      for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, x[t * vocab + i]);
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(x[t * vocab + i] - mx);
      const double z = mx + std::log(sum);
      *ce += z - x[t * vocab + tgt[t]];
      *zsq += z * z;
    }
  };
  Tensor d = random_tensor({rows, vocab}, 22);  // ignored row must be zeroed
  const CrossEntropySums s = cross_entropy_zloss(logits.view(), host_view(tgt), coef, scale, d.view());
  double ce, zsq;
  ref(to_d(logits), &ce, &zsq);
  EXPECT_EQ(s.count, 3);
  EXPECT_NEAR(s.ce_sum, ce, 1e-5);
  EXPECT_NEAR(s.z_sq_sum, zsq, 1e-4);
  check_fd(
      to_d(logits),
      [&](const Vec& x) {
        double c, z;
        ref(x, &c, &z);
        return scale * (c + coef * z);
      },
      d.f32(), "dlogits");
  for (int64_t i = 0; i < vocab; ++i) EXPECT_EQ(d.f32()[vocab + i], 0.0f);

  // In place (dlogits aliases logits) gives the same gradient; forward-only leaves no grad.
  Tensor inplace = Tensor::zeros({rows, vocab});
  for (int64_t i = 0; i < logits.numel(); ++i) inplace.f32()[i] = logits.f32()[i];
  const CrossEntropySums s2 = cross_entropy_zloss(inplace.view(), host_view(tgt), coef, scale, inplace.view());
  EXPECT_DOUBLE_EQ(s2.ce_sum, s.ce_sum);
  for (int64_t i = 0; i < logits.numel(); ++i) EXPECT_NEAR(inplace.f32()[i], d.f32()[i], 1e-7);
  const CrossEntropySums s3 = cross_entropy_zloss(logits.view(), host_view(tgt), coef, scale, TensorView{});
  EXPECT_DOUBLE_EQ(s3.z_sq_sum, s.z_sq_sum);

  // All ignored: nothing counted, all-zero gradient.
  const int32_t none[rows] = {kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex};
  const CrossEntropySums s4 = cross_entropy_zloss(logits.view(), host_view(none), coef, scale, d.view());
  EXPECT_EQ(s4.count, 0);
  EXPECT_EQ(s4.ce_sum, 0.0);
  for (int64_t i = 0; i < d.numel(); ++i) EXPECT_EQ(d.f32()[i], 0.0f);

  const int32_t bad[rows] = {3, -1, 0, 6};
  try {
    cross_entropy_zloss(logits.view(), host_view(bad), coef, scale, d.view());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("target -1 at row 1"));
  }
}

// ---------------------------------------------------------------------------------------
// Shapes large enough to take the OpenMP paths: 4 threads must agree with 1 thread (no
// races in the dw / dk / dv / dtable reductions), embedding against a naive scatter.
TEST(BackwardThreads, ParallelPathsMatchSingleThread) {
  const int saved = num_threads();
  struct Out {
    std::vector<float> rms_dx, rms_dw, dq, dk, dv, dlogits, dtable;
    CrossEntropySums ce;
  };
  const int64_t rows = 64, d = 512, t_len = 40, s_len = 48, vocab = 4096, n = 64, h = 2048;
  const int nh = 4, nkv = 2, hd = 8;
  Tensor x = random_tensor({rows, d}, 30), w = random_tensor({d}, 31),
         dy = random_tensor({rows, d}, 32);
  Tensor q = random_tensor({t_len, nh * hd}, 33), k = random_tensor({s_len, nkv * hd}, 34),
         v = random_tensor({s_len, nkv * hd}, 35), dout = random_tensor({t_len, nh * hd}, 36);
  Tensor logits = random_tensor({8, vocab}, 37, 3.0f), emb_g = random_tensor({n, h}, 38);
  std::vector<int32_t> tgt(8), ids(n);
  for (int i = 0; i < 8; ++i) tgt[i] = i == 5 ? kIgnoreIndex : (i * 977) % vocab;
  for (int i = 0; i < n; ++i) ids[i] = (i * 7) % 10;
  auto run = [&](int threads) {
    set_num_threads(threads);
    Out o;
    Tensor dx = Tensor::zeros({rows, d}), dw = Tensor::zeros({d});
    rmsnorm_backward(x.view(), w.view(), 1e-6f, dy.view(), dx.view(), dw.view());
    Tensor dq = Tensor::zeros({t_len, nh * hd}), dk = Tensor::zeros({s_len, nkv * hd}),
           dv = Tensor::zeros({s_len, nkv * hd});
    causal_attention_backward(q.view(), k.view(), v.view(), dout.view(), nh, nkv, dq.view(),
                              dk.view(), dv.view());
    Tensor dl = Tensor::zeros({8, vocab}), dt = Tensor::zeros({10, h});
    o.ce = cross_entropy_zloss(logits.view(), host_view(tgt), 1e-4f, 0.5f, dl.view());
    embedding_backward(host_view(ids), emb_g.view(), dt.view());
    auto vec = [](const Tensor& t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); };
    o.rms_dx = vec(dx), o.rms_dw = vec(dw), o.dq = vec(dq), o.dk = vec(dk), o.dv = vec(dv);
    o.dlogits = vec(dl), o.dtable = vec(dt);
    return o;
  };
  const Out a = run(1), b = run(4);
  set_num_threads(saved);
  auto same = [](const std::vector<float>& p, const std::vector<float>& q2, const char* what) {
    ASSERT_EQ(p.size(), q2.size());
    for (size_t i = 0; i < p.size(); ++i)
      ASSERT_NEAR(p[i], q2[i], 1e-4 * (1 + std::abs(p[i]))) << what << " element " << i;
  };
  same(a.rms_dx, b.rms_dx, "rmsnorm dx");
  same(a.rms_dw, b.rms_dw, "rmsnorm dw");
  same(a.dq, b.dq, "dq");
  same(a.dk, b.dk, "dk");
  same(a.dv, b.dv, "dv");
  same(a.dlogits, b.dlogits, "dlogits");
  same(a.dtable, b.dtable, "dtable");
  EXPECT_EQ(a.ce.count, 7);
  EXPECT_EQ(b.ce.count, 7);
  EXPECT_NEAR(a.ce.ce_sum, b.ce.ce_sum, 1e-9 * std::abs(a.ce.ce_sum));
  // Naive scatter-add for the embedding gradient.
  std::vector<double> want(10 * h, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < h; ++j) want[ids[i] * h + j] += emb_g.f32()[i * h + j];
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(b.dtable[i], want[i], 1e-4);
}

}  // namespace
}  // namespace olmo2::ops
