// Automatic prefix caching (docs/architecture.md §8): the chained block keys, the block
// allocator's reference counts and least-recently-used eviction, and the scheduler's
// reuse of cached prefixes — the longest cached prefix but never the last token's block,
// reference counts under sharing and pre-emption, cached-but-free blocks counted as free,
// the query and hit counts — and a random load whose every read position is checked
// against a model of the pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>

#include "runtime/serve/block_allocator.h"
#include "runtime/serve/prefix_cache.h"
#include "runtime/serve/scheduler.h"
#include "tests/serve/scheduler_test_util.h"

namespace olmo2 {
namespace {

using test::Brief;
using test::brief;
using test::chosen;
using test::expect_accounting;
using test::seq;

TEST(PrefixCache, MatchesWholeChainedKeysOnly) {
  PrefixCache c(8);
  const BlockKey k0{{}, {1, 2, 3, 4}};
  EXPECT_EQ(c.insert(3, k0), (CachedBlock{3, 0}));
  EXPECT_EQ(c.find(k0), (CachedBlock{3, 0}));
  EXPECT_EQ(c.find(BlockKey{{}, {1, 2, 3, 5}}), std::nullopt);
  // The same tokens after another prefix are another key.
  const BlockKey k1{{3, 0}, {5, 6, 7, 8}}, other{{}, {5, 6, 7, 8}};
  EXPECT_EQ(c.insert(5, k1), (CachedBlock{5, 0}));
  EXPECT_EQ(c.find(other), std::nullopt);
  EXPECT_EQ(c.insert(6, other), (CachedBlock{6, 0}));
  EXPECT_EQ(c.find(k1), (CachedBlock{5, 0}));
  EXPECT_EQ(c.find(BlockKey{{3, 1}, {5, 6, 7, 8}}), std::nullopt) << "another generation of block 3";
  // The same contents twice: the first block stays the cached one.
  EXPECT_EQ(c.insert(7, k0), (CachedBlock{3, 0}));
  EXPECT_FALSE(c.contains(7));
  EXPECT_EQ(c.insert(3, k0), (CachedBlock{3, 0})) << "again under its own key";
  EXPECT_THROW(c.insert(3, other), Error);
  EXPECT_THROW(c.insert(8, BlockKey{{}, {9}}), Error);
  EXPECT_EQ(c.size(), 3);
  // Evicted: block 3's generation moves on, so its old children can never match again
  // once it holds something else.
  c.erase(3);
  EXPECT_FALSE(c.contains(3));
  EXPECT_EQ(c.find(k0), std::nullopt);
  EXPECT_EQ(c.insert(3, BlockKey{{}, {9, 9, 9, 9}}), (CachedBlock{3, 1}));
  EXPECT_EQ(c.find(BlockKey{{3, 1}, {5, 6, 7, 8}}), std::nullopt);
  EXPECT_EQ(c.find(k1), (CachedBlock{5, 0})) << "a dead entry, unreachable through the new block 3";
  c.erase(2);  // not cached: nothing happens
  EXPECT_EQ(c.size(), 3);
  // The hash covers the parent's generation and every token.
  const BlockKeyHash h;
  EXPECT_NE(h(BlockKey{{3, 0}, {5, 6, 7, 8}}), h(BlockKey{{3, 1}, {5, 6, 7, 8}}));
  EXPECT_NE(h(BlockKey{{3, 0}, {5, 6, 7, 8}}), h(BlockKey{{3, 0}, {5, 6, 8, 7}}));
}

TEST(BlockAllocator, ReferenceCountsAndLeastRecentlyUsedEviction) {
  BlockAllocator a(4);
  std::vector<int32_t> t;
  ASSERT_TRUE(a.allocate(2, t));
  const BlockKey k0{{}, {1, 2}}, k1{{t[0], 0}, {3, 4}};
  a.cache().insert(t[0], k0);
  a.cache().insert(t[1], k1);
  a.share(t[0]);
  EXPECT_EQ((std::tuple(a.refs(t[0]), a.refs(t[1]), a.free_count())), (std::tuple(2, 1, 2)));
  std::vector<int32_t> one = {t[0]};
  a.release(one);
  EXPECT_EQ(a.refs(t[0]), 1);
  std::vector<int32_t> held = t;
  a.release(held);  // last block first: t[1] is the least recently released
  EXPECT_EQ((std::tuple(a.free_count(), a.cached_free_count(), a.cache().size())), (std::tuple(4, 2, 2)));
  // Never-cached free blocks go first; then the least recently released cached one.
  std::vector<int32_t> u;
  ASSERT_TRUE(a.allocate(2, u));
  EXPECT_TRUE(std::find(u.begin(), u.end(), t[0]) == u.end() && std::find(u.begin(), u.end(), t[1]) == u.end());
  EXPECT_EQ(a.cache().size(), 2);
  std::vector<int32_t> w;
  ASSERT_TRUE(a.allocate(1, w));
  EXPECT_EQ(w, std::vector<int32_t>{t[1]});
  EXPECT_FALSE(a.cache().contains(t[1]));
  EXPECT_EQ(a.cache().find(k1), std::nullopt);
  EXPECT_EQ(a.cache().find(k0), (CachedBlock{t[0], 0}));
  // A hit revives a cached free block: it is no longer free.
  a.share(t[0]);
  EXPECT_EQ((std::tuple(a.refs(t[0]), a.free_count(), a.cached_free_count())), (std::tuple(1, 0, 0)));
  std::vector<int32_t> none;
  EXPECT_FALSE(a.allocate(1, none));
  EXPECT_TRUE(none.empty());
  a.release(u);
  EXPECT_THROW(a.share(u[0]), Error) << "neither held nor cached";
  std::vector<int32_t> twice = {w[0], w[0]};
  EXPECT_THROW(a.release(twice), Error);
  std::vector<int32_t> outside = {4};
  EXPECT_THROW(a.release(outside), Error);
  EXPECT_EQ(a.refs(w[0]), 1) << "a bad table changes nothing";
}

/// Runs every planned sequence's chunk (sampling token `next`, then next+1, …).
void run(Scheduler& s, const StepPlan& p, int32_t& next) {
  std::vector<SelectedToken> out;
  for (int64_t i = 0; i < p.sampled(); ++i) out.push_back({next++, 0.0f, {}});
  s.step_done(p, out);
}

/// The prompt 100, 101, …, 100+from−1, then the tokens `tail`.
SchedSequence with_tail(int64_t id, int from, std::vector<int32_t> tail) {
  SchedSequence s = seq(id, from);
  s.tokens.insert(s.tokens.end(), tail.begin(), tail.end());
  s.prompt_len = static_cast<int64_t>(s.tokens.size());
  return s;
}

TEST(PrefixCaching, ReusesTheLongestCachedPrefixButNeverTheLastToken) {
  Scheduler s({.num_blocks = 32, .block_size = 4, .max_running = 8, .max_batch_tokens = 64});
  int32_t next = 1000;
  s.add(seq(1, 10));
  StepPlan p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 1u);
  const std::vector<int32_t> a = p.sequences[0].blocks;
  run(s, p, next);  // 10 positions: blocks a[0], a[1] are full and cached
  EXPECT_EQ((std::tuple(s.prefix_cache_queries(), s.prefix_cache_hits())), (std::tuple(10, 0)));
  s.add(with_tail(2, 8, {200, 201, 202}));  // the first 8 tokens, then others
  s.add(seq(3, 8));                             // exactly the first 8: one block, not two
  s.add(with_tail(4, 4, {999, 105, 106, 107, 108}));  // the first block only
  SchedSequence five = seq(5, 9);  // another first token: nothing, though block 2's tokens match
  five.tokens[0] = 555;
  s.add(five);
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 5u);
  EXPECT_EQ(brief(p.sequences[1]), (Brief{2, 8, 3, 3, true, 0}));
  EXPECT_EQ(brief(p.sequences[2]), (Brief{3, 4, 4, 2, true, 0}));
  EXPECT_EQ(p.sequences[2].tokens, (std::vector<int32_t>{104, 105, 106, 107}));
  EXPECT_EQ(brief(p.sequences[3]), (Brief{4, 4, 5, 3, true, 0}));
  EXPECT_EQ(brief(p.sequences[4]), (Brief{5, 0, 9, 3, true, 0}));
  for (size_t i : {1, 2, 3}) EXPECT_EQ(p.sequences[i].blocks[0], a[0]) << i;
  EXPECT_EQ(p.sequences[1].blocks[1], a[1]);
  EXPECT_EQ(p.sequences[2].blocks[1], p.sequences[2].blocks.back());
  EXPECT_NE(p.sequences[2].blocks[1], a[1]) << "the last token's block is computed";
  EXPECT_EQ((std::tuple(s.blocks().refs(a[0]), s.blocks().refs(a[1]), s.blocks().refs(a[2]))), (std::tuple(4, 2, 1)));
  EXPECT_EQ(s.prefix_cache_queries(), 10 + 11 + 8 + 9 + 9);
  EXPECT_EQ(s.prefix_cache_hits(), 8 + 4 + 4);
  expect_accounting(s, {1, 2, 3, 4, 5});
  run(s, p, next);
  for (int64_t id = 1; id <= 5; ++id) ASSERT_TRUE(s.remove(id));
  EXPECT_EQ((std::tuple(s.free_blocks(), s.kv_usage())), (std::tuple(32, 0.0)));
  EXPECT_GT(s.blocks().cached_free_count(), 0);
  // Caching off: nothing is looked up or counted.
  Scheduler off({.num_blocks = 32, .block_size = 4, .max_running = 8, .max_batch_tokens = 64, .prefix_caching = false});
  for (int64_t id : {1, 2}) {
    off.add(seq(id, 10));
    const StepPlan q = off.schedule();
    EXPECT_EQ(brief(q.sequences.back()), (Brief{id, 0, 10, 3, true, 0}));
    run(off, q, next);
  }
  EXPECT_EQ((std::tuple(off.prefix_cache_queries(), off.prefix_cache_hits(), off.blocks().cache().size())),
            (std::tuple(0, 0, 0)));
}

