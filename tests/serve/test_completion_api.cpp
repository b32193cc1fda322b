// Validation of single-prompt /v1/completions bodies (parse_completions): every refusal
// is a 400 naming its field, and accepted bodies give the documented defaults. Batches,
// choices, echo and the other fields: test_completion_request.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/serve/api/api_error.h"
#include "runtime/serve/api/api_request.h"
#include "runtime/serve/api/chat_request.h"
#include "runtime/serve/api/chat_response.h"
#include "runtime/serve/api/completion_request.h"
#include "runtime/serve/api/completion_response.h"
#include "runtime/serve/api/logprobs_json.h"
#include "runtime/serve/api/response_id.h"
#include "runtime/serve/api/served_model.h"
#include "runtime/serve/api/token_text.h"
#include "runtime/serve/api/tokenize_api.h"
#include "runtime/serve/serve_request.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const ServedModel kModel{
    .name = "m", .context_length = 64, .vocab_size = 100352, .cache_tokens = 1000};
constexpr uint64_t kFallbackSeed = 987654321;

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_file(test::source_path("data/dolma2-tokenizer.json"));
  return t;
}

CompletionParams parse(const std::string& body, const ServedModel& model = kModel) {
  ApiRequest r = parse_completions(body, model, tokenizer(), kFallbackSeed);
  EXPECT_EQ(r.prompts.size(), 1u) << body;
  return std::move(r.prompts.at(0));
}

/// A prompt of n token ids as JSON.
std::string ids(int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) {
    if (i) s += ',';
    s += std::to_string(1000 + i);
  }
  return s + "]";
}

struct Refusal {
  int status = 0;
  std::string param, message;
};

Refusal refusal(const std::string& body, const ServedModel& model = kModel) {
  try {
    parse(body, model);
  } catch (const ApiError& e) {
    return {e.status(), e.param(), e.what()};
  } catch (const std::exception& e) {
    ADD_FAILURE() << body << ": not an ApiError: " << e.what();
    return {};
  }
  ADD_FAILURE() << body << ": accepted";
  return {};
}

TEST(CompletionApi, EveryRefusalIs400NamingItsField) {
  const struct {
    std::string body, param;
  } cases[] = {
      {R"({"prompt": ""})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": 17})", "prompt"},
      {R"({"max_tokens": 4})", "prompt"},
      {R"({"prompt": [1], "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": [1], "max_tokens": -3})", "max_tokens"},
      {R"({"prompt": [1], "max_tokens": 2.5})", "max_tokens"},
      {R"({"prompt": [1], "temperature": -1})", "temperature"},
      {R"({"prompt": [1], "temperature": "hot"})", "temperature"},
      {R"({"prompt": [1], "top_p": 0})", "top_p"},
      {R"({"prompt": [1], "top_p": 1.5})", "top_p"},
      {R"({"prompt": [1], "top_k": -2})", "top_k"},
      {R"({"prompt": [1], "stop": ""})", "stop"},
      {R"({"prompt": [1], "stop": [1]})", "stop"},
      {R"({"prompt": [1], "stop": ["a", ""]})", "stop"},
      {R"({"prompt": [1], "logprobs": 21})", "logprobs"},
      {R"({"prompt": [1], "logprobs": -1})", "logprobs"},
      {R"({"prompt": [1], "model": "gpt-4"})", "model"},
      {R"({"prompt": [1], "stream": "yes"})", "stream"},
      {R"({"prompt": [1], "seed": 1.5})", "seed"},
      {R"({"prompt": [1], "presence_penalty": 2.5})", "presence_penalty"},
      {R"({"prompt": [1], "foo": 1})", "foo"},
      {R"({"prompt": [1)", ""},
      {"", ""},
      {R"([{"prompt": [1]}])", ""},
      {R"("hello")", ""},
  };
  for (const auto& c : cases) {
    const Refusal r = refusal(c.body);
    EXPECT_EQ(r.status, 400) << c.body;
    EXPECT_EQ(r.param, c.param) << c.body << ": " << r.message;
    EXPECT_FALSE(r.message.empty()) << c.body;
  }
}

