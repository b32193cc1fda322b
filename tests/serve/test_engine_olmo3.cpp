// The serving engine on the Olmo 3 golden fixtures (tests/golden/make_olmo3_fixtures.py:
// sliding-window and YaRN layers, docs/architecture.md §3), with the paged KV cache in
// blocks of 4 positions and the 20-token prompt prefilled in chunks of 8, so that every
// window spans blocks and the sliding KV groups release blocks as the window passes them
// (docs/architecture.md §8): the prompt's log-probabilities are those of transformers'
// logits, and the greedy continuation (positions 20 … 43: past YaRN's original context
// of 16) is transformers' — for a request alone in its steps and beside two others.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/io/safetensors.h"
#include "tests/serve/engine_fixture.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using test::Outcome;

struct Fixture {
  std::string name;
  double tolerance;  ///< on log-probabilities: twice test_golden.cpp's bound on logits
};

// fp32: logits within 1e-4 of transformers' (test_golden.cpp), so log-probabilities
// within 2e-4; bf16: 0.05 on logits, 0.1 here.
const Fixture kFixtures[] = {{"olmo3-mha-f32", 2e-4}, {"olmo3-gqa-f32", 2e-4}, {"olmo3-gqa-bf16", 0.1}};

void PrintTo(const Fixture& f, std::ostream* os) { *os << f.name; }

const Tokenizer& tokenizer() {
  static const Tokenizer t = [] {
    std::string path = test::source_path("data/dolma2-tokenizer.json");
    if (!std::filesystem::exists(path)) path = test::source_path("../shared/data/dolma2-tokenizer.json");
    return Tokenizer::from_file(path);
  }();
  return t;
}

/// Row `row` of reference tensor `key` ([T, V] f32) as log-probabilities (float64).
std::vector<double> log_softmax_row(const SafetensorsFile& ref, const std::string& key, int64_t row) {
  const TensorInfo& info = ref.tensors().at(key);
  const int64_t v = info.shape.at(1);
  std::vector<float> x(static_cast<size_t>(v));
  std::memcpy(x.data(), ref.data(info) + row * v * 4, x.size() * 4);
  double m = -INFINITY, s = 0;
  for (float f : x) m = std::max(m, static_cast<double>(f));
  for (float f : x) s += std::exp(f - m);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - m - std::log(s);
  return out;
}

std::vector<int32_t> ids_of(const std::vector<SelectedToken>& tokens) {
  std::vector<int32_t> ids;
  for (const SelectedToken& t : tokens) ids.push_back(t.id);
  return ids;
}

class EngineOlmo3 : public ::testing::TestWithParam<Fixture> {};

TEST_P(EngineOlmo3, PromptLogprobsAndGreedyContinuationMatchTransformers) {
  const Fixture& fx = GetParam();
  const std::string dir = test::source_path("tests/golden/fixtures/" + fx.name);
  const Olmo2Model model = Olmo2Model::load(dir);
  ASSERT_TRUE(model.config().has_sliding_layers());
  std::ifstream in(dir + "/reference.json");
  const auto ref = nlohmann::json::parse(in);
  const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  const auto greedy = ref["greedy_ids"].get<std::vector<int32_t>>();
  const SafetensorsFile logits(dir + "/reference.safetensors");
  ASSERT_EQ(logits.tensors().at("logits.0").shape.at(0), static_cast<int64_t>(prompt.size()));
  std::vector<int32_t> other(prompt.rbegin(), prompt.rend());  // another 20-token prompt

  std::vector<CompletionParams> requests = {test::scoring_request(prompt, static_cast<int64_t>(greedy.size()), 1),
                                            test::greedy_request(prompt, static_cast<int64_t>(greedy.size())),
                                            test::greedy_request(other, 12)};
  for (CompletionParams& p : requests) p.ignore_eos = true;
  const SchedulerOptions tight{.num_blocks = 128, .block_size = 4, .max_running = 4, .max_batch_tokens = 8};
  const std::vector<Outcome> together = test::serve_all(model, &tokenizer(), EngineRanks{}, tight, requests);
  const std::vector<Outcome> alone = test::serve_all(model, &tokenizer(), EngineRanks{}, tight, {requests[1]});
  ASSERT_EQ(together.size(), 3u);
  ASSERT_EQ(alone.size(), 1u);
  for (const Outcome* o : {&together[0], &together[1], &together[2], &alone[0]}) {
    EXPECT_TRUE(o->error.empty()) << fx.name << ": " << o->error;
    EXPECT_EQ(o->finish_reason, "length") << fx.name;
  }
  EXPECT_EQ(ids_of(together[0].tokens), greedy) << fx.name << " scored request";
  EXPECT_EQ(ids_of(together[1].tokens), greedy) << fx.name << " beside two others";
  EXPECT_EQ(ids_of(alone[0].tokens), greedy) << fx.name << " alone";
  EXPECT_EQ(together[2].tokens.size(), 12u);

  // The prompt's log-probabilities: position i scores prompt[i] with the logits of i − 1.
  const std::vector<SelectedToken>& scored = together[0].prompt_tokens;
  ASSERT_EQ(scored.size(), prompt.size()) << fx.name;
  double worst = 0;
  for (size_t i = 1; i < prompt.size(); ++i) {
    const std::vector<double> lp = log_softmax_row(logits, "logits.0", static_cast<int64_t>(i) - 1);
    EXPECT_EQ(scored[i].id, prompt[i]);
    worst = std::max(worst, ::olmo2::test::abs_diff(scored[i].logprob, lp[static_cast<size_t>(prompt[i])]));
  }
  // The first generated token's, from the last prompt position's logits.
  const std::vector<double> last = log_softmax_row(logits, "logits.0", static_cast<int64_t>(prompt.size()) - 1);
  ASSERT_FALSE(together[0].tokens.empty());
  worst = std::max(worst, ::olmo2::test::abs_diff(together[0].tokens[0].logprob, last[static_cast<size_t>(greedy[0])]));
  EXPECT_LE(worst, fx.tolerance) << fx.name << ": largest |log-probability − transformers'|";
  std::printf("[olmo3 engine] %s: largest |log-probability - transformers'| %.3g\n", fx.name.c_str(), worst);
}

