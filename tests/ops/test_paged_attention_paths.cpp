// The tiled paged attention (every code path, 1 and 2 threads) against the one-row
// kernel it replaced, kept here as the reference (its loops verbatim): bit-identical
// outputs over random prefill chunks, decode rows, windows, GQA groups, head dims that
// are not a multiple of 8, bf16 activations (with f32 and bf16 pools) and several
// sequences per call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "ops/cpu/paged_attention_detail.h"
#include "ops/dtype.h"
#include "ops/paged_attention.h"
#include "ops/threads.h"

namespace olmo2::ops {
namespace {

// ---- The reference: the one-row kernel, each (row, head) alone, plain loops. ----

float ref_dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void reference(const Tensor& q, const Tensor& kp, const Tensor& vp, int64_t bs, const std::vector<PagedSequence>& seqs,
               int nh, int nkv, Tensor& out, DType act, int64_t window) {
  const int64_t hd = q.shape()[1] / nh;
  const int group = nh / nkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> s;
  for (const PagedSequence& seq : seqs) {
    for (int64_t t = 0; t < seq.rows; ++t) {
      const int64_t visible = seq.start + t + 1;
      const int64_t first = window > 0 ? std::max<int64_t>(0, visible - window) : 0;
      const float* qr = q.f32() + (seq.row_begin + t) * q.shape()[1];
      float* orow = out.f32() + (seq.row_begin + t) * out.shape()[1];
      s.assign(static_cast<size_t>(visible), 0.0f);
      auto pool_row = [&](int64_t j) { return int64_t{seq.block_table[static_cast<size_t>(j / bs)]} * bs + j % bs; };
      for (int h = 0; h < nh; ++h) {
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = first; j < visible; ++j) {
          const float d = ref_dot(qr + h * hd, kp.f32() + pool_row(j) * kp.shape()[1] + (h / group) * hd, hd);
          const float x = act == DType::BF16 ? round_bf16(round_bf16(d) * scale) : d * scale;
          s[static_cast<size_t>(j)] = x;
          mx = std::max(mx, x);
        }
        float sum = 0.0f;
        for (int64_t j = first; j < visible; ++j) {
          s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - mx);
          sum += s[static_cast<size_t>(j)];
        }
        const float inv = 1.0f / sum;
        for (int64_t j = first; j < visible; ++j) {
          s[static_cast<size_t>(j)] *= inv;
          if (act == DType::BF16) s[static_cast<size_t>(j)] = round_bf16(s[static_cast<size_t>(j)]);
        }
        float* o = orow + h * hd;
        std::fill(o, o + hd, 0.0f);
        for (int64_t j = first; j < visible; ++j) {
          const float* v = vp.f32() + pool_row(j) * vp.shape()[1] + (h / group) * hd;
          for (int64_t i = 0; i < hd; ++i) o[i] += s[static_cast<size_t>(j)] * v[i];
        }
      }
      if (act == DType::BF16) round_to_dtype(orow, static_cast<size_t>(nh * hd), act);
    }
  }
}

// ---- Random calls. ----

struct Case {
  int nh, nkv;
  int64_t hd, bs, window;
  DType act;
  std::vector<std::pair<int64_t, int64_t>> chunks;  // (start, rows) per sequence
};

std::string describe(const Case& c) {
  std::string s = "heads " + std::to_string(c.nh) + "/" + std::to_string(c.nkv) + " hd " + std::to_string(c.hd) +
                  " bs " + std::to_string(c.bs) + " window " + std::to_string(c.window) + " " + dtype_name(c.act) +
                  " chunks";
  for (const auto& [start, rows] : c.chunks) s += " (" + std::to_string(start) + "+" + std::to_string(rows) + ")";
  return s;
}

Tensor random_values(std::vector<int64_t> shape, std::mt19937_64& rng, float range, bool bf16) {
  Tensor t = Tensor::zeros(std::move(shape));
  std::uniform_real_distribution<float> dist(-range, range);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = bf16 ? round_bf16(dist(rng)) : dist(rng);
  return t;
}

