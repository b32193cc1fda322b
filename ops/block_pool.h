// A caching allocator over a backing allocator (cudaMalloc/cudaFree on a GPU; any pair
// of functions in tests), independent of CUDA so the CPU tests can check its logic
// (docs/architecture.md §2, "Device memory"). The scheme is the one PyTorch's CUDA
// caching allocator made standard: requests are rounded to 512 bytes and served best-fit
// from cached blocks of their pool (small: ≤ 1 MiB, carved from 2 MiB segments; large:
// from segments of their own rounded size, at least 20 MiB), a block larger than needed
// is split and the remainder stays cached, a freed block merges with free neighbours of
// its segment, and wholly free segments go back to the backing allocator when the cached
// bytes pass a cap, when the backing allocator fails (then the request is retried), or
// on release_cached().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

namespace olmo2::ops {

/// What a BlockPool holds, in bytes, and its calls to the backing allocator.
struct BlockPoolStats {
  size_t in_use_bytes = 0;   ///< handed out and not yet freed (rounded sizes)
  size_t cached_bytes = 0;   ///< held from the backing allocator but not in use
  size_t backing_allocs = 0; ///< successful backing allocations (segments made)
  size_t backing_frees = 0;  ///< segments given back
};

class BlockPool {
 public:
  /// Returns a segment of exactly `bytes`, or null when out of memory (no throw).
  using BackingAlloc = std::function<void*(size_t bytes)>;
  using BackingFree = std::function<void(void*)>;
  /// Called before segments are given back, so that no queued work still uses them
  /// (the GPU: synchronize the device). May be empty.
  using BeforeRelease = std::function<void()>;

  static constexpr size_t kRound = 512;
  static constexpr size_t kSmallLimit = size_t{1} << 20;    ///< requests ≤ this: small pool
  static constexpr size_t kSmallSegment = size_t{2} << 20;  ///< the small pool's segments
  static constexpr size_t kLargeSegmentMin = size_t{20} << 20;
  static constexpr size_t kLargeSplitMin = size_t{1} << 20; ///< large remainders below this stay attached

  /// `cache_limit`: the most bytes kept cached (wholly free segments above it are given
  /// back at each free); SIZE_MAX for no limit.
  BlockPool(BackingAlloc alloc, BackingFree free, BeforeRelease before_release, size_t cache_limit);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  /// `bytes` (rounded up to 512), 512-byte aligned when the backing allocator's segments
  /// are. 0 bytes: null. Throws Error naming the size, the bytes in use and cached when
  /// the backing allocator fails even after every wholly free segment was given back.
  void* allocate(size_t bytes);
  /// Returns a block from allocate() to the cache. Null is ignored; a pointer this pool
  /// did not hand out throws Error.
  void free(void* p);
  /// Gives every wholly free segment back to the backing allocator.
  void release_cached();
  /// Caps the cached bytes (held, not in use): whenever they exceed `bytes`, now or
  /// after a free, wholly free segments are given back (in address order) until they do
  /// not or none is left. 0 keeps no free segment.
  void set_cache_limit(size_t bytes);
  /// A snapshot of the counters (BlockPoolStats); thread-safe.
  BlockPoolStats stats() const;
  /// Cached bytes in segments that are wholly free (what release_cached() gives back).
  size_t releasable_bytes() const;

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  Block* take_block(size_t size, bool small);
  Block* new_segment(size_t size, bool small);
  void split(Block* b, size_t size, bool small);
  size_t release_free_segments(size_t keep_cached);  // lock held

  BackingAlloc alloc_;
  BackingFree free_;
  BeforeRelease before_release_;
  size_t cache_limit_;
  mutable std::mutex mu_;
  std::set<Block*, BySize> free_small_, free_large_;
  std::unordered_map<void*, Block*> live_;
  std::map<uintptr_t, Block*> segments_;  // segment start -> its first block
  BlockPoolStats stats_;
};

}  // namespace olmo2::ops