TEST(PrefixCaching, ASequenceThatMustNotReadTheCacheComputesEverythingAndFillsIt) {
  Scheduler s({.num_blocks = 32, .block_size = 4, .max_running = 8, .max_batch_tokens = 64});
  int32_t next = 1000;
  s.add(seq(1, 10));
  run(s, s.schedule(), next);
  SchedSequence scoring = seq(2, 10);  // the same prompt, to be scored: every position computed
  scoring.read_cache = false;
  s.add(scoring);
  StepPlan p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(brief(p.sequences[1]), (Brief{2, 0, 10, 3, true, 0}));
  EXPECT_EQ((std::tuple(s.prefix_cache_queries(), s.prefix_cache_hits())), (std::tuple(10, 0)));
  run(s, p, next);
  // Its own new blocks do enter the cache.
  SchedSequence other = seq(3, 10, 300);
  other.read_cache = false;
  s.add(other);
  run(s, s.schedule(), next);
  s.add(seq(4, 11, 300));
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 4u);
  EXPECT_EQ(brief(p.sequences[3]), (Brief{4, 8, 3, 3, true, 0}));
}

TEST(PrefixCaching, FreeCachedBlocksAreEvictedLeastRecentlyUsedFirst) {
  Scheduler s({.num_blocks = 6, .block_size = 4, .max_running = 4, .max_batch_tokens = 32});
  int32_t next = 1000;
  auto run_alone = [&](SchedSequence q) {  // prefill, sample once, finish
    const int64_t id = q.id;
    s.add(std::move(q));
    const StepPlan p = s.schedule();
    EXPECT_EQ(p.sequences.size(), 1u);
    const Brief b = brief(p.sequences[0]);
    run(s, p, next);
    EXPECT_TRUE(s.remove(id));
    return b;
  };
  EXPECT_EQ(run_alone(seq(1, 9, 100)), (Brief{1, 0, 9, 3, true, 0}));  // A: 2 full blocks cached
  EXPECT_EQ(run_alone(seq(2, 9, 300)), (Brief{2, 0, 9, 3, true, 0}));  // B: 2 more
  EXPECT_EQ((std::tuple(s.free_blocks(), s.blocks().cached_free_count(), s.kv_usage())), (std::tuple(6, 4, 0.0)));
  EXPECT_EQ(run_alone(seq(3, 9, 100)), (Brief{3, 8, 1, 3, true, 0}));  // A again: used last now
  // 17 positions need 5 blocks: the 2 never cached, then B's (least recently used),
  // then A's second block — its tail, released before its head.
  EXPECT_EQ(run_alone(seq(4, 17, 500)), (Brief{4, 0, 17, 5, true, 0}));
  EXPECT_EQ(run_alone(seq(5, 9, 300)), (Brief{5, 0, 9, 3, true, 0})) << "B was evicted";
  EXPECT_EQ(run_alone(seq(6, 9, 100)), (Brief{6, 0, 9, 3, true, 0})) << "A's head went for B";
  EXPECT_EQ(s.prefix_cache_hits(), 8);
  EXPECT_EQ(s.free_blocks(), 6);
}

