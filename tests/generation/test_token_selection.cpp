// select_tokens on one process: the same tokens as Sampler on the whole logits, and
// log-probabilities as a double-precision log_softmax. The multi-rank merge is in
// tests/parallel/test_token_selection_mpi.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "runtime/generation/sampling.h"
#include "runtime/generation/token_selection.h"

namespace olmo2 {
namespace {

constexpr int64_t kVocab = 1000;

ShardSpec whole_vocab(int64_t v) {
  ShardSpec s;
  s.vocab_rows = s.vocab_real = {0, v};
  s.padded_vocab = v;
  return s;
}

std::vector<float> random_logits(std::mt19937& rng, int64_t n, float sd = 3.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

SelectionRequest request(double temperature, int64_t top_k, double top_p, uint64_t seed,
                         uint64_t draw, int32_t logprobs = 0) {
  SelectionRequest r;
  r.params = {.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed};
  r.draw = draw;
  r.logprobs = logprobs;
  return r;
}

/// log_softmax of x in double.
std::vector<double> log_softmax(const std::vector<float>& x) {
  double mx = -INFINITY;
  for (float v : x) mx = std::max(mx, static_cast<double>(v));
  double s = 0;
  for (float v : x) s += std::exp(static_cast<double>(v) - mx);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<double>(x[i]) - mx - std::log(s);
  return out;
}

/// Ids most likely first, ties by lower id.
std::vector<int32_t> ranked(const std::vector<float>& x) {
  std::vector<int32_t> ids(x.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  return ids;
}

struct Mode {
  const char* name;
  SamplingParams params;
};
const Mode kModes[] = {
    {"greedy", {.temperature = 0.0, .top_k = 0, .top_p = 1.0, .seed = 1}},
    {"t0.7-top_k50", {.temperature = 0.7, .top_k = 50, .top_p = 1.0, .seed = 2}},
    {"top_p0.9", {.temperature = 1.0, .top_k = 0, .top_p = 0.9, .seed = 3}},
    {"full-vocab", {.temperature = 1.3, .top_k = 0, .top_p = 1.0, .seed = 4}},
    {"top_k2000-top_p0.5", {.temperature = 0.9, .top_k = 2000, .top_p = 0.5, .seed = 5}},
};

TEST(TokenSelection, EqualsSamplerOnTheWholeLogitsInEveryMode) {
  std::mt19937 rng(11);
  const ShardSpec shard = whole_vocab(kVocab);
  constexpr size_t kModesN = std::size(kModes);
  std::vector<Sampler> samplers;
  for (const Mode& m : kModes) samplers.emplace_back(m.params);
  std::vector<std::set<int32_t>> distinct(kModesN);
  for (uint64_t draw = 0; draw < 150; ++draw) {
    // One call selects for every mode at once, each row with its own logits.
    std::vector<std::vector<float>> logits;
    std::vector<const float*> rows;
    std::vector<SelectionRequest> reqs;
    for (const Mode& m : kModes) {
      logits.push_back(random_logits(rng, kVocab, 2.0f));
      reqs.push_back(
          request(m.params.temperature, m.params.top_k, m.params.top_p, m.params.seed, draw));
    }
    for (const auto& l : logits) rows.push_back(l.data());
    const std::vector<SelectedToken> got = select_tokens(rows, shard, reqs, nullptr);
    ASSERT_EQ(got.size(), kModesN);
    for (size_t i = 0; i < kModesN; ++i) {
      const int32_t want = samplers[i].next(logits[i].data(), kVocab);
      ASSERT_EQ(got[i].id, want) << kModes[i].name << " draw " << draw;
      distinct[i].insert(got[i].id);
      EXPECT_TRUE(got[i].top.empty());
    }
  }
  // The sampling modes really sample (not always the argmax of fresh logits).
  for (size_t i = 1; i < kModesN; ++i) EXPECT_GT(distinct[i].size(), 20u) << kModes[i].name;
}

TEST(TokenSelection, LogprobsAreLogSoftmaxOfTheRawLogits) {
  std::mt19937 rng(12);
  const ShardSpec shard = whole_vocab(kVocab);
  for (const Mode& m : kModes) {
    for (uint64_t draw = 0; draw < 20; ++draw) {
      const std::vector<float> x = random_logits(rng, kVocab);
      const std::vector<double> lp = log_softmax(x);
      const std::vector<int32_t> order = ranked(x);
      const SelectionRequest r =
          request(m.params.temperature, m.params.top_k, m.params.top_p, m.params.seed, draw, 5);
      const SelectedToken t = select_tokens({x.data()}, shard, {r}, nullptr)[0];
      Sampler sampler(m.params);
      for (uint64_t d = 0; d < draw; ++d) sampler.next(x.data(), kVocab);
      ASSERT_EQ(t.id, sampler.next(x.data(), kVocab)) << m.name;
      EXPECT_NEAR(t.logprob, lp[static_cast<size_t>(t.id)], 1e-5) << m.name;
      ASSERT_EQ(t.top.size(), 5u) << m.name;
      for (size_t j = 0; j < 5; ++j) {
        EXPECT_EQ(t.top[j].id, order[j]) << m.name << " rank " << j;
        EXPECT_NEAR(t.top[j].logit, lp[static_cast<size_t>(order[j])], 1e-5) << m.name;
      }
    }
  }
  // More alternatives asked than top_k keeps: all reported, the draw still from top_k.
  const std::vector<float> x = random_logits(rng, kVocab);
  const std::vector<int32_t> order = ranked(x);
  const SelectedToken t =
      select_tokens({x.data()}, shard, {request(1.0, 2, 1.0, 9, 0, 8)}, nullptr)[0];
  EXPECT_TRUE(t.id == order[0] || t.id == order[1]);
  ASSERT_EQ(t.top.size(), 8u);
  for (size_t j = 0; j < 8; ++j) EXPECT_EQ(t.top[j].id, order[j]);
}

TEST(TokenSelection, GreedyTiesPickTheLowestId) {
  std::mt19937 rng(13);
  std::vector<float> x = random_logits(rng, kVocab);
  const float top = *std::max_element(x.begin(), x.end()) + 1.0f;
  x[700] = x[3] = x[999] = top;
  const ShardSpec shard = whole_vocab(kVocab);
  const SelectedToken t = select_tokens({x.data()}, shard, {request(0, 0, 1, 0, 0, 3)}, nullptr)[0];
  EXPECT_EQ(t.id, 3);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].id, 3);
  EXPECT_EQ(t.top[1].id, 700);
  EXPECT_EQ(t.top[2].id, 999);
  EXPECT_EQ(t.top[0].logit, t.top[2].logit);
  const SelectedToken plain =
      select_tokens({x.data()}, shard, {request(0, 0, 1, 0, 0)}, nullptr)[0];
  EXPECT_EQ(plain.id, 3);
  // top_k 1 sampling is greedy too, whatever the draw.
  for (uint64_t d = 0; d < 10; ++d) {
    EXPECT_EQ(select_tokens({x.data()}, shard, {request(1.0, 1, 1.0, 5, d)}, nullptr)[0].id, 3);
  }
}

TEST(TokenSelection, SameSeedAndDrawSameTokenDifferentDrawsDiffer) {
  std::mt19937 rng(14);
  const std::vector<float> x = random_logits(rng, kVocab, 0.5f);  // flat: many likely ids
  const ShardSpec shard = whole_vocab(kVocab);
  std::set<int32_t> seen;
  for (uint64_t d = 0; d < 30; ++d) {
    const int32_t a =
        select_tokens({x.data()}, shard, {request(1.0, 0, 1.0, 77, d)}, nullptr)[0].id;
    const int32_t b =
        select_tokens({x.data()}, shard, {request(1.0, 0, 1.0, 77, d)}, nullptr)[0].id;
    EXPECT_EQ(a, b);
    seen.insert(a);
  }
  EXPECT_GT(seen.size(), 20u);
}

}  // namespace
}  // namespace olmo2
