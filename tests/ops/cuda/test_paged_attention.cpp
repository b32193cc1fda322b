// CUDA paged attention against ops::cpu::paged_attention, and against itself: the same
// bits for a sequence alone or in a batch, for a prompt in one chunk or several, and as
// cuda::causal_attention over the same keys (docs/architecture.md §2, §8). Skipped,
// saying why, without a GPU. Tolerances per element as in test_attention.cpp (each
// sequence's keys gathered from its blocks; the bf16 cases use inputs on a 1/16 grid so
// that every score is exact in fp32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/cpu/kernels.h"
#include "ops/paged_attention.h"
#include "ops/tensor_ops.h"
#include "tests/ops/attention_bounds.h"
#include "tests/ops/cuda/cuda_test_util.h"

namespace olmo2::ops {
namespace {

#ifdef OLMO2_HAVE_CUDA

constexpr int64_t kBlock = 16;

Tensor values(std::vector<int64_t> shape, uint64_t seed) {
  Tensor t = Tensor::zeros(std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> grid(-32, 32);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = grid(rng) / 16.0f;
  return t;
}

// A pool of `blocks` blocks filled with values everywhere (positions not yet written by
// a test still hold finite numbers), the block ids handed out in a shuffled order.
struct Pool {
  int h, kv;
  int64_t hd, blocks;
  Tensor q, k, v;  // host: q [rows, H·hd]; k, v [blocks·16, KV·hd]
  Tensor gq, gk, gv;
  std::vector<int32_t> free_ids;
  Pool(int h_, int kv_, int64_t hd_, int64_t rows, int64_t blocks_) : h(h_), kv(kv_), hd(hd_), blocks(blocks_) {
    q = values({rows, h * hd}, 1), k = values({blocks * kBlock, kv * hd}, 2), v = values({blocks * kBlock, kv * hd}, 3);
    gq = test::to_device(q.view()), gk = test::to_device(k.view()), gv = test::to_device(v.view());
    free_ids.resize(static_cast<size_t>(blocks));
    std::iota(free_ids.begin(), free_ids.end(), 0);
    std::shuffle(free_ids.begin(), free_ids.end(), std::mt19937_64(4));
  }
  std::vector<int32_t> take(int64_t n) {
    std::vector<int32_t> t(free_ids.end() - n, free_ids.end());
    free_ids.resize(free_ids.size() - static_cast<size_t>(n));
    return t;
  }
  // The GPU result for `seqs`, all q rows poisoned first (only the sequences' rows are
  // compared by the callers).
  Tensor run_gpu(const std::vector<PagedSequence>& seqs, DType act, int64_t window = 0) const {
    Tensor out = Tensor::zeros(q.shape(), DType::F32, Device::CUDA);
    test::poison(out.view());
    paged_attention(gq.view(), gk.view(), gv.view(), kBlock, seqs, h, kv, out.view(), act, window);
    return test::to_host(out.view());
  }
};

// The between-backends bounds for every row of q [rows, H·hd]: each sequence's rows
// from its keys and values gathered through its block table; rows of no sequence must
// come back as the CPU left them (bound 0, never compared by value there).
std::vector<double> paged_bounds(const Pool& pool, const std::vector<PagedSequence>& seqs, bool bf16, int64_t window) {
  const int64_t width = pool.h * pool.hd, kw = pool.kv * pool.hd;
  std::vector<double> bound(static_cast<size_t>(pool.q.shape()[0] * width), 0.0);
  const std::vector<double> q = test::dense(pool.q.view()), k = test::dense(pool.k.view()), v = test::dense(pool.v.view());
  for (const PagedSequence& s : seqs) {
    const int64_t S = s.start + s.rows;
    std::vector<double> qs(q.begin() + s.row_begin * width, q.begin() + (s.row_begin + s.rows) * width);
    std::vector<double> ks(static_cast<size_t>(S * kw), 0.0), vs = ks;
    for (int64_t p = 0; p < S; ++p) {
      const int32_t blk = s.block_table[static_cast<size_t>(p / kBlock)];
      if (blk < 0) continue;  // freed: never read
      const int64_t src = int64_t{blk} * kBlock + p % kBlock;
      std::copy(k.begin() + src * kw, k.begin() + (src + 1) * kw, ks.begin() + p * kw);
      std::copy(v.begin() + src * kw, v.begin() + (src + 1) * kw, vs.begin() + p * kw);
    }
    const std::vector<double> b =
        test::attention(qs, ks, vs, s.rows, S, pool.h, pool.kv, pool.hd, window, bf16).out.between_two();
    std::copy(b.begin(), b.end(), bound.begin() + s.row_begin * width);
  }
  return bound;
}

bool same_rows(const Tensor& a, const Tensor& b, int64_t r0, int64_t r1, int64_t ra = -1) {
  const int64_t w = a.shape()[1];
  if (ra < 0) ra = r0;
  return std::memcmp(a.f32() + ra * w, b.f32() + r0 * w, sizeof(float) * static_cast<size_t>((r1 - r0) * w)) == 0;
}

TEST(CudaPagedAttention, MatchesCpu) {
  OLMO2_REQUIRE_GPU();
  for (auto [h, kv, hd] : {std::tuple{4, 4, 64}, std::tuple{8, 2, 128}, std::tuple{6, 1, 24}}) {
    for (DType act : {DType::F32, DType::BF16}) {
      // (start, rows): a first chunk, chunked prefill, decodes, a block boundary.
      const std::vector<std::pair<int64_t, int64_t>> shape = {{0, 37}, {20, 13}, {50, 1}, {15, 1}, {31, 2}, {64, 17}};
      int64_t rows = 0;
      for (auto [s, r] : shape) rows += r;
      Pool pool(h, kv, hd, rows, 40);
      std::vector<std::vector<int32_t>> tables;
      std::vector<PagedSequence> seqs;
      int64_t row = 0;
      for (auto [s, r] : shape) tables.push_back(pool.take((s + r + kBlock - 1) / kBlock + 1));  // one spare
      for (size_t i = 0; i < shape.size(); ++i) {
        seqs.push_back({row, shape[i].second, shape[i].first, tables[i]});
        row += shape[i].second;
      }
      Tensor want = Tensor::zeros(pool.q.shape());
      cpu::paged_attention(pool.q.view(), pool.k.view(), pool.v.view(), kBlock, seqs, h, kv, want.view(), act, 0);
      const std::string what = "H/KV " + std::to_string(h) + "/" + std::to_string(kv) + " hd " + std::to_string(hd) +
                               " act " + dtype_name(act);
      test::expect_close(want.view(), pool.run_gpu(seqs, act).view(), paged_bounds(pool, seqs, act == DType::BF16, 0),
                         what);
    }
  }
}

TEST(CudaPagedAttention, BatchAndChunkInvariant) {
  OLMO2_REQUIRE_GPU();
  const int h = 8, kv = 2;
  const int64_t hd = 64, len = 40;
  for (DType act : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(act));
    Pool pool(h, kv, hd, 64, 32);
    const std::vector<int32_t> t_a = pool.take(3), t_b = pool.take(4), t_c = pool.take(2);
    // Sequence a: a 40-token prompt at rows 0…39. b: one decode at position 55, row 40.
    // c: a decode at position 20, row 41.
    const PagedSequence a{0, len, 0, t_a}, b{40, 1, 55, t_b}, c{41, 1, 20, t_c};
    const Tensor all = pool.run_gpu({a, b, c}, act);
    EXPECT_TRUE(same_rows(all, pool.run_gpu({a}, act), 0, len)) << "a alone";
    EXPECT_TRUE(same_rows(all, pool.run_gpu({b}, act), 40, 41)) << "b alone (one-warp blocks)";
    EXPECT_TRUE(same_rows(all, pool.run_gpu({c, b}, act), 40, 42)) << "b, c reordered";
    // a's prompt in chunks of 16, 1 and 23 rows (its keys are already in the pool).
    const Tensor chunked = pool.run_gpu({{0, 16, 0, t_a}, {16, 1, 16, t_a}, {17, 23, 17, t_a}, c}, act);
    EXPECT_TRUE(same_rows(all, chunked, 0, len)) << "a chunked";
    EXPECT_TRUE(same_rows(all, chunked, 41, 42)) << "c beside chunks";
    // a as contiguous causal attention: the same keys, the same order, the same bits.
    Tensor k = Tensor::zeros({len, kv * hd}), v = Tensor::zeros({len, kv * hd});
    for (int64_t p = 0; p < len; ++p) {
      const int64_t src = int64_t{t_a[static_cast<size_t>(p / kBlock)]} * kBlock + p % kBlock;
      std::memcpy(k.f32() + p * kv * hd, pool.k.f32() + src * kv * hd, sizeof(float) * kv * hd);
      std::memcpy(v.f32() + p * kv * hd, pool.v.f32() + src * kv * hd, sizeof(float) * kv * hd);
    }
    Tensor gk = test::to_device(k.view()), gv = test::to_device(v.view());
    Tensor gout = Tensor::zeros({len, h * hd}, DType::F32, Device::CUDA);
    causal_attention(pool.gq.view().rows(0, len), gk.view(), gv.view(), h, kv, gout.view(), act);
    EXPECT_TRUE(same_rows(all, test::to_host(gout.view()), 0, len)) << "a as causal_attention";
  }
}

// A sliding window (docs/architecture.md §3, §8): the CPU's result; the same bits alone,
// batched, chunked and as causal_attention; −1 entries for blocks wholly before every
// row's window are accepted and not read.
TEST(CudaPagedAttention, WindowMatchesCpuAndIsInvariant) {
  OLMO2_REQUIRE_GPU();
  const int h = 8, kv = 2;
  const int64_t hd = 64, len = 70;
  for (int64_t window : {1, 20, 40}) {
    for (DType act : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(act)) + " window " + std::to_string(window));
      Pool pool(h, kv, hd, 80, 32);
      const std::vector<int32_t> t_a = pool.take(5), t_b = pool.take(5);
      // b decodes position 75 with its blocks before the window freed.
      std::vector<int32_t> t_b_freed = t_b;
      for (int64_t blk = 0; (blk + 1) * kBlock <= 75 + 1 - window; ++blk) t_b_freed[static_cast<size_t>(blk)] = -1;
      const PagedSequence a{0, len, 0, t_a}, b{len, 1, 75, t_b_freed}, b_full{len, 1, 75, t_b};
      const Tensor all = pool.run_gpu({a, b}, act, window);
      Tensor want = Tensor::zeros(pool.q.shape());
      cpu::paged_attention(pool.q.view(), pool.k.view(), pool.v.view(), kBlock, {a, b_full}, h, kv, want.view(), act,
                           window);
      // Rows 0 … len (a, then b); the rest of `all` is poisoned.
      Tensor want_a = Tensor::zeros({len + 1, h * hd}), got_a = Tensor::zeros({len + 1, h * hd});
      std::memcpy(want_a.f32(), want.f32(), sizeof(float) * want_a.numel());
      std::memcpy(got_a.f32(), all.f32(), sizeof(float) * got_a.numel());
      std::vector<double> bound_a = paged_bounds(pool, {a, b_full}, act == DType::BF16, window);
      bound_a.resize(static_cast<size_t>(want_a.numel()));
      test::expect_close(want_a.view(), got_a.view(), bound_a, "window vs cpu");
      EXPECT_TRUE(same_rows(all, pool.run_gpu({b_full}, act, window), len, len + 1)) << "b with its whole table";
      EXPECT_TRUE(same_rows(all, pool.run_gpu({{0, 16, 0, t_a}, {16, 1, 16, t_a}, {17, 53, 17, t_a}}, act, window), 0,
                            len))
          << "a chunked";
      Tensor k = Tensor::zeros({len, kv * hd}), v = Tensor::zeros({len, kv * hd});
      for (int64_t p = 0; p < len; ++p) {
        const int64_t src = int64_t{t_a[static_cast<size_t>(p / kBlock)]} * kBlock + p % kBlock;
        std::memcpy(k.f32() + p * kv * hd, pool.k.f32() + src * kv * hd, sizeof(float) * kv * hd);
        std::memcpy(v.f32() + p * kv * hd, pool.v.f32() + src * kv * hd, sizeof(float) * kv * hd);
      }
      Tensor gk = test::to_device(k.view()), gv = test::to_device(v.view());
      Tensor gout = Tensor::zeros({len, h * hd}, DType::F32, Device::CUDA);
      causal_attention(pool.gq.view().rows(0, len), gk.view(), gv.view(), h, kv, gout.view(), act, window);
      EXPECT_TRUE(same_rows(all, test::to_host(gout.view()), 0, len)) << "a as causal_attention";
    }
  }
}

