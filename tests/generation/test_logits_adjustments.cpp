// logit_bias, the presence / frequency / repetition penalties, the min_tokens ban and
// min_p against PyTorch (tests/generation/make_selection_fixtures.py: vLLM's processors
// in torch, and the documented draw over what they leave), on one process; target rows
// (prompt logprobs) too. The TP split is in test_token_selection_mpi.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "runtime/generation/logits_adjustments.h"
#include "runtime/generation/token_selection.h"
#include "tests/generation/selection_fixture.h"

namespace olmo2 {
namespace {

ShardSpec whole_vocab(int64_t v) {
  ShardSpec s;
  s.vocab_rows = s.vocab_real = {0, v};
  s.padded_vocab = v;
  return s;
}

void apply(std::span<float> x, int64_t first, const SelectionRequest& r) {
  apply_logits_adjustments(x, first, r.adjust, r.banned, r.prompt_ids, r.output_counts);
}

TEST(LogitsAdjustments, EqualTorchsVllmProcessorsBitForBit) {
  const test::SelectionFixture f = test::load_selection_fixture();
  int adjusted = 0;
  for (const test::SelectionCase& c : f.cases) {
    if (!c.request.adjusted()) continue;
    ++adjusted;
    std::vector<float> x = c.logits;
    apply(x, 0, c.request);
    for (size_t j = 0; j < x.size(); ++j) ASSERT_EQ(x[j], c.adjusted[j]) << c.name << " id " << j;
    // Each half adjusted on its own (a TP rank's slice, ids from its first) gives the same.
    std::vector<float> lo(c.logits.begin(), c.logits.begin() + 500), hi(c.logits.begin() + 500, c.logits.end());
    apply(lo, 0, c.request);
    apply(hi, 500, c.request);
    for (size_t j = 0; j < 500; ++j) {
      ASSERT_EQ(lo[j], c.adjusted[j]) << c.name << " id " << j;
      ASSERT_EQ(hi[j], c.adjusted[500 + j]) << c.name << " id " << 500 + j;
    }
  }
  EXPECT_GE(adjusted, 8);
}

TEST(LogitsAdjustments, SelectTokensChoosesFromTheAdjustedAndReportsTheRawDistribution) {
  const test::SelectionFixture f = test::load_selection_fixture();
  std::vector<TensorView> rows;
  std::vector<SelectionRequest> reqs;
  for (const test::SelectionCase& c : f.cases) {
    rows.push_back(host_view(c.logits));
    reqs.push_back(c.request);
  }
  const std::vector<SelectedToken> got = select_tokens(rows, whole_vocab(f.vocab), reqs, nullptr);
  int changed = 0;
  for (size_t i = 0; i < f.cases.size(); ++i) {
    const test::SelectionCase& c = f.cases[i];
    SCOPED_TRACE(c.name);
    EXPECT_EQ(got[i].id, c.expected_id);
    if (c.request.params.temperature == 0 && c.request.adjusted()) changed += got[i].id != c.raw_argmax;
    if (c.request.logprobs > 0 || c.request.target >= 0) EXPECT_NEAR(got[i].logprob, c.expected_logprob, 2e-6);
    ASSERT_EQ(got[i].top.size(), c.expected_top.size());
    for (size_t j = 0; j < c.expected_top.size(); ++j) {
      EXPECT_EQ(got[i].top[j].id, c.expected_top[j].first) << "alternative " << j;
      EXPECT_NEAR(got[i].top[j].logit, c.expected_top[j].second, 2e-6) << "alternative " << j;
    }
  }
  // Every greedy case's adjustments move the choice off the raw argmax.
  EXPECT_EQ(changed, 5);
}

TEST(LogitsAdjustments, ListsOutOfOrderAndBadPenaltiesAreRefused) {
  std::vector<float> x(10, 1.0f);
  const LogitsAdjustments none;
  const std::vector<int32_t> down = {4, 2};
  const std::vector<std::pair<int32_t, int32_t>> twice = {{3, 1}, {3, 2}};
  EXPECT_THROW(apply_logits_adjustments(x, 0, none, down, {}, {}), Error);
  EXPECT_THROW(apply_logits_adjustments(x, 0, none, {}, down, {}), Error);
  EXPECT_THROW(apply_logits_adjustments(x, 0, none, {}, {}, twice), Error);
  LogitsAdjustments bias;
  bias.logit_bias = {{7, 1.0f}, {1, 1.0f}};
  EXPECT_THROW(apply_logits_adjustments(x, 0, bias, {}, {}, {}), Error);
  LogitsAdjustments zero;
  zero.repetition_penalty = 0;
  EXPECT_THROW(apply_logits_adjustments(x, 0, zero, {}, {}, {}), Error);
  // select_tokens checks before its parallel loop: the error reaches the caller.
  SelectionRequest r;
  r.banned = down;
  EXPECT_THROW(select_tokens({host_view(x)}, whole_vocab(10), {r}, nullptr), Error);
}

TEST(MinP, NoDrawFallsBelowMinPTimesTheLargestProbability) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(2000);
  for (float& v : x) v = normal(rng);
  const float mx = *std::max_element(x.begin(), x.end());
  for (const double min_p : {0.0, 0.3, 0.8, 1.0}) {
    for (const int64_t top_k : {int64_t{0}, int64_t{100}}) {
      SelectionRequest r;
      r.params = {.temperature = 1.3, .top_k = top_k, .top_p = 1.0, .min_p = min_p, .seed = 3};
      int below = 0, above = 0;
      for (uint64_t d = 0; d < 300; ++d) {
        r.draw = d;
        const int32_t id = select_tokens({host_view(x)}, whole_vocab(2000), {r}, nullptr)[0].id;
        const double p = std::exp((x[static_cast<size_t>(id)] - mx) / 1.3);  // relative to the largest
        below += p < min_p;
        above += p < 0.3;
      }
      EXPECT_EQ(below, 0) << "min_p " << min_p << " top_k " << top_k;
      if (min_p == 0 && top_k == 0) EXPECT_GT(above, 200) << "without min_p most draws are unlikely tokens";
    }
  }
}

TEST(MinP, IsValidated) {
  EXPECT_THROW(validate(SamplingParams{.temperature = 1, .min_p = -0.1}), InputError);
  EXPECT_THROW(validate(SamplingParams{.temperature = 1, .min_p = 1.5}), InputError);
  EXPECT_NO_THROW(validate(SamplingParams{.temperature = 1, .min_p = 1.0}));
}

}  // namespace
}  // namespace olmo2
