#include "runtime/model/kv_cache.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace olmo2 {

PagedKVCache::PagedKVCache(const ModelConfig& c, const ShardSpec& shard, int64_t num_blocks, int64_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  if (num_blocks < 1) OLMO2_THROW(InputError, "the KV cache needs at least one block, got ", num_blocks);
  if (block_size < 1) OLMO2_THROW(InputError, "KV block size must be ≥ 1, got ", block_size);
  const int64_t width = shard.kv_heads.size() * c.head_dim;
  for (int64_t l = shard.layers.begin; l < shard.layers.end; ++l) {
    k_.push_back(Tensor::zeros({num_blocks * block_size, width}));
    v_.push_back(Tensor::zeros({num_blocks * block_size, width}));
  }
}

int64_t PagedKVCache::bytes_per_block(const ModelConfig& c, const ShardSpec& shard, int64_t block_size) {
  return 2 * shard.layers.size() * shard.kv_heads.size() * c.head_dim * block_size *
         static_cast<int64_t>(sizeof(float));
}

void PagedKVCache::write(int64_t layer, std::span<const int32_t> table, int64_t start, const TensorView& k,
                         const TensorView& v) const {
  const int64_t n = k.size(0), width = k.size(1);
  OLMO2_CHECK(blocks_for(start + n, block_size_) <= static_cast<int64_t>(table.size()), "block table of ",
              table.size(), " blocks is too short for ", start + n, " positions");
  const TensorView& kp = keys(layer);
  const TensorView& vp = values(layer);
  OLMO2_CHECK(width == kp.size(1) && v.size(0) == n && v.size(1) == width, "KV write: k ", k.shape_str(),
              " v ", v.shape_str(), " pool ", kp.shape_str());
  for (int64_t t = 0; t < n; ++t) {
    const int64_t p = start + t;
    const int64_t row = static_cast<int64_t>(table[static_cast<size_t>(p / block_size_)]) * block_size_ + p % block_size_;
    OLMO2_CHECK(row >= 0 && row < kp.size(0), "KV block ", table[static_cast<size_t>(p / block_size_)],
                " outside the pool of ", num_blocks_);
    std::memcpy(kp.f32() + row * width, k.f32() + t * k.stride(0), sizeof(float) * static_cast<size_t>(width));
    std::memcpy(vp.f32() + row * width, v.f32() + t * v.stride(0), sizeof(float) * static_cast<size_t>(width));
  }
}

}  // namespace olmo2
