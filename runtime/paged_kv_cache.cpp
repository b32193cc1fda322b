#include "runtime/paged_kv_cache.h"

#include <cmath>
#include <cstring>

#include "ops/error.h"

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

int64_t parse_memory_size(const std::string& text, const std::string& what) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    OLMO2_THROW(InputError, what, ": '", text, "' is not a size (e.g. 512MiB, 2GiB, 1.5G)");
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB") scale = 1e3;
  else if (unit == "M" || unit == "MB") scale = 1e6;
  else if (unit == "G" || unit == "GB") scale = 1e9;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else OLMO2_THROW(InputError, what, ": unknown unit '", unit, "' in '", text, "' (B, K, M, G, KiB, MiB, GiB)");
  const double bytes = value * scale;
  if (!(bytes >= 1) || !std::isfinite(bytes) || bytes > 9e18) {
    OLMO2_THROW(InputError, what, " must be a positive size, got '", text, "'");
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace olmo2
