#include "runtime/model/kv_cache.h"

#include <numeric>

#include "core/error.h"
#include "ops/tensor_ops.h"

namespace olmo2 {

KVCache::KVCache(const ModelConfig& c, const ShardSpec& shard, int64_t num_blocks, int64_t block_size, Device device)
    : num_blocks_(num_blocks), block_size_(block_size), device_(device) {
  if (num_blocks < 1) OLMO2_THROW(InputError, "the KV cache needs at least one block, got ", num_blocks);
  if (block_size < 1) OLMO2_THROW(InputError, "KV block size must be ≥ 1, got ", block_size);
  const int64_t width = shard.kv_heads.size() * c.head_dim;
  for (int64_t l = shard.layers.begin; l < shard.layers.end; ++l) {
    k_.push_back(Tensor::zeros({num_blocks * block_size, width}, DType::F32, device));
    v_.push_back(Tensor::zeros({num_blocks * block_size, width}, DType::F32, device));
  }
}

KVCache KVCache::contiguous(const ModelConfig& c, const ShardSpec& shard, int64_t capacity, int64_t block_size,
                            Device device) {
  return KVCache(c, shard, std::max<int64_t>(1, blocks_for(capacity, block_size)), block_size, device);
}

std::vector<int32_t> KVCache::consecutive_blocks(int64_t positions, int64_t block_size) {
  std::vector<int32_t> table(static_cast<size_t>(blocks_for(positions, block_size)));
  std::iota(table.begin(), table.end(), 0);
  return table;
}

int64_t KVCache::bytes_per_block(const ModelConfig& c, const ShardSpec& shard, int64_t block_size) {
  return 2 * shard.layers.size() * shard.kv_heads.size() * c.head_dim * block_size *
         static_cast<int64_t>(sizeof(float));
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
  if (blocks > static_cast<int64_t>(table.size()) || blocks == 0) return -1;
  for (int64_t b = 1; b < blocks; ++b) {
    if (table[static_cast<size_t>(b)] != table[0] + b) return -1;
  }
  return static_cast<int64_t>(table[0]) * block_size_;
}

void KVCache::write(int64_t layer, const TensorView& rows, const TensorView& k, const TensorView& v) const {
  ops::scatter_rows(k, rows, keys(layer));
  ops::scatter_rows(v, rows, values(layer));
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
    for (size_t l = 0; l < k_.size(); ++l) {
      ops::copy(k_[l].view().rows(s, s + block_size_), k_[l].view().rows(d, d + block_size_));
      ops::copy(v_[l].view().rows(s, s + block_size_), v_[l].view().rows(d, d + block_size_));
    }
  }
}

}  // namespace olmo2
