// The KV cache's dtype (--kv-cache-dtype, docs/architecture.md §3.2, §8): bf16 pools take
// half the bytes per block (twice the blocks in the same memory); under bf16 precision,
// whose keys and values are bf16 numbers already, they give the very bits of f32 pools
// through the paged (batch-invariant) and the contiguous (generate) attention; under fp32
// they round keys and values, and the batch and chunk invariance hold all the same.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/model/kv_cache.h"
#include "runtime/model/model.h"
#include "runtime/model/precision.h"

namespace olmo2 {
namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.vocab_size = 96, c.hidden_size = 64, c.intermediate_size = 96, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16;
  c.max_position_embeddings = 64, c.rms_norm_eps = 1e-6, c.rope_theta = 10000.0;
  return c;
}

/// OLMo 2 1B's attention shape (allenai/OLMo-2-0425-1B config.json): 16 layers of 16
/// kv heads of 128.
ModelConfig olmo2_1b() {
  ModelConfig c = tiny();
  c.hidden_size = 2048, c.intermediate_size = 8192, c.num_hidden_layers = 16;
  c.num_attention_heads = 16, c.num_key_value_heads = 16, c.head_dim = 128, c.max_position_embeddings = 4096;
  return c;
}

TEST(KVCacheDtype, Bf16PoolsHalveTheBytesPerBlockAndDoubleTheBlocksOfAMemory) {
  const ModelConfig c = olmo2_1b();
  const ShardSpec whole = ShardSpec::whole(c);
  // 2 (k, v) · 16 layers · 16 kv heads · 128 · 16 positions · 4 or 2 bytes.
  EXPECT_EQ(KVCache::bytes_per_block(c, whole, 16, DType::F32), 2 * 16 * 16 * 128 * 16 * 4);
  EXPECT_EQ(KVCache::bytes_per_block(c, whole, 16, DType::BF16), 2 * 16 * 16 * 128 * 16 * 2);
  const int64_t gib = int64_t{1} << 30;  // serve's default --kv-cache-memory
  EXPECT_EQ(gib / KVCache::bytes_per_block(c, whole, 16, DType::F32), 256);
  EXPECT_EQ(gib / KVCache::bytes_per_block(c, whole, 16, DType::BF16), 512);
  // The pools allocated are what bytes_per_block counts.
  const ModelConfig t = tiny();
  for (DType d : {DType::F32, DType::BF16}) {
    const KVCache cache(t, ShardSpec::whole(t), 5, 4, Device::CPU, d);
    EXPECT_EQ(cache.dtype(), d);
    EXPECT_EQ(cache.keys(0).dtype(), d);
    EXPECT_EQ(static_cast<int64_t>(2 * t.num_hidden_layers * cache.keys(0).bytes()),
              5 * KVCache::bytes_per_block(t, ShardSpec::whole(t), 4, d));
  }
  EXPECT_THROW(KVCache(t, ShardSpec::whole(t), 5, 4, Device::CPU, DType::F16), InputError);
}

TEST(KVCacheDtype, AutoIsThePrecisionsAndBadNamesAreRefused) {
  EXPECT_EQ(kv_cache_dtype(std::nullopt, Precision::BF16), DType::BF16);
  EXPECT_EQ(kv_cache_dtype(std::nullopt, Precision::FP32), DType::F32);
  EXPECT_EQ(kv_cache_dtype(DType::F32, Precision::BF16), DType::F32);
  EXPECT_EQ(parse_kv_cache_dtype("auto", "--kv-cache-dtype"), std::nullopt);
  EXPECT_EQ(parse_kv_cache_dtype("bf16", "--kv-cache-dtype"), DType::BF16);
  EXPECT_EQ(parse_kv_cache_dtype("f32", "--kv-cache-dtype"), DType::F32);
  try {
    parse_kv_cache_dtype("f16", "--kv-cache-dtype");
    ADD_FAILURE() << "f16 accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--kv-cache-dtype must be auto, bf16 or f32, got \"f16\"");
  }
}

