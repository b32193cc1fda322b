// Sliding-window attention against PyTorch: transformers' Olmo 3 sliding-window causal
// mask and eager attention (tests/ops/make_window_attention_fixtures.py, committed output
// tests/ops/fixtures/window_attention.json), for causal_attention as one prefill, as the
// last rows after a cached prefix, and for paged_attention in chunks.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/attention.h"
#include "ops/paged_attention.h"
#include "tests/ops/window_reference.h"

namespace olmo2::ops {
namespace {

struct Fixture {
  int64_t seq, hd, window;
  int nh, nkv;
  Tensor q, k, v, out;
  std::vector<std::vector<bool>> mask;
};

Tensor from_json(const nlohmann::json& values, int64_t rows, int64_t cols) {
  Tensor t = Tensor::zeros({rows, cols});
  EXPECT_EQ(static_cast<int64_t>(values.size()), rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) t.f32()[i] = values[static_cast<size_t>(i)].get<float>();
  return t;
}

Fixture load() {
  std::ifstream in(std::string(OLMO2_SOURCE_DIR) + "/tests/ops/fixtures/window_attention.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  Fixture f;
  f.seq = j["seq"], f.hd = j["head_dim"], f.window = j["window"], f.nh = j["heads"], f.nkv = j["kv_heads"];
  f.q = from_json(j["q"], f.seq, f.nh * f.hd);
  f.k = from_json(j["k"], f.seq, f.nkv * f.hd);
  f.v = from_json(j["v"], f.seq, f.nkv * f.hd);
  f.out = from_json(j["out"], f.seq, f.nh * f.hd);
  f.mask = j["mask"].get<std::vector<std::vector<bool>>>();
  return f;
}

void expect_matches(const Tensor& got, const Fixture& f, int64_t first_row) {
  const int64_t width = f.nh * f.hd;
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.f32()[i], f.out.f32()[first_row * width + i], 1e-6) << "row " << first_row + i / width;
}

TEST(WindowAttentionFixture, TransformersMaskIsOurs) {
  const Fixture f = load();
  ASSERT_EQ(static_cast<int64_t>(f.mask.size()), f.seq);
  for (int64_t i = 0; i < f.seq; ++i)
    for (int64_t j = 0; j < f.seq; ++j) EXPECT_EQ(f.mask[i][j], test::window_keeps(i, j, f.window)) << i << ", " << j;
}

TEST(WindowAttentionFixture, CausalAttentionMatchesTransformers) {
  const Fixture f = load();
  Tensor out = Tensor::zeros({f.seq, f.nh * f.hd});
  causal_attention(f.q.view(), f.k.view(), f.v.view(), f.nh, f.nkv, out.view(), DType::F32, f.window);
  expect_matches(out, f, 0);
  // The last 4 rows after a cached prefix of the rest.
  const int64_t t = 4;
  Tensor tail = Tensor::zeros({t, f.nh * f.hd});
  causal_attention(f.q.view().rows(f.seq - t, f.seq), f.k.view(), f.v.view(), f.nh, f.nkv, tail.view(), DType::F32,
                   f.window);
  expect_matches(tail, f, f.seq - t);
  // Without the window the result is another one (the fixture tests the window).
  causal_attention(f.q.view(), f.k.view(), f.v.view(), f.nh, f.nkv, out.view());
  EXPECT_GT(std::abs(out.f32()[out.numel() - 1] - f.out.f32()[out.numel() - 1]), 1e-3);
}

TEST(WindowAttentionFixture, PagedAttentionMatchesTransformersInChunks) {
  const Fixture f = load();
  const int64_t bs = 2, width = f.nkv * f.hd;
  // Positions in reversed blocks: block b of the sequence is pool block n − 1 − b.
  const int64_t n = (f.seq + bs - 1) / bs;
  std::vector<int32_t> table(static_cast<size_t>(n));
  Tensor k_pool = Tensor::zeros({n * bs, width}), v_pool = Tensor::zeros({n * bs, width});
  for (int64_t b = 0; b < n; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(n - 1 - b);
  for (int64_t p = 0; p < f.seq; ++p) {
    const int64_t row = (n - 1 - p / bs) * bs + p % bs;
    for (int64_t i = 0; i < width; ++i) {
      k_pool.f32()[row * width + i] = f.k.f32()[p * width + i];
      v_pool.f32()[row * width + i] = f.v.f32()[p * width + i];
    }
  }
  int64_t start = 0;
  for (int64_t rows : {3, 1, 6, 1}) {
    // Blocks wholly before this chunk's window are freed (−1) as the scheduler does.
    std::vector<int32_t> held = table;
    for (int64_t b = 0; (b + 1) * bs <= start + 1 - f.window; ++b) held[static_cast<size_t>(b)] = -1;
    Tensor out = Tensor::zeros({rows, f.nh * f.hd});
    paged_attention(f.q.view().rows(start, start + rows), k_pool.view(), v_pool.view(), bs, {{0, rows, start, held}},
                    f.nh, f.nkv, out.view(), DType::F32, f.window);
    expect_matches(out, f, start);
    start += rows;
  }
  EXPECT_EQ(start, f.seq);
}

}  // namespace
}  // namespace olmo2::ops
