// /v1/completions bodies → ApiRequest (runtime/serve/api/completion_request.h): every field's
// value, every refusal a 400 naming its field, batches, n / best_of, echo, per-choice KV
// room, numbers that overflow, unknown fields.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/serve/api_test_util.h"

namespace olmo2 {
namespace {

using namespace api_test;
using ::testing::AllOf;
using ::testing::HasSubstr;

ApiRequest parse(const std::string& body, const ServedModel& model = kModel) {
  return parse_completions(body, model, tokenizer(), kFallbackSeed);
}

Refusal refused(const std::string& body, const ServedModel& model = kModel) {
  return refusal(body, [&] { parse(body, model); });
}

TEST(CompletionRequest, EveryRefusalIs400NamingItsField) {
  const struct {
    std::string body, param;
  } cases[] = {
      {R"({"prompt": 17})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt"},
      {R"({"prompt": ["a", [1]]})", "prompt"},
      {R"({"prompt": [[1], "a"]})", "prompt"},
      {R"({"prompt": ["a", ""]})", "prompt"},
      {R"({"prompt": [[1], []]})", "prompt"},
      {R"({"prompt": [[1, 100352]]})", "prompt"},
      {R"({"prompt": [1], "n": 0})", "n"},
      {R"({"prompt": [1], "n": 129})", "n"},
      {R"({"prompt": [1], "n": "2"})", "n"},
      {R"({"prompt": [1], "n": 1.5})", "n"},
      {R"({"prompt": [1], "n": 2, "best_of": 1})", "best_of"},
      {R"({"prompt": [1], "best_of": 3, "stream": true})", "best_of"},
      {R"({"prompt": [1], "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": [1], "max_tokens": 0, "echo": false})", "max_tokens"},
      {R"({"prompt": [1], "echo": 1})", "echo"},
      {R"({"prompt": [1], "logprobs": 21})", "logprobs"},
      {R"({"prompt": [1], "logprobs": true})", "logprobs"},
      {R"({"prompt": [1], "logit_bias": [5]})", "logit_bias"},
      {R"({"prompt": [1], "logit_bias": {"abc": 1}})", "logit_bias"},
      {R"({"prompt": [1], "logit_bias": {"-1": 1}})", "logit_bias"},
      {R"({"prompt": [1], "logit_bias": {"100352": 1}})", "logit_bias"},
      {R"({"prompt": [1], "logit_bias": {"5": 100.5}})", "logit_bias"},
      {R"({"prompt": [1], "logit_bias": {"5": "x"}})", "logit_bias"},
      {R"({"prompt": [1], "logit_bias": {"7": 1, "07": 2}})", "logit_bias"},
      {R"({"prompt": [1], "presence_penalty": 2.5})", "presence_penalty"},
      {R"({"prompt": [1], "frequency_penalty": -2.01})", "frequency_penalty"},
      {R"({"prompt": [1], "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": [1], "repetition_penalty": -1})", "repetition_penalty"},
      {R"({"prompt": [1], "min_tokens": -1})", "min_tokens"},
      {R"({"prompt": [1], "min_tokens": 17})", "min_tokens"},
      {R"({"prompt": [1], "min_p": 1.5})", "min_p"},
      {R"({"prompt": [1], "min_p": -0.1})", "min_p"},
      {R"({"prompt": [1], "stop_token_ids": 5})", "stop_token_ids"},
      {R"({"prompt": [1], "stop_token_ids": [-1]})", "stop_token_ids"},
      {R"({"prompt": [1], "stop_token_ids": [100352]})", "stop_token_ids"},
      {R"({"prompt": [1], "stop_token_ids": ["a"]})", "stop_token_ids"},
      {R"({"prompt": [1], "include_stop_str_in_output": "yes"})", "include_stop_str_in_output"},
      {R"({"prompt": [1], "skip_special_tokens": 1})", "skip_special_tokens"},
      {R"({"prompt": [1], "ignore_eos": "x"})", "ignore_eos"},
      {R"({"prompt": [1], "return_tokens_as_token_ids": "y"})", "return_tokens_as_token_ids"},
      {R"({"prompt": [1], "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": [1], "stream": true, "stream_options": 5})", "stream_options"},
      {R"({"prompt": [1], "stream": true, "stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
      {R"({"prompt": [1], "stream": true, "stream_options": {"foo": true}})", "stream_options.foo"},
      {R"({"prompt": [1], "stream": true, "stream_options": {"continuous_usage_stats": true}})",
       "stream_options.continuous_usage_stats"},
      {R"({"prompt": [1], "suffix": "x"})", "suffix"},
      {R"({"prompt": [1], "response_format": {"type": "xml"}})", "response_format.type"},
      {R"({"prompt": [1], "tools": [{"type": "function"}]})", "tools"},
      {R"({"prompt": [1], "tool_choice": "auto"})", "tool_choice"},
      {R"({"prompt": [1], "functions": [{}]})", "functions"},
      {R"({"prompt": [1], "function_call": "auto"})", "function_call"},
      {R"({"prompt": [1], "guided_json": 5})", "guided_json"},
      {R"({"prompt": [1], "guided_regex": 5})", "guided_regex"},
      {R"({"prompt": [1], "guided_choice": []})", "guided_choice"},
      {R"({"prompt": [1], "guided_whitespace_pattern": " *"})", "guided_whitespace_pattern"},
      {R"({"prompt": [1], "prompt_logprobs": 1})", "prompt_logprobs"},
      {R"({"prompt": [1], "use_beam_search": true})", "use_beam_search"},
      {R"({"prompt": [1], "length_penalty": 2})", "length_penalty"},
      {R"({"prompt": [1], "truncate_prompt_tokens": 5})", "truncate_prompt_tokens"},
      {R"({"prompt": [1], "bad_words": ["x"]})", "bad_words"},
      {R"({"prompt": [1], "allowed_token_ids": [1]})", "allowed_token_ids"},
      {R"({"prompt": [1], "foo": 1})", "foo"},
      {R"({"prompt": [1], "temperature": 1e999})", "temperature"},
      {R"({"prompt": [1], "logit_bias": {"5": -1e999}})", "logit_bias"},
      {R"({"prompt": [1, 1e400]})", "prompt"},
      {R"({"prompt": [1], "model": "x"})", "model"},
  };
  for (const auto& c : cases) {
    const Refusal r = refused(c.body);
    EXPECT_EQ(r.status, 400) << c.body;
    EXPECT_EQ(r.param, c.param) << c.body << ": " << r.message;
    EXPECT_FALSE(r.message.empty()) << c.body;
  }
}

TEST(CompletionRequest, MessagesStateTheValues) {
  Refusal r = refused(R"({"prompt": [1], "logit_bias": {"5": -1e999}})");
  EXPECT_THAT(r.message, HasSubstr("logit_bias: the number -1e999 is out of range"));
  r = refused(R"({"prompt": [1, 1e400]})");
  EXPECT_THAT(r.message, HasSubstr("prompt: the number 1e400"));
  r = refused(R"({"prompt": [1], "logit_bias": {"100352": 1}})");
  EXPECT_THAT(r.message, HasSubstr("token id 100352 is outside the vocabulary [0, 100352)"));
  r = refused(R"({"prompt": [1], "logit_bias": {"5": 100.5}})");
  EXPECT_THAT(r.message, AllOf(HasSubstr("the bias of token id 5"), HasSubstr("100.5")));
  r = refused(R"({"prompt": [1], "n": 129})");
  EXPECT_THAT(r.message, AllOf(HasSubstr("[1, 128]"), HasSubstr("129")));
  // Whole numbers past 64 bits are too large, not "not an integer".
  r = refused(R"({"prompt": [1], "top_k": 1e20})");
  EXPECT_EQ(r.param, "top_k");
  EXPECT_EQ(r.message, "top_k is too large: 1e+20 (it must be an integer of at most 64 bits)");
  r = refused(R"({"prompt": [1], "seed": 18446744073709551616})");
  EXPECT_THAT(r.message, HasSubstr("seed is too large: 1.8446744073709552e+19"));
  r = refused(R"({"prompt": [1], "max_tokens": 1e20})");
  EXPECT_EQ(r.message, "max_tokens is too large: 1e+20 (it must be an integer ≥ 0)");
  r = refused(R"({"prompt": [1], "top_k": 2.5})");
  EXPECT_THAT(r.message, HasSubstr("top_k must be an integer, got 2.5"));
  r = refused(R"({"prompt": [1], "foo": 1})");
  EXPECT_THAT(r.message, HasSubstr("unknown field foo"));
  r = refused(R"({"prompt": [1], "min_tokens": 17})");
  EXPECT_THAT(r.message, HasSubstr("min_tokens 17 is more than max_tokens 16"));
  r = refused(R"({"prompt": [[9906], [5, 6, 100352]]})");
  EXPECT_THAT(r.message, HasSubstr("prompt 1: token id 100352 at position 2"));
  r = refused(R"({"prompt": [1], "stream": true, "stream_options": {"foo": true}})");
  EXPECT_THAT(r.message, HasSubstr("unknown field stream_options.foo"));
}

TEST(CompletionRequest, NoOpValuesOfUnimplementedFieldsAndFieldsWithoutEffectAreAccepted) {
  const ApiRequest r = parse(R"({"prompt": [1], "suffix": "", "tools": [], "tool_choice": "none",
      "functions": [], "function_call": "none", "response_format": {"type": "text"},
      "use_beam_search": false, "length_penalty": 1.0, "bad_words": [], "prompt_logprobs": null,
      "guided_json": null, "parallel_tool_calls": true, "user": "u", "metadata": {"a": "b"},
      "store": false, "service_tier": "auto", "add_special_tokens": true, "foo": null})");
  EXPECT_EQ(r.prompts.size(), 1u);
}

TEST(CompletionRequest, EveryFieldReachesTheParams) {
  const ApiRequest r = parse(R"({"model": "m", "prompt": [0, 100351], "max_tokens": 20,
      "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 42,
      "stop": ["a", "bc"], "stop_token_ids": [100257, 5, 5], "presence_penalty": 0.5,
      "frequency_penalty": -1.25, "repetition_penalty": 1.1,
      "logit_bias": {"100": -100, "5": 2.5, "0": 100}, "min_tokens": 3,
      "include_stop_str_in_output": true, "skip_special_tokens": false, "ignore_eos": true,
      "stream": true, "stream_options": {"include_usage": true}, "logprobs": 5, "n": 2,
      "best_of": 2, "echo": true, "return_tokens_as_token_ids": true})");
  EXPECT_EQ(r.endpoint, ApiEndpoint::Completions);
  ASSERT_EQ(r.prompts.size(), 1u);
  const CompletionParams& p = r.prompts[0];
  EXPECT_EQ(p.prompt, (std::vector<int32_t>{0, 100351}));
  EXPECT_EQ(p.max_tokens, 20);
  EXPECT_EQ(p.sampling.temperature, 0.5);
  EXPECT_EQ(p.sampling.top_p, 0.9);
  EXPECT_EQ(p.sampling.top_k, 40);
  EXPECT_EQ(p.sampling.min_p, 0.05);
  EXPECT_EQ(p.sampling.seed, 42u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{5, 100257}));
  EXPECT_EQ(p.adjust.presence_penalty, 0.5);
  EXPECT_EQ(p.adjust.frequency_penalty, -1.25);
  EXPECT_EQ(p.adjust.repetition_penalty, 1.1);
  EXPECT_EQ(p.adjust.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{0, 100.0f}, {5, 2.5f}, {100, -100.0f}}));
  EXPECT_EQ(p.min_tokens, 3);
  EXPECT_TRUE(p.include_stop_str_in_output);
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_TRUE(p.stream);
  EXPECT_EQ(p.logprobs, 5);
  EXPECT_TRUE(p.want_logprobs);
  EXPECT_TRUE(p.prompt_logprobs);
  EXPECT_EQ(p.choices, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(r.want_logprobs);
  EXPECT_EQ(r.top_logprobs, 5);
  EXPECT_TRUE(r.return_tokens_as_token_ids);
  EXPECT_FALSE(r.skip_special_tokens);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.best_of, 2);
}

