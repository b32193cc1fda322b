#include "runtime/model/kv_cache.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "ops/tensor_ops.h"

namespace olmo2 {

namespace {
/// The KV slots the layers of `shard` use, ascending without repeats.
std::vector<int64_t> local_slots(const KVLayout& layout, const ShardSpec& shard) {
  std::vector<int64_t> slots;
  for (int64_t i = 0; i < shard.layer_count(); ++i) slots.push_back(layout.slot_of(shard.global_layer(i)));
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  return slots;
}

/// f32 or bf16; InputError naming `dtype` otherwise.
void check_pool_dtype(DType dtype) {
  if (dtype != DType::F32 && dtype != DType::BF16) {
    OLMO2_THROW(InputError, "the KV cache holds f32 or bf16, not ", dtype_name(dtype));
  }
}
}  // namespace

KVCache::KVCache(const ModelConfig& c, const ShardSpec& shard, int64_t num_blocks, int64_t block_size, Device device,
                 DType dtype)
    : num_blocks_(num_blocks), block_size_(block_size), device_(device), dtype_(dtype), layout_(c), shard_(shard) {
  if (num_blocks < 1) OLMO2_THROW(InputError, "the KV cache needs at least one block, got ", num_blocks);
  if (block_size < 1) OLMO2_THROW(InputError, "KV block size must be ≥ 1, got ", block_size);
  check_pool_dtype(dtype);
  const int64_t width = shard.kv_heads.size() * c.head_dim;
  const std::vector<int64_t> slots = local_slots(layout_, shard);
  for (size_t i = 0; i < slots.size(); ++i) {
    k_.push_back(Tensor::zeros({num_blocks * block_size, width}, dtype, device));
    v_.push_back(Tensor::zeros({num_blocks * block_size, width}, dtype, device));
  }
  for (int64_t i = 0; i < shard.layer_count(); ++i) {
    const auto at = std::lower_bound(slots.begin(), slots.end(), layout_.slot_of(shard.global_layer(i)));
    pool_of_.push_back(static_cast<size_t>(at - slots.begin()));
  }
}

KVCache KVCache::contiguous(const ModelConfig& c, const ShardSpec& shard, int64_t capacity, int64_t block_size,
                            Device device, DType dtype) {
  const int64_t groups = KVLayout(c).groups();
  return KVCache(c, shard, groups * std::max<int64_t>(1, blocks_for(capacity, block_size)), block_size, device,
                 dtype);
}

std::vector<int32_t> KVCache::contiguous_table(int64_t positions) const {
  std::vector<int32_t> table(static_cast<size_t>(layout_.groups() * blocks_for(positions, block_size_)));
  std::iota(table.begin(), table.end(), 0);
  return table;
}

std::span<const int32_t> KVCache::group_table(std::span<const int32_t> table, int64_t groups, int64_t group) {
  OLMO2_CHECK(groups >= 1 && group >= 0 && group < groups && table.size() % static_cast<size_t>(groups) == 0,
                    "a block table of ", table.size(), " entries is not ", groups,
                    " equal group tables, or group ", group, " is not one of them");
  const size_t n = table.size() / static_cast<size_t>(groups);
  return table.subspan(static_cast<size_t>(group) * n, n);
}

std::vector<int32_t> KVCache::consecutive_blocks(int64_t positions, int64_t block_size) {
  std::vector<int32_t> table(static_cast<size_t>(blocks_for(positions, block_size)));
  std::iota(table.begin(), table.end(), 0);
  return table;
}

int64_t KVCache::bytes_per_block(const ModelConfig& c, const ShardSpec& shard, int64_t block_size, DType dtype) {
  check_pool_dtype(dtype);
  const int64_t slots = static_cast<int64_t>(local_slots(KVLayout(c), shard).size());
  return 2 * slots * shard.kv_heads.size() * c.head_dim * block_size * static_cast<int64_t>(dtype_size(dtype));
}

Tensor KVCache::rows_of(std::span<const int32_t> table, int64_t start, int64_t n) const {
  OLMO2_CHECK(start >= 0 && blocks_for(start + n, block_size_) <= static_cast<int64_t>(table.size()),
              "block table of ", table.size(), " blocks of ", block_size_, " is too short for ", start + n,
              " positions");
  Tensor rows = Tensor::zeros({n}, DType::I32);
  int32_t* r = rows.i32();
  for (int64_t t = 0; t < n; ++t) {
    const int64_t p = start + t;
    const int64_t block = table[static_cast<size_t>(p / block_size_)];
    if (block < 0 || block >= num_blocks_) {
      OLMO2_THROW(InputError, "KV block ", block, " outside the pool of ", num_blocks_, " blocks");
    }
    r[t] = static_cast<int32_t>(block * block_size_ + p % block_size_);
  }
  if (device_ == Device::CPU) return rows;
  Tensor on_device = Tensor::zeros({n}, DType::I32, device_);
  ops::copy(rows.view(), on_device.view());
  return on_device;
}

int64_t KVCache::contiguous_rows(std::span<const int32_t> table, int64_t n) const {
  const int64_t blocks = blocks_for(n, block_size_);
  if (blocks > static_cast<int64_t>(table.size()) || blocks == 0 || table[0] < 0) return -1;
  for (int64_t b = 1; b < blocks; ++b) {
    if (table[static_cast<size_t>(b)] != table[0] + b) return -1;
  }
  return static_cast<int64_t>(table[0]) * block_size_;
}

void KVCache::write(int64_t layer, const TensorView& rows, const TensorView& k, const TensorView& v) const {
  if (dtype_ == DType::F32) {
    ops::scatter_rows(k, rows, keys(layer));
    ops::scatter_rows(v, rows, values(layer));
    return;
  }
  // bf16 pools: the rows rounded (nearest even) on the cache's device, then scattered.
  const auto rounded_into = [&](const TensorView& src, const TensorView& pool) {
    OLMO2_CHECK(src.dim() == 2, "KV cache write: keys/values ", src.shape_str(), " are not 2-d");
    Tensor rounded = Tensor::zeros({src.size(0), src.size(1)}, DType::BF16, device_);
    ops::copy(src, rounded.view());
    ops::scatter_rows(rounded.view(), rows, pool);
  };
  rounded_into(k, keys(layer));
  rounded_into(v, values(layer));
}

void KVCache::copy_blocks(std::span<const BlockCopy> copies) const {
  for (const BlockCopy& c : copies) {
    if (c.src < 0 || c.src >= num_blocks_ || c.dst < 0 || c.dst >= num_blocks_ || c.src == c.dst) {
      OLMO2_THROW(InputError, "KV block copy ", c.src, " -> ", c.dst, " in a pool of ", num_blocks_,
                  " blocks (both must be in the pool and distinct)");
    }
  }
  for (const BlockCopy& c : copies) {
    const int64_t s = c.src * block_size_, d = c.dst * block_size_;
    for (size_t l = 0; l < k_.size(); ++l) {  // every slot: the block's group uses them all
      ops::copy(k_[l].view().rows(s, s + block_size_), k_[l].view().rows(d, d + block_size_));
      ops::copy(v_[l].view().rows(s, s + block_size_), v_[l].view().rows(d, d + block_size_));
    }
  }
}

}  // namespace olmo2