// Runs `c` on every available path at 1 and 2 threads; every output equals the reference's bits.
void check_case(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const bool bf16 = c.act == DType::BF16;
  int64_t total = 0, blocks = 0;
  for (const auto& [start, rows] : c.chunks) total += rows, blocks += (start + rows + c.bs - 1) / c.bs;
  const Tensor q = random_values({total, c.nh * c.hd}, rng, 2.0f, bf16);
  const Tensor kp = random_values({(blocks + 2) * c.bs, c.nkv * c.hd}, rng, 2.0f, bf16);
  const Tensor vp = random_values({(blocks + 2) * c.bs, c.nkv * c.hd}, rng, 1.0f, bf16);
  std::vector<int32_t> ids(static_cast<size_t>(blocks + 2));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables;
  size_t next = 0;
  for (const auto& [start, rows] : c.chunks) {
    const size_t n = static_cast<size_t>((start + rows + c.bs - 1) / c.bs);
    tables.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(next), ids.begin() + static_cast<std::ptrdiff_t>(next + n));
    // Blocks wholly before the first row's window are freed (−1) and must not be read.
    if (c.window > 0)
      for (int64_t b = 0; b < std::max<int64_t>(0, start + 1 - c.window) / c.bs; ++b) tables.back()[static_cast<size_t>(b)] = -1;
    next += n;
  }
  std::vector<PagedSequence> seqs;
  int64_t row = 0;
  for (size_t s = 0; s < c.chunks.size(); ++s) {
    seqs.push_back({row, c.chunks[s].second, c.chunks[s].first, tables[s]});
    row += c.chunks[s].second;
  }
  Tensor want = Tensor::zeros({total, c.nh * c.hd});
  reference(q, kp, vp, c.bs, seqs, c.nh, c.nkv, want, c.act, c.window);
  // bf16 activations: the pools' values are bf16, so bf16 pools holding them must give the same bits.
  auto to_bf16 = [](const Tensor& t) {
    Tensor b = Tensor::zeros(t.shape(), DType::BF16);
    auto* d = static_cast<uint16_t*>(b.view().data());
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = f32_to_bf16(t.f32()[i]);
    return b;
  };
  const Tensor kb = bf16 ? to_bf16(kp) : Tensor(), vb = bf16 ? to_bf16(vp) : Tensor();
  const int saved = num_threads();
  for (PagedAttentionPath path : {PagedAttentionPath::Avx2, PagedAttentionPath::Portable}) {
    if (!paged_attention_path_available(path)) continue;
    set_paged_attention_path(path);
    for (int threads : {1, 2, 3}) {
      const bool pools16 = threads == 3;  // the last run: bf16 pools, 2 threads
      if (pools16 && !bf16) continue;
      set_num_threads(pools16 ? 2 : threads);
      Tensor got = Tensor::zeros({total, c.nh * c.hd});
      std::fill(got.f32(), got.f32() + got.numel(), 7.0f);
      paged_attention(q.view(), (pools16 ? kb : kp).view(), (pools16 ? vb : vp).view(), c.bs, seqs, c.nh, c.nkv,
                      got.view(), c.act, c.window);
      for (int64_t i = 0; i < got.numel(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, got.f32() + i, 4), std::memcpy(&b, want.f32() + i, 4);
        ASSERT_EQ(a, b) << describe(c) << ": path " << paged_attention_path_name(path) << ", "
                        << (pools16 ? "bf16 pools, 2" : std::to_string(threads)) << " threads, element " << i << " (row " << i / (c.nh * c.hd) << "): " << got.f32()[i]
                        << " vs the one-row kernel's " << want.f32()[i];
      }
    }
  }
  reset_paged_attention_path();
  set_num_threads(saved);
}

