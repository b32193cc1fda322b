// Paged attention against contiguous causal_attention, a naive double reference, and
// itself under re-chunking, re-batching and another thread count (bit-identical).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <span>

#include "ops/attention.h"
#include "ops/paged_attention.h"
#include "ops/tensor_ops.h"
#include "ops/threads.h"
#include "tests/ops/random_tensor.h"

namespace olmo2::ops {
namespace {

using test::random_tensor;
using ::testing::HasSubstr;

// All `pool_blocks` block ids in a seeded random order.
std::vector<int32_t> shuffled_blocks(int64_t pool_blocks, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(pool_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

// Copies positions [from, to) of the contiguous rows `src` into `pool` via `table`.
void scatter(const Tensor& src, const Tensor& pool, const std::vector<int32_t>& table, int64_t bs,
             int64_t from, int64_t to) {
  const int64_t width = src.shape()[1];
  for (int64_t p = from; p < to; ++p) {
    const int64_t row = int64_t{table[static_cast<size_t>(p / bs)]} * bs + p % bs;
    std::copy(src.f32() + p * width, src.f32() + (p + 1) * width, pool.f32() + row * width);
  }
}

// Rows [begin, end) of a contiguous 2-d tensor as a view.
TensorView row_view(const Tensor& t, int64_t begin, int64_t end) {
  return t.view().rows(begin, end);
}

// Restores the thread count when a test ends, also on failure.
struct ThreadGuard {
  int saved = num_threads();
  ~ThreadGuard() { set_num_threads(saved); }
};

// One sequence with its own contiguous k/v and a block table into a shared pool.
struct Seq {
  Tensor q, k, v;  // q [len, H·hd] (all positions), k/v [len, KV·hd]
  std::vector<int32_t> table;
  int64_t len = 0;
};

// `lens.size()` sequences in one pool of `pool_blocks` blocks (shuffled, disjoint tables).
struct Batch {
  int nh, nkv;
  int64_t hd, bs;
  Tensor k_pool, v_pool;
  std::vector<Seq> seqs;

  Batch(int nh_, int nkv_, int64_t hd_, int64_t bs_, const std::vector<int64_t>& lens,
        uint64_t seed)
      : nh(nh_), nkv(nkv_), hd(hd_), bs(bs_) {
    int64_t need = 0;
    for (int64_t len : lens) need += (len + bs - 1) / bs;
    const int64_t pool_blocks = need + 3;  // some blocks stay unused
    k_pool = Tensor::zeros({pool_blocks * bs, nkv * hd});
    v_pool = Tensor::zeros({pool_blocks * bs, nkv * hd});
    const auto ids = shuffled_blocks(pool_blocks, seed);
    size_t next = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
      Seq sq;
      sq.len = lens[s];
      sq.q = random_tensor({sq.len, nh * hd}, seed * 100 + 3 * s + 1);
      sq.k = random_tensor({sq.len, nkv * hd}, seed * 100 + 3 * s + 2);
      sq.v = random_tensor({sq.len, nkv * hd}, seed * 100 + 3 * s + 3);
      const int64_t blocks = (sq.len + bs - 1) / bs;
      sq.table.assign(ids.begin() + static_cast<std::ptrdiff_t>(next),
                      ids.begin() + static_cast<std::ptrdiff_t>(next + blocks));
      next += static_cast<size_t>(blocks);
      seqs.push_back(std::move(sq));
    }
  }
  void fill(size_t s, int64_t from, int64_t to) {
    scatter(seqs[s].k, k_pool, seqs[s].table, bs, from, to);
    scatter(seqs[s].v, v_pool, seqs[s].table, bs, from, to);
  }
  void fill_all() {
    for (size_t s = 0; s < seqs.size(); ++s) fill(s, 0, seqs[s].len);
  }
};

// A call's query rows: chunks[i] = (sequence, start, rows), packed in order into q.
struct Call {
  Tensor q, out;
  std::vector<PagedSequence> sequences;
};

Call make_call(const Batch& b, const std::vector<std::array<int64_t, 3>>& chunks) {
  int64_t total = 0;
  for (const auto& c : chunks) total += c[2];
  Call call;
  const int64_t width = b.nh * b.hd;
  call.q = Tensor::zeros({total, width});
  call.out = Tensor::zeros({total, width});
  int64_t row = 0;
  for (const auto& [s, start, rows] : chunks) {
    const Seq& sq = b.seqs[static_cast<size_t>(s)];
    std::copy(sq.q.f32() + start * width, sq.q.f32() + (start + rows) * width,
              call.q.f32() + row * width);
    call.sequences.push_back({row, rows, start, sq.table});
    row += rows;
  }
  return call;
}

void run(const Batch& b, Call& call, DType act = DType::F32) {
  paged_attention(call.q.view(), b.k_pool.view(), b.v_pool.view(), b.bs, call.sequences, b.nh,
                  b.nkv, call.out.view(), act);
}

TEST(PagedAttention, MatchesContiguousCausalAttentionThroughShuffledBlocks) {
  const int64_t hd = 16, len = 23;  // 23 is not a multiple of 4 or 16
  for (int64_t bs : {4, 16}) {
    for (auto [nh, nkv] : {std::pair{4, 4}, std::pair{4, 2}, std::pair{4, 1}}) {
      Batch b(nh, nkv, hd, bs, {len}, 40 + bs + nkv);
      b.fill_all();
      const Seq& sq = b.seqs[0];
      // (start, rows): whole prompt, decode of the last token, a chunk after a prefix.
      for (auto [start, rows] : {std::pair<int64_t, int64_t>{0, len}, {len - 1, 1}, {13, 10}}) {
        SCOPED_TRACE(testing::Message() << "bs " << bs << " heads " << nh << "/" << nkv << " start "
                                        << start << " rows " << rows);
        // The sequence's rows sit at row_begin 2 of a larger q; other rows stay untouched.
        const int64_t width = nh * hd, row_begin = 2;
        Tensor q = Tensor::zeros({rows + 3, width}), out = Tensor::zeros({rows + 3, width});
        std::copy(sq.q.f32() + start * width, sq.q.f32() + (start + rows) * width,
                  q.f32() + row_begin * width);
        std::fill(out.f32(), out.f32() + out.numel(), 7.0f);
        paged_attention(q.view(), b.k_pool.view(), b.v_pool.view(), bs,
                        {{row_begin, rows, start, sq.table}}, nh, nkv, out.view());

        Tensor ref = Tensor::zeros({rows, width});
        causal_attention(row_view(sq.q, start, start + rows), row_view(sq.k, 0, start + rows),
                         row_view(sq.v, 0, start + rows), nh, nkv, ref.view());
        for (int64_t i = 0; i < rows * width; ++i)
          ASSERT_NEAR(out.f32()[row_begin * width + i], ref.f32()[i], 1e-5) << "element " << i;
        for (int64_t i = 0; i < row_begin * width; ++i) ASSERT_EQ(out.f32()[i], 7.0f);
        for (int64_t i = (row_begin + rows) * width; i < out.numel(); ++i)
          ASSERT_EQ(out.f32()[i], 7.0f);
      }
    }
  }
}

// Naive paged attention in double, written from the formula: positions read through the
// block table, softmax over 0 … start+t.
std::vector<double> naive_paged(const Batch& b, const Call& call) {
  const int64_t width = b.nh * b.hd, kvw = b.nkv * b.hd;
  std::vector<double> out(static_cast<size_t>(call.q.numel()), 0.0);
  for (const PagedSequence& s : call.sequences) {
    for (int64_t t = 0; t < s.rows; ++t) {
      const int64_t row = s.row_begin + t, p = s.start + t;
      for (int h = 0; h < b.nh; ++h) {
        const int kvh = h / (b.nh / b.nkv);
        std::vector<double> sc(static_cast<size_t>(p + 1));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= p; ++j) {
          const int64_t pr =
              int64_t{s.block_table[static_cast<size_t>(j / b.bs)]} * b.bs + j % b.bs;
          double dot = 0;
          for (int64_t i = 0; i < b.hd; ++i)
            dot += double(call.q.f32()[row * width + h * b.hd + i]) *
                   b.k_pool.f32()[pr * kvw + kvh * b.hd + i];
          sc[static_cast<size_t>(j)] = dot / std::sqrt(double(b.hd));
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j <= p; ++j) {
          const int64_t pr =
              int64_t{s.block_table[static_cast<size_t>(j / b.bs)]} * b.bs + j % b.bs;
          for (int64_t i = 0; i < b.hd; ++i)
            out[static_cast<size_t>(row * width + h * b.hd + i)] +=
                sc[static_cast<size_t>(j)] / sum * b.v_pool.f32()[pr * kvw + kvh * b.hd + i];
        }
      }
    }
  }
  return out;
}

TEST(PagedAttention, MatchesNaiveDoubleReferenceForSeveralSequences) {
  // hd 20 exercises the dot product's tail; GQA 6/2; block size 4.
  Batch b(6, 2, 20, 4, {9, 17, 1, 30}, 7);
  b.fill_all();
  Call call = make_call(b, {{0, 0, 9}, {1, 16, 1}, {2, 0, 1}, {3, 11, 19}});
  run(b, call);
  const auto ref = naive_paged(b, call);
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(call.out.f32()[i], ref[i], 1e-5) << "element " << i;
}

TEST(PagedAttention, ChunkedPrefillIsBitIdenticalToOneChunk) {
  const int64_t n = 10;
  for (int64_t bs : {4, 16}) {
    Batch b(4, 2, 64, bs, {n}, 11);
    b.fill_all();
    Call whole = make_call(b, {{0, 0, n}});
    run(b, whole);

    // Same positions as chunks of 3, 5, 1, 1 rows; the pool only holds what is cached.
    Batch c(4, 2, 64, bs, {n}, 11);
    std::vector<float> chunked;
    int64_t start = 0;
    for (int64_t rows : {3, 5, 1, 1}) {
      c.fill(0, start, start + rows);
      Call part = make_call(c, {{0, start, rows}});
      run(c, part);
      chunked.insert(chunked.end(), part.out.f32(), part.out.f32() + part.out.numel());
      start += rows;
    }
    ASSERT_EQ(static_cast<int64_t>(chunked.size()), whole.out.numel());
    EXPECT_EQ(std::memcmp(chunked.data(), whole.out.f32(), chunked.size() * sizeof(float)), 0)
        << "block size " << bs;
  }
}

TEST(PagedAttention, SequenceResultDoesNotDependOnBatchOrThreads) {
  ThreadGuard guard;
  // Sequence 2 (start 40, 6 new rows) alone, then in the middle of five others. Alone,
  // its 6 rows are too few for 2 threads, so the kernel also splits the heads into
  // ranges; in the batch it does not: the grouping must not change a bit either.
  Batch b(8, 2, 32, 16, {50, 3, 46, 130, 1, 77}, 21);
  b.fill_all();
  set_num_threads(2);
  Call alone = make_call(b, {{2, 40, 6}});
  run(b, alone);
  Call batch =
      make_call(b, {{0, 0, 50}, {1, 2, 1}, {3, 100, 30}, {2, 40, 6}, {4, 0, 1}, {5, 76, 1}});
  run(b, batch);
  const int64_t width = 8 * 32, at = 50 + 1 + 30;
  EXPECT_EQ(std::memcmp(alone.out.f32(), batch.out.f32() + at * width, sizeof(float) * 6 * width),
            0);

  set_num_threads(1);
  Call one_thread =
      make_call(b, {{0, 0, 50}, {1, 2, 1}, {3, 100, 30}, {2, 40, 6}, {4, 0, 1}, {5, 76, 1}});
  run(b, one_thread);
  EXPECT_EQ(std::memcmp(one_thread.out.f32(), batch.out.f32(), sizeof(float) * batch.out.numel()),
            0);
}

TEST(PagedAttention, Bf16ActivationsMatchCausalAttention) {
  const int nh = 4, nkv = 2;
  const int64_t hd = 32, len = 37;
  Batch b(nh, nkv, hd, 16, {len}, 31);
  b.fill_all();
  const Seq& sq = b.seqs[0];
  const int64_t start = 20, rows = len - start, width = nh * hd;
  Call call = make_call(b, {{0, start, rows}});
  run(b, call, DType::BF16);
  Tensor ref = Tensor::zeros({rows, width});
  causal_attention(row_view(sq.q, start, len), row_view(sq.k, 0, len), row_view(sq.v, 0, len), nh,
                   nkv, ref.view(), DType::BF16);
  int64_t equal = 0;
  for (int64_t i = 0; i < rows * width; ++i) {
    const float o = call.out.f32()[i], r = ref.f32()[i];
    ASSERT_EQ(o, round_bf16(o)) << "element " << i << " is not bf16";
    ASSERT_NEAR(o, r, 1e-2 + 1e-2 * std::abs(r)) << "element " << i;
    equal += o == r;
  }
  // Both round at the same points, so nearly every element agrees exactly.
  EXPECT_GT(equal, rows * width * 9 / 10);
}

// A bf16 KV cache (docs/architecture.md §3.2): bf16 pools are widened exactly, so they
// give the bits of f32 pools holding the same bf16-rounded keys and values, for f32 and
// bf16 activations, several sequences in shuffled blocks, GQA.
TEST(PagedAttention, Bf16PoolsGiveTheBitsOfF32PoolsHoldingTheSameValues) {
  Batch b(4, 2, 32, 8, {37, 21}, 71);
  b.fill_all();
  for (Tensor* pool : {&b.k_pool, &b.v_pool}) {
    for (int64_t i = 0; i < pool->numel(); ++i) pool->f32()[i] = round_bf16(pool->f32()[i]);
  }
  Tensor k16 = Tensor::zeros(b.k_pool.shape(), DType::BF16), v16 = Tensor::zeros(b.v_pool.shape(), DType::BF16);
  copy(b.k_pool.view(), k16.view());
  copy(b.v_pool.view(), v16.view());
  for (DType act : {DType::F32, DType::BF16}) {
    Call f32_pools = make_call(b, {{0, 30, 7}, {1, 0, 21}});
    Call bf16_pools = make_call(b, {{0, 30, 7}, {1, 0, 21}});
    run(b, f32_pools, act);
    paged_attention(bf16_pools.q.view(), k16.view(), v16.view(), b.bs, bf16_pools.sequences, b.nh, b.nkv,
                    bf16_pools.out.view(), act);
    EXPECT_EQ(std::memcmp(f32_pools.out.f32(), bf16_pools.out.f32(), sizeof(float) * f32_pools.out.numel()), 0)
        << dtype_name(act);
    double max_abs = 0.0;  // and the result is not all zeros
    for (int64_t i = 0; i < bf16_pools.out.numel(); ++i) max_abs = std::max(max_abs, double{std::abs(bf16_pools.out.f32()[i])});
    EXPECT_GT(max_abs, 0.05);
  }
  // Pools of two dtypes are refused, naming both.
  Call call = make_call(b, {{1, 0, 21}});
  try {
    paged_attention(call.q.view(), k16.view(), b.v_pool.view(), b.bs, call.sequences, b.nh, b.nkv, call.out.view());
    ADD_FAILURE() << "bf16 keys with f32 values accepted";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("bf16/f32"));
  }
}

TEST(PagedAttention, RejectsBadInputs) {
  Batch b(4, 2, 8, 4, {10}, 51);
  b.fill_all();
  Call call = make_call(b, {{0, 0, 10}});
  const auto bad = [&](std::vector<PagedSequence> seqs, int nh = 4, int nkv = 2, int64_t bs = 4) {
    paged_attention(call.q.view(), b.k_pool.view(), b.v_pool.view(), bs, seqs, nh, nkv,
                    call.out.view());
  };
  const std::vector<int32_t>& table = b.seqs[0].table;  // 3 blocks for 10 positions
  // Block table too short for start + rows = 10 positions.
  const std::span<const int32_t> short_table(table.data(), 2);
  try {
    bad({{0, 10, 0, short_table}});
    ADD_FAILURE() << "short block table accepted";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs 3 blocks"));
  }
  // A decode at position 12 needs a 4th block.
  EXPECT_THROW(bad({{0, 1, 12, table}}), ShapeError);
  // Block ids outside the pool (6 blocks).
  const int64_t pool_blocks = b.k_pool.shape()[0] / 4;
  for (int32_t id : {-1, static_cast<int32_t>(pool_blocks)}) {
    std::vector<int32_t> broken = table;
    broken[1] = id;
    try {
      bad({{0, 10, 0, broken}, {0, 10, 0, table}});
      ADD_FAILURE() << "block " << id << " accepted";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr("sequence 0"));
      EXPECT_THAT(e.what(), HasSubstr("block " + std::to_string(id)));
    }
  }
  EXPECT_THROW(bad({{0, 10, 0, table}}, 4, 3), ShapeError);     // H % KV != 0
  EXPECT_THROW(bad({{0, 10, 0, table}}, 4, 2, 5), ShapeError);  // pool rows not a multiple
  EXPECT_THROW(bad({{5, 6, 0, table}}), ShapeError);            // rows past the end of q
  EXPECT_THROW(bad({{0, 0, 0, table}}), ShapeError);            // no rows
  Tensor wide = Tensor::zeros({b.k_pool.shape()[0], 3 * 8});    // KV·hd mismatch
  EXPECT_THROW(paged_attention(call.q.view(), wide.view(), wide.view(), 4, {{0, 10, 0, table}}, 4,
                               2, call.out.view()),
               ShapeError);
}

}  // namespace
}  // namespace olmo2::ops
