#include "runtime/serve/block_allocator.h"

#include <algorithm>

#include "core/error.h"

namespace olmo2 {

BlockAllocator::BlockAllocator(int64_t total)
    : total_(total), refs_(static_cast<size_t>(std::max<int64_t>(total, 0)), 0), lru_at_(refs_.size()),
      cache_(std::max<int64_t>(total, 1)) {
  OLMO2_CHECK(total >= 1, "block allocator of ", total, " blocks");
  for (int64_t i = total - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

void BlockAllocator::check(int32_t id) const {
  OLMO2_CHECK(id >= 0 && id < total_, "KV block ", id, " outside the pool of ", total_, " blocks");
}

bool BlockAllocator::allocate(int64_t n, std::vector<int32_t>& table) {
  if (n > free_count()) return false;
  for (int64_t i = 0; i < n; ++i) {
    int32_t id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {  // evict the least recently released cached block
      id = lru_.front();
      lru_.pop_front();
      cache_.erase(id);
    }
    refs_[static_cast<size_t>(id)] = 1;
    table.push_back(id);
  }
  return true;
}

void BlockAllocator::share(int32_t id) {
  check(id);
  int32_t& r = refs_[static_cast<size_t>(id)];
  if (r == 0) {
    OLMO2_CHECK(cache_.contains(id), "KV block ", id, " shared but neither held nor cached");
    lru_.erase(lru_at_[static_cast<size_t>(id)]);
  }
  ++r;
}

void BlockAllocator::release(std::vector<int32_t>& table) {
  std::vector<int32_t> sorted = table;  // all checked first: a bad table changes nothing
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    check(sorted[i]);
    OLMO2_CHECK(refs_[static_cast<size_t>(sorted[i])] > 0, "KV block ", sorted[i], " released but not allocated");
    OLMO2_CHECK(i == 0 || sorted[i] != sorted[i - 1], "KV block ", sorted[i], " listed twice in one block table");
  }
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const int32_t id = *it;
    if (--refs_[static_cast<size_t>(id)] > 0) continue;
    if (cache_.contains(id)) {
      lru_at_[static_cast<size_t>(id)] = lru_.insert(lru_.end(), id);
    } else {
      free_.push_back(id);
    }
  }
  table.clear();
}

int32_t BlockAllocator::refs(int32_t id) const {
  check(id);
  return refs_[static_cast<size_t>(id)];
}

}  // namespace olmo2
