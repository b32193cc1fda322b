// A request's n > 1 choices in the scheduler (docs/architecture.md §8): the prompt is
// prefilled once, then each fork shares the full blocks before the prompt's last token
// (reference counts) and gets a copy of the block there when it is partial
// (copy-on-write: a BlockCopy in the next plan, applied before anything writes), and
// joins the running batch, within its limit, to compute the last prompt token itself
// with its own seed. Checked with and without
// prefix caching, and against a model of the pool (what each sequence would read).
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/serve/scheduler.h"
#include "tests/serve/scheduler_test_util.h"

namespace olmo2 {
namespace {

using test::Brief;
using test::brief;
using test::chosen;
using test::expect_accounting;
using test::PoolModel;
using test::seq;

/// Fork `id` with its own seed.
SchedSequence fork_of(int64_t id, uint64_t seed) {
  SchedSequence f;
  f.id = id;
  f.selection.params.seed = seed;
  return f;
}

class Forks : public ::testing::TestWithParam<bool> {
 protected:
  SchedulerOptions options(int64_t blocks = 32, int64_t budget = 64, int64_t running = 8) const {
    return {.num_blocks = blocks, .block_size = 4, .max_running = running, .max_batch_tokens = budget,
            .prefix_caching = GetParam()};
  }
};

TEST_P(Forks, ShareTheFullBlocksAndCopyThePartialOne) {
  Scheduler s(options());
  PoolModel pool(32, 4);
  s.add(seq(1, 10), {fork_of(2, 21), fork_of(3, 22)});
  ASSERT_NE(s.find(2), nullptr);
  EXPECT_EQ((std::tuple(s.find(2)->tokens, s.find(2)->computed, s.find(3)->prompt_len, s.waiting())),
            (std::tuple(s.find(1)->tokens, 0, 10, 1)));
  StepPlan p = s.schedule();  // the prompt, once
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(brief(p.sequences[0]), (Brief{1, 0, 10, 3, true, 0}));
  EXPECT_TRUE(p.copies.empty());
  const std::vector<int32_t> pb = p.sequences[0].blocks;
  ASSERT_EQ(pool.apply(p, s), 0);
  s.step_done(p, chosen({50}));
  // Made: positions 0…8 are shared — blocks 0 and 1 whole, block 2 copied (it holds
  // position 8 and the parent's 9 on).
  const SchedSequence *two = s.find(2), *three = s.find(3);
  ASSERT_TRUE(two && three);
  EXPECT_EQ((std::tuple(two->computed, two->blocks.size(), three->computed, s.waiting(), s.running())),
            (std::tuple(9, 3u, 9, 0, 3)));
  EXPECT_EQ(std::vector<int32_t>(two->blocks.begin(), two->blocks.begin() + 2), (std::vector<int32_t>{pb[0], pb[1]}));
  EXPECT_EQ(std::vector<int32_t>(three->blocks.begin(), three->blocks.begin() + 2), (std::vector<int32_t>{pb[0], pb[1]}));
  const int32_t x = two->blocks[2], y = three->blocks[2];
  EXPECT_TRUE(x != y && std::find(pb.begin(), pb.end(), x) == pb.end() && std::find(pb.begin(), pb.end(), y) == pb.end());
  EXPECT_EQ((std::tuple(s.blocks().refs(pb[0]), s.blocks().refs(pb[1]), s.blocks().refs(pb[2]), s.blocks().refs(x))),
            (std::tuple(3, 3, 1, 1)));
  expect_accounting(s, {1, 2, 3});
  p = s.schedule();
  EXPECT_EQ(p.copies, (std::vector<BlockCopy>{{pb[2], x}, {pb[2], y}}));
  ASSERT_EQ(p.sequences.size(), 3u);
  EXPECT_EQ(brief(p.sequences[0]), (Brief{1, 10, 1, 3, true, 1}));
  EXPECT_EQ(brief(p.sequences[1]), (Brief{2, 9, 1, 3, true, 0}));
  EXPECT_EQ(brief(p.sequences[2]), (Brief{3, 9, 1, 3, true, 0}));
  EXPECT_EQ(p.sequences[1].tokens, std::vector<int32_t>{109});
  EXPECT_EQ((std::tuple(p.sequences[0].selection.params.seed, p.sequences[1].selection.params.seed,
                        p.sequences[2].selection.params.seed)),
            (std::tuple(7u, 21u, 22u)));
  ASSERT_EQ(pool.apply(p, s), 0);
  s.step_done(p, chosen({51, 60, 70}));
  EXPECT_EQ(s.find(2)->tokens.back(), 60);
  EXPECT_EQ(s.find(3)->tokens.size(), 11u);
  for (int step = 0; step < 4; ++step) {  // each writes its own block 2, then a block 3
    p = s.schedule();
    EXPECT_TRUE(p.copies.empty());
    ASSERT_EQ(p.sequences.size(), 3u);
    ASSERT_EQ(pool.apply(p, s), 0) << step;
    s.step_done(p, chosen({52, 61, 71}));
    expect_accounting(s, {1, 2, 3});
  }
  ASSERT_TRUE(s.remove(1));
  EXPECT_EQ(s.blocks().refs(pb[0]), 2);
  ASSERT_TRUE(s.remove(2) && s.remove(3));
  EXPECT_EQ(s.free_blocks(), 32);
}

TEST_P(Forks, NoCopyWhenTheSharedPositionsFillWholeBlocks) {
  Scheduler s(options());
  s.add(seq(1, 9), {fork_of(2, 21)});
  StepPlan p = s.schedule();
  const std::vector<int32_t> pb = p.sequences[0].blocks;
  s.step_done(p, chosen({50}));
  const SchedSequence* two = s.find(2);
  EXPECT_EQ((std::tuple(two->computed, two->blocks[0], two->blocks[1])), (std::tuple(8, pb[0], pb[1])));
  EXPECT_NE(two->blocks[2], pb[2]);
  p = s.schedule();
  EXPECT_TRUE(p.copies.empty());
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(brief(p.sequences[1]), (Brief{2, 8, 1, 3, true, 0}));
  EXPECT_EQ(p.sequences[1].tokens, std::vector<int32_t>{108});
}

TEST_P(Forks, AOneTokenPromptHasNothingToShare) {
  Scheduler s(options());
  s.add(seq(1, 1), {fork_of(2, 21), fork_of(3, 22)});
  EXPECT_EQ(s.waiting(), 3);
  const StepPlan p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(brief(p.sequences[i]), (Brief{static_cast<int64_t>(i) + 1, 0, 1, 1, true, 0}));
  }
  EXPECT_EQ(p.sequences[2].selection.params.seed, 22u);
}

TEST_P(Forks, WaitForTheChunkedPrefillToReachTheLastPromptToken) {
  // A budget of 3: chunks 0–2, 3–5, 6–8 of the prompt; then the last token (9), sampled
  // by the parent and both forks in one step.
  Scheduler s(options(32, 3, 3));
  PoolModel pool(32, 4);
  s.add(seq(1, 10), {fork_of(2, 21), fork_of(3, 22)});
  for (int chunk = 0; chunk < 3; ++chunk) {
    const StepPlan p = s.schedule();
    ASSERT_EQ(p.sequences.size(), 1u);
    EXPECT_EQ(brief(p.sequences[0]), (Brief{1, 3 * chunk, 3, static_cast<size_t>(blocks_for(3 * chunk + 3, 4)), false, 0}));
    ASSERT_EQ(pool.apply(p, s), 0);
    s.step_done(p, chosen({}));
    EXPECT_EQ(s.running(), chunk < 2 ? 1 : 3) << chunk;
    EXPECT_EQ(s.find(2)->computed, chunk < 2 ? 0 : 9);
  }
  const StepPlan p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 3u);
  EXPECT_EQ(p.copies.size(), 2u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(brief(p.sequences[i]), (Brief{static_cast<int64_t>(i) + 1, 9, 1, 3, true, 0}));
  }
  ASSERT_EQ(pool.apply(p, s), 0);
}

