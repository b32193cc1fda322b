// The serving scheduler (chunked prefill, continuous batching, recompute pre-emption,
// micro-batches), the block allocator, the step-plan encodings and memory sizes. Prefix
// caching and forks: test_prefix_cache.cpp, test_forks.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "runtime/model/kv_cache.h"
#include "runtime/serve/scheduler.h"
#include "runtime/serve/memory_size.h"
#include "runtime/serve/serve_plan.h"
#include "tests/serve/scheduler_test_util.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using test::Brief;
using test::brief;
using test::chosen;
using test::expect_accounting;
using test::seq;

TEST(Scheduler, ChunkedPrefillInBudgetSizedChunks) {
  Scheduler s({.num_blocks = 64, .block_size = 4, .max_running = 4, .max_batch_tokens = 16});
  s.add(seq(1, 40));
  const Brief want[] = {{1, 0, 16, 4, false, 0}, {1, 16, 16, 8, false, 0}, {1, 32, 8, 10, true, 0}};
  for (int c = 0; c < 3; ++c) {
    const StepPlan p = s.schedule();
    ASSERT_EQ(p.sequences.size(), 1u);
    EXPECT_EQ(brief(p.sequences[0]), want[c]) << "chunk " << c;
    EXPECT_EQ(p.sequences[0].tokens.front(), 100 + std::get<1>(want[c]));
    EXPECT_EQ(p.sampled(), c == 2 ? 1 : 0);
    s.step_done(p, c == 2 ? chosen({7}) : chosen({}));
  }
  EXPECT_EQ(s.free_blocks(), 54);
  const StepPlan d = s.schedule();  // the first decode: one token, one more block
  ASSERT_EQ(d.sequences.size(), 1u);
  EXPECT_EQ(brief(d.sequences[0]), (Brief{1, 40, 1, 11, true, 1}));
  EXPECT_EQ(d.sequences[0].tokens, std::vector<int32_t>{7});
  EXPECT_EQ(d.sequences[0].selection.params.seed, 7u);
}

TEST(Scheduler, ContinuousBatchingJoinsTheNextStep) {
  Scheduler s({.num_blocks = 64, .block_size = 4, .max_running = 4, .max_batch_tokens = 16});
  s.add(seq(1, 5));
  StepPlan p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 1u);
  s.step_done(p, chosen({10}));
  s.add(seq(2, 8, 200));
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(brief(p.sequences[0]), (Brief{1, 5, 1, 2, true, 1}));
  EXPECT_EQ(p.sequences[0].tokens, std::vector<int32_t>{10});
  EXPECT_EQ(brief(p.sequences[1]), (Brief{2, 0, 8, 2, true, 0}));
  s.step_done(p, chosen({11, 20}));
  EXPECT_EQ(s.find(1)->tokens, (std::vector<int32_t>{100, 101, 102, 103, 104, 10, 11}));
  EXPECT_EQ(s.find(2)->tokens.back(), 20);
  EXPECT_EQ(s.find(2)->computed, 8);
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(brief(p.sequences[0]), (Brief{1, 6, 1, 2, true, 2}));
  EXPECT_EQ(p.sequences[0].tokens[0], 11);
  EXPECT_EQ(brief(p.sequences[1]), (Brief{2, 8, 1, 3, true, 1}));
  EXPECT_EQ(p.sequences[1].tokens[0], 20);
}

