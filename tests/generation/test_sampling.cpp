// Next-token sampling through the one token picker (select_tokens): greedy at
// temperature 0, the distribution it draws from, top-k and top-p cut-offs, determinism
// per seed, and refused parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/generation/generate.h"
#include "runtime/generation/sampling.h"
#include "runtime/generation/token_selection.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

// Probabilities 0.5, 0.3, 0.15, 0.05 at ids 2, 0, 3, 1.
const std::vector<float> kLogits = {std::log(0.3f), std::log(0.05f), std::log(0.5f), std::log(0.15f)};

/// Temperature, top_k, top_p and seed (min_p 0).
SamplingParams sp(double temperature, int64_t top_k, double top_p, uint64_t seed) {
  return {.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed};
}

/// Draw number `draw` of a request with `p` from `logits` (one process, whole vocabulary).
int32_t pick(const std::vector<float>& logits, const SamplingParams& p, uint64_t draw) {
  ShardSpec shard;
  shard.vocab_rows = shard.vocab_real = {0, static_cast<int64_t>(logits.size())};
  SelectionRequest r;
  r.params = p;
  r.draw = draw;
  return select_tokens({host_view(logits)}, shard, {r}, nullptr)[0].id;
}

std::vector<double> frequencies(const SamplingParams& p, int draws) {
  std::vector<double> f(kLogits.size());
  for (int i = 0; i < draws; ++i) f[static_cast<size_t>(pick(kLogits, p, static_cast<uint64_t>(i)))] += 1.0 / draws;
  return f;
}

TEST(Sampling, TemperatureZeroIsArgmax) {
  EXPECT_EQ(pick(kLogits, SamplingParams{}, 0), 2);
  EXPECT_EQ(pick({1, 3, 3}, SamplingParams{}, 5), 1);
}

TEST(Sampling, DrawsFromTheSoftmax) {
  const std::vector<double> f = frequencies(sp(1.0, 0, 1.0, 7), 40000);
  EXPECT_NEAR(f[2], 0.5, 0.01);
  EXPECT_NEAR(f[0], 0.3, 0.01);
  EXPECT_NEAR(f[3], 0.15, 0.01);
  EXPECT_NEAR(f[1], 0.05, 0.006);
}

TEST(Sampling, TemperatureSharpens) {
  // T = 0.5 squares the probabilities: 0.25, 0.09, 0.0225, 0.0025 over 0.365.
  const std::vector<double> f = frequencies(sp(0.5, 0, 1.0, 3), 40000);
  EXPECT_NEAR(f[2], 0.25 / 0.365, 0.01);
  EXPECT_NEAR(f[0], 0.09 / 0.365, 0.01);
}

TEST(Sampling, TopKAndTopPCutTheTail) {
  const std::vector<double> k2 = frequencies(sp(1.0, 2, 1.0, 5), 20000);
  EXPECT_EQ(k2[3] + k2[1], 0.0);
  EXPECT_NEAR(k2[2], 0.5 / 0.8, 0.015);
  // top_p 0.7: 0.5 < 0.7 ≤ 0.8, so ids 2 and 0 stay.
  const std::vector<double> p7 = frequencies(sp(1.0, 0, 0.7, 5), 20000);
  EXPECT_EQ(p7[3] + p7[1], 0.0);
  EXPECT_NEAR(p7[0], 0.3 / 0.8, 0.015);
  const std::vector<double> k1 = frequencies(sp(1.0, 1, 1.0, 5), 100);
  EXPECT_NEAR(k1[2], 1.0, 1e-9);
}

TEST(Sampling, SameSeedSameTokensOtherSeedOthers) {
  auto draw = [](uint64_t seed) {
    std::vector<int32_t> v;
    for (uint64_t i = 0; i < 64; ++i) v.push_back(pick(kLogits, sp(1.0, 0, 1.0, seed), i));
    return v;
  };
  EXPECT_EQ(draw(11), draw(11));
  EXPECT_NE(draw(11), draw(12));
}

TEST(Sampling, RefusesBadParameters) {
  EXPECT_THROW(validate(sp(-0.1, 0, 1.0, 0)), InputError);
  EXPECT_THROW(validate(sp(NAN, 0, 1.0, 0)), InputError);
  EXPECT_THROW(validate(sp(1.0, -1, 1.0, 0)), InputError);
  EXPECT_THROW(validate(sp(1.0, 0, 0.0, 0)), InputError);
  EXPECT_THROW(validate(sp(1.0, 0, 1.5, 0)), InputError);
}

TEST(Sampling, GenerateWithTemperatureZeroEqualsGreedy) {
  const Olmo2Model m = Olmo2Model::load(test::source_path("tests/golden/fixtures/gqa-f32"));
  const std::vector<int32_t> prompt = {111, 171, 8, 84, 96};
  EXPECT_EQ(generate(m, prompt, 8, SamplingParams{}).output_ids, generate_greedy(m, prompt, 8).output_ids);
  const GenerateResult a = generate(m, prompt, 8, sp(1.0, 0, 1.0, 9));
  EXPECT_EQ(a.output_ids, generate(m, prompt, 8, sp(1.0, 0, 1.0, 9)).output_ids);
}

}  // namespace
}  // namespace olmo2
