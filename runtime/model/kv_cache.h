// The KV cache: keys and values of every position of every sequence in fixed-size
// blocks of one pool per KV slot, and per-sequence block tables, one per KV group
// (PagedAttention, Kwon et al., SOSP 2023; vLLM's hybrid layout, runtime/model/kv_layout.h).
// Serving hands blocks out and back as sequences come and go; generation gives its one
// sequence consecutive blocks — a contiguous cache is a block table of consecutive
// blocks (docs/architecture.md §3, §8).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/tensor.h"
#include "runtime/model/config.h"
#include "runtime/model/kv_layout.h"
#include "runtime/model/shard_spec.h"

namespace olmo2 {

/// One block copy: block `dst` of every pool ← block `src` (the copy-on-write of a forked
/// sequence's last, partial block; docs/architecture.md §8).
struct BlockCopy {
  int32_t src = 0, dst = 0;
  bool operator==(const BlockCopy&) const = default;
};

/// What one rank stores for its layers and kv heads: per KV slot its local layers use
/// (KVLayout; with one group a slot is a layer), keys and values
/// [num_blocks·block_size, KV_local·hd] of one dtype, f32 or bf16 (--kv-cache-dtype,
/// docs/architecture.md §3.2), on one device (the model's). A sequence's
/// block table is its G group tables (G = KVLayout::groups()) of equal length n, group
/// after group: group k's table is entries k·n … (k+1)·n − 1 (group_table); with one
/// group it is the plain table. Position p of a sequence lives, for a layer of group k,
/// in row group_table(k)[p / block_size]·block_size + p % block_size of the layer's slot's
/// pool. An entry −1 is a block released for a sliding group (before every window).
/// Block ids are the same on every rank of a job (the scheduler's), so every pool has
/// the same block count; the block tables stay on the host.
class KVCache {
 public:
  /// The pools, of `dtype` (f32 or bf16), on `device` (zero-filled). Throws InputError
  /// for num_blocks < 1, block_size < 1 or another dtype; Error when the device is out of
  /// memory.
  KVCache(const ModelConfig& config, const ShardSpec& shard, int64_t num_blocks, int64_t block_size,
          Device device = Device::CPU, DType dtype = DType::F32);

  /// A cache for one sequence of up to `capacity` positions in blocks of `block_size`:
  /// G·max(1, blocks_for(capacity)) blocks, to be used with contiguous_table(capacity)
  /// as its table (with one group: consecutive_blocks(capacity, block_size)).
  static KVCache contiguous(const ModelConfig& config, const ShardSpec& shard, int64_t capacity,
                            int64_t block_size = 16, Device device = Device::CPU, DType dtype = DType::F32);
  /// The block table 0, 1, …, blocks_for(positions) − 1.
  static std::vector<int32_t> consecutive_blocks(int64_t positions, int64_t block_size);
  /// The table of one sequence of `positions` positions in a contiguous() cache: with
  /// n = blocks_for(positions), group k gets the consecutive blocks k·n … (k+1)·n − 1
  /// (so the whole table is 0 … G·n − 1). Nothing is ever released from it.
  std::vector<int32_t> contiguous_table(int64_t positions) const;
  /// Group `group`'s table within `table` (all G groups' tables, see the class comment).
  /// Throws ShapeError when table's length is not a multiple of `groups` or group is
  /// outside 0 … groups − 1.
  static std::span<const int32_t> group_table(std::span<const int32_t> table, int64_t groups, int64_t group);

  /// Bytes one block id takes on a rank holding `shard` with pools of `dtype`: 2 (k, v) ·
  /// (KV slots its layers use) · KV_local · hd · block_size · (4 for f32, 2 for bf16) (with
  /// one group the slots are its layers). InputError for a dtype other than f32 or bf16.
  static int64_t bytes_per_block(const ModelConfig& config, const ShardSpec& shard, int64_t block_size,
                                 DType dtype);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  /// Where the pools live.
  Device device() const { return device_; }
  /// The pools' dtype: f32 or bf16.
  DType dtype() const { return dtype_; }
  /// The model's KV groups.
  const KVLayout& layout() const { return layout_; }
  /// KV group of local layer `layer` (0 = the shard's first layer).
  int64_t group(int64_t layer) const { return layout_.group_of(shard_.global_layer(layer)); }
  /// Keys / values of local layer `layer`: the pool of its slot.
  const TensorView& keys(int64_t layer) const { return k_[pool(layer)].view(); }
  const TensorView& values(int64_t layer) const { return v_[pool(layer)].view(); }

  /// Pool rows of positions start … start+n−1 of the sequence with `table` (one group's),
  /// as an [n] i32 tensor on the cache's device (what write uses): computed on the host
  /// from the host block table, then copied (ops::copy). Only the entries of those
  /// positions are read (earlier ones may be −1). Throws ShapeError when the table is too
  /// short, InputError for a block id outside the pool (−1 included: a released block).
  Tensor rows_of(std::span<const int32_t> table, int64_t start, int64_t n) const;

  /// The first pool row of positions 0 … n−1 when they lie in consecutive rows (the
  /// table's first blocks are consecutive, none of them −1), else −1. `table` is one
  /// group's.
  int64_t contiguous_rows(std::span<const int32_t> table, int64_t n) const;

  /// Writes k, v [n, KV_local·hd] f32 into local layer `layer` at the pool rows `rows`
  /// ([n] i32, from rows_of); bf16 pools get them rounded to nearest even (ops::copy, as
  /// torch's .to(torch.bfloat16)). ShapeError on mismatched shapes.
  void write(int64_t layer, const TensorView& rows, const TensorView& k, const TensorView& v) const;

  /// Applies `copies` in order: for each, the block_size rows of block dst in every local
  /// slot's keys and values ← block src's rows, by ops::copy on the pools' row views (so
  /// on any device: CPU, CUDA, the emulated device). Throws InputError for a block id
  /// outside the pool or src == dst (naming them), before copying anything.
  void copy_blocks(std::span<const BlockCopy> copies) const;

 private:
  size_t pool(int64_t layer) const { return pool_of_[static_cast<size_t>(layer)]; }
  int64_t num_blocks_, block_size_;
  Device device_ = Device::CPU;
  DType dtype_ = DType::F32;
  KVLayout layout_;
  ShardSpec shard_;  // which model layers the local layer indices are
  std::vector<size_t> pool_of_;  // per local layer: its slot's index in k_, v_
  std::vector<Tensor> k_, v_;    // per slot used locally, in slot order
};

/// Blocks needed to hold `tokens` positions.
inline int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }

}  // namespace olmo2
