// The serving scheduler's free list of KV-cache blocks.
#pragma once

#include <cstdint>
#include <vector>

namespace olmo2 {

/// Hands out block ids 0 … total−1 (the scheduler's, on rank 0 only). Not thread-safe.
class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t total);
  int64_t total() const { return total_; }
  int64_t free_count() const { return static_cast<int64_t>(free_.size()); }
  /// Appends n free ids to `table`; returns false (and takes none) when fewer are free.
  bool allocate(int64_t n, std::vector<int32_t>& table);
  /// Returns every id of `table` to the pool and clears it. Throws Error for an id
  /// that is not allocated (a double free would hand one block to two sequences).
  void release(std::vector<int32_t>& table);

 private:
  int64_t total_;
  std::vector<int32_t> free_;   // a stack: the most recently freed block is reused first
  std::vector<char> in_use_;
};

}  // namespace olmo2
