// KVCache::copy_blocks (copy-on-write of a forked sequence's last block, docs/architecture.md
// §8): every local layer's keys and values of the destination block become the source's,
// copies apply in order, bad ids change nothing; a sequence continued from a copied
// partial block gets bit-identical logits; and the same copies on the device (label gpu,
// and on the emulated device, label unit, where they run through ops::copy like a GPU's).
// With bf16 pools (docs/architecture.md §3.2) too, whose write rounds to nearest even.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "ops/tensor_ops.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/model.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

ModelConfig config() {
  ModelConfig c;
  c.vocab_size = 96, c.hidden_size = 64, c.intermediate_size = 96, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16;
  c.max_position_embeddings = 64, c.rms_norm_eps = 1e-6, c.rope_theta = 10000.0;
  return c;
}

/// The pools on the host, layer by layer, keys then values.
std::vector<std::vector<float>> host_pools(const KVCache& cache, int64_t layers) {
  std::vector<std::vector<float>> out;
  for (int64_t l = 0; l < layers; ++l) {
    for (const TensorView* v : {&cache.keys(l), &cache.values(l)}) {
      Tensor h = Tensor::zeros(v->shape());
      ops::copy(*v, h.view());
      out.emplace_back(h.f32(), h.f32() + h.numel());
    }
  }
  return out;
}

/// x rounded to the nearest bf16 number, ties to the even one: the nearer of the two bf16
/// numbers around x (its bits truncated, and the next one), by the values' distance.
float nearest_bf16(float x) {
  const uint32_t lo = std::bit_cast<uint32_t>(x) & 0xffff0000u;
  const float a = std::bit_cast<float>(lo), b = std::bit_cast<float>(lo + 0x10000u);
  const double da = std::abs(double{x} - a), db = std::abs(double{x} - b);
  if (da != db) return da < db ? a : b;
  return (lo & 0x10000u) ? b : a;
}

/// Element i of layer l's keys (values: negated). f32 pools: its index, distinct. bf16
/// pools: distinct bf16 numbers (1 + i/128 … scaled by layer) plus, by i % 4, nothing, half
/// a bf16 step (a tie), just under and just over it, so that writing rounds them.
float element(int64_t l, int64_t i, DType dtype) {
  if (dtype == DType::F32) return static_cast<float>(l * 100000 + i);
  const uint32_t low[4] = {0x0000u, 0x8000u, 0x7fffu, 0x8001u};
  return std::bit_cast<float>(static_cast<uint32_t>((0x3c00 + l * 2048 + i) << 16) | low[i % 4]);
}

/// A cache of 8 blocks of 4 on `device` with `dtype` pools whose every element is distinct
/// (element()), written through KVCache::write.
KVCache filled_cache(Device device, DType dtype = DType::F32) {
  const ModelConfig c = config();
  const ShardSpec shard = ShardSpec::whole(c);
  KVCache cache(c, shard, 8, 4, device, dtype);
  const int64_t width = c.num_key_value_heads * c.head_dim, rows = 32;
  const std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Tensor k = Tensor::zeros({rows, width}), v = Tensor::zeros({rows, width});
    for (int64_t i = 0; i < rows * width; ++i) {
      k.f32()[i] = element(l, i, dtype);
      v.f32()[i] = -element(l, i, dtype);
    }
    Tensor kd = Tensor::zeros({rows, width}, DType::F32, device), vd = Tensor::zeros({rows, width}, DType::F32, device);
    ops::copy(k.view(), kd.view());
    ops::copy(v.view(), vd.view());
    cache.write(l, cache.rows_of(table, 0, rows).view(), kd.view(), vd.view());
  }
  return cache;
}

