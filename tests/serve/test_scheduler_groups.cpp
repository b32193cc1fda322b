// The scheduler with sliding KV groups (docs/architecture.md §8, "Sliding-window KV (KV
// groups)"): one id per group for every logical block; in sliding groups the blocks
// wholly before the window of the next position are released (−1) as a sequence grows,
// so it holds the window and no more; pre-emption, removal and a random load return
// every id; forks share each group's blocks (released ones stay −1) and copy each group's
// partial block; a prefix hit takes the full blocks and the sliding window before it,
// also under eviction (off when every layer slides); plans carry −1 entries; one group
// plans exactly as without groups; the capacity one sequence can always hold. A model
// of the pools checks that every read would see the right keys of the right group.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "runtime/serve/scheduler.h"
#include "tests/serve/group_pool_model.h"
#include "tests/serve/scheduler_test_util.h"

namespace olmo2 {
namespace {

using test::chosen;
using test::expect_group_accounting;
using test::GroupPoolModel;
using test::seq;

SchedulerOptions options(std::vector<int64_t> windows, int64_t blocks = 64, int64_t budget = 16,
                         int64_t running = 4) {
  return {.num_blocks = blocks, .block_size = 4, .max_running = running, .max_batch_tokens = budget,
          .prefix_caching = false, .group_windows = std::move(windows)};
}

/// Blocks a sequence with `computed` positions holds in a group of window w (0: full).
int64_t expected_held(int64_t computed, int64_t w) {
  if (w == 0) return blocks_for(computed, 4);
  return (computed - 1) / 4 - std::max<int64_t>(0, computed - w + 1) / 4 + 1;
}

/// One step of a random load: schedules, checks every read against `pool`, samples
/// token 5 for every sampled row, checks each group's accounting, and removes the live
/// sequences that reached their target length. Returns how many finished.
int64_t run_step(Scheduler& s, GroupPoolModel& pool, std::vector<int64_t>& live,
                 const std::map<int64_t, size_t>& target, int step) {
  const StepPlan p = s.schedule();
  EXPECT_EQ(pool.apply(p, s), 0) << "step " << step;
  s.step_done(p, std::vector<SelectedToken>(static_cast<size_t>(p.sampled()), SelectedToken{5, 0.0f, {}}));
  expect_group_accounting(s, live);
  int64_t finished = 0;
  for (auto it = live.begin(); it != live.end();) {
    const SchedSequence* q = s.find(*it);
    if (q == nullptr) {
      ADD_FAILURE() << "sequence " << *it << " dropped";
      it = live.erase(it);
    } else if (q->tokens.size() >= target.at(*it)) {
      EXPECT_TRUE(s.remove(*it));
      ++finished;
      it = live.erase(it);
    } else {
      ++it;
    }
  }
  return finished;
}

TEST(SchedulerGroups, ReleasesSlidingBlocksAsTheWindowPasses) {
  const std::vector<int64_t> windows = {0, 8, 8};
  Scheduler s(options(windows));
  GroupPoolModel pool(64, 4, windows);
  EXPECT_EQ(s.groups(), 3);
  s.add(seq(1, 30));
  StepPlan p = s.schedule();  // positions 0 … 15: 4 blocks in every group
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].blocks.size(), 12u);
  EXPECT_EQ(s.free_blocks(), 64 - 12);
  ASSERT_EQ(pool.apply(p, s), 0);
  s.step_done(p, std::vector<SelectedToken>{});
  // Next position 16: the window starts at 9, so blocks 0 and 1 (positions 0 … 7) go.
  const SchedSequence* q = s.find(1);
  EXPECT_EQ(q->blocks[4], -1);
  EXPECT_EQ(q->blocks[5], -1);
  EXPECT_GE(q->blocks[6], 0);
  EXPECT_EQ(q->blocks[8], -1);
  EXPECT_EQ(q->blocks[9], -1);
  EXPECT_EQ((std::vector<int64_t>{s.held_in_group(0), s.held_in_group(1), s.held_in_group(2)}),
            (std::vector<int64_t>{4, 2, 2}));
  EXPECT_EQ(s.free_blocks(), 64 - 8);
  p = s.schedule();  // positions 16 … 29, with the released entries still −1 in the plan
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].blocks.size(), 24u);
  EXPECT_EQ(p.sequences[0].blocks[8], -1);
  ASSERT_EQ(pool.apply(p, s), 0);
  s.step_done(p, chosen({7}));
  // Next position 30: the window starts at 23, blocks 0 … 4 are gone.
  EXPECT_EQ((std::vector<int64_t>{s.held_in_group(0), s.held_in_group(1), s.held_in_group(2)}),
            (std::vector<int64_t>{8, 3, 3}));
  expect_group_accounting(s, {1});
  for (int step = 0; step < 20; ++step) {  // decodes: a sliding group never holds more than the window
    p = s.schedule();
    ASSERT_EQ(pool.apply(p, s), 0);
    s.step_done(p, chosen({static_cast<int32_t>(step)}));
    const int64_t c = s.find(1)->computed;
    EXPECT_EQ(s.held_in_group(0), expected_held(c, 0)) << "at " << c;
    EXPECT_EQ(s.held_in_group(1), expected_held(c, 8)) << "at " << c;
    EXPECT_EQ(s.held_in_group(2), expected_held(c, 8)) << "at " << c;
    EXPECT_LE(s.held_in_group(1), 3);
    expect_group_accounting(s, {1});
  }
  EXPECT_DOUBLE_EQ(s.kv_usage(), 1.0 - static_cast<double>(s.free_blocks()) / 64);
  ASSERT_TRUE(s.remove(1));
  EXPECT_EQ(s.free_blocks(), 64);
}

