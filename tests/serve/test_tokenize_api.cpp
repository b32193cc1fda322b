// /tokenize, /detokenize and /v1/models bodies (runtime/serve/api/tokenize_api.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/serve/api_test_util.h"

namespace olmo2 {
namespace {

using namespace api_test;
using nlohmann::json;
using ::testing::HasSubstr;

std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt, const nlohmann::ordered_json&) {
  std::string out = "<|endoftext|>";
  for (const auto& m : messages) out += "<|" + m["role"].get<std::string>() + "|>\n" + m["content"].get<std::string>() + "\n";
  return add_generation_prompt ? out + "<|assistant|>\n" : out;
}

json tokenize(const std::string& body) { return tokenize_response(body, kModel, tokenizer(), render); }

TEST(TokenizeApi, PromptsAndMessages) {
  EXPECT_EQ(tokenize(R"({"prompt": "Hello!"})"),
            json::parse(R"({"count": 2, "max_model_len": 64, "tokens": [9906, 0], "token_strs": null})"));
  EXPECT_EQ(tokenize(R"({"prompt": "Hello!", "return_token_strs": true, "add_special_tokens": true, "model": "m"})")
                ["token_strs"],
            json::parse(R"(["Hello", "!"])"));
  const json& chat = fixture()["chat"];
  const json r = tokenize(R"({"messages": )" + chat["messages"].dump() + "}");
  EXPECT_EQ(r["tokens"], chat["ids"]);
  EXPECT_EQ(r["count"], chat["ids"].size());
  // Without the generation prompt the text ends before "<|assistant|>\n".
  const json shorter = tokenize(R"({"messages": )" + chat["messages"].dump() + R"(, "add_generation_prompt": false})");
  EXPECT_EQ(shorter["count"].get<size_t>() + tokenizer().encode("<|assistant|>\n").size(), chat["ids"].size());
}

TEST(TokenizeApi, Refusals) {
  const struct {
    std::string body, param;
  } cases[] = {
      {R"({})", "prompt"},
      {R"({"prompt": "a", "messages": [{"role": "user", "content": "a"}]})", "messages"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": "a", "model": "x"})", "model"},
      {R"({"prompt": "a", "foo": 1})", "foo"},
      {R"({"messages": [{"role": "robot", "content": "a"}]})", "messages[0].role"},
      {R"({"prompt": "a", "add_special_tokens": "yes"})", "add_special_tokens"},
      {R"([1])", ""},
  };
  for (const auto& c : cases) {
    const Refusal r = refusal(c.body, [&] { tokenize(c.body); });
    EXPECT_EQ(r.status, 400) << c.body;
    EXPECT_EQ(r.param, c.param) << c.body << ": " << r.message;
  }
  const Refusal r = refusal("no template", [] {
    tokenize_response(R"({"messages": [{"role": "user", "content": "a"}]})", kModel, tokenizer(), ChatRenderer());
  });
  EXPECT_EQ(r.param, "messages");
}

TEST(TokenizeApi, Detokenize) {
  EXPECT_EQ(detokenize_response(R"({"tokens": [9906, 0]})", kModel, tokenizer()), json::parse(R"({"prompt": "Hello!"})"));
  const json& c = offset_case("special_inside");  // special tokens are kept
  EXPECT_EQ(detokenize_response(R"({"tokens": )" + c["ids"].dump() + "}", kModel, tokenizer())["prompt"],
            "x<|endoftext|>y");
  for (const std::string body : {R"({})", R"({"tokens": "a"})", R"({"tokens": [1, -1]})", R"({"tokens": [100352]})",
                                 R"({"tokens": [1.5]})"}) {
    const Refusal r = refusal(body, [&] { detokenize_response(body, kModel, tokenizer()); });
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(r.param, "tokens") << body;
  }
  const Refusal r = refusal("range", [&] { detokenize_response(R"({"tokens": [100352]})", kModel, tokenizer()); });
  EXPECT_THAT(r.message, HasSubstr("tokens[0] is not a token id of the model's vocabulary [0, 100352)"));
  // The one rule of completions: ids of the model's vocabulary past the tokenizer's (the
  // padded rows 100278 … 100351 of dolma2's 100352) are taken and have no text.
  EXPECT_EQ(detokenize_response(R"({"tokens": [9906, 100278, 100351, 0]})", kModel, tokenizer()),
            json::parse(R"({"prompt": "Hello!"})"));
}

TEST(TokenizeApi, Models) {
  const json m = json::parse(R"({"id": "m", "object": "model", "created": 1700000000, "owned_by": "olmo2",
      "max_model_len": 64})");
  EXPECT_EQ(model_json(kModel, 1700000000), m);
  EXPECT_EQ(model_response("m", kModel, 1700000000), m);
  EXPECT_EQ(models_list_json(kModel, 1700000000), (json{{"object", "list"}, {"data", json::array({m})}}));
  const Refusal r = refusal("unknown model", [] { model_response("gpt-4", kModel, 1700000000); });
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.param, "model");
  EXPECT_THAT(r.message, HasSubstr("\"gpt-4\" does not exist"));
  EXPECT_EQ(error_json(404, r.message, r.param)["error"]["code"], 404);
}

}  // namespace
}  // namespace olmo2
