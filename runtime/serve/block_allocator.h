// The serving scheduler's KV-cache blocks: reference counts, the free list, and the
// cached blocks no sequence holds, evicted least recently used (docs/architecture.md §8).
#pragma once

#include <cstdint>
#include <list>
#include <vector>

#include "runtime/serve/prefix_cache.h"

namespace olmo2 {

/// Hands out block ids 0 … total−1 (the scheduler's, on rank 0 only). A block is held by
/// the sequences whose tables list it (its reference count); at count 0 it is free. A
/// free block that is in the prefix cache keeps its contents until it is needed: new
/// blocks come from the never-cached free blocks first, then from the cached ones least
/// recently released first (LRU eviction: dropped from the cache as they are handed
/// out). free_count() counts both kinds. Not thread-safe.
class BlockAllocator {
 public:
  /// Throws Error for total < 1.
  explicit BlockAllocator(int64_t total);
  int64_t total() const { return total_; }
  /// Blocks allocate() can hand out: free ones, cached or not.
  int64_t free_count() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  /// Free blocks that still hold cached contents (a prefix-cache hit can revive them).
  int64_t cached_free_count() const { return static_cast<int64_t>(lru_.size()); }
  /// Appends n blocks, each with reference count 1, to `table`; returns false (and takes
  /// none) when fewer than n are free.
  bool allocate(int64_t n, std::vector<int32_t>& table);
  /// One more reference to the held or cached block `id` (a fork shares a block, a
  /// prefix-cache hit reuses one); a cached free block leaves the LRU list. Throws Error
  /// for a block that is neither held nor cached.
  void share(int32_t id);
  /// Drops one reference to every block of `table`, last block first (so that, among
  /// blocks freed together, a sequence's tail is evicted before its head), and clears
  /// it. Throws Error, changing nothing, for a block with no reference (a double free
  /// would hand one block to two sequences) or listed twice.
  void release(std::vector<int32_t>& table);
  /// Sequences holding block `id`.
  int32_t refs(int32_t id) const;
  /// The content map of full blocks (prefix caching).
  PrefixCache& cache() { return cache_; }
  const PrefixCache& cache() const { return cache_; }

 private:
  void check(int32_t id) const;
  int64_t total_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;   // free and not cached: a stack, the most recently freed reused first
  std::list<int32_t> lru_;      // free and cached: least recently released first
  std::vector<std::list<int32_t>::iterator> lru_at_;  // per block: its place in lru_ (valid while listed)
  PrefixCache cache_;
};

}  // namespace olmo2