TEST(CompletionRequest, Defaults) {
  const ApiRequest r = parse(R"({"prompt": "Hello!"})");
  const CompletionParams& p = r.prompts[0];
  EXPECT_EQ(p.prompt, fixture()["prompts"]["Hello!"].get<std::vector<int32_t>>());
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_EQ(p.sampling.temperature, 1.0);
  EXPECT_EQ(p.sampling.top_p, 1.0);
  EXPECT_EQ(p.sampling.top_k, 0);
  EXPECT_EQ(p.sampling.min_p, 0.0);
  EXPECT_EQ(p.sampling.seed, kFallbackSeed);
  EXPECT_FALSE(p.adjust.any());
  EXPECT_EQ(p.min_tokens, 0);
  EXPECT_TRUE(p.stop_token_ids.empty());
  EXPECT_FALSE(p.include_stop_str_in_output);
  EXPECT_TRUE(p.skip_special_tokens);
  EXPECT_FALSE(p.prompt_logprobs);
  EXPECT_FALSE(p.want_logprobs);
  EXPECT_EQ(p.choices, 1);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.best_of, 1);
  EXPECT_FALSE(r.echo || r.stream || r.include_usage || r.return_tokens_as_token_ids);
  EXPECT_EQ(r.prompt_texts, std::vector<std::string>{"Hello!"});
}

