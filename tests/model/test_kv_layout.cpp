// KV groups (docs/architecture.md §8, "Sliding-window KV (KV groups)"): KVLayout's groups,
// slots and windows for Olmo 3 7B's pattern, 2 full : 3 sliding, all-full and all-sliding
// models and bad configs; KVCache's pools per slot (layers of one slot share memory),
// bytes per block, the group tables of one table, contiguous tables, and tables with
// released (−1) blocks before the window.
#include <gtest/gtest.h>

#include "core/error.h"
#include "ops/tensor_ops.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/kv_layout.h"

namespace olmo2 {
namespace {

constexpr AttentionType F = AttentionType::Full, S = AttentionType::Sliding;

/// A tiny model with these layer types (Olmo 3 when any is given).
ModelConfig config(std::vector<AttentionType> types, int64_t window = 8) {
  ModelConfig c;
  c.vocab_size = 96, c.hidden_size = 32, c.intermediate_size = 64;
  c.num_hidden_layers = static_cast<int64_t>(std::max<size_t>(types.size(), 2));
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8;
  c.max_position_embeddings = 128, c.rms_norm_eps = 1e-6, c.rope_theta = 10000.0;
  if (!types.empty()) c.architecture = "Olmo3ForCausalLM", c.layer_types = std::move(types), c.sliding_window = window;
  return c;
}

/// Olmo 3 7B's layer types: three sliding layers then a full one, eight times.
std::vector<AttentionType> olmo3_7b_types() {
  std::vector<AttentionType> t;
  for (int i = 0; i < 8; ++i) t.insert(t.end(), {S, S, S, F});
  return t;
}

TEST(KVLayout, Olmo3SevenBHasOneFullGroupAndThreeSlidingOnesOfEightLayers) {
  const KVLayout l(config(olmo3_7b_types(), 4096));
  EXPECT_EQ(l.groups(), 4);
  EXPECT_EQ(l.slots(), 8);
  EXPECT_EQ(l.windows(), (std::vector<int64_t>{0, 4096, 4096, 4096}));
  EXPECT_TRUE(l.has_sliding_groups());
  // Full layers 3, 7, …, 31 fill group 0 in order.
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(l.group_of(4 * i + 3), 0) << "layer " << 4 * i + 3;
    EXPECT_EQ(l.slot_of(4 * i + 3), i) << "layer " << 4 * i + 3;
  }
  // Sliding layers 0, 1, 2, 4, 5, 6, 8, 9 are group 1; 10 starts group 2; 31's
  // predecessor 30 is the last of group 3.
  const std::vector<int64_t> group1 = {0, 1, 2, 4, 5, 6, 8, 9};
  for (int64_t s = 0; s < 8; ++s) {
    EXPECT_EQ(l.group_of(group1[static_cast<size_t>(s)]), 1);
    EXPECT_EQ(l.slot_of(group1[static_cast<size_t>(s)]), s);
  }
  EXPECT_EQ(l.group_of(10), 2);
  EXPECT_EQ(l.slot_of(10), 0);
  EXPECT_EQ(l.group_of(30), 3);
  EXPECT_EQ(l.slot_of(30), 7);
}

TEST(KVLayout, TwoFullToThreeSlidingMakesFiveGroupsOfOneLayer) {
  const KVLayout l(config({S, F, S, F, S}, 6));
  EXPECT_EQ(l.groups(), 5);
  EXPECT_EQ(l.slots(), 1);
  EXPECT_EQ(l.windows(), (std::vector<int64_t>{0, 0, 6, 6, 6}));
  const std::vector<int64_t> group = {2, 0, 3, 1, 4};
  for (int64_t layer = 0; layer < 5; ++layer) {
    EXPECT_EQ(l.group_of(layer), group[static_cast<size_t>(layer)]) << "layer " << layer;
    EXPECT_EQ(l.slot_of(layer), 0);
  }
}

TEST(KVLayout, OneAttentionTypeIsOneGroupOfEveryLayer) {
  for (const ModelConfig& c : {config({}), config({F, F, F}), config({S, S, S}, 5)}) {
    const KVLayout l(c);
    EXPECT_EQ(l.groups(), 1);
    EXPECT_EQ(l.slots(), c.num_hidden_layers);
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
      EXPECT_EQ(l.group_of(layer), 0);
      EXPECT_EQ(l.slot_of(layer), layer);
    }
  }
  EXPECT_EQ(KVLayout(config({})).windows(), std::vector<int64_t>{0});
  EXPECT_EQ(KVLayout(config({F, F, F})).windows(), std::vector<int64_t>{0});
  EXPECT_EQ(KVLayout(config({S, S, S}, 5)).windows(), std::vector<int64_t>{5});
  EXPECT_FALSE(KVLayout(config({F, F, F})).has_sliding_groups());
}

TEST(KVLayout, RefusesLayerTypesOfAnotherLengthAndSlidingLayersWithoutAWindow) {
  ModelConfig c = config({S, F});
  c.num_hidden_layers = 3;
  EXPECT_THROW(KVLayout{c}, InputError);
  EXPECT_THROW(KVLayout{config({S, F}, 0)}, InputError);
}