TEST(SchedulerGroups, RandomLoadWithPreemptionReadsRightAndReturnsEveryBlock) {
  const std::vector<int64_t> windows = {0, 6, 6};  // a window that is not a multiple of the block
  const SchedulerOptions o = options(windows, 30, 10, 3);
  Scheduler s(o);
  GroupPoolModel pool(30, 4, windows);
  std::mt19937 rng(11);
  std::vector<int64_t> live;
  std::map<int64_t, size_t> target;
  int64_t next_id = 0, finished = 0;
  for (int step = 0; step < 600 && finished < 30; ++step) {
    if (next_id < 30 && rng() % 3 == 0) {
      s.add(seq(next_id, 1 + static_cast<int>(rng() % 20), static_cast<int32_t>(100 * next_id)));
      target[next_id] = s.find(next_id)->tokens.size() + 1 + rng() % 12;
      live.push_back(next_id++);
    }
    finished += run_step(s, pool, live, target, step);
    ASSERT_FALSE(HasFailure()) << "step " << step;
  }
  EXPECT_EQ(finished, 30);
  EXPECT_GT(s.preemptions(), 0);
  EXPECT_EQ(s.free_blocks(), o.num_blocks);
}

class GroupForks : public ::testing::TestWithParam<bool> {};  // prefix caching off, on

TEST_P(GroupForks, ShareEachGroupAndCopyEachGroupsPartialBlock) {
  const std::vector<int64_t> windows = {0, 4};
  SchedulerOptions o = options(windows, 40, 8, 4);
  o.prefix_caching = GetParam();
  Scheduler s(o);
  GroupPoolModel pool(40, 4, windows);
  SchedSequence f2, f3;
  f2.id = 2, f3.id = 3;
  s.add(seq(1, 15), {f2, f3});
  StepPlan p = s.schedule();  // positions 0 … 7
  ASSERT_EQ(pool.apply(p, s), 0);
  s.step_done(p, std::vector<SelectedToken>{});
  p = s.schedule();  // positions 8 … 14
  ASSERT_EQ(pool.apply(p, s), 0);
  s.step_done(p, chosen({9}));
  // The parent computed 15 positions, whose next window starts at 12, past block 2; but it
  // keeps the window of position 14 (from 11) for its forks: sliding blocks 0, 1 released.
  const SchedSequence *parent = s.find(1), *two = s.find(2), *three = s.find(3);
  ASSERT_TRUE(parent && two && three);
  const std::vector<int32_t> pb = parent->blocks;  // 4 logical blocks per group
  ASSERT_EQ(pb.size(), 8u);
  EXPECT_EQ((std::vector<int32_t>{pb[4], pb[5]}), (std::vector<int32_t>{-1, -1}));
  ASSERT_GE(pb[6], 0);
  for (const SchedSequence* f : {two, three}) {
    EXPECT_EQ(f->computed, 14);
    ASSERT_EQ(f->blocks.size(), 8u);
    for (int b = 0; b < 3; ++b) EXPECT_EQ(f->blocks[static_cast<size_t>(b)], pb[static_cast<size_t>(b)]);
    EXPECT_EQ(f->blocks[4], -1);  // released by the parent: stays released
    EXPECT_EQ(f->blocks[5], -1);
    EXPECT_EQ(f->blocks[6], pb[6]);  // shared
    EXPECT_NE(f->blocks[3], pb[3]);  // its own copies of the partial block, per group
    EXPECT_NE(f->blocks[7], pb[7]);
  }
  EXPECT_EQ(s.blocks().refs(pb[0]), 3);
  EXPECT_EQ(s.blocks().refs(pb[6]), 3);
  expect_group_accounting(s, {1, 2, 3});
  p = s.schedule();
  ASSERT_EQ(p.copies.size(), 4u);  // two forks × two groups
  EXPECT_EQ(p.copies[0], (BlockCopy{pb[3], two->blocks[3]}));
  EXPECT_EQ(p.copies[1], (BlockCopy{pb[7], two->blocks[7]}));
  for (int step = 0; step < 8; ++step) {
    ASSERT_EQ(pool.apply(p, s), 0) << "step " << step;
    std::vector<SelectedToken> out(static_cast<size_t>(p.sampled()), SelectedToken{static_cast<int32_t>(step), 0.0f, {}});
    s.step_done(p, out);
    expect_group_accounting(s, {1, 2, 3});
    p = s.schedule();
  }
  // Past the prompt every sequence dropped the shared sliding block 2.
  EXPECT_EQ(s.find(2)->blocks[6], -1);
  for (int64_t id : {1, 2, 3}) ASSERT_TRUE(s.remove(id));
  EXPECT_EQ(s.free_blocks(), 40);
}