TEST(CompletionRequest, BatchesOfPromptsGiveOneParamsEach) {
  ApiRequest r = parse(R"({"prompt": ["Hello!", "Once upon a time"], "max_tokens": 3})");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[0].prompt, fixture()["prompts"]["Hello!"].get<std::vector<int32_t>>());
  EXPECT_EQ(r.prompts[1].prompt, fixture()["prompts"]["Once upon a time"].get<std::vector<int32_t>>());
  EXPECT_EQ(r.prompts[1].max_tokens, 3);
  EXPECT_EQ(r.prompt_texts, (std::vector<std::string>{"Hello!", "Once upon a time"}));
  // Without a seed the prompts draw apart (prompt 0 keeps the server's seed); with one
  // they share it, as vLLM.
  EXPECT_EQ(r.prompts[0].sampling.seed, kFallbackSeed);
  EXPECT_EQ(r.prompts[1].sampling.seed, choice_seed(kFallbackSeed, 1));
  EXPECT_NE(r.prompts[1].sampling.seed, kFallbackSeed);
  r = parse(R"({"prompt": [[9906, 0], [1917]], "seed": 7})");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[0].prompt, (std::vector<int32_t>{9906, 0}));
  EXPECT_EQ(r.prompts[1].prompt, (std::vector<int32_t>{1917}));
  EXPECT_EQ(r.prompts[0].sampling.seed, 7u);
  EXPECT_EQ(r.prompts[1].sampling.seed, 7u);
  // Token prompts are echoed as their decoded text.
  EXPECT_EQ(r.prompt_texts, (std::vector<std::string>{"Hello!", " world"}));
  // A list of one token list is a batch of one.
  EXPECT_EQ(parse(R"({"prompt": [[1, 2]]})").prompts.size(), 1u);
}