void expect_copies_applied_in_order(Device device, DType dtype = DType::F32) {
  const KVCache cache = filled_cache(device, dtype);
  ASSERT_EQ(cache.keys(0).dtype(), dtype);
  const std::vector<std::vector<float>> before = host_pools(cache, 2);
  for (size_t pool = 0; pool < before.size(); ++pool) {  // what write stored: the values, rounded
    const int64_t l = static_cast<int64_t>(pool / 2);
    for (size_t i = 0; i < before[pool].size(); ++i) {
      const float x = (pool % 2 ? -1.0f : 1.0f) * element(l, static_cast<int64_t>(i), dtype);
      ASSERT_EQ(before[pool][i], dtype == DType::F32 ? x : nearest_bf16(x)) << "pool " << pool << " element " << i;
    }
  }
  // 2 → 5, then 5 → 1: block 1 ends as block 2 was (in order), 6 as block 0.
  const std::vector<BlockCopy> copies = {{2, 5}, {5, 1}, {0, 6}};
  cache.copy_blocks(copies);
  const std::vector<std::vector<float>> after = host_pools(cache, 2);
  const int64_t width = 32, bs = 4;
  const int from_block[8] = {0, 2, 2, 3, 4, 2, 0, 7};
  for (size_t pool = 0; pool < after.size(); ++pool) {
    for (int b = 0; b < 8; ++b) {
      const float* got = after[pool].data() + b * bs * width;
      const float* want = before[pool].data() + from_block[b] * bs * width;
      EXPECT_EQ(std::memcmp(got, want, bs * width * sizeof(float)), 0) << "pool " << pool << " block " << b;
    }
  }
  for (const std::vector<BlockCopy>& bad :
       {std::vector<BlockCopy>{{1, 3}, {8, 0}}, {{1, 3}, {0, -1}}, {{4, 4}}}) {
    const std::string m = test::input_error([&] { cache.copy_blocks(bad); });
    EXPECT_NE(m.find("KV block copy"), std::string::npos) << m;
  }
  EXPECT_EQ(host_pools(cache, 2), after) << "a bad list copies nothing";
}

TEST(KVCacheCopy, CopiesEveryLayersKeysAndValuesInOrder) { expect_copies_applied_in_order(Device::CPU); }

TEST(KVCacheCopy, Bf16PoolsRoundWhatIsWrittenAndCopyInOrder) {
  expect_copies_applied_in_order(Device::CPU, DType::BF16);
}

TEST(KVCacheCopy, OnTheDevice) {
  OLMO2_REQUIRE_DEVICE();
  expect_copies_applied_in_order(Device::CUDA);
  expect_copies_applied_in_order(Device::CUDA, DType::BF16);
}

TEST(KVCacheCopy, AForkContinuesFromACopiedPartialBlockBitIdentically) {
  const Olmo2Model m = Olmo2Model::random(config(), 5, 0.1f);
  const KVCache cache(m.config(), m.shard(), 12, 4);
  std::mt19937 rng(3);
  std::vector<int32_t> prompt(6);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 96);
  const ForwardOptions o{.last_logits_only = true, .batch_invariant = true};
  // The parent computes positions 0…5 into blocks 3, 7; the fork shares block 3 and
  // copies block 7 (positions 4, 5) to 9; both then compute position 6 with the same token.
  const std::vector<int32_t> parent = {3, 7}, fork = {3, 9}, next = {17};
  m.forward(TokenBatch{{prompt}, {0}, {parent}}, &cache, o, ParallelContext{});
  cache.copy_blocks(std::vector<BlockCopy>{{7, 9}});
  const ForwardResult r = m.forward(TokenBatch{{next, next}, {6, 6}, {parent, fork}}, &cache, o, ParallelContext{});
  ASSERT_EQ(r.logits.size(), 2u);
  EXPECT_EQ(std::memcmp(r.logits[0].f32(), r.logits[1].f32(), 96 * sizeof(float)), 0);
  // Without the copy, block 9 holds zeros and the fork's logits differ.
  cache.copy_blocks(std::vector<BlockCopy>{{0, 9}});
  const ForwardResult z = m.forward(TokenBatch{{next}, {6}, {fork}}, &cache, o, ParallelContext{});
  EXPECT_NE(std::memcmp(z.logits[0].f32(), r.logits[0].f32(), 96 * sizeof(float)), 0);
}

}  // namespace
}  // namespace olmo2