TEST_P(Forks, AParentThatLeavesEarly) {
  // Cancelled before its prompt is computed: the forks queue on their own.
  {
    Scheduler s(options(32, 4, 4));
    s.add(seq(1, 10), {fork_of(2, 21), fork_of(3, 22)});
    StepPlan p = s.schedule();
    s.step_done(p, chosen({}));  // 4 of 10 positions
    ASSERT_TRUE(s.remove(1));
    EXPECT_EQ((std::tuple(s.waiting(), s.find(2)->computed, s.find(2)->blocks.size())), (std::tuple(2, 0, 0u)));
    p = s.schedule();
    ASSERT_EQ(p.sequences.size(), 1u);
    // With caching the first block, computed by the parent, is found.
    EXPECT_EQ(brief(p.sequences[0]), (Brief{2, GetParam() ? 4 : 0, 4, GetParam() ? 2u : 1u, false, 0}));
  }
  // Done after its first token (max_tokens 1): the forks were made in that step; the
  // parent's blocks go, and the block it gave for copying is handed out again at once —
  // the copies come first, so the forks still read the parent's keys.
  Scheduler s(options(8));
  PoolModel pool(8, 4);
  s.add(seq(1, 6), {fork_of(2, 21)});
  StepPlan p = s.schedule();
  const std::vector<int32_t> pb = p.sequences[0].blocks;
  ASSERT_EQ(pool.apply(p, s), 0);
  s.step_done(p, chosen({50}));
  ASSERT_TRUE(s.remove(1));
  s.add(seq(9, 8, 500));
  p = s.schedule();
  EXPECT_EQ(p.copies, (std::vector<BlockCopy>{{pb[1], s.find(2)->blocks[1]}}));
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(brief(p.sequences[0]), (Brief{2, 5, 1, 2, true, 0}));
  EXPECT_TRUE(std::find(p.sequences[1].blocks.begin(), p.sequences[1].blocks.end(), pb[1]) !=
              p.sequences[1].blocks.end())
      << "the parent's last block went to sequence 9";
  ASSERT_EQ(pool.apply(p, s), 0);
}

