// Olmo2Model::forward over a paged KV cache (serving): the same logits as a contiguous
// cache (consecutive blocks) and as a forward without a cache, and, batch-invariant,
// bit-identical logits for a sequence whatever else is in the batch, however its prompt
// is chunked and wherever its blocks lie in the pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "runtime/model/model.h"
#include "runtime/model/kv_cache.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

ModelConfig gqa_config() {
  ModelConfig c;
  c.vocab_size = 96, c.hidden_size = 64, c.intermediate_size = 96, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16;
  c.max_position_embeddings = 128, c.rms_norm_eps = 1e-6, c.rope_theta = 10000.0;
  return c;
}

const Olmo2Model& model() {
  static const Olmo2Model m = Olmo2Model::random(gqa_config(), 77, 0.1f);
  return m;
}

std::vector<int32_t> tokens(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 96);
  return t;
}

/// One sequence of a paged call: new tokens, cached positions before them, its table.
struct Part {
  std::vector<int32_t> tokens;
  int64_t start;
  std::vector<int32_t> table;
};

ForwardResult paged(const KVCache& cache, const std::vector<Part>& parts,
                    bool last_only = true) {
  TokenBatch b;
  for (const Part& p : parts) {
    b.tokens.emplace_back(p.tokens);
    b.start.push_back(p.start);
    b.block_tables.emplace_back(p.table);
  }
  const ForwardOptions o{.last_logits_only = last_only, .batch_invariant = true};
  return model().forward(b, &cache, o, ParallelContext{});
}

KVCache make_cache() { return KVCache(gqa_config(), model().shard(), 40, 4); }

/// Bytes of rows [r0, r1) of a [T, V] logits tensor.
std::vector<float> rows(const Tensor& t, int64_t r0, int64_t r1) {
  const int64_t v = t.view().size(1);
  return std::vector<float>(t.f32() + r0 * v, t.f32() + r1 * v);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    worst = std::max(worst, ::olmo2::test::abs_diff(static_cast<double>(got.f32()[i]), want.f32()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want.f32()[i])));
  }
  ASSERT_GT(scale, 0.1) << what;
  EXPECT_LE(worst / scale, 1e-4) << what << ": max |diff| " << worst << " of max |logit| " << scale;
}

TEST(PagedForward, MatchesTheContiguousCacheForPrefillAndDecode) {
  const Olmo2Model& m = model();
  const KVCache cache = make_cache();
  std::vector<std::vector<int32_t>> seq = {tokens(10, 1), tokens(7, 2)};
  std::vector<std::vector<int32_t>> table = {{5, 2, 9, 0, 17},
                                             {1, 7, 3, 11, 30}};  // 20 positions each
  // The reference: each sequence in a contiguous cache of its own (consecutive blocks,
  // BLAS attention over its rows).
  const KVCache c0 = KVCache::contiguous(m.config(), m.shard(), 32),
                c1 = KVCache::contiguous(m.config(), m.shard(), 32);
  const std::vector<int32_t> consecutive = KVCache::consecutive_blocks(32, c0.block_size());
  std::vector<int64_t> start = {0, 0};
  for (int step = 0; step < 6; ++step) {
    std::vector<ForwardResult> alone;
    for (size_t i = 0; i < 2; ++i) {
      alone.push_back(m.forward(TokenBatch{{seq[i]}, {start[i]}, {consecutive}}, i == 0 ? &c0 : &c1,
                                ForwardOptions{.last_logits_only = true}));
    }
    ForwardResult want;
    for (ForwardResult& r : alone) want.logits.push_back(std::move(r.logits[0]));
    const ForwardResult got =
        paged(cache, {{seq[0], start[0], table[0]}, {seq[1], start[1], table[1]}});
    ASSERT_EQ(got.logits.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(got.logits[i].view().size(0), 1);
      ASSERT_EQ(got.logits[i].view().size(1), 96);
      expect_close(got.logits[i], want.logits[i],
                   "step " + std::to_string(step) + " sequence " + std::to_string(i));
      start[i] += static_cast<int64_t>(seq[i].size());
      // Next input: the argmax of the reference logits (a real decode).
      const float* l = want.logits[i].f32();
      seq[i] = {static_cast<int32_t>(std::max_element(l, l + 96) - l)};
    }
  }
  EXPECT_EQ(start[0], 15);
  EXPECT_EQ(start[1], 12);
}

TEST(PagedForward, AllLogitsOfAPrefillMatchTheContiguousForward) {
  const Olmo2Model& m = model();
  const KVCache cache = make_cache();
  const std::vector<int32_t> s = tokens(13, 3);
  const ForwardResult want = m.forward({s});
  const ForwardResult got = paged(cache, {{s, 0, {39, 4, 21, 8}}}, /*last_only=*/false);
  ASSERT_EQ(got.logits[0].view().size(0), 13);
  expect_close(got.logits[0], want.logits[0], "13-token prefill");
}