TEST(PrefixCaching, EvictionOrderFollowsTheLastUse) {
  Scheduler s({.num_blocks = 6, .block_size = 4, .max_running = 4, .max_batch_tokens = 32});
  int32_t next = 1000;
  for (int64_t id : {1, 2}) {
    s.add(seq(id, 9, id == 1 ? 100 : 300));
    const StepPlan p = s.schedule();
    run(s, p, next);
    ASSERT_TRUE(s.remove(id));
  }
  // A (100…) was used before B (300…): a 13-position prompt takes the 2 never-cached
  // blocks and evicts A's 2 blocks, keeping B's.
  s.add(seq(3, 13, 700));
  StepPlan p = s.schedule();
  run(s, p, next);
  ASSERT_TRUE(s.remove(3));
  s.add(seq(4, 9, 300));
  p = s.schedule();
  EXPECT_EQ(brief(p.sequences[0]), (Brief{4, 8, 1, 3, true, 0}));
  run(s, p, next);
  ASSERT_TRUE(s.remove(4));
  s.add(seq(5, 9, 100));
  p = s.schedule();
  EXPECT_EQ(brief(p.sequences[0]), (Brief{5, 0, 9, 3, true, 0}));
}

TEST(PrefixCaching, KvUsageAndTheWatermarkCountCachedBlocksAsFree) {
  // 200 blocks: the watermark keeps 2 for running decodes.
  Scheduler s({.num_blocks = 200, .block_size = 4, .max_running = 4, .max_batch_tokens = 800});
  int32_t next = 1000;
  s.add(seq(1, 796));  // 199 blocks, all full but the last sampled position's
  StepPlan p = s.schedule();
  run(s, p, next);
  EXPECT_NEAR(s.kv_usage(), 199.0 / 200.0, 1e-12);
  ASSERT_TRUE(s.remove(1));
  EXPECT_EQ((std::tuple(s.free_blocks(), s.blocks().cached_free_count(), s.kv_usage())), (std::tuple(200, 199, 0.0)));
  s.add(seq(2, 1, 5000));  // running: one block (its next three positions fit in it)
  p = s.schedule();
  run(s, p, next);
  // 199 free (all cached), less the watermark of 2: a 198-block prompt does not fit…
  s.add(seq(3, 198 * 4, 6000));
  p = s.schedule();
  EXPECT_EQ(p.sequences.size(), 1u);
  run(s, p, next);
  ASSERT_TRUE(s.remove(3));
  // … a 197-block one does, evicting cached blocks.
  s.add(seq(4, 197 * 4, 7000));
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(brief(p.sequences[1]), (Brief{4, 0, 788, 197, true, 0}));
  EXPECT_NEAR(s.kv_usage(), 198.0 / 200.0, 1e-12);
  EXPECT_EQ(s.blocks().cached_free_count(), 2);
}

