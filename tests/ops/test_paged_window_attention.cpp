// Sliding-window paged attention (docs/architecture.md §3, §8) on the CPU: the same
// result as causal_attention with the window for several block sizes, the same bits
// whatever the chunking, −1 table entries before the window accepted (never read), and
// keys before a row's window never read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "ops/attention.h"
#include "ops/paged_attention.h"
#include "tests/ops/random_tensor.h"
#include "tests/ops/window_reference.h"

namespace olmo2::ops {
namespace {

using test::random_tensor;
using ::testing::HasSubstr;

// One sequence of `len` positions: contiguous q/k/v and the same k/v scattered into a
// pool through a shuffled block table.
struct PagedSeq {
  int nh, nkv;
  int64_t hd, bs, len;
  Tensor q, k, v, k_pool, v_pool;
  std::vector<int32_t> table;

  PagedSeq(int nh_, int nkv_, int64_t hd_, int64_t bs_, int64_t len_, uint64_t seed)
      : nh(nh_), nkv(nkv_), hd(hd_), bs(bs_), len(len_) {
    q = random_tensor({len, nh * hd}, seed);
    k = random_tensor({len, nkv * hd}, seed + 1);
    v = random_tensor({len, nkv * hd}, seed + 2);
    const int64_t blocks = (len + bs - 1) / bs, pool_blocks = blocks + 2;
    table.resize(static_cast<size_t>(pool_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(table.begin(), table.end(), rng);
    table.resize(static_cast<size_t>(blocks));
    k_pool = Tensor::zeros({pool_blocks * bs, nkv * hd});
    v_pool = Tensor::zeros({pool_blocks * bs, nkv * hd});
    for (int64_t p = 0; p < len; ++p) {
      const int64_t row = int64_t{table[static_cast<size_t>(p / bs)]} * bs + p % bs;
      std::memcpy(k_pool.f32() + row * nkv * hd, k.f32() + p * nkv * hd, sizeof(float) * nkv * hd);
      std::memcpy(v_pool.f32() + row * nkv * hd, v.f32() + p * nkv * hd, sizeof(float) * nkv * hd);
    }
  }
  // Rows start … start+rows−1 through the pool, with `tbl` as the block table.
  Tensor paged(int64_t start, int64_t rows, int64_t window, const std::vector<int32_t>& tbl,
               DType act = DType::F32) const {
    Tensor out = Tensor::zeros({rows, nh * hd});
    paged_attention(q.view().rows(start, start + rows), k_pool.view(), v_pool.view(), bs, {{0, rows, start, tbl}},
                    nh, nkv, out.view(), act, window);
    return out;
  }
  // Rows start … start+rows−1 with contiguous keys 0 … start+rows−1.
  Tensor causal(int64_t start, int64_t rows, int64_t window, DType act = DType::F32) const {
    Tensor out = Tensor::zeros({rows, nh * hd});
    causal_attention(q.view().rows(start, start + rows), k.view().rows(0, start + rows),
                     v.view().rows(0, start + rows), nh, nkv, out.view(), act, window);
    return out;
  }
};

TEST(PagedWindowAttention, MatchesCausalAttentionWithTheWindow) {
  const int64_t len = 29;
  for (int64_t bs : {1, 3, 4, 16}) {
    for (int64_t window : {1, 2, 5, 16, 40}) {
      const PagedSeq s(4, 2, 16, bs, len, 300 + bs * 7 + window);
      // Whole prompt, a chunk after a cached prefix, one decode step.
      for (auto [start, rows] : {std::pair<int64_t, int64_t>{0, len}, {11, 9}, {len - 1, 1}}) {
        SCOPED_TRACE(testing::Message() << "bs " << bs << " window " << window << " start " << start);
        const Tensor got = s.paged(start, rows, window, s.table), want = s.causal(start, rows, window);
        for (int64_t i = 0; i < got.numel(); ++i) ASSERT_NEAR(got.f32()[i], want.f32()[i], 2e-6) << "element " << i;
      }
    }
  }
}

TEST(PagedWindowAttention, ChunkingDoesNotChangeABit) {
  const int64_t len = 23, window = 6;
  for (int64_t bs : {1, 4, 16}) {
    for (DType act : {DType::F32, DType::BF16}) {
      const PagedSeq s(4, 1, 32, bs, len, 400 + bs);
      const Tensor whole = s.paged(0, len, window, s.table, act);
      int64_t start = 0;
      for (int64_t rows : {5, 1, 9, 2, 6}) {
        const Tensor part = s.paged(start, rows, window, s.table, act);
        EXPECT_EQ(std::memcmp(part.f32(), whole.f32() + start * 4 * 32, sizeof(float) * part.numel()), 0)
            << "bs " << bs << " " << dtype_name(act) << " chunk at " << start;
        start += rows;
      }
      // Window 0 and a window covering the sequence are the plain paged attention.
      const Tensor plain = s.paged(0, len, 0, s.table, act), wide = s.paged(0, len, len, s.table, act);
      EXPECT_EQ(std::memcmp(plain.f32(), wide.f32(), sizeof(float) * plain.numel()), 0);
      EXPECT_NE(std::memcmp(plain.f32(), whole.f32(), sizeof(float) * plain.numel()), 0);
    }
  }
}

TEST(PagedWindowAttention, FreedBlocksBeforeTheWindowAreNeverRead) {
  const int64_t len = 30, bs = 4, window = 7;
  PagedSeq s(4, 2, 8, bs, len, 500);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // A chunk of rows 20 … 29: the first row sees 14 … 20, so blocks 0 … 2 (positions
  // 0 … 11) lie wholly before every row's window and are freed (−1); block 3 holds
  // positions 12, 13 before the window: poison them, they must not be read either.
  std::vector<int32_t> freed = s.table;
  for (int b = 0; b < 3; ++b) freed[static_cast<size_t>(b)] = -1;
  for (int64_t p : {12, 13}) {
    const int64_t row = int64_t{s.table[3]} * bs + p % bs;
    for (int64_t i = 0; i < 2 * 8; ++i) s.k_pool.f32()[row * 16 + i] = s.v_pool.f32()[row * 16 + i] = float(nan);
  }
  const Tensor got = s.paged(20, 10, window, freed), want = s.paged(20, 10, window, s.table);
  const Tensor causal = s.causal(20, 10, window);
  for (int64_t i = 0; i < got.numel(); ++i) {
    ASSERT_EQ(got.f32()[i], want.f32()[i]) << "element " << i;
    ASSERT_NEAR(got.f32()[i], causal.f32()[i], 2e-6) << "element " << i;
  }
  // The same table for a row that sees block 2 (position 17 sees 11 … 17): refused,
  // naming the entry.
  try {
    s.paged(17, 3, window, freed);
    ADD_FAILURE() << "a −1 entry inside the window was accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("block table entry 2 is block -1"));
  }
  // Without a window every entry is read, so checked.
  EXPECT_THROW(s.paged(20, 10, 0, freed), InputError);
  EXPECT_THROW(s.paged(20, 10, -1, s.table), ShapeError);
}

TEST(PagedWindowAttention, MatchesTheExplicitMaskForSeveralSequencesInOneCall) {
  const int nh = 6, nkv = 2;
  const int64_t hd = 20, bs = 4, window = 5;
  const PagedSeq a(nh, nkv, hd, bs, 17, 600), b(nh, nkv, hd, bs, 9, 610);
  // Both sequences in one pool: b's blocks after a's.
  const int64_t a_rows = a.k_pool.shape()[0], width = nkv * hd;
  Tensor k_pool = Tensor::zeros({a_rows + b.k_pool.shape()[0], width}),
         v_pool = Tensor::zeros({a_rows + b.k_pool.shape()[0], width});
  std::memcpy(k_pool.f32(), a.k_pool.f32(), sizeof(float) * a.k_pool.numel());
  std::memcpy(v_pool.f32(), a.v_pool.f32(), sizeof(float) * a.v_pool.numel());
  std::memcpy(k_pool.f32() + a_rows * width, b.k_pool.f32(), sizeof(float) * b.k_pool.numel());
  std::memcpy(v_pool.f32() + a_rows * width, b.v_pool.f32(), sizeof(float) * b.v_pool.numel());
  std::vector<int32_t> b_table = b.table;
  for (int32_t& id : b_table) id += static_cast<int32_t>(a_rows / bs);
  // a: rows 10 … 16 (7 rows); b: the decode of position 8.
  Tensor q = Tensor::zeros({8, nh * hd}), out = Tensor::zeros({8, nh * hd});
  std::memcpy(q.f32(), a.q.f32() + 10 * nh * hd, sizeof(float) * 7 * nh * hd);
  std::memcpy(q.f32() + 7 * nh * hd, b.q.f32() + 8 * nh * hd, sizeof(float) * nh * hd);
  paged_attention(q.view(), k_pool.view(), v_pool.view(), bs, {{0, 7, 10, a.table}, {7, 1, 8, b_table}}, nh, nkv,
                  out.view(), DType::F32, window);
  auto d = [](const Tensor& t, int64_t r0, int64_t r1) {
    const int64_t w = t.shape()[1];
    return std::vector<double>(t.f32() + r0 * w, t.f32() + r1 * w);
  };
  const auto ra = test::masked_attention(d(a.q, 10, 17), d(a.k, 0, 17), d(a.v, 0, 17), 7, 17, nh, nkv, hd, window);
  const auto rb = test::masked_attention(d(b.q, 8, 9), d(b.k, 0, 9), d(b.v, 0, 9), 1, 9, nh, nkv, hd, window);
  for (size_t i = 0; i < ra.size(); ++i) ASSERT_NEAR(out.f32()[i], ra[i], 2e-6) << "a element " << i;
  for (size_t i = 0; i < rb.size(); ++i) ASSERT_NEAR(out.f32()[ra.size() + i], rb[i], 2e-6) << "b element " << i;
}

}  // namespace
}  // namespace olmo2::ops