TEST(Scheduler, PreemptsTheNewestAndRecomputesIt) {
  // 4 blocks of 4: two sequences of 4 prompt tokens hold 2 blocks each from their
  // fifth position; the ninth position of the older one needs a third block.
  // Without prefix caching: all of it is recomputed (test_prefix_cache.cpp: with it).
  Scheduler s({.num_blocks = 4, .block_size = 4, .max_running = 4, .max_batch_tokens = 16, .prefix_caching = false});
  const std::vector<int64_t> ids = {1, 2, 3};
  s.add(seq(1, 4, 100));
  s.add(seq(2, 4, 200));
  int32_t next = 1000;
  for (int step = 0; step < 5; ++step) {
    const StepPlan p = s.schedule();
    ASSERT_EQ(p.sequences.size(), 2u) << step;
    expect_accounting(s, ids);
    s.step_done(p, chosen({next, next + 1}));
    next += 2;
    if (step == 1) s.add(seq(3, 4, 300));  // waits: no free block
  }
  EXPECT_EQ(s.free_blocks(), 0);
  EXPECT_EQ(s.waiting(), 1);
  const std::vector<int32_t> b_tokens = s.find(2)->tokens;
  ASSERT_EQ(b_tokens.size(), 9u);
  StepPlan p = s.schedule();  // sequence 1 reaches position 8: needs a block
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(brief(p.sequences[0]), (Brief{1, 8, 1, 3, true, 5}));
  EXPECT_EQ((std::tuple(s.preemptions(), s.running(), s.waiting(), s.free_blocks())),
            (std::tuple(1, 1, 2, 1)));
  const SchedSequence* b = s.find(2);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ((std::tuple(b->computed, b->blocks.size(), b->preemptions)), (std::tuple(0, 0u, 1)));
  EXPECT_EQ(b->tokens, b_tokens);  // what it generated is kept
  expect_accounting(s, ids);
  s.step_done(p, chosen({next++}));
  ASSERT_TRUE(s.remove(1));
  EXPECT_EQ(s.free_blocks(), 4);
  // Sequence 2 is at the front of the queue (before 3), recomputed whole, then samples
  // its sixth token (draw 5).
  p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(brief(p.sequences[0]), (Brief{2, 0, 9, 3, true, 5}));
  EXPECT_EQ(p.sequences[0].tokens, b_tokens);
  expect_accounting(s, ids);
  s.step_done(p, chosen({next++}));
  EXPECT_EQ((std::tuple(s.find(2)->tokens.size(), s.find(2)->computed)), (std::tuple(10u, 9)));
  ASSERT_TRUE(s.remove(2) && s.remove(3));
  EXPECT_EQ(s.free_blocks(), 4);
  EXPECT_EQ(s.running() + s.waiting(), 0);
}

TEST(Scheduler, RandomLoadKeepsEveryLimitAndFinishesEverySequence) {
  // Without prefix caching no block is shared (test_prefix_cache.cpp: the same with it).
  const SchedulerOptions o{
      .num_blocks = 12, .block_size = 4, .max_running = 3, .max_batch_tokens = 10, .prefix_caching = false};
  Scheduler s(o);
  std::mt19937 rng(5);
  std::vector<int64_t> live;
  std::map<int64_t, size_t> target;  // total tokens at which a sequence is finished
  int64_t next_id = 0, finished = 0;
  for (int step = 0; step < 400; ++step) {
    if (next_id < 30 && rng() % 3 == 0) {
      s.add(seq(next_id, 1 + static_cast<int>(rng() % 14)));
      target[next_id] = s.find(next_id)->tokens.size() + 1 + rng() % 8;
      live.push_back(next_id++);
    }
    const StepPlan p = s.schedule();
    int64_t tokens = 0;
    std::set<int64_t> seen;
    std::set<int32_t> blocks;
    for (const PlannedSequence& q : p.sequences) {
      tokens += static_cast<int64_t>(q.tokens.size());
      EXPECT_TRUE(seen.insert(q.seq_id).second);
      EXPECT_GE(static_cast<int64_t>(q.blocks.size()),
                blocks_for(q.start + static_cast<int64_t>(q.tokens.size()), 4));
      for (int32_t b : q.blocks) EXPECT_TRUE(blocks.insert(b).second) << "block " << b << " shared";
    }
    ASSERT_LE(tokens, o.max_batch_tokens);
    ASSERT_LE(static_cast<int64_t>(p.sequences.size()), o.max_running);
    ASSERT_LE(s.running(), o.max_running);
    std::vector<SelectedToken> out(static_cast<size_t>(p.sampled()), SelectedToken{5, 0.0f, {}});
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
  EXPECT_EQ(finished, 30);
  EXPECT_GT(s.preemptions(), 0);  // the pool is small enough to force some
  EXPECT_EQ(s.free_blocks(), o.num_blocks);
}

TEST(Scheduler, LimitsAndRemove) {
  Scheduler s({.num_blocks = 64, .block_size = 4, .max_running = 2, .max_batch_tokens = 8});
  for (int64_t id = 1; id <= 4; ++id) s.add(seq(id, 3));
  StepPlan p = s.schedule();
  ASSERT_EQ(p.sequences.size(), 2u);  // max_running
  EXPECT_EQ((std::tuple(s.running(), s.waiting(), s.free_blocks())), (std::tuple(2, 2, 62)));
  EXPECT_TRUE(s.remove(1));  // running
  EXPECT_TRUE(s.remove(4));  // waiting
  EXPECT_FALSE(s.remove(4));
  EXPECT_FALSE(s.remove(99));
  EXPECT_TRUE(s.find(1) == nullptr && s.find(4) == nullptr);
  EXPECT_EQ((std::tuple(s.running(), s.waiting(), s.free_blocks())), (std::tuple(1, 1, 63)));
  EXPECT_TRUE(s.remove(2) && s.remove(3));
  EXPECT_EQ(s.free_blocks(), 64);
  EXPECT_TRUE(s.schedule().sequences.empty());

  EXPECT_THROW(Scheduler({.num_blocks = 8, .max_running = 4, .max_batch_tokens = 3}), InputError);
  EXPECT_THROW(Scheduler({.num_blocks = 0}), InputError);
  EXPECT_THROW(Scheduler({.num_blocks = 8, .micro_batches = 0}), InputError);
}

/// Tokens per micro-batch of a plan (every micro_batch checked to be in range).
std::vector<int64_t> loads(const StepPlan& p) {
  std::vector<int64_t> load(static_cast<size_t>(p.micro_batches), 0);
  for (const PlannedSequence& q : p.sequences) {
    EXPECT_TRUE(q.micro_batch >= 0 && q.micro_batch < p.micro_batches) << q.micro_batch;
    if (q.micro_batch >= 0 && q.micro_batch < p.micro_batches)
      load[q.micro_batch] += q.tokens.size();
  }
  return load;
}

TEST(Scheduler, MicroBatchesBalanceTokens) {
  Scheduler s({.num_blocks = 64, .max_running = 8, .max_batch_tokens = 64, .micro_batches = 2});
  for (int64_t id = 0; id < 4; ++id) s.add(seq(id, 5));
  EXPECT_EQ(loads(s.schedule()), (std::vector<int64_t>{10, 10}));
  for (int64_t id = 0; id < 4; ++id) s.remove(id);
  const int lens[] = {9, 2, 3, 7};
  for (int64_t id = 0; id < 4; ++id) s.add(seq(10 + id, lens[id]));
  const std::vector<int64_t> l = loads(s.schedule());
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0] + l[1], 21);
  EXPECT_LE(std::abs(l[0] - l[1]), 9);  // never worse than the largest sequence
  s.add(seq(20, 4));                    // alone in a step: one micro-batch
  for (int64_t id = 10; id < 14; ++id) s.remove(id);
  EXPECT_EQ(loads(s.schedule()), std::vector<int64_t>{4});
}