TEST(CompletionApi, MessagesStateTheOffendingValues) {
  Refusal r = refusal(R"({"prompt": [5, 6, 100352, 7]})");
  EXPECT_EQ(r.param, "prompt");
  EXPECT_THAT(r.message, AllOf(HasSubstr("100352"), HasSubstr("position 2")));
  r = refusal(R"({"prompt": [5, -1]})");
  EXPECT_THAT(r.message, AllOf(HasSubstr("-1"), HasSubstr("position 1")));
  // 64 tokens fill the context: no room for one generated token.
  r = refusal(R"({"prompt": )" + ids(64) + "}");
  EXPECT_EQ(r.param, "prompt");
  EXPECT_THAT(r.message, AllOf(HasSubstr("64 tokens"), HasSubstr("context length is 64")));
  r = refusal(R"({"prompt": )" + ids(60) + R"(, "max_tokens": 5})");
  EXPECT_EQ(r.param, "max_tokens");
  EXPECT_THAT(r.message, AllOf(HasSubstr("60 tokens"), HasSubstr("max_tokens 5"), HasSubstr("64"),
                               HasSubstr("at most 4")));
  // Within the context but over the KV cache.
  const ServedModel small{
      .name = "m", .context_length = 64, .vocab_size = 100352, .cache_tokens = 30};
  r = refusal(R"({"prompt": )" + ids(20) + R"(, "max_tokens": 11})", small);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.param, "max_tokens");
  EXPECT_THAT(r.message,
              AllOf(HasSubstr("20 tokens"), HasSubstr("max_tokens 11"), HasSubstr("30")));
  EXPECT_EQ(parse(R"({"prompt": )" + ids(20) + R"(, "max_tokens": 10})", small).max_tokens, 10);
  // A max_tokens near 2^63 must not wrap prompt + max_tokens around to a small number.
  r = refusal(R"({"prompt": [1, 2], "max_tokens": 9223372036854775807})");
  EXPECT_EQ(r.param, "max_tokens");
  EXPECT_THAT(r.message, AllOf(HasSubstr("9223372036854775807"), HasSubstr("64")));
  r = refusal(R"({"prompt": [1], "model": "gpt-4"})");
  EXPECT_THAT(r.message, AllOf(HasSubstr("gpt-4"), HasSubstr("\"m\"")));
  r = refusal(R"({"prompt": [1], "top_p": 1.5})");
  EXPECT_THAT(r.message, HasSubstr("1.5"));
}

