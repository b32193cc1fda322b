// The GPU caching allocator's bookkeeping (ops/block_pool.h; docs/architecture.md §2,
// "Device memory") over a fake backing allocator that hands out address ranges and can
// be made to fail: size classes (small requests share 2 MiB segments, large ones get
// 20 MiB or their own), best fit with splitting (a freed large block serves smaller
// requests), merging of neighbours, the cap on cached bytes, the retry after giving back
// free segments when the backing allocator fails, and the error when even that fails.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/block_pool.h"

namespace olmo2::ops {
namespace {

constexpr size_t MiB = size_t{1} << 20;

// Address ranges from a counter (never dereferenced), at most `capacity` bytes at once.
struct FakeDevice {
  size_t capacity = SIZE_MAX, used = 0;
  uintptr_t next = 1 << 20;
  std::map<uintptr_t, size_t> live;
  int syncs = 0;
  BlockPool pool(size_t cache_limit = SIZE_MAX) {
    return BlockPool([this](size_t b) -> void* { return alloc(b); }, [this](void* p) { release(p); },
                     [this] { ++syncs; }, cache_limit);
  }
  void* alloc(size_t b) {
    if (used + b > capacity) return nullptr;
    used += b;
    const uintptr_t p = next;
    next += b + 4096;
    live.emplace(p, b);
    return reinterpret_cast<void*>(p);
  }
  void release(void* p) {
    auto it = live.find(reinterpret_cast<uintptr_t>(p));
    ASSERT_NE(it, live.end());
    used -= it->second;
    live.erase(it);
  }
};

TEST(BlockPool, SmallRequestsShareASegmentAndAreReused) {
  FakeDevice dev;
  BlockPool pool = dev.pool();
  std::vector<void*> ps;
  for (int i = 0; i < 100; ++i) ps.push_back(pool.allocate(1000));  // 1024 each after rounding
  EXPECT_EQ(pool.stats().backing_allocs, 1u) << "100 KiB of small blocks fit one 2 MiB segment";
  EXPECT_EQ(pool.stats().in_use_bytes, 100u * 1024);
  EXPECT_EQ(pool.stats().cached_bytes, 2 * MiB - 100 * 1024);
  std::set<void*> distinct(ps.begin(), ps.end());
  EXPECT_EQ(distinct.size(), 100u);
  for (void* p : ps) pool.free(p);
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
  EXPECT_EQ(pool.releasable_bytes(), 2 * MiB) << "the freed blocks merged back into one";
  void* again = pool.allocate(512 * 1024);
  EXPECT_EQ(pool.stats().backing_allocs, 1u);
  pool.free(again);
  EXPECT_EQ(pool.allocate(0), nullptr);
  pool.free(nullptr);
}

TEST(BlockPool, AFreedLargeBlockIsSplitForSmallerRequests) {
  FakeDevice dev;
  BlockPool pool = dev.pool();
  void* big = pool.allocate(64 * MiB);
  EXPECT_EQ(pool.stats().backing_allocs, 1u);
  pool.free(big);
  // Three requests of other sizes from the cached 64 MiB: no new segment.
  void* a = pool.allocate(30 * MiB);
  void* b = pool.allocate(20 * MiB);
  void* c = pool.allocate(5 * MiB);
  EXPECT_EQ(pool.stats().backing_allocs, 1u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a), reinterpret_cast<uintptr_t>(big)) << "best fit from the start";
  EXPECT_EQ(pool.stats().in_use_bytes, 55 * MiB);
  EXPECT_EQ(pool.stats().cached_bytes, 9 * MiB);
  EXPECT_EQ(pool.releasable_bytes(), 0u) << "the segment is in use";
  pool.free(b), pool.free(a), pool.free(c);
  EXPECT_EQ(pool.releasable_bytes(), 64 * MiB);
  // Medium requests come from the cached segment too.
  void* m1 = pool.allocate(3 * MiB);
  void* m2 = pool.allocate(3 * MiB);
  EXPECT_EQ(pool.stats().backing_allocs, 1u) << "served from the 64 MiB segment";
  pool.free(m1), pool.free(m2);
}

TEST(BlockPool, TheCapGivesWhollyFreeSegmentsBack) {
  FakeDevice dev;
  BlockPool pool = dev.pool(/*cache_limit=*/30 * MiB);
  void* a = pool.allocate(40 * MiB);
  void* b = pool.allocate(24 * MiB);
  pool.free(b);  // 24 MiB cached: under the cap
  EXPECT_EQ(pool.stats().cached_bytes, 24 * MiB);
  EXPECT_EQ(pool.stats().backing_frees, 0u);
  pool.free(a);  // 64 MiB cached: the 40 MiB segment goes back (24 MiB stay)
  EXPECT_EQ(pool.stats().backing_frees, 1u);
  EXPECT_LE(pool.stats().cached_bytes, 30 * MiB);
  EXPECT_EQ(dev.used, pool.stats().cached_bytes);
  EXPECT_GE(dev.syncs, 1) << "segments go back only after the device is idle";
  pool.release_cached();
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
  EXPECT_EQ(dev.used, 0u);
}

TEST(BlockPool, OutOfMemoryGivesCachedSegmentsBackAndRetries) {
  FakeDevice dev;
  dev.capacity = 85 * MiB;
  BlockPool pool = dev.pool();
  void* a = pool.allocate(60 * MiB);
  pool.free(a);  // cached, wholly free
  void* b = pool.allocate(70 * MiB);  // does not fit beside the cached 60 MiB: it goes back first
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(pool.stats().backing_frees, 1u);
  EXPECT_EQ(pool.stats().in_use_bytes, 70 * MiB);
  // 9 MiB fit only without the 20 MiB segment's slack: the request alone is taken.
  void* c = pool.allocate(9 * MiB);
  EXPECT_NE(c, nullptr);
  // Nothing is left to give back: the error names the size and what is held.
  try {
    pool.allocate(50 * MiB);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("52428800 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("bytes in use"), std::string::npos) << m;
  }
  pool.free(b), pool.free(c);
  EXPECT_THROW(pool.free(reinterpret_cast<void*>(12345)), Error);
}

}  // namespace
}  // namespace olmo2::ops