TEST(PagedForward, ChunkedPrefillIsBitIdentical) {
  const std::vector<int32_t> s = tokens(10, 4);
  const KVCache a = make_cache(), b = make_cache();
  const ForwardResult whole = paged(a, {{s, 0, {3, 8, 1}}}, false);
  const std::vector<int32_t> first(s.begin(), s.begin() + 4), rest(s.begin() + 4, s.end());
  const ForwardResult c1 = paged(b, {{first, 0, {12, 0, 33}}}, false);
  const ForwardResult c2 = paged(b, {{rest, 4, {12, 0, 33}}}, false);
  EXPECT_TRUE(same_bits(rows(c1.logits[0], 0, 4), rows(whole.logits[0], 0, 4)));
  EXPECT_TRUE(same_bits(rows(c2.logits[0], 0, 6), rows(whole.logits[0], 4, 10)));
  // And with last_logits_only, the 4+6 split in one pool against a different table.
  const KVCache c = make_cache();
  paged(c, {{first, 0, {7, 19, 2}}});
  const ForwardResult last = paged(c, {{rest, 4, {7, 19, 2}}});
  EXPECT_TRUE(same_bits(rows(last.logits[0], 0, 1), rows(whole.logits[0], 9, 10)));
}

TEST(PagedForward, ASequenceIsBitIdenticalAloneAndInABusyBatch) {
  const std::vector<int32_t> s = tokens(10, 5);
  const std::vector<int32_t> o1 = tokens(3, 6), o2 = tokens(7, 7), o3 = tokens(13, 8);
  // Alone.
  const KVCache alone = make_cache();
  std::vector<int32_t> t_alone = {0, 1, 2, 3};
  std::vector<std::vector<float>> solo;
  solo.push_back(rows(paged(alone, {{s, 0, t_alone}}).logits[0], 0, 1));
  // Together with three others, its blocks shuffled through the pool, at index 2.
  const KVCache busy = make_cache();
  std::vector<int32_t> pool(40);
  for (int i = 0; i < 40; ++i) pool[static_cast<size_t>(i)] = i;
  std::shuffle(pool.begin(), pool.end(), std::mt19937(9));
  auto take = [&](size_t at) {
    return std::vector<int32_t>(pool.begin() + at, pool.begin() + at + 6);
  };
  const std::vector<int32_t> t1 = take(0), t2 = take(6), t_s = take(12), t3 = take(18);
  ForwardResult r = paged(busy, {{o1, 0, t1}, {o2, 0, t2}, {s, 0, t_s}, {o3, 0, t3}});
  ASSERT_EQ(r.logits.size(), 4u);
  EXPECT_TRUE(same_bits(rows(r.logits[2], 0, 1), solo[0])) << "prefill";
  // Decode steps: the same next token for it; the others decode (or one prefills more).
  std::vector<int32_t> next = {11};
  int64_t at = 10, at1 = 3, at3 = 13;
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> a = rows(paged(alone, {{next, at, t_alone}}).logits[0], 0, 1);
    const std::vector<int32_t> d1 = {static_cast<int32_t>(step)}, d3 = tokens(2, 20 + step);
    r = paged(busy, {{d3, at3, t3}, {next, at, t_s}, {d1, at1, t1}});
    EXPECT_TRUE(same_bits(rows(r.logits[1], 0, 1), a)) << "decode " << step;
    if (step == 0) {
      // Not trivially equal: another sequence's logits differ from this one's.
      EXPECT_FALSE(same_bits(rows(r.logits[2], 0, 1), a));
    }
    ++at, ++at1, at3 += 2;
    next = {static_cast<int32_t>(40 + step)};
  }
}

TEST(PagedForward, AllLogitsForSomeSequencesLeavesTheOthersBitIdentical) {
  // Prompt logprobs in serving: one sequence of the batch gets every row's logits, the
  // others their last row only — the same bits as a batch where none asks for more.
  const std::vector<int32_t> a = tokens(5, 30), b = tokens(9, 31), c = tokens(3, 32);
  const KVCache plain = make_cache(), some = make_cache(), full = make_cache();
  const std::vector<Part> parts = {{a, 0, {0, 1}}, {b, 0, {2, 3, 4}}, {c, 0, {5}}};
  const ForwardResult last = paged(plain, parts);
  const ForwardResult every = paged(full, parts, false);
  TokenBatch batch;
  for (const Part& p : parts) {
    batch.tokens.emplace_back(p.tokens);
    batch.start.push_back(p.start);
    batch.block_tables.emplace_back(p.table);
  }
  const ForwardOptions o{.last_logits_only = true, .batch_invariant = true, .all_logits = {false, true, false}};
  const ForwardResult mixed = model().forward(batch, &some, o, ParallelContext{});
  ASSERT_EQ(mixed.logits.size(), 3u);
  ASSERT_EQ(mixed.logits[1].view().size(0), 9);
  EXPECT_TRUE(same_bits(rows(mixed.logits[1], 0, 9), rows(every.logits[1], 0, 9)));
  for (size_t i : {size_t{0}, size_t{2}}) {
    ASSERT_EQ(mixed.logits[i].view().size(0), 1);
    EXPECT_TRUE(same_bits(rows(mixed.logits[i], 0, 1), rows(last.logits[i], 0, 1))) << "sequence " << i;
  }
  ForwardOptions wrong = o;
  wrong.all_logits = {true};
  EXPECT_THROW(model().forward(batch, &some, wrong, ParallelContext{}), Error);
}

TEST(PagedForward, RefusesATableTooShortAndPositionsPastTheContext) {
  const KVCache cache = make_cache();
  const std::vector<int32_t> s = tokens(9, 9);
  EXPECT_THROW(paged(cache, {{s, 0, {1, 2}}}), ShapeError);  // 9 positions need 3 blocks
  const std::vector<int32_t> one = {1};
  std::vector<int32_t> table(33);
  for (int i = 0; i < 33; ++i) table[static_cast<size_t>(i)] = i;
  EXPECT_THROW(paged(cache, {{one, 128, table}}), InputError);
}

}  // namespace
}  // namespace olmo2