/// Logits of three sequences' last positions: a 13-token prompt prefilled in chunks of
/// 8 and 5 beside a 6-token one, then one decode step of both beside a third sequence;
/// blocks of 4 from a shuffled pool (the paged, batch-invariant attention) — or, with
/// `contiguous`, each sequence alone in consecutive blocks without batch invariance (the
/// contiguous attention generate uses).
std::vector<std::vector<float>> run(const Olmo2Model& m, DType kv, bool contiguous) {
  const KVCache cache(m.config(), m.shard(), 24, 4, Device::CPU, kv);
  std::mt19937 rng(11);
  std::vector<int32_t> a(13), b(6), c(9);
  for (auto* p : {&a, &b, &c}) {
    for (int32_t& t : *p) t = static_cast<int32_t>(rng() % 96);
  }
  const std::vector<int32_t> seven = {7}, eight = {8};
  std::vector<std::vector<float>> out;
  auto keep = [&](const ForwardResult& r) {
    for (const Tensor& l : r.logits) out.emplace_back(l.f32(), l.f32() + l.numel());
  };
  const ForwardOptions o{.last_logits_only = true, .batch_invariant = !contiguous};
  if (contiguous) {
    const std::vector<int32_t> ta = {0, 1, 2, 3}, tb = {8, 9}, tc = {12, 13, 14};
    keep(m.forward(TokenBatch{{{a.begin(), a.begin() + 8}}, {0}, {ta}}, &cache, o, ParallelContext{}));
    keep(m.forward(TokenBatch{{{a.begin() + 8, a.end()}}, {8}, {ta}}, &cache, o, ParallelContext{}));
    keep(m.forward(TokenBatch{{b}, {0}, {tb}}, &cache, o, ParallelContext{}));
    keep(m.forward(TokenBatch{{c}, {0}, {tc}}, &cache, o, ParallelContext{}));
    keep(m.forward(TokenBatch{{seven}, {13}, {ta}}, &cache, o, ParallelContext{}));
    return out;
  }
  const std::vector<int32_t> ta = {17, 3, 9, 21}, tb = {5, 12}, tc = {2, 20, 7};
  keep(m.forward(TokenBatch{{{a.begin(), a.begin() + 8}, b}, {0, 0}, {ta, tb}}, &cache, o, ParallelContext{}));
  keep(m.forward(TokenBatch{{{a.begin() + 8, a.end()}}, {8}, {ta}}, &cache, o, ParallelContext{}));
  keep(m.forward(TokenBatch{{seven, eight, c}, {13, 6, 0}, {ta, tb, tc}}, &cache, o, ParallelContext{}));
  return out;
}

TEST(KVCacheDtype, UnderBf16Bf16PoolsGiveTheBitsOfF32Pools) {
  const Olmo2Model m = Olmo2Model::random(tiny(), 5, 0.1f, Precision::BF16);
  for (bool contiguous : {false, true}) {
    const auto f32 = run(m, DType::F32, contiguous), bf16 = run(m, DType::BF16, contiguous);
    ASSERT_EQ(f32.size(), bf16.size());
    for (size_t i = 0; i < f32.size(); ++i) {
      EXPECT_EQ(std::memcmp(f32[i].data(), bf16[i].data(), f32[i].size() * sizeof(float)), 0)
          << (contiguous ? "contiguous" : "paged") << " logits " << i;
    }
  }
}

TEST(KVCacheDtype, UnderFp32Bf16PoolsRoundKeysAndValuesAndStayInvariant) {
  const Olmo2Model m = Olmo2Model::random(tiny(), 5, 0.1f, Precision::FP32);
  const auto f32 = run(m, DType::F32, false), bf16 = run(m, DType::BF16, false);
  double worst = 0, scale = 0;
  bool differ = false;
  for (size_t i = 0; i < f32.size(); ++i) {
    differ = differ || std::memcmp(f32[i].data(), bf16[i].data(), f32[i].size() * sizeof(float)) != 0;
    for (size_t j = 0; j < f32[i].size(); ++j) {
      worst = std::max(worst, std::abs(double{f32[i][j]} - bf16[i][j]));
      scale = std::max(scale, std::abs(double{f32[i][j]}));
    }
  }
  EXPECT_TRUE(differ) << "bf16 pools under fp32 must round the keys and values";
  // bf16 keeps 8 significant bits (relative error ≤ 2^-9 per key and value).
  EXPECT_LT(worst, 0.02 * scale) << "largest |Δ logit| " << worst << " of logits up to " << scale;
  // The same sequences alone and unchunked: the same bits (batch and chunk invariance).
  const KVCache cache(m.config(), m.shard(), 24, 4, Device::CPU, DType::BF16);
  std::mt19937 rng(11);
  std::vector<int32_t> a(13);
  for (int32_t& t : a) t = static_cast<int32_t>(rng() % 96);
  const ForwardOptions o{.last_logits_only = true, .batch_invariant = true};
  const std::vector<int32_t> table = {4, 10, 1, 15}, seven = {7};
  m.forward(TokenBatch{{a}, {0}, {table}}, &cache, o, ParallelContext{});
  const ForwardResult r = m.forward(TokenBatch{{seven}, {13}, {table}}, &cache, o, ParallelContext{});
  EXPECT_EQ(std::memcmp(r.logits[0].f32(), bf16[3].data(), bf16[3].size() * sizeof(float)), 0)
      << "a's decode alone after one prefill";
}

}  // namespace
}  // namespace olmo2
