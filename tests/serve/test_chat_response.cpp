// /v1/chat/completions responses (runtime/serve/api/chat_response.h): the chat.completion
// body, chat.completion.chunk events (role in the first delta, an empty last delta),
// include_usage, chat logprobs, echo.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/serve/api_test_util.h"

namespace olmo2 {
namespace {

using namespace api_test;
using nlohmann::json;

constexpr int64_t kCreated = 1700000000;

std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt, const nlohmann::ordered_json&) {
  std::string out = "<|endoftext|>";
  for (const auto& m : messages) out += "<|" + m["role"].get<std::string>() + "|>\n" + m["content"].get<std::string>() + "\n";
  return add_generation_prompt ? out + "<|assistant|>\n" : out;
}

ApiRequest request(const std::string& fields) {
  return parse_chat(R"({"messages": [{"role": "user", "content": "Hi"}])" + fields + "}", kModel, tokenizer(), render,
                    kFallbackSeed);
}

TEST(ChatResponse, BodyWithMessageLogprobsAndUsage) {
  const ApiRequest r = request(R"(, "n": 2, "logprobs": true, "top_logprobs": 1, "max_tokens": 4)");
  ChatAssembler a(r, tokenizer(), "m", "chatcmpl-test", kCreated);
  a.feed(0, chunk(1, "!", {token(0, -1.0f, {{-0.5f, 9906}})}, "length"));
  a.feed(0, chunk(0, "Hello", {token(9906, -0.5f, {{-0.5f, 9906}})}));
  a.feed(0, chunk(0, "!", {token(0, -0.25f, {{-0.25f, 0}})}, "stop"));
  ASSERT_TRUE(a.done());
  const json b = a.body();
  const int64_t plen = static_cast<int64_t>(r.prompts[0].prompt.size());
  EXPECT_EQ(b, json::parse(R"({"id": "chatcmpl-test", "object": "chat.completion", "created": 1700000000,
      "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop",
         "logprobs": {"content": [
           {"token": "Hello", "logprob": -0.5, "bytes": [72, 101, 108, 108, 111],
            "top_logprobs": [{"token": "Hello", "logprob": -0.5, "bytes": [72, 101, 108, 108, 111]}]},
           {"token": "!", "logprob": -0.25, "bytes": [33],
            "top_logprobs": [{"token": "!", "logprob": -0.25, "bytes": [33]}]}]}},
        {"index": 1, "message": {"role": "assistant", "content": "!"}, "finish_reason": "length",
         "logprobs": {"content": [
           {"token": "!", "logprob": -1.0, "bytes": [33],
            "top_logprobs": [{"token": "Hello", "logprob": -0.5, "bytes": [72, 101, 108, 108, 111]}]}]}}],
      "usage": {"prompt_tokens": )" + std::to_string(plen) + R"(, "completion_tokens": 3,
                "total_tokens": )" + std::to_string(plen + 3) + "}}"));
  // Without logprobs: null.
  const ApiRequest plain = request("");
  ChatAssembler p(plain, tokenizer(), "m", "chatcmpl-test", kCreated);
  p.feed(0, chunk(0, "Hi", {token(13347)}, "stop"));
  EXPECT_TRUE(p.body()["choices"][0]["logprobs"].is_null());
}