// bf16 pools (a bf16 KV cache, docs/architecture.md §3.2): the values on the 1/16 grid
// are bf16 numbers, so the pools converted to bf16 on the device must give the very bits
// of the f32 pools, for a prefill and a decode, f32 and bf16 activations.
TEST(CudaPagedAttention, Bf16PoolsGiveTheBitsOfF32Pools) {
  OLMO2_REQUIRE_GPU();
  const int h = 8, kv = 2;
  Pool pool(h, kv, 64, 64, 32);
  const std::vector<int32_t> t_a = pool.take(3), t_b = pool.take(4);
  const std::vector<PagedSequence> seqs = {{0, 40, 0, t_a}, {40, 1, 55, t_b}};
  Tensor k16 = Tensor::zeros(pool.k.shape(), DType::BF16, Device::CUDA);
  Tensor v16 = Tensor::zeros(pool.v.shape(), DType::BF16, Device::CUDA);
  copy(pool.gk.view(), k16.view());
  copy(pool.gv.view(), v16.view());
  for (DType act : {DType::F32, DType::BF16}) {
    const Tensor want = pool.run_gpu(seqs, act);
    Tensor out = Tensor::zeros(pool.q.shape(), DType::F32, Device::CUDA);
    test::poison(out.view());
    paged_attention(pool.gq.view(), k16.view(), v16.view(), kBlock, seqs, h, kv, out.view(), act);
    EXPECT_TRUE(same_rows(want, test::to_host(out.view()), 0, 41)) << dtype_name(act);
  }
  Tensor out = Tensor::zeros(pool.q.shape(), DType::F32, Device::CUDA);
  EXPECT_THROW(paged_attention(pool.gq.view(), k16.view(), pool.gv.view(), kBlock, seqs, h, kv, out.view()),
               ShapeError);  // keys bf16, values f32
}

TEST(CudaPagedAttention, ValidatesTablesLikeCpu) {
  OLMO2_REQUIRE_GPU();
  Pool pool(2, 1, 32, 4, 4);
  Tensor out = Tensor::zeros(pool.q.shape(), DType::F32, Device::CUDA);
  const std::vector<int32_t> outside = {0, 9}, short_table = {1};
  auto call = [&](std::span<const int32_t> table, int64_t start) {
    paged_attention(pool.gq.view(), pool.gk.view(), pool.gv.view(), kBlock, {{0, 4, start, table}}, 2, 1, out.view());
  };
  EXPECT_THROW(call(outside, 20), InputError);      // block 9 of a 4-block pool
  EXPECT_THROW(call(short_table, 20), ShapeError);  // 24 positions need 2 blocks
  EXPECT_NO_THROW(call(outside, 8));                // 12 positions: only block 0 is read
  test::to_host(out.view());
}

#endif

}  // namespace
}  // namespace olmo2::ops
