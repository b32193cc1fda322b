// The rule book of request fields (runtime/generation/request_rules.h, docs/architecture.md
// §8): each rule at its edges, and the API's 400 and the engine-side InputError giving the
// same field and the same words for one broken rule.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "runtime/generation/request_rules.h"
#include "runtime/generation/sampling.h"
#include "tests/serve/api_test_util.h"

namespace olmo2 {
namespace {

using api_test::kFallbackSeed;
using api_test::kModel;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool holds(const RuleVerdict& v) { return !v.has_value(); }

TEST(RequestRules, SamplingAtItsEdges) {
  EXPECT_TRUE(holds(temperature_rule(0)));
  EXPECT_TRUE(holds(temperature_rule(2.5)));
  EXPECT_FALSE(holds(temperature_rule(-1e-12)));
  EXPECT_FALSE(holds(temperature_rule(kInf)));
  EXPECT_FALSE(holds(temperature_rule(kNaN)));
  EXPECT_TRUE(holds(top_p_rule(1)));
  EXPECT_TRUE(holds(top_p_rule(1e-9)));
  EXPECT_FALSE(holds(top_p_rule(0)));
  EXPECT_FALSE(holds(top_p_rule(std::nextafter(1.0, 2.0))));
  EXPECT_TRUE(holds(top_k_rule(0)));
  EXPECT_FALSE(holds(top_k_rule(-1)));
  EXPECT_TRUE(holds(min_p_rule(0)));
  EXPECT_TRUE(holds(min_p_rule(1)));
  EXPECT_FALSE(holds(min_p_rule(-0.01)));
  EXPECT_FALSE(holds(min_p_rule(kNaN)));
  const RuleVerdict v = top_p_rule(1.5);
  ASSERT_FALSE(holds(v));
  EXPECT_EQ(v->field, "top_p");
  EXPECT_EQ(v->reason, "top_p must be in (0, 1], got 1.5");
}

TEST(RequestRules, PenaltiesAndLogitBiasAtTheirEdges) {
  EXPECT_TRUE(holds(presence_penalty_rule(-2)));
  EXPECT_TRUE(holds(frequency_penalty_rule(2)));
  EXPECT_FALSE(holds(presence_penalty_rule(2.0001)));
  EXPECT_EQ(frequency_penalty_rule(-3)->field, "frequency_penalty");
  EXPECT_FALSE(holds(repetition_penalty_rule(0)));
  EXPECT_FALSE(holds(repetition_penalty_rule(kInf)));
  EXPECT_TRUE(holds(repetition_penalty_rule(1e-6)));
  EXPECT_TRUE(holds(logit_bias_rule({{0, -100.f}, {9, 100.f}}, 10)));
  EXPECT_EQ(logit_bias_rule({{10, 1.f}}, 10)->reason, "logit_bias: token id 10 is outside the vocabulary [0, 10)");
  EXPECT_FALSE(holds(logit_bias_rule({{1, 100.5f}}, 10)));
  EXPECT_NE(logit_bias_rule({{3, 1.f}, {3, 2.f}}, 10)->reason.find("names token id 3 twice"), std::string::npos);
  EXPECT_NE(logit_bias_rule({{5, 1.f}, {3, 2.f}}, 10)->reason.find("ascending: 5 then 3"), std::string::npos);
}

TEST(RequestRules, PromptAndLengthsAtTheirEdges) {
  const PromptNames n{"messages", "the rendered prompt", true, "max_completion_tokens"};
  EXPECT_EQ(prompt_rule({}, 10, n)->field, "messages");
  EXPECT_NE(prompt_rule({1, 10}, 10, n)->reason.find("the tokenizer does not fit this model"), std::string::npos);
  EXPECT_TRUE(holds(prompt_rule({0, 9}, 10, n)));
  EXPECT_TRUE(holds(max_tokens_rule(0, true, n)));
  EXPECT_EQ(max_tokens_rule(0, false, n)->field, "max_completion_tokens");
  EXPECT_TRUE(holds(context_rule(10, 6, 16, n)));   // 10 + 6 = 16: fits exactly
  EXPECT_EQ(context_rule(10, 7, 16, n)->field, "max_completion_tokens");
  EXPECT_EQ(context_rule(16, 1, 16, n)->field, "messages");
  EXPECT_TRUE(holds(context_rule(16, 0, 16, n)));   // echo scores a prompt as long as the context
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();  // no overflow on the way
  EXPECT_TRUE(holds(context_rule(3, kMax - 3, kMax, n)));
  EXPECT_FALSE(holds(context_rule(3, kMax - 2, kMax, n)));
  EXPECT_FALSE(holds(context_rule(3, kMax, kMax, n)));
  EXPECT_TRUE(holds(kv_cache_rule(10, 5, 2, 20, n)));  // 10 + 2 × 5 = 20
  EXPECT_FALSE(holds(kv_cache_rule(10, 6, 2, 20, n)));
  EXPECT_TRUE(holds(min_tokens_rule(4, 4, n)));
  EXPECT_FALSE(holds(min_tokens_rule(5, 4, n)));
  EXPECT_FALSE(holds(min_tokens_rule(-1, 4, n)));
  EXPECT_TRUE(holds(reads_choices_rule(true, 1)));
  EXPECT_TRUE(holds(reads_choices_rule(false, 4)));
  EXPECT_EQ(reads_choices_rule(true, 2)->field, "activations");
  EXPECT_TRUE(holds(batch_rule(320, 320)));
  EXPECT_EQ(batch_rule(321, 320)->field, "prompt");
}

/// One broken rule through the API (a 400 naming the field) and through `validate`, the
/// check of `generate` and the engine: the same field, the same words.
TEST(RequestRules, TheApiAndTheEngineSideSayTheSame) {
  struct Case {
    const char* body;
    SamplingParams sampling;
  };
  SamplingParams hot, narrow, negative_k, tight;
  hot.temperature = -0.5;
  narrow.top_p = 0;
  negative_k.top_k = -2;
  tight.min_p = 1.25;
  for (const Case& c : {Case{R"({"prompt":[1,2],"temperature":-0.5})", hot}, Case{R"({"prompt":[1,2],"top_p":0})", narrow},
                        Case{R"({"prompt":[1,2],"top_k":-2})", negative_k},
                        Case{R"({"prompt":[1,2],"min_p":1.25})", tight}}) {
    const api_test::Refusal r = api_test::refusal(c.body, [&] {
      parse_completions(c.body, kModel, api_test::tokenizer(), kFallbackSeed);
    });
    const RuleVerdict rule = sampling_rules(c.sampling);
    ASSERT_TRUE(rule.has_value()) << c.body;
    EXPECT_EQ(r.status, 400) << c.body;
    EXPECT_EQ(r.param, rule->field) << c.body;
    EXPECT_EQ(r.message, rule->reason) << c.body;
    try {
      validate(c.sampling);
      ADD_FAILURE() << c.body << ": validate accepted it";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(rule->reason), std::string::npos) << e.what();
    }
  }
  const api_test::Refusal bias = api_test::refusal("logit_bias", [&] {
    parse_completions(R"({"prompt":[1],"logit_bias":{"7":1,"07":2}})", kModel, api_test::tokenizer(), kFallbackSeed);
  });
  EXPECT_EQ(bias.param, "logit_bias");
  EXPECT_EQ(bias.message, logit_bias_rule({{7, 1.f}, {7, 2.f}}, kModel.vocab_size)->reason);
  ServedModel small = kModel;
  small.max_prompts = 2;
  const api_test::Refusal batch = api_test::refusal("batch", [&] {
    parse_completions(R"({"prompt":[[1],[2],[3]]})", small, api_test::tokenizer(), kFallbackSeed);
  });
  EXPECT_EQ(batch.status, 400);
  EXPECT_EQ(batch.param, "prompt");
  EXPECT_EQ(batch.message, batch_rule(3, 2)->reason);
  const api_test::Refusal penalty = api_test::refusal("presence_penalty", [&] {
    parse_completions(R"({"prompt":[1],"presence_penalty":2.5})", kModel, api_test::tokenizer(), kFallbackSeed);
  });
  EXPECT_EQ(penalty.message, presence_penalty_rule(2.5)->reason);
}

}  // namespace
}  // namespace olmo2