// A bf16 KV cache (docs/architecture.md §3.2). Under bf16 the keys and values written are
// bf16 numbers already: bf16 pools give the very bits of f32 pools — every token id and
// log-probability, prompt and continuation, chunked over blocks released by the windows.
// Under fp32, bf16 pools round the keys and values: the prompt's log-probabilities stay
// within the bf16 fixture's bound of transformers' fp32 ones.
TEST(EngineOlmo3, Bf16KvCachePoolsAreExactUnderBf16AndCloseUnderFp32) {
  for (const char* name : {"olmo3-gqa-bf16", "olmo3-gqa-f32"}) {
    const std::string dir = test::source_path(std::string("tests/golden/fixtures/") + name);
    const Olmo2Model model = Olmo2Model::load(dir);
    std::ifstream in(dir + "/reference.json");
    const auto ref = nlohmann::json::parse(in);
    const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> other(prompt.rbegin(), prompt.rend());
    std::vector<CompletionParams> requests = {test::scoring_request(prompt, 12, 1), test::greedy_request(other, 12)};
    for (CompletionParams& p : requests) p.ignore_eos = true;
    const SchedulerOptions tight{.num_blocks = 128, .block_size = 4, .max_running = 4, .max_batch_tokens = 8};
    const auto f32 = test::serve_all(model, &tokenizer(), EngineRanks{}, tight, requests, DType::F32);
    const auto bf16 = test::serve_all(model, &tokenizer(), EngineRanks{}, tight, requests, DType::BF16);
    ASSERT_EQ(f32.size(), 2u);
    ASSERT_EQ(bf16.size(), 2u);
    ASSERT_EQ(bf16[0].prompt_tokens.size(), prompt.size()) << name;
    if (model.precision() == Precision::BF16) {
      for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(test::bits(bf16[i].tokens), test::bits(f32[i].tokens)) << name << " request " << i;
        EXPECT_EQ(test::bits(bf16[i].prompt_tokens), test::bits(f32[i].prompt_tokens)) << name << " request " << i;
      }
      continue;
    }
    const SafetensorsFile logits(dir + "/reference.safetensors");
    double worst = 0;
    for (size_t i = 1; i < prompt.size(); ++i) {
      const std::vector<double> lp = log_softmax_row(logits, "logits.0", static_cast<int64_t>(i) - 1);
      worst = std::max(worst, test::abs_diff(bf16[0].prompt_tokens[i].logprob, lp[static_cast<size_t>(prompt[i])]));
    }
    EXPECT_GT(worst, 0.0) << name << ": bf16 pools under fp32 round the keys and values";
    EXPECT_LE(worst, 0.1) << name << ": largest |log-probability − transformers'| with bf16 pools";
    std::printf("[olmo3 engine] %s, bf16 KV pools: largest |log-probability - transformers'| %.3g\n", name, worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineOlmo3, ::testing::ValuesIn(kFixtures), [](const auto& info) {
  std::string n = info.param.name;
  for (char& ch : n) if (ch == '-') ch = '_';
  return n;
});

}  // namespace
}  // namespace olmo2
