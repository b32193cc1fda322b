// Prefix caching keyed on interventions (docs/architecture.md §13): a salt in the first
// block's key keeps sequences with different steering from sharing KV blocks, equal
// salts share as before, salt 0 is the unsteered cache; InterventionSalts interns the
// exact interventions as salts.
#include <gtest/gtest.h>

#include <tuple>

#include "runtime/serve/intervention_salts.h"
#include "runtime/serve/prefix_cache.h"
#include "runtime/serve/scheduler.h"
#include "tests/serve/scheduler_test_util.h"

namespace olmo2 {
namespace {

using test::Brief;
using test::brief;
using test::expect_accounting;
using test::seq;

TEST(PrefixSalt, KeysDifferingOnlyInTheSaltAreDifferentKeys) {
  PrefixCache c(4);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const CachedBlock first = c.insert(0, BlockKey{CachedBlock{}, tokens, 5});
  EXPECT_FALSE(c.find(BlockKey{CachedBlock{}, tokens}).has_value());
  EXPECT_FALSE(c.find(BlockKey{CachedBlock{}, tokens, 6}).has_value());
  ASSERT_TRUE(c.find(BlockKey{CachedBlock{}, tokens, 5}).has_value());
  EXPECT_EQ(*c.find(BlockKey{CachedBlock{}, tokens, 5}), first);
  // The same tokens unsalted go to another block; a chained key inherits the salt
  // through its parent.
  const CachedBlock plain = c.insert(1, BlockKey{CachedBlock{}, tokens});
  EXPECT_EQ(plain.block, 1);
  c.insert(2, BlockKey{first, {5, 6, 7, 8}});
  EXPECT_EQ(c.find(BlockKey{first, {5, 6, 7, 8}})->block, 2);
  EXPECT_FALSE(c.find(BlockKey{plain, {5, 6, 7, 8}}).has_value());
  EXPECT_EQ(BlockKeyHash{}(BlockKey{plain, tokens}), BlockKeyHash{}(BlockKey{plain, tokens, 0}));
}

/// Runs a plan, sampling token 1000, 1001, … for its sampled sequences.
void run(Scheduler& s, const StepPlan& p, int32_t& next) {
  std::vector<SelectedToken> out;
  for (int64_t i = 0; i < p.sampled(); ++i) out.push_back({next++, 0.0f, {}});
  s.step_done(p, out);
}

SchedSequence salted(int64_t id, uint64_t salt) {
  SchedSequence q = seq(id, 10);  // the same ten-token prompt: two full blocks of 4 to share
  q.cache_salt = salt;
  return q;
}

TEST(PrefixSalt, SequencesShareBlocksOnlyWithEqualSalts) {
  Scheduler s({.num_blocks = 32, .block_size = 4, .max_running = 8, .max_batch_tokens = 64});
  int32_t next = 1000;
  s.add(salted(1, 0));
  s.add(salted(2, 1));
  StepPlan p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(brief(p.sequences[1]), (Brief{2, 0, 10, 3, true, 0})) << "another salt: nothing from the cache";
  const std::vector<int32_t> unsalted = p.sequences[0].blocks, steered = p.sequences[1].blocks;
  run(s, p, next);
  s.add(salted(3, 1));
  s.add(salted(4, 0));
  s.add(salted(5, 2));
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 5u);
  EXPECT_EQ(brief(p.sequences[2]), (Brief{3, 8, 2, 3, true, 0}));
  EXPECT_EQ(brief(p.sequences[3]), (Brief{4, 8, 2, 3, true, 0}));
  EXPECT_EQ(brief(p.sequences[4]), (Brief{5, 0, 10, 3, true, 0}));
  for (size_t b : {0, 1}) {
    EXPECT_EQ(p.sequences[2].blocks[b], steered[b]) << "equal salts share block " << b;
    EXPECT_EQ(p.sequences[3].blocks[b], unsalted[b]) << "salt 0 shares with salt 0, block " << b;
  }
  for (size_t i : {0, 1, 2, 3}) {
    for (int32_t b : p.sequences[4].blocks) {
      EXPECT_EQ(std::count(p.sequences[i].blocks.begin(), p.sequences[i].blocks.end(), b), 0)
          << "salt 2 shares no block with sequence " << p.sequences[i].seq_id;
    }
  }
  for (int32_t b : steered) {
    EXPECT_EQ(std::count(unsalted.begin(), unsalted.end(), b), 0) << "salts 0 and 1 share block " << b;
  }
  EXPECT_EQ(s.prefix_cache_hits(), 8 + 8);
  expect_accounting(s, {1, 2, 3, 4, 5});
}

TEST(PrefixSalt, SteeredBlocksAreInvisibleToUnsteeredSequences) {
  // An unsteered load plans the same (positions taken from the cache, chunks, table
  // lengths, hits) whether or not a steered sequence of the same prompts ran before it.
  const auto load = [](bool steered_first) {
    Scheduler s({.num_blocks = 64, .block_size = 4, .max_running = 8, .max_batch_tokens = 16});
    int32_t next = 1000;
    if (steered_first) {
      s.add(salted(99, 1));
      for (int step = 0; step < 2; ++step) run(s, s.schedule(), next);
      EXPECT_TRUE(s.remove(99));
    }
    const int64_t hits_before = s.prefix_cache_hits();
    std::vector<Brief> briefs;
    for (int64_t id = 1; id <= 3; ++id) {
      s.add(salted(id, 0));
      for (int step = 0; step < 2; ++step) {
        const StepPlan p = s.schedule();
        for (const PlannedSequence& q : p.sequences) briefs.push_back(brief(q));
        run(s, p, next);
      }
    }
    return std::tuple(briefs, s.prefix_cache_hits() - hits_before);
  };
  const auto plain = load(false);
  EXPECT_EQ(load(true), plain);
  EXPECT_EQ(std::get<1>(plain), 8 + 8) << "the second and third share the first's two blocks";
}

TEST(PrefixSalt, ForksTakeTheirParentsSalt) {
  Scheduler s({.num_blocks = 32, .block_size = 4, .max_running = 8, .max_batch_tokens = 64});
  SchedSequence fork = seq(2, 10);
  fork.cache_salt = 0;
  s.add(salted(1, 7), {fork});
  ASSERT_NE(s.find(1), nullptr);
  int32_t next = 1000;
  run(s, s.schedule(), next);
  const SchedSequence* made = s.find(2);
  ASSERT_NE(made, nullptr);
  EXPECT_EQ(made->cache_salt, 7u);
}

TEST(InterventionSalts, EqualInterventionsShareAnIdDifferentOnesNever) {
  InterventionSalts salts;
  trace::TraceSpec none, reads_only, a, a_again, b;
  reads_only.reads.resize(1);
  reads_only.reads[0].name = "logits", reads_only.reads[0].site = TapSite::LmHeadOutput;
  trace::Intervention add;
  add.layers = {1};
  add.vector = {1.0f, 2.0f};
  a.interventions = {add};
  a_again = a;
  a_again.prompt_len = 9;  // not part of the interventions
  a_again.reads = reads_only.reads;
  add.vector[1] = std::nextafter(2.0f, 3.0f);  // one bit apart
  b.interventions = {add};
  EXPECT_EQ(salts.salt_of(none), 0u);
  EXPECT_EQ(salts.salt_of(reads_only), 0u);
  EXPECT_EQ(salts.salt_of(a), 1u);
  EXPECT_EQ(salts.salt_of(b), 2u);
  EXPECT_EQ(salts.salt_of(a_again), 1u);
  EXPECT_EQ(salts.size(), 2);
  EXPECT_EQ(salts.bytes(), static_cast<int64_t>(a.intervention_key().size() + b.intervention_key().size()));
}

TEST(InterventionSalts, PastTheByteLimitKeysAreForgottenButIdsNeverReused) {
  trace::TraceSpec a, b;
  trace::Intervention add;
  add.layers = {0};
  add.vector = {1.0f};
  a.interventions = {add};
  add.vector = {2.0f};
  b.interventions = {add};
  const int64_t one = static_cast<int64_t>(a.intervention_key().size());
  InterventionSalts salts(one);  // room for one key
  EXPECT_EQ(salts.salt_of(a), 1u);
  EXPECT_EQ(salts.salt_of(a), 1u);
  EXPECT_EQ(salts.salt_of(b), 2u);
  EXPECT_EQ(salts.size(), 1);
  EXPECT_EQ(salts.salt_of(a), 3u) << "forgotten: a new id, never an old one";
  EXPECT_THROW(InterventionSalts(0), InputError);
}

}  // namespace
}  // namespace olmo2
