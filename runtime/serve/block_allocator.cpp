#include "runtime/serve/block_allocator.h"

#include "core/error.h"

namespace olmo2 {

BlockAllocator::BlockAllocator(int64_t total) : total_(total), in_use_(static_cast<size_t>(total), 0) {
  OLMO2_CHECK(total >= 1, "block allocator of ", total, " blocks");
  for (int64_t i = total - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

bool BlockAllocator::allocate(int64_t n, std::vector<int32_t>& table) {
  if (n > free_count()) return false;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(id)] = 1;
    table.push_back(id);
  }
  return true;
}

void BlockAllocator::release(std::vector<int32_t>& table) {
  for (const int32_t id : table) {
    OLMO2_CHECK(id >= 0 && id < total_ && in_use_[static_cast<size_t>(id)], "KV block ", id,
                " released but not allocated");
    in_use_[static_cast<size_t>(id)] = 0;
    free_.push_back(id);
  }
  table.clear();
}

}  // namespace olmo2