TEST(BlockAllocator, AllocateReleaseAndDoubleFree) {
  BlockAllocator a(4);
  std::vector<int32_t> t;
  ASSERT_TRUE(a.allocate(3, t));
  EXPECT_EQ(a.free_count(), 1);
  const std::set<int32_t> distinct(t.begin(), t.end());
  EXPECT_TRUE(t.size() == 3 && distinct.size() == 3 && *distinct.rbegin() < 4 &&
              *distinct.begin() >= 0);
  std::vector<int32_t> u = {42};
  EXPECT_FALSE(a.allocate(2, u));
  EXPECT_EQ(u, std::vector<int32_t>{42});
  EXPECT_EQ(a.free_count(), 1);
  const std::vector<int32_t> copy = t;
  a.release(t);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(a.free_count(), 4);
  std::vector<int32_t> again = copy;
  EXPECT_THROW(a.release(again), Error);
  std::vector<int32_t> outside = {4};
  EXPECT_THROW(a.release(outside), Error);
  EXPECT_EQ(a.free_count(), 4);
}

TEST(ServePlan, EncodeDecodeRoundTrip) {
  StepPlan p;
  p.micro_batches = 2;
  PlannedSequence a;
  a.seq_id = 12, a.micro_batch = 1, a.start = 33, a.tokens = {5, 100351, 0}, a.blocks = {7, 2},
  a.sample = true;
  a.selection.params = {
      .temperature = 0.7, .top_k = 50, .top_p = 0.9, .seed = 0xFEDCBA9876543210ull};
  a.selection.draw = 17, a.selection.logprobs = 3;
  PlannedSequence b;
  b.seq_id = 99, b.tokens = {1}, b.blocks = {0};
  p.sequences = {a, b};
  p.copies = {{3, 9}, {3, 10}, {0, 2}};
  const std::vector<int64_t> d = encode_plan(p);
  const StepPlan q = decode_plan(d);
  EXPECT_FALSE(q.shutdown);
  EXPECT_EQ(q.micro_batches, 2);
  EXPECT_EQ(q.copies, (std::vector<BlockCopy>{{3, 9}, {3, 10}, {0, 2}}));
  ASSERT_EQ(q.sequences.size(), 2u);
  auto all = [](const PlannedSequence& s) {  // every field, doubles by their bits
    const SelectionRequest& r = s.selection;
    return std::tuple(s.seq_id, s.micro_batch, s.start, s.tokens, s.blocks, s.sample,
                      std::bit_cast<uint64_t>(r.params.temperature), r.params.top_k,
                      std::bit_cast<uint64_t>(r.params.top_p), r.params.seed, r.draw, r.logprobs);
  };
  EXPECT_EQ(all(q.sequences[0]), all(a));
  EXPECT_EQ(all(q.sequences[1]), all(b));
  EXPECT_EQ(q.sequences[0].selection.params.top_p, 0.9);
  StepPlan stop;
  stop.shutdown = true;
  EXPECT_TRUE(decode_plan(encode_plan(stop)).shutdown);
  EXPECT_TRUE(decode_plan(encode_plan(StepPlan{})).copies.empty());
  for (size_t cut : {d.size() - 1, d.size() - 4, size_t{2}, size_t{5}, size_t{0}}) {
    EXPECT_THROW(decode_plan(std::span<const int64_t>(d.data(), cut)), Error) << cut;
  }
}

