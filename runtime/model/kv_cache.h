// The paged KV cache: fixed-size blocks in one pool per rank, per-sequence block
// tables (PagedAttention, Kwon et al., SOSP 2023).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "runtime/model/config.h"
#include "runtime/model/model.h"

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

/// Blocks needed to hold `tokens` positions.
inline int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }

}  // namespace olmo2