TEST(CompletionRequest, ChoicesAreTheLargerOfNAndBestOf) {
  ApiRequest r = parse(R"({"prompt": [1], "n": 2, "best_of": 3})");
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.best_of, 3);
  EXPECT_EQ(r.prompts[0].choices, 3);
  r = parse(R"({"prompt": [1], "n": 3})");
  EXPECT_EQ(r.best_of, 3);
  EXPECT_EQ(r.prompts[0].choices, 3);
  r = parse(R"({"prompt": [1], "n": 2, "best_of": 2, "stream": true})");
  EXPECT_EQ(r.prompts[0].choices, 2);
  const ServedModel few{.name = "m", .context_length = 64, .vocab_size = 100352, .cache_tokens = 1000, .max_choices = 4};
  EXPECT_EQ(parse(R"({"prompt": [1], "best_of": 4})", few).prompts[0].choices, 4);
  EXPECT_EQ(refused(R"({"prompt": [1], "best_of": 5})", few).param, "best_of");
}

TEST(CompletionRequest, EchoScoresThePromptWithLogprobs) {
  ApiRequest r = parse(R"({"prompt": [9906, 0], "echo": true, "max_tokens": 0, "logprobs": 2})");
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.prompts[0].max_tokens, 0);
  EXPECT_TRUE(r.prompts[0].prompt_logprobs);
  EXPECT_EQ(r.prompt_texts[0], "Hello!");
  r = parse(R"({"prompt": "Hello!", "echo": true})");
  EXPECT_FALSE(r.prompts[0].prompt_logprobs);
  EXPECT_EQ(r.prompts[0].max_tokens, 16);
  // With max_tokens 0 the prompt may fill the whole context.
  std::string ids = "[1";
  for (int i = 1; i < 64; ++i) ids += ",1";
  EXPECT_EQ(parse(R"({"prompt": )" + ids + R"(], "echo": true, "max_tokens": 0})").prompts[0].prompt.size(), 64u);
  EXPECT_EQ(refused(R"({"prompt": )" + ids + R"(], "echo": true, "max_tokens": 1})").param, "prompt");
}