TEST_P(Forks, WaitForAFreeBlock) {
  // 3 blocks: parents 1 and 3 take one each; in the step that computes their prompts,
  // the fork of 1 takes the last free block and the fork of 3 waits for one.
  Scheduler s(options(3));
  PoolModel pool(3, 4);
  s.add(seq(1, 3), {fork_of(2, 21)});
  s.add(seq(3, 3, 300), {fork_of(4, 41)});
  StepPlan p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 2u);
  ASSERT_EQ(pool.apply(p, s), 0);
  s.step_done(p, chosen({50, 51}));
  EXPECT_EQ((std::tuple(s.find(2)->computed, s.find(4)->computed, s.free_blocks())), (std::tuple(2, 0, 0)));
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 3u);  // 1, 3 decode; 2 computes position 2
  ASSERT_EQ(pool.apply(p, s), 0);
  s.step_done(p, chosen({52, 53, 60}));
  EXPECT_EQ(s.find(4)->computed, 0);
  ASSERT_TRUE(s.remove(1) && s.remove(2));
  p = s.schedule();  // 3 decodes into a new block; its fork is made after this step
  ASSERT_EQ(p.sequences.size(), 1u);
  ASSERT_EQ(pool.apply(p, s), 0);
  s.step_done(p, chosen({54}));
  EXPECT_EQ(s.find(4)->computed, 2);
  p = s.schedule();
  ASSERT_EQ(p.copies.size(), 1u);
  EXPECT_EQ(p.copies[0].src, s.find(3)->blocks[0]);
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(brief(p.sequences[1]), (Brief{4, 2, 1, 1, true, 0}));
  ASSERT_EQ(pool.apply(p, s), 0);
  s.step_done(p, chosen({55, 61}));
  expect_accounting(s, {3, 4});
}

TEST_P(Forks, KeepTheRunningLimit) {
  Scheduler s(options(32, 64, 2));
  s.add(seq(1, 10), {fork_of(2, 21), fork_of(3, 22)});
  StepPlan p = s.schedule();
  s.step_done(p, chosen({50}));
  EXPECT_EQ((std::tuple(s.running(), s.find(2)->computed, s.find(3)->computed)), (std::tuple(2, 9, 0)));
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 2u);
  s.step_done(p, chosen({51, 60}));
  ASSERT_TRUE(s.remove(2));  // its one token was all it wanted
  p = s.schedule();
  s.step_done(p, chosen({52}));
  EXPECT_EQ((std::tuple(s.running(), s.find(3)->computed)), (std::tuple(2, 9)));
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(brief(p.sequences[1]), (Brief{3, 9, 1, 3, true, 0}));
  EXPECT_EQ(p.copies.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(CachingOnAndOff, Forks, ::testing::Bool());

}  // namespace
}  // namespace olmo2
