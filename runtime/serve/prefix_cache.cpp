#include "runtime/serve/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace olmo2 {

namespace {
/// One splitmix64 step (Steele, Lea and Flood, OOPSLA 2014) folding `v` into `h`.
uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t z = h + 0x9E3779B97F4A7C15ull + v;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

size_t BlockKeyHash::operator()(const BlockKey& key) const {
  uint64_t h = mix(static_cast<uint64_t>(static_cast<int64_t>(key.parent.block)),
                   static_cast<uint64_t>(key.parent.generation));
  for (const int32_t t : key.tokens) h = mix(h, static_cast<uint32_t>(t));
  if (key.salt != 0) h = mix(h, key.salt);
  return static_cast<size_t>(h);
}

PrefixCache::PrefixCache(int64_t num_blocks)
    : key_of_(static_cast<size_t>(std::max<int64_t>(num_blocks, 0)), nullptr),
      generation_(key_of_.size(), 0) {
  if (num_blocks < 1) OLMO2_THROW(InputError, "prefix cache of ", num_blocks, " blocks");
}

std::optional<CachedBlock> PrefixCache::find(const BlockKey& key) const {
  const auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  return CachedBlock{it->second, generation_[static_cast<size_t>(it->second)]};
}

CachedBlock PrefixCache::insert(int32_t block, BlockKey key) {
  OLMO2_CHECK(block >= 0 && static_cast<size_t>(block) < key_of_.size(), "KV block ", block, " outside the pool of ",
              key_of_.size());
  if (const BlockKey* held = key_of_[static_cast<size_t>(block)]) {  // recorded already: by the same key only
    OLMO2_CHECK(*held == key, "KV block ", block, " is cached already, with other contents");
    return CachedBlock{block, generation_[static_cast<size_t>(block)]};
  }
  const auto [it, fresh] = map_.try_emplace(std::move(key), block);
  if (fresh) key_of_[static_cast<size_t>(block)] = &it->first;  // node-based: the key's address is stable
  return CachedBlock{it->second, generation_[static_cast<size_t>(it->second)]};
}

bool PrefixCache::contains(int32_t block) const {
  return block >= 0 && static_cast<size_t>(block) < key_of_.size() && key_of_[static_cast<size_t>(block)];
}

void PrefixCache::erase(int32_t block) {
  if (!contains(block)) return;
  const size_t b = static_cast<size_t>(block);
  map_.erase(map_.find(*key_of_[b]));  // by iterator: the key argument lives in the erased node
  key_of_[b] = nullptr;
  ++generation_[b];
}

}  // namespace olmo2