TEST(KVCacheGroups, LayersOfOneSlotShareAPoolAndABlockCostsTheSlotsUsed) {
  const ModelConfig c = config({S, F, S, F});  // g = 2: groups {1, 3} full, {0, 2} sliding
  const KVCache cache(c, ShardSpec::whole(c), 6, 4);
  EXPECT_EQ(cache.layout().groups(), 2);
  EXPECT_EQ(cache.group(0), 1);
  EXPECT_EQ(cache.group(1), 0);
  EXPECT_EQ(cache.keys(0).data(), cache.keys(1).data());    // both slot 0
  EXPECT_EQ(cache.values(2).data(), cache.values(3).data());  // both slot 1
  EXPECT_NE(cache.keys(0).data(), cache.keys(2).data());
  EXPECT_EQ(cache.keys(0).shape(), (std::vector<int64_t>{24, 16}));
  // 2 (k, v) · 2 slots · 2 kv heads · 8 · 4 positions · 4 bytes; OLMo 2's 4 layers: twice that.
  EXPECT_EQ(KVCache::bytes_per_block(c, ShardSpec::whole(c), 4, DType::F32), 2 * 2 * 2 * 8 * 4 * 4);
  EXPECT_EQ(KVCache::bytes_per_block(config({F, F, F, F}), ShardSpec::whole(c), 4, DType::F32),
            2 * 4 * 2 * 8 * 4 * 4);
  EXPECT_EQ(KVCache::bytes_per_block(config({}), ShardSpec::whole(config({})), 4, DType::F32), 2 * 2 * 2 * 8 * 4 * 4);
  // bf16 pools (--kv-cache-dtype, docs/architecture.md §3.2): 2 bytes an element, half.
  EXPECT_EQ(KVCache::bytes_per_block(c, ShardSpec::whole(c), 4, DType::BF16), 2 * 2 * 2 * 8 * 4 * 2);
  EXPECT_THROW(KVCache::bytes_per_block(c, ShardSpec::whole(c), 4, DType::F16), InputError);
}

TEST(KVCacheGroups, APipelineStageKeepsThePoolsOfTheSlotsItsLayersUse) {
  const ModelConfig c = config({S, S, F, S, S, F});  // g = 2: {2, 5} full; {0, 1}, {3, 4} sliding
  ShardSpec late = ShardSpec::whole(c), first = ShardSpec::whole(c);
  late.chunks = {{3, 6}};
  first.chunks = {{0, 1}};
  const KVCache cache(c, late, 4, 4);
  EXPECT_EQ((std::vector<int64_t>{cache.group(0), cache.group(1), cache.group(2)}), (std::vector<int64_t>{2, 2, 0}));
  EXPECT_EQ(cache.keys(1).data(), cache.keys(2).data());  // layers 4 and 5: slot 1
  EXPECT_NE(cache.keys(0).data(), cache.keys(1).data());
  EXPECT_EQ(KVCache::bytes_per_block(c, late, 4, DType::F32), 2 * 2 * 2 * 8 * 4 * 4);
  EXPECT_EQ(KVCache::bytes_per_block(c, first, 4, DType::F32), 2 * 1 * 2 * 8 * 4 * 4);  // layer 0 alone: one slot
}

TEST(KVCacheGroups, AContiguousCacheGivesEachGroupItsConsecutiveBlocks) {
  const ModelConfig c = config({S, F, S, F});
  const KVCache cache = KVCache::contiguous(c, ShardSpec::whole(c), 10, 4);  // 3 blocks per group
  EXPECT_EQ(cache.num_blocks(), 6);
  const std::vector<int32_t> table = cache.contiguous_table(10);
  EXPECT_EQ(table, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  const auto g0 = KVCache::group_table(table, 2, 0), g1 = KVCache::group_table(table, 2, 1);
  EXPECT_EQ(std::vector<int32_t>(g0.begin(), g0.end()), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(std::vector<int32_t>(g1.begin(), g1.end()), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(cache.contiguous_rows(g1, 10), 12);
  EXPECT_THROW(KVCache::group_table(std::vector<int32_t>{0, 1, 2}, 2, 0), ShapeError);
  EXPECT_THROW(KVCache::group_table(table, 2, 2), ShapeError);
  // One group: the table of before.
  const ModelConfig olmo2 = config({});
  EXPECT_EQ(KVCache::contiguous(olmo2, ShardSpec::whole(olmo2), 10, 4).contiguous_table(10),
            KVCache::consecutive_blocks(10, 4));
}

TEST(KVCacheGroups, ReleasedBlocksBeforeTheWindowAreNeverRead) {
  const ModelConfig c = config({S, F, S, F});
  const KVCache cache(c, ShardSpec::whole(c), 8, 4);
  const std::vector<int32_t> table = {-1, -1, 5, 6};  // blocks 0, 1 released
  EXPECT_EQ(cache.contiguous_rows(table, 12), -1);     // not contiguous: the paged path runs
  EXPECT_EQ(cache.contiguous_rows(std::vector<int32_t>{-1, 0}, 8), -1);  // −1 then 0 is no run
  const Tensor rows = cache.rows_of(table, 9, 3);     // positions 9 … 11 only read entry 2
  EXPECT_EQ(std::vector<int32_t>(rows.i32(), rows.i32() + 3), (std::vector<int32_t>{21, 22, 23}));
  EXPECT_THROW(cache.rows_of(table, 7, 2), InputError);  // position 7 is in a released block
}

}  // namespace
}  // namespace olmo2