TEST(ChatResponse, StreamDeltasRoleFirstAndUsageLast) {
  const ApiRequest r = request(R"(, "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 4)");
  ChatAssembler a(r, tokenizer(), "m", "chatcmpl-test", kCreated);
  std::vector<std::string> events = a.feed(0, chunk(0, "Hel", {token(1)}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(event_json(events[0]), json::parse(R"({"id": "chatcmpl-test", "object": "chat.completion.chunk",
      "created": 1700000000, "model": "m", "usage": null, "choices": [{"index": 0,
      "delta": {"role": "assistant", "content": "Hel"}, "logprobs": null, "finish_reason": null}]})"));
  events = a.feed(0, chunk(0, "lo", {token(2)}));
  EXPECT_EQ(event_json(events[0])["choices"][0]["delta"], json::parse(R"({"content": "lo"})"));
  events = a.feed(0, chunk(0, "", {}, "stop"));  // the last chunk has no text: an empty delta
  EXPECT_EQ(event_json(events[0])["choices"][0]["delta"], json::object());
  EXPECT_EQ(event_json(events[0])["choices"][0]["finish_reason"], "stop");
  ASSERT_TRUE(a.done());
  events = a.finish();
  ASSERT_EQ(events.size(), 2u);
  const json usage = event_json(events[0]);
  EXPECT_EQ(usage["object"], "chat.completion.chunk");
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_EQ(events[1], "data: [DONE]\n\n");
  // A first chunk without text still says who speaks.
  const ApiRequest s = request(R"(, "stream": true)");
  ChatAssembler b(s, tokenizer(), "m", "chatcmpl-test", kCreated);
  events = b.feed(0, chunk(0, "", {}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(event_json(events[0])["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_FALSE(event_json(events[0]).contains("usage"));
  EXPECT_TRUE(b.feed(0, chunk(0, "", {})).empty());
}

// Speculative decoding (docs/architecture.md §8): usage's "speculative" field, in the
// body and in the stream's usage event, as for completions (the assembler they share).
TEST(ChatResponse, UsageCarriesSpeculationWhenTokensWereDrafted) {
  CompletionChunk last = chunk(0, "Hello", {token(1), token(2), token(3)}, "stop");
  last.spec_proposed = 4, last.spec_accepted = 2;
  const ApiRequest whole = request(R"(, "max_tokens": 4)");
  ChatAssembler a(whole, tokenizer(), "m", "chatcmpl-test", kCreated);
  a.feed(0, last);
  EXPECT_EQ(a.body()["usage"]["speculative"],
            json::parse(R"({"proposed_tokens": 4, "accepted_tokens": 2, "acceptance_rate": 0.5})"));
  const ApiRequest r = request(R"(, "stream": true, "stream_options": {"include_usage": true})");
  ChatAssembler b(r, tokenizer(), "m", "chatcmpl-test", kCreated);
  b.feed(0, last);
  const json usage = event_json(b.finish()[0])["usage"];
  EXPECT_EQ(usage["completion_tokens"], 3);
  EXPECT_EQ(usage["speculative"]["acceptance_rate"].get<double>(), 0.5);
}

TEST(ChatResponse, EchoStartsTheContentWithTheAssistantsLastMessage) {
  const ApiRequest r = parse_chat(R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello"}], "echo": true, "add_generation_prompt": false,
      "logprobs": true})", kModel, tokenizer(), render, kFallbackSeed);
  ChatAssembler a(r, tokenizer(), "m", "chatcmpl-test", kCreated);
  a.feed(0, chunk(0, "!", {token(0, -0.5f)}, "stop"));
  const json choice = a.body()["choices"][0];
  EXPECT_EQ(choice["message"]["content"], "Hello!");
  EXPECT_EQ(choice["logprobs"]["content"].size(), 1u);  // the echoed text has no entries
  const ApiRequest s = parse_chat(R"({"messages": [{"role": "assistant", "content": "Hello"}], "echo": true,
      "stream": true})", kModel, tokenizer(), render, kFallbackSeed);
  ChatAssembler b(s, tokenizer(), "m", "chatcmpl-test", kCreated);
  const auto events = b.feed(0, chunk(0, "!", {token(0)}, "stop"));
  EXPECT_EQ(event_json(events[0])["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": "Hello!"})"));
}

TEST(ChatResponse, MidStreamErrorsKeepTheirCode) {
  const ApiRequest r = request(R"(, "stream": true)");
  ChatAssembler a(r, tokenizer(), "m", "chatcmpl-test", kCreated);
  CompletionChunk failure;
  failure.error = "internal error: the engine stopped";
  failure.error_status = 500;
  const auto events = a.feed(0, failure);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(event_json(events[0])["error"]["code"], 500);
  EXPECT_EQ(event_json(events[0])["error"]["type"], "server_error");
  EXPECT_EQ(a.finish(), std::vector<std::string>{"data: [DONE]\n\n"});
}

}  // namespace
}  // namespace olmo2