TEST(PagedAttentionPaths, EveryPathGivesTheOneRowKernelsBitsOnRandomCalls) {
  std::mt19937_64 rng(38);
  const std::vector<std::pair<int, int>> heads = {{4, 4}, {4, 2}, {6, 1}, {8, 2}, {2, 1}, {36, 2}, {3, 3}};
  const std::vector<int64_t> hds = {128, 8, 48, 80, 96, 5, 13, 64, 20};
  for (int n = 0; n < 60; ++n) {
    Case c;
    std::tie(c.nh, c.nkv) = heads[static_cast<size_t>(n) % heads.size()];
    c.hd = hds[static_cast<size_t>(n) % hds.size()];
    c.bs = std::vector<int64_t>{1, 4, 16}[rng() % 3];
    c.window = std::vector<int64_t>{0, 0, 1, 5, 17, 40}[rng() % 6];
    c.act = n % 3 == 2 ? DType::BF16 : DType::F32;
    const int nseq = 1 + static_cast<int>(rng() % 3);
    for (int s = 0; s < nseq; ++s) {
      const int64_t kind = static_cast<int64_t>(rng() % 3);  // prefill from 0, a later chunk, a decode row
      const int64_t start = kind == 0 ? 0 : static_cast<int64_t>(rng() % 70);
      const int64_t rows = kind == 2 ? 1 : 1 + static_cast<int64_t>(rng() % 45);
      c.chunks.emplace_back(start, rows);
    }
    SCOPED_TRACE(describe(c));
    check_case(c, 1000 + static_cast<uint64_t>(n));
    if (HasFatalFailure()) return;
  }
}

TEST(PagedAttentionPaths, LongPromptAndDecodeBatchGiveTheOneRowKernelsBits) {
  check_case({4, 4, 128, 16, 0, DType::F32, {{0, 300}}}, 1);
  check_case({4, 2, 64, 16, 0, DType::BF16, {{0, 200}, {150, 40}}}, 2);
  check_case({4, 4, 128, 16, 64, DType::F32, {{0, 300}}}, 3);
  std::vector<std::pair<int64_t, int64_t>> decode;
  for (int s = 0; s < 12; ++s) decode.emplace_back(20 + 17 * s, 1);
  check_case({8, 8, 128, 16, 0, DType::F32, decode}, 4);
  check_case({8, 2, 128, 16, 0, DType::BF16, decode}, 5);
}

// Sequences of at most 2 new rows (detail::kRowPathMaxRows) take the one-row path (whole key rows, all heads),
// longer ones the tiled path: both sides of that threshold in one call, several head
// ranges per row, windows and bf16 pools included.
TEST(PagedAttentionPaths, BothSidesOfTheRowPathThresholdGiveTheOneRowKernelsBits) {
  static_assert(detail::kRowPathMaxRows == 2, "the cases below sit on either side of the threshold");
  ASSERT_EQ(detail::row_path_max_rows(), detail::kRowPathMaxRows);
  const std::vector<std::pair<int64_t, int64_t>> mixed = {{0, 4}, {30, 5}, {7, 3}, {50, 1}, {0, 6}, {12, 2}};
  check_case({8, 8, 128, 16, 0, DType::F32, mixed}, 6);
  check_case({8, 2, 80, 4, 9, DType::BF16, mixed}, 7);
  check_case({16, 16, 64, 16, 0, DType::F32, {{100, 2}, {100, 3}}}, 8);
  check_case({6, 3, 13, 1, 17, DType::F32, {{60, 2}}}, 9);
}

TEST(PagedAttentionPaths, NamesAndAvailability) {
  EXPECT_STREQ(paged_attention_path_name(PagedAttentionPath::Avx2), "avx2");
  EXPECT_STREQ(paged_attention_path_name(PagedAttentionPath::Portable), "portable");
  EXPECT_TRUE(paged_attention_path_available(PagedAttentionPath::Portable));
  if (!paged_attention_path_available(PagedAttentionPath::Avx2)) {
    EXPECT_THROW(set_paged_attention_path(PagedAttentionPath::Avx2), ShapeError);
    GTEST_SKIP() << "this CPU lacks AVX2 and FMA: only the portable path was compared";
  }
}

}  // namespace
}  // namespace olmo2::ops
