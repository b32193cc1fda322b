// The SIMT executor (ops/simt/executor.h) against the CUDA C++ Programming Guide: thread
// and block indices, barriers, the warp shuffles / votes / matches and their masks, the
// launch limits, and that the shuffled order exposes a missing barrier.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <set>
#include <tuple>
#include <vector>

#include "ops/simt/executor.h"

namespace olmo2::simt {
namespace {

constexpr unsigned kFull = 0xffffffffu;

LaunchConfig config(Dim3 grid, Dim3 block, size_t dynamic_shared = 0) {
  LaunchConfig c;
  c.grid = grid;
  c.block = block;
  c.dynamic_shared = dynamic_shared;
  return c;
}

unsigned lane() {
  const Dim3& t = thread_idx();
  const Dim3& b = block_dim();
  return (t.x + b.x * (t.y + b.y * t.z)) % 32;
}

template <typename F>
std::string error_of(const LaunchConfig& c, F body) {
  try {
    run_grid(c, "test_kernel", body);
  } catch (const ExecutionError& e) {
    return e.what();
  }
  return "";
}

TEST(SimtExecutor, EveryThreadOfEveryBlockRunsOnceWithItsIndices) {
  const Dim3 grid(3, 2, 2), block(5, 3, 2);
  std::vector<std::atomic<int>> seen(grid.volume() * block.volume());
  std::atomic<int> bad_dims{0};
  run_grid(config(grid, block), "indices", [&] {
    const Dim3 &t = thread_idx(), &b = block_idx();
    if (block_dim().x != 5 || block_dim().y != 3 || block_dim().z != 2 || grid_dim().x != 3 || grid_dim().y != 2 ||
        grid_dim().z != 2)
      bad_dims++;
    const uint64_t blk = b.x + 3 * (b.y + 2 * b.z), thr = t.x + 5 * (t.y + 3 * t.z);
    seen[blk * block.volume() + thr]++;
  });
  EXPECT_EQ(bad_dims.load(), 0);
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << "thread " << i;
}

// The reduction of ops/cuda/reduce.cuh written against the executor's API.
float block_sum(float v, float* partial, bool with_barriers) {
  for (int off = 16; off > 0; off >>= 1) v += shuffle(WarpOp::ShflXor, kFull, v, off, 32, "sum.xor1");
  if (with_barriers) syncthreads("sum.barrier1");
  if ((thread_idx().x & 31) == 0) partial[thread_idx().x >> 5] = v;
  if (with_barriers) syncthreads("sum.barrier2");
  v = (thread_idx().x & 31) < (block_dim().x >> 5) ? partial[thread_idx().x & 31] : 0.0f;
  for (int off = 16; off > 0; off >>= 1) v += shuffle(WarpOp::ShflXor, kFull, v, off, 32, "sum.xor2");
  return v;
}

TEST(SimtExecutor, BlockReductionWithBarriersIsExactForEveryBlockSize) {
  for (unsigned threads : {32u, 64u, 96u, 256u, 1024u}) {
    std::vector<float> out(threads * 2, -1.0f);
    run_grid(config(Dim3(2), Dim3(threads)), "sum", [&] {
      thread_local float partial[32];
      const float v = static_cast<float>(thread_idx().x + 1 + 1000 * block_idx().x);
      out[block_idx().x * threads + thread_idx().x] = block_sum(v, partial, true);
    });
    for (unsigned b = 0; b < 2; ++b) {
      const double n = threads, expect = n * (n + 1) / 2 + 1000.0 * b * n;  // exact in f32 for these sizes
      for (unsigned t = 0; t < threads; ++t) ASSERT_EQ(out[b * threads + t], expect) << threads << " threads, block " << b;
    }
  }
}

TEST(SimtExecutor, ShuffledOrderExposesAMissingBarrier) {
  // Without the barriers, threads read `partial` before other warps wrote it (zero, the
  // fresh block's static shared memory) or after: some thread gets a wrong sum.
  int wrong_runs = 0;
  for (uint64_t s = 1; s <= 4; ++s) {
    set_seed(s);
    std::atomic<int> wrong{0};
    run_grid(config(Dim3(1), Dim3(256)), "sum_without_barrier", [&] {
      thread_local float partial[32];
      if (block_sum(static_cast<float>(thread_idx().x + 1), partial, false) != 256.0f * 257.0f / 2) wrong++;
    });
    if (wrong.load() > 0) ++wrong_runs;
  }
  set_seed(0x5eed0f0126ull);
  EXPECT_EQ(wrong_runs, 4);
}

TEST(SimtExecutor, ShufflesFollowTheirDefinitionsWithWidths) {
  struct Case {
    WarpOp op;
    int arg, width;
  };
  // The source lane of each shuffle, from the Programming Guide's definitions.
  auto expect = [](const Case& c, int l) {
    const int base = l / c.width * c.width, pos = l % c.width;
    switch (c.op) {
      case WarpOp::ShflIdx: return base + c.arg % c.width;
      case WarpOp::ShflXor: return (l ^ c.arg) >= base + c.width ? l : (l ^ c.arg);
      case WarpOp::ShflDown: return pos + c.arg < c.width ? l + c.arg : l;
      case WarpOp::ShflUp: return pos >= c.arg ? l - c.arg : l;
      default: return -1;
    }
  };
  const std::vector<Case> cases = {{WarpOp::ShflIdx, 5, 32}, {WarpOp::ShflIdx, 11, 8},  {WarpOp::ShflXor, 1, 32},
                                   {WarpOp::ShflXor, 16, 32}, {WarpOp::ShflXor, 4, 4},  {WarpOp::ShflDown, 3, 32},
                                   {WarpOp::ShflDown, 1, 8},  {WarpOp::ShflUp, 2, 32}, {WarpOp::ShflUp, 5, 16}};
  for (const Case& c : cases) {
    std::vector<int> got(64, -1);
    run_grid(config(Dim3(1), Dim3(64)), "shuffle", [&] {
      const int me = static_cast<int>(thread_idx().x);
      got[me] = shuffle(c.op, kFull, me, c.arg, c.width, "shuffle") ;
    });
    for (int t = 0; t < 64; ++t)
      ASSERT_EQ(got[t], (t / 32) * 32 + expect(c, t % 32)) << "op " << int(c.op) << " arg " << c.arg << " width " << c.width << " thread " << t;
  }
}

TEST(SimtExecutor, BallotAndMatchAnyOverPartialMasks) {
  std::vector<uint64_t> ballot(32), match(32);
  run_grid(config(Dim3(1), Dim3(32)), "vote", [&] {
    const unsigned l = thread_idx().x;
    const unsigned mask = l < 16 ? 0x0000ffffu : 0xffff0000u;  // two independent groups
    ballot[l] = warp_exchange(WarpOp::Ballot, mask, l % 3 == 0, 0, 32, "ballot");
    match[l] = warp_exchange(WarpOp::MatchAny, mask, l % 4, 0, 32, "match");
  });
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned mask = l < 16 ? 0x0000ffffu : 0xffff0000u;
    uint64_t b = 0, m = 0;
    for (unsigned k = 0; k < 32; ++k) {
      if (!(mask >> k & 1u)) continue;
      if (k % 3 == 0) b |= 1ull << k;
      if (k % 4 == l % 4) m |= 1ull << k;
    }
    EXPECT_EQ(ballot[l], b) << l;
    EXPECT_EQ(match[l], m) << l;
  }
}

TEST(SimtExecutor, BarrierReachedByPartOfTheBlockFails) {
  const std::string e = error_of(config(Dim3(2), Dim3(64)), [] {
    if (thread_idx().x < 40) syncthreads("partial_barrier");
  });
  EXPECT_NE(e.find("reached by part of the block"), std::string::npos) << e;
  EXPECT_NE(e.find("shuffle seed"), std::string::npos) << e;
  const std::string two = error_of(config(Dim3(1), Dim3(64)), [] {
    if (thread_idx().x < 32) syncthreads("barrier_a");
    else syncthreads("barrier_b");
  });
  EXPECT_NE(two.find("must reach the same __syncthreads"), std::string::npos) << two;
}

TEST(SimtExecutor, DivergentWarpExchangeFails) {
  const std::string e = error_of(config(Dim3(1), Dim3(32)), [] {
    if (lane() < 16) (void)shuffle(WarpOp::ShflXor, kFull, 1.0f, 1, 32, "divergent_shfl");
  });
  EXPECT_NE(e.find("has exited"), std::string::npos) << e;
  EXPECT_NE(e.find("divergent"), std::string::npos) << e;
  const std::string at_barrier = error_of(config(Dim3(1), Dim3(64)), [] {
    if (thread_idx().x < 16) (void)shuffle(WarpOp::ShflDown, kFull, 1, 1, 32, "shfl");
    syncthreads("after");
  });
  EXPECT_NE(at_barrier.find("divergent"), std::string::npos) << at_barrier;
}

TEST(SimtExecutor, MasksMustNameLanesThatExistAndTakePart) {
  const std::string outside = error_of(config(Dim3(1), Dim3(16)), [] {
    (void)shuffle(WarpOp::ShflXor, kFull, 1, 1, 32, "small_block");
  });
  EXPECT_NE(outside.find("outside the block"), std::string::npos) << outside;
  const std::string not_own = error_of(config(Dim3(1), Dim3(32)), [] {
    (void)shuffle(WarpOp::ShflIdx, 0x1u, 1, 0, 32, "not_own");
  });
  EXPECT_NE(not_own.find("does not name its own lane"), std::string::npos) << not_own;
  const std::string reads_outside = error_of(config(Dim3(1), Dim3(32)), [] {
    (void)shuffle(WarpOp::ShflIdx, kFull >> 1, 1, 31, 32, "reads_31");  // lane 31 not in the mask
  });
  EXPECT_NE(reads_outside.find("does not name"), std::string::npos) << reads_outside;
  const std::string mixed = error_of(config(Dim3(1), Dim3(32)), [] {
    if (lane() % 2) (void)warp_exchange(WarpOp::Ballot, kFull, 1, 0, 32, "ballot");
    else (void)shuffle(WarpOp::ShflXor, kFull, 1, 1, 32, "xor");
  });
  EXPECT_NE(mixed.find("different warp exchanges"), std::string::npos) << mixed;
}

TEST(SimtExecutor, LaunchLimitsAreTheGpusOwn) {
  auto body = [] {};
  EXPECT_NE(error_of(config(Dim3(1), Dim3(1025)), body).find("more than 1024 threads"), std::string::npos);
  EXPECT_NE(error_of(config(Dim3(1), Dim3(32, 32, 2)), body).find("more than 1024 threads"), std::string::npos);
  EXPECT_NE(error_of(config(Dim3(1, 65536), Dim3(32)), body).find("over 65535"), std::string::npos);
  EXPECT_NE(error_of(config(Dim3(1, 1, 65536), Dim3(32)), body).find("over 65535"), std::string::npos);
  EXPECT_NE(error_of(config(Dim3(0), Dim3(32)), body).find("zero extent"), std::string::npos);
  EXPECT_NE(error_of(config(Dim3(1), Dim3(32), 48 * 1024 + 1), body).find("cudaFuncSetAttribute"), std::string::npos);
  EXPECT_EQ(error_of(config(Dim3(1), Dim3(1024), 48 * 1024), body), "");
  LaunchConfig big = config(Dim3(1), Dim3(32), 100 * 1024);
  big.dynamic_shared_limit = 100 * 1024;
  EXPECT_EQ(error_of(big, body), "");
}

TEST(SimtExecutor, DynamicSharedMemoryStartsAsNaNAndIsPerBlock) {
  std::atomic<int> not_nan{0}, mixed{0};
  run_grid(config(Dim3(8), Dim3(64), 64 * sizeof(float)), "dynamic_shared", [&] {
    float* s = static_cast<float*>(dynamic_shared());
    if (!std::isnan(s[thread_idx().x])) not_nan++;
    syncthreads("after_read");
    s[thread_idx().x] = static_cast<float>(block_idx().x);
    syncthreads("after_write");
    if (s[(thread_idx().x + 1) % 64] != static_cast<float>(block_idx().x)) mixed++;
  });
  EXPECT_EQ(not_nan.load(), 0);
  EXPECT_EQ(mixed.load(), 0);
}

TEST(SimtExecutor, ExceptionsAndIntrinsicsOutsideALaunch) {
  EXPECT_THROW(run_grid(config(Dim3(4), Dim3(32)), "throws",
                        [] {
                          if (block_idx().x == 2 && thread_idx().x == 7) throw std::runtime_error("kernel failed");
                        }),
               std::runtime_error);
  EXPECT_THROW(syncthreads("host"), ExecutionError);
  EXPECT_THROW((void)thread_idx(), ExecutionError);
}

}  // namespace
}  // namespace olmo2::simt