TEST(CompletionApi, Defaults) {
  const CompletionParams p = parse(R"({"prompt": [1, 2, 3]})");
  EXPECT_EQ(p.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_EQ(p.sampling.temperature, 1.0);
  EXPECT_EQ(p.sampling.top_p, 1.0);
  EXPECT_EQ(p.sampling.top_k, 0);
  EXPECT_EQ(p.sampling.seed, kFallbackSeed);
  EXPECT_TRUE(p.stop.empty());
  EXPECT_FALSE(p.stream);
  EXPECT_FALSE(p.ignore_eos);
  EXPECT_FALSE(p.want_logprobs);
  EXPECT_EQ(p.logprobs, 0);
  // null is "not given".
  const CompletionParams q =
      parse(R"({"prompt": [4], "max_tokens": null, "temperature": null, "seed": null})");
  EXPECT_EQ(q.max_tokens, 16);
  EXPECT_EQ(q.sampling.temperature, 1.0);
  EXPECT_EQ(q.sampling.seed, kFallbackSeed);
}

TEST(CompletionApi, AcceptedFields) {
  CompletionParams p =
      parse(R"({"model": "m", "prompt": [0, 100351], "max_tokens": 62, "temperature": 0,
      "top_p": 0.5, "top_k": -1, "seed": 42, "stop": "\n\n", "stream": true, "logprobs": 0,
      "n": 1, "echo": false, "ignore_eos": true, "user": "ignored"})");
  EXPECT_EQ(p.prompt, (std::vector<int32_t>{0, 100351}));
  EXPECT_EQ(p.max_tokens, 62);
  EXPECT_EQ(p.sampling.temperature, 0.0);
  EXPECT_EQ(p.sampling.top_p, 0.5);
  EXPECT_EQ(p.sampling.top_k, 0);
  EXPECT_EQ(p.sampling.seed, 42u);
  EXPECT_EQ(p.stop, std::vector<std::string>{"\n\n"});
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_TRUE(p.want_logprobs);
  EXPECT_EQ(p.logprobs, 0);
  p = parse(
      R"({"prompt": [7], "top_k": 40, "stop": ["a", "bc"], "logprobs": 20, "max_tokens": 63})");
  EXPECT_EQ(p.sampling.top_k, 40);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(p.logprobs, 20);
  EXPECT_EQ(p.max_tokens, 63);
  EXPECT_EQ(parse(R"({"prompt": [7], "seed": 18446744073709551615})").sampling.seed,
            18446744073709551615ull);
  EXPECT_EQ(parse(R"({"prompt": [7], "max_tokens": 8.0})").max_tokens, 8);
  // What the engine applies passes through; the default values of what this route does
  // not do are accepted.
  p = parse(R"({"prompt": [7], "presence_penalty": 0.5, "frequency_penalty": -0.5,
      "repetition_penalty": 1.2, "logit_bias": {"5": 1}, "min_p": 0.1, "min_tokens": 2,
      "stop_token_ids": [5], "include_stop_str_in_output": true, "skip_special_tokens": true,
      "best_of": 1, "echo": false, "stream": true, "stream_options": {"include_usage": true}})");
  EXPECT_EQ(p.adjust.presence_penalty, 0.5);
  EXPECT_EQ(p.adjust.frequency_penalty, -0.5);
  EXPECT_EQ(p.adjust.repetition_penalty, 1.2);
  EXPECT_EQ(p.adjust.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, 1.0f}}));
  EXPECT_EQ(p.sampling.min_p, 0.1);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_EQ(p.stop_token_ids, std::vector<int32_t>{5});
  EXPECT_TRUE(p.include_stop_str_in_output);
}

TEST(CompletionApi, TextPromptIsEncodedByTheTokenizer) {
  EXPECT_EQ(parse(R"({"prompt": "Hello!"})").prompt, (std::vector<int32_t>{9906, 0}));
  const std::string text = "The quick brown fox jumps over the lazy dog.";
  EXPECT_EQ(parse(R"({"prompt": ")" + text + R"("})").prompt, tokenizer().encode(text));
  EXPECT_EQ(tokenizer().encode(text).size(), 10u);
}

TEST(CompletionApi, ATokenizerWiderThanTheModelCostsTheRequestA400) {
  // "Hello!" is 9906, 0: a model of 160 ids cannot take 9906.
  const ServedModel narrow{.name = "m", .context_length = 64, .vocab_size = 160, .cache_tokens = 1000};
  const Refusal r = refusal(R"({"prompt": "Hello!"})", narrow);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.param, "prompt");
  EXPECT_THAT(r.message, HasSubstr("the tokenizer gives token id 9906 at position 0, outside the model's "
                                   "vocabulary [0, 160)"));
}

TEST(CompletionApi, ErrorJson) {
  const nlohmann::json j = error_json(400, "top_p must be in (0, 1]", "top_p");
  EXPECT_EQ(j["error"]["message"], "top_p must be in (0, 1]");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "top_p");
  EXPECT_EQ(j["error"]["code"], 400);
  EXPECT_TRUE(error_json(503, "busy", "")["error"]["param"].is_null());
  EXPECT_EQ(error_json(503, "busy", "")["error"]["type"], "service_unavailable");
}

}  // namespace
}  // namespace olmo2
