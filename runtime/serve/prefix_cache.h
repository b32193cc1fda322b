// Automatic prefix caching: which KV block already holds the keys and values of a full
// block of tokens after a given prefix, so that a new sequence with that prefix reuses it
// instead of computing it again (vLLM's design; docs/architecture.md §8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace olmo2 {

/// A cached block as a prefix: the block's id and the generation of that id, which moves
/// on each time the block leaves the cache. While the block is cached, (block, generation)
/// stands for exactly one token prefix (the one its key chains to); once evicted, that
/// pair never names anything again.
struct CachedBlock {
  int32_t block = -1;      ///< -1: the empty prefix (before a sequence's first block)
  int64_t generation = 0;
  bool operator==(const CachedBlock&) const = default;
};

/// What a full block holds: the keys and values of `tokens` (block_size of them) at the
/// positions right after the prefix `parent` (the previous block's identity; block −1
/// for a sequence's first block). A chained key: `parent` stands for every block before
/// this one. Batch invariance (docs/architecture.md §8) makes a position's keys and
/// values a function of its token prefix only, so two sequences with equal keys hold
/// equal bits there — for equal interventions: `salt` tells apart what steered sequences
/// hold (docs/architecture.md §13, InterventionSalts). A sequence's first block carries
/// its salt (0: no interventions); later blocks leave it 0 and inherit it through
/// `parent`, which stands for the first block's key.
struct BlockKey {
  CachedBlock parent;
  std::vector<int32_t> tokens;
  uint64_t salt = 0;
  bool operator==(const BlockKey&) const = default;
};

/// 64-bit hash of a key (splitmix64 steps over the parent's id and generation, then each
/// token, then a non-zero salt). It only picks the hash table's bucket: lookups compare
/// whole keys.
struct BlockKeyHash {
  size_t operator()(const BlockKey& key) const;
};

/// The map from a full block's key to the block holding it. Exact: a lookup compares the
/// whole key (parent identity, every token and the salt), never a hash alone, so a hash collision
/// can cost a bucket probe but never hand out a block with other contents. A block is in
/// the cache from insert until erase (eviction by the block allocator); whether a
/// sequence holds it is the allocator's business. Not thread-safe (the scheduler's).
class PrefixCache {
 public:
  /// A cache for block ids 0 … num_blocks−1. Throws InputError for num_blocks < 1.
  explicit PrefixCache(int64_t num_blocks);

  /// The cached block holding `key`, if any.
  std::optional<CachedBlock> find(const BlockKey& key) const;
  /// Records that `block` (full, computed) holds `key` and returns its identity; when
  /// another block holds `key` already, records nothing and returns that one's (the
  /// same contents twice: the first stays the cached copy). A block cached already under
  /// `key` returns its identity. Throws Error for a block id outside the pool or a block
  /// cached under another key.
  CachedBlock insert(int32_t block, BlockKey key);
  /// Whether `block` is in the cache.
  bool contains(int32_t block) const;
  /// Drops `block` from the cache (it is about to be overwritten) and moves its
  /// generation on, so that keys naming it as their parent can never match again.
  /// Nothing happens for a block not cached.
  void erase(int32_t block);
  /// Blocks in the cache.
  int64_t size() const { return static_cast<int64_t>(map_.size()); }

 private:
  std::unordered_map<BlockKey, int32_t, BlockKeyHash> map_;
  std::vector<const BlockKey*> key_of_;  // per block: its key in map_, null when not cached
  std::vector<int64_t> generation_;
};

}  // namespace olmo2