INSTANTIATE_TEST_SUITE_P(CachingOffAndOn, GroupForks, ::testing::Bool());

TEST(SchedulerGroups, APrefixHitTakesTheFullBlocksAndTheSlidingWindowBeforeIt) {
  const std::vector<int64_t> windows = {0, 8};
  SchedulerOptions o = options(windows);
  o.prefix_caching = true;
  Scheduler s(o);
  GroupPoolModel pool(64, 4, windows);
  s.add(seq(1, 30));
  std::vector<int32_t> first;  // sequence 1's table as its second chunk ran: 8 blocks per group
  for (int step = 0; step < 4; ++step) {  // prefill in two chunks, two decodes
    const StepPlan p = s.schedule();
    ASSERT_EQ(pool.apply(p, s), 0);
    if (step == 1) first = p.sequences.at(0).blocks;
    s.step_done(p, std::vector<SelectedToken>(static_cast<size_t>(p.sampled()), SelectedToken{3, 0.0f, {}}));
  }
  ASSERT_EQ(first.size(), 16u);
  EXPECT_EQ(s.find(1)->blocks[8 + 5], -1);  // released since, but still cached
  ASSERT_TRUE(s.remove(1));  // everything free, the full blocks still cached
  EXPECT_EQ(s.free_blocks(), 64);
  SchedSequence two = seq(2, 27);  // the first 24 tokens as sequence 1's, then others
  for (int i = 24; i < 27; ++i) two.tokens[static_cast<size_t>(i)] = 7;
  s.add(two);
  const StepPlan p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].start, 24);
  const std::vector<int32_t>& b = p.sequences[0].blocks;  // 7 logical blocks per group
  ASSERT_EQ(b.size(), 14u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b[static_cast<size_t>(i)], first[static_cast<size_t>(i)]) << "full block " << i;
  // The window of position 24 starts at 17: sliding blocks 4 and 5 (positions 16 … 23).
  EXPECT_EQ((std::vector<int32_t>(b.begin() + 7, b.begin() + 13)),
            (std::vector<int32_t>{-1, -1, -1, -1, first[8 + 4], first[8 + 5]}));
  ASSERT_EQ(pool.apply(p, s), 0);
  EXPECT_EQ(s.prefix_cache_hits(), 24);
  EXPECT_EQ(s.prefix_cache_queries(), 30 + 27);
  expect_group_accounting(s, {2});
}