TEST(PrefixCaching, PreemptionReleasesOnlyItsOwnReferences) {
  // 5 blocks of 4. Sequences 1 and 2 share the cached prompt's 2 full blocks.
  Scheduler s({.num_blocks = 5, .block_size = 4, .max_running = 4, .max_batch_tokens = 16});
  int32_t next = 1000;
  s.add(seq(1, 8));
  StepPlan p = s.schedule();
  const std::vector<int32_t> a = p.sequences[0].blocks;
  run(s, p, next);  // position 8 (its first decode) needs a third block
  s.add(with_tail(2, 8, {300}));
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(brief(p.sequences[1]), (Brief{2, 8, 1, 3, true, 0}));
  run(s, p, next);
  EXPECT_EQ((std::tuple(s.blocks().refs(a[0]), s.blocks().refs(a[1]), s.free_blocks())), (std::tuple(2, 2, 1)));
  expect_accounting(s, {1, 2});
  // Decodes until sequence 1 needs a block and none is free: sequence 2, the newest, is
  // pre-empted; the shared blocks stay with sequence 1.
  while (s.preemptions() == 0) {
    p = s.schedule();
    expect_accounting(s, {1, 2});
    run(s, p, next);
  }
  const SchedSequence* two = s.find(2);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ((std::tuple(two->computed, two->blocks.size(), s.waiting())), (std::tuple(0, 0u, 1)));
  EXPECT_EQ((std::tuple(s.blocks().refs(a[0]), s.blocks().refs(a[1]))), (std::tuple(1, 1)));
  const std::vector<int32_t> two_tokens = two->tokens;
  ASSERT_TRUE(s.remove(1));
  // Back in, it finds the prompt's blocks (and its own full ones) cached.
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 1u);
  const int64_t full = (static_cast<int64_t>(two_tokens.size()) - 1) / 4 * 4;
  EXPECT_EQ(p.sequences[0].start, full);
  EXPECT_GE(full, 8);
  EXPECT_EQ(p.sequences[0].blocks[0], a[0]);
  EXPECT_EQ(p.sequences[0].tokens, std::vector<int32_t>(two_tokens.begin() + full, two_tokens.end()));
  run(s, p, next);
  ASSERT_TRUE(s.remove(2));
  EXPECT_EQ(s.free_blocks(), 5);
}