TEST(ServePlan, ResultsRoundTripWithLogprobs) {
  StepPlan p;
  p.sequences.resize(3);
  p.sequences[0].sample = true, p.sequences[0].selection.logprobs = 3;
  p.sequences[2].sample = true;
  EXPECT_EQ(results_size(p), 5);
  // Ids past 2^24 are not exact in an f32: typed buffers carry them whole.
  const std::vector<SelectedToken> in = {{5, -0.25f, {{-0.25f, 5}, {-1.5f, 16777217}}},
                                         {100351, -3.0f, {}}};
  const StepResults d = encode_results(p, in);
  EXPECT_EQ(d.ids, (std::vector<int32_t>{5, 5, 16777217, -1, 100351}));
  EXPECT_EQ(d.logprobs, (std::vector<float>{-0.25f, -0.25f, -1.5f, 0.0f, -3.0f}));
  const std::vector<SelectedToken> out = decode_results(p, d.ids, d.logprobs);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].id, 5);
  EXPECT_EQ(out[0].logprob, -0.25f);
  ASSERT_EQ(out[0].top.size(), 2u) << "the missing third alternative is dropped";
  EXPECT_EQ(out[0].top[1].id, 16777217);
  EXPECT_EQ(out[0].top[1].logit, -1.5f);
  EXPECT_EQ(out[1].id, 100351);
  EXPECT_EQ(out[1].logprob, -3.0f);
  EXPECT_TRUE(out[1].top.empty());
  EXPECT_THROW(decode_results(p, std::span<const int32_t>(d.ids.data(), 4), d.logprobs), Error);
  EXPECT_THROW(decode_results(p, d.ids, std::span<const float>(d.logprobs.data(), 4)), Error);
  EXPECT_THROW(encode_results(p, {in[0]}), Error) << "fewer tokens than sampled sequences";
}

TEST(MemorySize, Units) {
  EXPECT_EQ(parse_memory_size("512MiB", "x"), 536870912);
  EXPECT_EQ(parse_memory_size("1.5G", "x"), 1500000000);
  EXPECT_EQ(parse_memory_size("2GiB", "x"), 2147483648);
  EXPECT_EQ(parse_memory_size("4096", "x"), 4096);
  EXPECT_EQ(parse_memory_size("3K", "x"), 3000);
  EXPECT_EQ(parse_memory_size("80gb", "x"), 80000000000);
  EXPECT_EQ(parse_memory_size("1TiB", "x"), 1099511627776);
  EXPECT_EQ(parse_memory_size("2T", "x"), 2000000000000);
  EXPECT_EQ(parse_memory_size("0.5kib", "x"), 512);
  for (const char* bad : {"", "12XB", "-1", "0", "GiB", "0x10GB", "1e3GB", "+1GB", "1.GB", ".5GB", "1 GB", "0.1B"}) {
    const std::string m = test::input_error([&] { parse_memory_size(bad, "--kv-cache-memory"); });
    EXPECT_NE(m.find("--kv-cache-memory"), std::string::npos) << bad << ": " << m;
  }
}

}  // namespace
}  // namespace olmo2
