// The paged KV cache: fixed-size blocks in one pool per rank, per-sequence block
// tables (PagedAttention, Kwon et al., SOSP 2023).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "runtime/config.h"
#include "runtime/model.h"

namespace olmo2 {

/// What one rank stores for its layers and kv heads: per local layer, keys and values
/// [num_blocks·block_size, KV_local·hd] f32. Position p of a sequence lives in row
/// table[p / block_size]·block_size + p % block_size. Block ids are the same on every
/// rank of a serving job (the scheduler's), so every pool has the same block count.
class PagedKVCache {
 public:
  /// Throws InputError for num_blocks < 1 or block_size < 1.
  PagedKVCache(const ModelConfig& config, const ShardSpec& shard, int64_t num_blocks, int64_t block_size);

  /// Bytes one block takes on a rank holding `shard`: 2 (k, v) · layers · KV_local · hd ·
  /// block_size · 4.
  static int64_t bytes_per_block(const ModelConfig& config, const ShardSpec& shard, int64_t block_size);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  /// Keys / values of local layer `layer` (0 = the shard's first layer).
  const TensorView& keys(int64_t layer) const { return k_[static_cast<size_t>(layer)].view(); }
  const TensorView& values(int64_t layer) const { return v_[static_cast<size_t>(layer)].view(); }

  /// Writes k, v [n, KV_local·hd] of positions start … start+n−1 of the sequence with
  /// `table` into local layer `layer`. Throws ShapeError when the table is too short.
  void write(int64_t layer, std::span<const int32_t> table, int64_t start, const TensorView& k,
             const TensorView& v) const;

 private:
  int64_t num_blocks_, block_size_;
  std::vector<Tensor> k_, v_;
};

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

/// Blocks needed to hold `tokens` positions.
inline int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }

/// Parses a memory size: a number of bytes with an optional unit K, M, G (powers of
/// 1000), KiB, MiB, GiB (powers of 1024), e.g. "512MiB", "2GiB", "1.5G". Throws
/// InputError naming `what` and the text for anything else or a size ≤ 0.
int64_t parse_memory_size(const std::string& text, const std::string& what);

}  // namespace olmo2
