// The caching allocator's bookkeeping (ops/block_pool.h).
#include "ops/block_pool.h"

#include <utility>
#include <vector>

#include "core/error.h"

namespace olmo2::ops {

/// A piece of one segment: [addr, addr + size), linked to its neighbours in the segment.
struct BlockPool::Block {
  uintptr_t addr = 0;
  size_t size = 0;
  bool small = false, free = true;
  Block *prev = nullptr, *next = nullptr;
};

bool BlockPool::BySize::operator()(const Block* a, const Block* b) const {
  return a->size != b->size ? a->size < b->size : a->addr < b->addr;
}

namespace {
size_t round_up(size_t n, size_t q) { return (n + q - 1) / q * q; }
constexpr size_t kLargeSegmentBelow = size_t{10} << 20;  // requests below this share 20 MiB segments
constexpr size_t kLargeRound = size_t{2} << 20;
}  // namespace

BlockPool::BlockPool(BackingAlloc alloc, BackingFree free, BeforeRelease before_release, size_t cache_limit)
    : alloc_(std::move(alloc)), free_(std::move(free)), before_release_(std::move(before_release)),
      cache_limit_(cache_limit) {}

BlockPool::~BlockPool() {
  // Blocks are bookkeeping only; the segments stay with the backing allocator's owner
  // (a GPU's memory is reclaimed by the driver at exit).
  for (auto& [addr, first] : segments_) {
    for (Block* b = first; b;) {
      Block* n = b->next;
      delete b;
      b = n;
    }
  }
}

BlockPool::Block* BlockPool::take_block(size_t size, bool small) {
  auto& pool = small ? free_small_ : free_large_;
  Block key;
  key.size = size, key.addr = 0;
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

BlockPool::Block* BlockPool::new_segment(size_t size, bool small) {
  const size_t seg = small ? kSmallSegment : size < kLargeSegmentBelow ? kLargeSegmentMin : round_up(size, kLargeRound);
  void* p = alloc_(seg);
  size_t got = seg;
  if (!p) {
    release_free_segments(0);
    p = alloc_(seg);
    if (!p && seg > size) p = alloc_(got = size);  // the request alone, without the segment's slack
  }
  if (!p) return nullptr;
  ++stats_.backing_allocs;
  stats_.cached_bytes += got;
  auto* b = new Block;
  b->addr = reinterpret_cast<uintptr_t>(p), b->size = got, b->small = small, b->free = true;
  segments_.emplace(b->addr, b);
  return b;
}

void BlockPool::split(Block* b, size_t size, bool small) {
  const size_t rest = b->size - size;
  if (small ? rest < kRound : rest <= kLargeSplitMin) return;  // too small to be worth a block
  auto* r = new Block;
  r->addr = b->addr + size, r->size = rest, r->small = small, r->free = true;
  r->prev = b, r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = size;
  (small ? free_small_ : free_large_).insert(r);
}

void* BlockPool::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t size = round_up(bytes, kRound);
  const bool small = size <= kSmallLimit;
  std::lock_guard<std::mutex> lock(mu_);
  Block* b = take_block(size, small);
  if (!b) b = new_segment(size, small);
  if (!b) {
    OLMO2_THROW(Error, "out of GPU memory: a block of ", size, " bytes could not be allocated even after giving back ",
                "every cached segment; ", stats_.in_use_bytes, " bytes in use, ", stats_.cached_bytes, " cached");
  }
  split(b, size, small);
  b->free = false;
  live_.emplace(reinterpret_cast<void*>(b->addr), b);
  stats_.in_use_bytes += b->size;
  stats_.cached_bytes -= b->size;
  return reinterpret_cast<void*>(b->addr);
}

void BlockPool::free(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  OLMO2_CHECK(it != live_.end(), "device_free of a pointer the caching allocator did not hand out");
  Block* b = it->second;
  live_.erase(it);
  stats_.in_use_bytes -= b->size;
  stats_.cached_bytes += b->size;
  b->free = true;
  auto& pool = b->small ? free_small_ : free_large_;
  // Merge with free neighbours of the same segment.
  if (b->prev && b->prev->free) {
    Block* a = b->prev;
    pool.erase(a);
    a->size += b->size, a->next = b->next;
    if (b->next) b->next->prev = a;
    delete b;
    b = a;
  }
  if (b->next && b->next->free) {
    Block* n = b->next;
    pool.erase(n);
    b->size += n->size, b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  pool.insert(b);
  if (stats_.cached_bytes > cache_limit_) release_free_segments(cache_limit_);
}

size_t BlockPool::release_free_segments(size_t keep_cached) {
  std::vector<Block*> whole;
  for (auto& [addr, first] : segments_) {
    if (first->free && !first->next) whole.push_back(first);
  }
  if (whole.empty() || stats_.cached_bytes <= keep_cached) return 0;
  if (before_release_) before_release_();
  size_t released = 0;
  for (Block* b : whole) {
    if (stats_.cached_bytes <= keep_cached) break;
    (b->small ? free_small_ : free_large_).erase(b);
    segments_.erase(b->addr);
    free_(reinterpret_cast<void*>(b->addr));
    ++stats_.backing_frees;
    stats_.cached_bytes -= b->size;
    released += b->size;
    delete b;
  }
  return released;
}

void BlockPool::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  release_free_segments(0);
}

void BlockPool::set_cache_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_limit_ = bytes;
  if (stats_.cached_bytes > cache_limit_) release_free_segments(cache_limit_);
}

BlockPoolStats BlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

size_t BlockPool::releasable_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [addr, first] : segments_) {
    if (first->free && !first->next) n += first->size;
  }
  return n;
}

}  // namespace olmo2::ops