TEST(CompletionRequest, TheKvCacheMustHoldEveryChoice) {
  const ServedModel small{.name = "m", .context_length = 64, .vocab_size = 100352, .cache_tokens = 30};
  std::string ids20 = "[1";
  for (int i = 1; i < 20; ++i) ids20 += ",1";
  ids20 += "]";
  // 20 prompt positions shared + 2 × 5 generated = 30: fits; 3 × 5 does not.
  EXPECT_EQ(parse(R"({"prompt": )" + ids20 + R"(, "max_tokens": 5, "n": 2})", small).prompts[0].choices, 2);
  Refusal r = refused(R"({"prompt": )" + ids20 + R"(, "max_tokens": 5, "n": 3})", small);
  EXPECT_EQ(r.param, "max_tokens");
  EXPECT_THAT(r.message, AllOf(HasSubstr("20 tokens"), HasSubstr("max_tokens 5 × 3 choices"), HasSubstr("30")));
  r = refused(R"({"prompt": )" + ids20 + R"(, "max_tokens": 5, "n": 1, "best_of": 3})", small);
  EXPECT_EQ(r.param, "max_tokens");
}

TEST(CompletionRequest, OverflowingNumbersNameTheirField) {
  // nlohmann refuses 1e999 while parsing ("number overflow"); the refusal still names it.
  Refusal r = refused(R"({"prompt": [1], "max_tokens": 1e999})");
  EXPECT_EQ(r.param, "max_tokens");
  EXPECT_THAT(r.message, HasSubstr("max_tokens: the number 1e999 is out of range"));
  r = refused(R"({"prompt": [1], "stream": true, "stream_options": {"include_usage": -2e308}})");
  EXPECT_EQ(r.param, "stream_options");
  // Within a double's range, a number too large for an integer is that field's error.
  r = refused(R"({"prompt": [1], "max_tokens": 1e300})");
  EXPECT_EQ(r.param, "max_tokens");
  r = refused(R"({"prompt": [1], "n": 18446744073709551616})");
  EXPECT_EQ(r.param, "n");
}

}  // namespace
}  // namespace olmo2