/// Random load with shared prefixes and forks, with and without caching: every limit
/// holds, every sequence finishes, and every position a planned sequence reads holds its
/// own prefix (PoolModel).
class RandomSharing : public ::testing::TestWithParam<bool> {};

TEST_P(RandomSharing, EveryReadPositionHoldsTheSequencesOwnPrefix) {
  const SchedulerOptions o{.num_blocks = 9, .block_size = 4, .max_running = 4, .max_batch_tokens = 12,
                           .prefix_caching = GetParam()};
  Scheduler s(o);
  test::PoolModel pool(o.num_blocks, o.block_size);
  std::mt19937 rng(11);
  const std::vector<int32_t> system = {7, 7, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11};  // shared by many prompts
  std::vector<int64_t> live;
  std::map<int64_t, size_t> target;
  int64_t next_id = 0, finished = 0, added = 0, copies = 0;
  for (int step = 0; step < 2000 && (added < 60 || !live.empty()); ++step) {
    if (added < 60 && rng() % 2 == 0) {
      SchedSequence q;
      q.id = next_id++;
      const size_t shared = rng() % 2 ? rng() % (system.size() + 1) : 0;
      q.tokens.assign(system.begin(), system.begin() + static_cast<std::ptrdiff_t>(shared));
      for (int64_t i = 0, n = 1 + rng() % 6; i < n; ++i) q.tokens.push_back(static_cast<int32_t>(20 + rng() % 3));
      q.prompt_len = static_cast<int64_t>(q.tokens.size());
      std::vector<SchedSequence> forks(rng() % 3 == 0 ? 1 + rng() % 2 : 0);
      for (SchedSequence& f : forks) f.id = next_id++;
      const size_t len = q.tokens.size();
      live.push_back(q.id);
      target[q.id] = len + 1 + rng() % 6;
      for (const SchedSequence& f : forks) live.push_back(f.id), target[f.id] = len + 1 + rng() % 6;
      s.add(std::move(q), std::move(forks));
      ++added;
    }
    const StepPlan p = s.schedule();
    int64_t tokens = 0;
    for (const PlannedSequence& q : p.sequences) tokens += static_cast<int64_t>(q.tokens.size());
    ASSERT_LE(tokens, o.max_batch_tokens);
    ASSERT_LE(s.running(), o.max_running);
    ASSERT_EQ(pool.apply(p, s), 0) << "step " << step;
    copies += static_cast<int64_t>(p.copies.size());
    std::vector<SelectedToken> out;
    for (int64_t i = 0; i < p.sampled(); ++i) out.push_back({static_cast<int32_t>(30 + rng() % 2), 0.0f, {}});
    s.step_done(p, out);
    expect_accounting(s, live);
    for (auto it = live.begin(); it != live.end();) {
      const SchedSequence* q = s.find(*it);
      ASSERT_NE(q, nullptr) << "sequence " << *it << " dropped";
      if (q->tokens.size() >= target[*it]) {
        ASSERT_TRUE(s.remove(*it));
        ++finished;
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  }
  EXPECT_EQ(finished, next_id);
  for (int64_t id : live) {  // what is stuck, if anything
    const SchedSequence* q = s.find(id);
    ADD_FAILURE() << "sequence " << id << " unfinished: " << q->tokens.size() << " tokens, " << q->computed
                  << " computed, " << q->blocks.size() << " blocks, " << q->forks.size() << " forks waiting";
  }
  EXPECT_GT(s.preemptions(), 0);
  EXPECT_GT(copies, 0);
  std::printf("%lld sequences, %lld pre-emptions, %lld block copies, %lld of %lld tokens found cached\n",
              static_cast<long long>(next_id), static_cast<long long>(s.preemptions()), static_cast<long long>(copies),
              static_cast<long long>(s.prefix_cache_hits()), static_cast<long long>(s.prefix_cache_queries()));
  EXPECT_EQ(s.free_blocks(), o.num_blocks);
  if (GetParam()) {
    EXPECT_GT(s.prefix_cache_hits(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(CachingOnAndOff, RandomSharing, ::testing::Bool());

}  // namespace
}  // namespace olmo2