TEST(SchedulerGroups, PrefixHitsUnderEvictionReadTheirOwnKeysInEveryGroup) {
  // Shared prefixes, a pool small enough to evict: each group's cached blocks come and go
  // apart, and every hit must still read the right keys in every window.
  for (const std::vector<int64_t>& windows : std::vector<std::vector<int64_t>>{{0, 6, 6}, {0, 0, 9}}) {
    SchedulerOptions o = options(windows, 36, 10, 3);
    o.prefix_caching = true;
    Scheduler s(o);
    GroupPoolModel pool(36, 4, windows);
    std::mt19937 rng(17);
    std::vector<int64_t> live;
    std::map<int64_t, size_t> target;
    int64_t next_id = 0, finished = 0;
    for (int step = 0; step < 800 && finished < 40; ++step) {
      if (next_id < 40 && rng() % 3 == 0) {
        SchedSequence q = seq(next_id, 2 + static_cast<int>(rng() % 22), 100 + static_cast<int32_t>(rng() % 2));
        for (size_t i = 12 + rng() % 10; i < q.tokens.size(); ++i) q.tokens[i] = static_cast<int32_t>(rng() % 50);
        s.add(q);
        target[next_id] = s.find(next_id)->tokens.size() + 1 + rng() % 6;
        live.push_back(next_id++);
      }
      finished += run_step(s, pool, live, target, step);
      ASSERT_FALSE(HasFailure()) << "step " << step;
    }
    EXPECT_EQ(finished, 40);
    EXPECT_GT(s.prefix_cache_hits(), 0);
    EXPECT_EQ(s.free_blocks(), o.num_blocks);
  }
}

TEST(SchedulerGroups, NoPrefixCachingWhenEveryLayerSlides) {
  SchedulerOptions o = options({8});
  o.prefix_caching = true;
  EXPECT_FALSE(Scheduler(o).options().prefix_caching);
  o.group_windows = {0, 8};
  EXPECT_TRUE(Scheduler(o).options().prefix_caching);
  EXPECT_FALSE(Scheduler(options({0, 8})).options().prefix_caching);  // as asked
  o.group_windows = {-1};
  EXPECT_THROW(Scheduler{o}, InputError);
}

TEST(SchedulerGroups, OneGroupPlansExactlyAsWithoutGroups) {
  for (bool caching : {false, true}) {
    SchedulerOptions plain{.num_blocks = 14, .block_size = 4, .max_running = 3, .max_batch_tokens = 10,
                           .prefix_caching = caching};
    SchedulerOptions grouped = plain;
    grouped.group_windows = {0};
    Scheduler a(plain), b(grouped);
    std::mt19937 rng(3);
    std::vector<int64_t> live;
    int64_t next_id = 0;
    for (int step = 0; step < 300; ++step) {
      if (next_id < 25 && rng() % 3 == 0) {
        const SchedSequence q = seq(next_id++, 1 + static_cast<int>(rng() % 14), 100 + static_cast<int32_t>(rng() % 3));
        a.add(q), b.add(q);
        live.push_back(q.id);
      }
      const StepPlan pa = a.schedule(), pb = b.schedule();
      ASSERT_EQ(encode_plan(pa), encode_plan(pb)) << "step " << step << (caching ? ", caching on" : "");
      std::vector<SelectedToken> out(static_cast<size_t>(pa.sampled()), SelectedToken{5, 0.0f, {}});
      a.step_done(pa, out), b.step_done(pb, out);
      if (!live.empty() && rng() % 5 == 0) {
        const int64_t id = live[rng() % live.size()];
        EXPECT_EQ(a.remove(id), b.remove(id));
      }
    }
    EXPECT_EQ(a.free_blocks(), b.free_blocks());
  }
}

TEST(SchedulerGroups, PlansCarryReleasedEntriesAcrossRanks) {
  StepPlan p;
  PlannedSequence q;
  q.seq_id = 4, q.start = 9, q.tokens = {3}, q.blocks = {0, 1, 2, -1, -1, 5};
  p.sequences.push_back(q);
  EXPECT_EQ(decode_plan(encode_plan(p)).sequences.at(0).blocks, q.blocks);
}

TEST(SchedulerGroups, CapacityOneSequenceCanAlwaysHold) {
  EXPECT_EQ(kv_capacity_tokens(options({}, 100)), 400);
  EXPECT_EQ(kv_capacity_tokens(options({0}, 100)), 400);
  EXPECT_EQ(kv_capacity_tokens(options({0, 0}, 100)), 200);
  // Two sliding groups hold at most blocks_for(7 + 16) + 1 = 7 blocks each; the full one the rest.
  EXPECT_EQ(kv_capacity_tokens(options({0, 8, 8}, 100)), (100 - 14) * 4);
  EXPECT_EQ(kv_capacity_tokens(options({8}, 100)), std::numeric_limits<int64_t>::max() / 2);
  EXPECT_EQ(kv_capacity_tokens(options({0, 8}, 5)), 8);  // the window alone does not fit
}

}  // namespace
}  // namespace olmo2
