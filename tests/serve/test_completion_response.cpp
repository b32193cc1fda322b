// /v1/completions responses from engine chunks (runtime/serve/api/completion_response.h):
// choice order over a batch and n, best_of, echo, usage, text_offset, stream events with
// and without include_usage, errors, response ids.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "tests/serve/api_test_util.h"

namespace olmo2 {
namespace {

using namespace api_test;
using nlohmann::json;

constexpr int64_t kCreated = 1700000000;

ApiRequest request(const std::string& body) { return parse_completions(body, kModel, tokenizer(), kFallbackSeed); }

std::vector<SelectedToken> tokens_of(const std::vector<int32_t>& ids) {
  std::vector<SelectedToken> out;
  for (const int32_t id : ids) out.push_back(token(id));
  return out;
}

TEST(CompletionResponse, ABatchOfPromptsWithNChoicesInOrderAndUsageSummed) {
  const ApiRequest r = request(R"({"prompt": ["Hello!", "Once upon a time"], "n": 2, "max_tokens": 3})");
  CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
  EXPECT_TRUE(a.feed(1, chunk(1, " d", tokens_of({4}))).empty());
  a.feed(0, chunk(0, "a", tokens_of({1}), "length"));
  a.feed(0, chunk(1, "b", tokens_of({2, 2}), "stop"));
  a.feed(1, chunk(0, "c", tokens_of({3}), "length"));
  EXPECT_FALSE(a.done());
  a.feed(1, chunk(1, " e", tokens_of({5}), "stop"));
  ASSERT_TRUE(a.done());
  const json b = a.body();
  EXPECT_EQ(b["id"], "cmpl-test");
  EXPECT_EQ(b["object"], "text_completion");
  EXPECT_EQ(b["created"], kCreated);
  EXPECT_EQ(b["model"], "m");
  const json expected = json::parse(R"([
      {"index": 0, "text": "a", "logprobs": null, "finish_reason": "length"},
      {"index": 1, "text": "b", "logprobs": null, "finish_reason": "stop"},
      {"index": 2, "text": "c", "logprobs": null, "finish_reason": "length"},
      {"index": 3, "text": " d e", "logprobs": null, "finish_reason": "stop"}])");
  EXPECT_EQ(b["choices"], expected);
  // Prompts once each (2 + 4 tokens), every generated token of every choice.
  EXPECT_EQ(b["usage"], json::parse(R"({"prompt_tokens": 6, "completion_tokens": 6, "total_tokens": 12})"));
}

TEST(CompletionResponse, BestOfReturnsTheChoicesWithTheHighestCumulativeLogprob) {
  const auto run = [](const std::string& body, const std::vector<double>& cumulative) {
    const ApiRequest r = request(body);
    CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
    for (size_t c = 0; c < cumulative.size(); ++c) {
      a.feed(0, chunk(static_cast<int32_t>(c), std::string(1, static_cast<char>('A' + c)), tokens_of({1, 2}), "length",
                      cumulative[c]));
    }
    return a.body();
  };
  json b = run(R"({"prompt": [1], "best_of": 3})", {-3, -1, -2});
  ASSERT_EQ(b["choices"].size(), 1u);
  EXPECT_EQ(b["choices"][0]["text"], "B");
  EXPECT_EQ(b["choices"][0]["index"], 0);
  EXPECT_EQ(b["usage"]["completion_tokens"], 6);  // all three choices were generated
  b = run(R"({"prompt": [1], "n": 2, "best_of": 3})", {-3, -1, -2});
  ASSERT_EQ(b["choices"].size(), 2u);
  EXPECT_EQ(b["choices"][0]["text"], "B");
  EXPECT_EQ(b["choices"][1]["text"], "C");
  EXPECT_EQ(b["choices"][1]["index"], 1);
  b = run(R"({"prompt": [1], "best_of": 2})", {-1, -1});  // a tie: the lower choice
  EXPECT_EQ(b["choices"][0]["text"], "A");
  b = run(R"({"prompt": [1], "n": 3})", {-3, -1, -2});  // best_of = n: every choice, in order
  EXPECT_EQ(b["choices"][0]["text"], "A");
  EXPECT_EQ(b["choices"][2]["text"], "C");
}

TEST(CompletionResponse, EchoPrependsThePromptAndItsLogprobs) {
  const ApiRequest r = request(R"({"prompt": "Hello!", "echo": true, "logprobs": 1, "max_tokens": 1})");
  CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
  CompletionChunk c = chunk(0, " world", {token(1917, -0.5f, {{-0.5f, 1917}, {-1.0f, 0}})}, "length");
  c.prompt_tokens = {token(9906), token(0, -1.5f, {{-1.25f, 1917}, {-1.5f, 0}})};
  a.feed(0, c);
  const json b = a.body();
  const json& choice = b["choices"][0];
  EXPECT_EQ(choice["text"], "Hello! world");
  EXPECT_EQ(choice["logprobs"], json::parse(R"({
      "tokens": ["Hello", "!", " world"],
      "token_logprobs": [null, -1.5, -0.5],
      "top_logprobs": [null, {"!": -1.5, " world": -1.25}, {" world": -0.5}],
      "text_offset": [0, 5, 6]})"));
  EXPECT_EQ(b["usage"], json::parse(R"({"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3})"));
  // max_tokens 0: the prompt alone.
  const ApiRequest r0 = request(R"({"prompt": "Hello!", "echo": true, "max_tokens": 0})");
  CompletionAssembler a0(r0, tokenizer(), "m", "cmpl-test", kCreated);
  a0.feed(0, chunk(0, "", {}, "length"));
  EXPECT_EQ(a0.body()["choices"][0]["text"], "Hello!");
  EXPECT_EQ(a0.body()["usage"]["completion_tokens"], 0);
}

/// The logprobs of one non-streamed choice of `ids` whose returned text is `text`.
json logprobs_of(const std::vector<int32_t>& ids, const std::string& text, const std::string& extra = "") {
  const ApiRequest r = request(R"({"prompt": [1], "logprobs": 0, "ignore_eos": true)" + extra + "}");
  CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
  a.feed(0, chunk(0, text, tokens_of(ids), "length"));
  return a.body()["choices"][0]["logprobs"];
}

TEST(CompletionResponse, TextOffsetsCountTheTextReturned) {
  // The reported bug: "\n" then EOS tokens gave offsets [0, 1, 14, 27, 40, 53] (the
  // EOS's text counted though the text skips it): an EOS adds no text, so no offset.
  const json& eos = offset_case("newline_then_eos");
  EXPECT_EQ(eos["offsets"], json::parse("[0, 1, 1, 1, 1, 1]"));
  EXPECT_EQ(logprobs_of(eos["ids"], eos["text"])["text_offset"], eos["offsets"]);
  for (const json& c : fixture()["offset_cases"]) {
    EXPECT_EQ(logprobs_of(c["ids"], c["text"])["text_offset"], c["offsets"]) << c["name"];
  }
  // Special tokens kept in the text count in full: "<|endoftext|>" is 13 characters.
  const std::string shown = "\n<|endoftext|><|endoftext|><|endoftext|><|endoftext|><|endoftext|>";
  EXPECT_EQ(logprobs_of(eos["ids"], shown, R"(, "skip_special_tokens": false)")["text_offset"],
            json::parse("[0, 1, 14, 27, 40, 53]"));
  // A stop string cut the text to "He": no offset points past it.
  EXPECT_EQ(logprobs_of({9906, 0, 1917}, "He")["text_offset"], json::parse("[0, 2, 2]"));
}

TEST(CompletionResponse, StreamedTextOffsetsContinueAcrossEvents) {
  const json& c = offset_case("split_apostrophe");  // "a", then ’ in three byte tokens, " b"
  const std::vector<std::string> released = {"a", "", "", "\xE2\x80\x99", " b"};
  const ApiRequest r = request(R"({"prompt": [1], "logprobs": 0, "stream": true})");
  CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
  json offsets = json::array(), tokens = json::array();
  std::string text;
  for (size_t i = 0; i < released.size(); ++i) {
    const auto events = a.feed(0, chunk(0, released[i], tokens_of({c["ids"][i].get<int32_t>()}),
                                        i + 1 == released.size() ? "length" : ""));
    ASSERT_EQ(events.size(), 1u);
    const json e = event_json(events[0]);
    text += e["choices"][0]["text"].get<std::string>();
    for (const json& o : e["choices"][0]["logprobs"]["text_offset"]) offsets.push_back(o);
    for (const json& t : e["choices"][0]["logprobs"]["tokens"]) tokens.push_back(t);
  }
  EXPECT_EQ(text, c["text"]);
  EXPECT_EQ(offsets, c["offsets"]);
  EXPECT_EQ(tokens, json::parse(R"(["a", "bytes:\\xe2", "bytes:\\x80", "bytes:\\x99", " b"])"));
}

TEST(CompletionResponse, StreamEventsWithAndWithoutIncludeUsage) {
  const std::string body = R"({"prompt": ["Hello!", "Once upon a time"], "n": 2, "stream": true, "max_tokens": 2)";
  const ApiRequest r = request(body + R"(, "stream_options": {"include_usage": true}})");
  CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
  std::vector<std::string> events = a.feed(0, chunk(1, "x", tokens_of({7})));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(event_json(events[0]), json::parse(R"({"id": "cmpl-test", "object": "text_completion",
      "created": 1700000000, "model": "m", "usage": null,
      "choices": [{"index": 1, "text": "x", "logprobs": null, "finish_reason": null}]})"));
  events = a.feed(1, chunk(0, "y", tokens_of({8, 9}), "length"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(event_json(events[0])["choices"][0]["index"], 2);
  EXPECT_EQ(event_json(events[0])["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(a.feed(0, chunk(0, "", {})).empty());  // nothing to say
  a.feed(0, chunk(0, "z", tokens_of({1}), "stop"));
  a.feed(0, chunk(1, "", {}, "stop"));
  EXPECT_FALSE(a.done());
  events = a.feed(1, chunk(1, "w", tokens_of({2}), "length"));
  EXPECT_EQ(event_json(events[0])["choices"][0]["index"], 3);
  ASSERT_TRUE(a.done());
  events = a.finish();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(event_json(events[0]), json::parse(R"({"id": "cmpl-test", "object": "text_completion",
      "created": 1700000000, "model": "m", "choices": [],
      "usage": {"prompt_tokens": 6, "completion_tokens": 5, "total_tokens": 11}})"));
  EXPECT_EQ(events[1], "data: [DONE]\n\n");
  // Without include_usage: no usage anywhere.
  const ApiRequest plain = request(body + "}");
  CompletionAssembler b(plain, tokenizer(), "m", "cmpl-test", kCreated);
  events = b.feed(0, chunk(0, "x", tokens_of({7}), "length"));
  EXPECT_FALSE(event_json(events[0]).contains("usage"));
  EXPECT_EQ(b.finish(), std::vector<std::string>{"data: [DONE]\n\n"});
}

// Speculative decoding (docs/architecture.md §8): each choice's last chunk carries the
// drafted tokens verified and accepted for it; usage sums them over every choice of every
// prompt, best_of ones not returned included, and the rate is accepted / proposed.
TEST(CompletionResponse, UsageSumsSpeculationOverTheResponsesSequences) {
  const auto finished = [](int32_t c, int64_t proposed, int64_t accepted) {
    CompletionChunk last = chunk(c, "t", tokens_of({3}), "length", -1.0 - c);
    last.spec_proposed = proposed, last.spec_accepted = accepted;
    return last;
  };
  const ApiRequest r = request(R"({"prompt": ["Hello!", "Once upon a time"], "n": 1, "best_of": 2, "max_tokens": 4})");
  CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
  a.feed(0, chunk(0, "a", tokens_of({1})));
  a.feed(0, finished(0, 8, 5));
  a.feed(0, finished(1, 4, 0));  // not returned (best_of), still counted
  a.feed(1, finished(0, 0, 0));  // this one had nothing drafted
  a.feed(1, finished(1, 4, 4));
  ASSERT_TRUE(a.done());
  const json usage = a.body()["usage"];
  EXPECT_EQ(usage["completion_tokens"], 5);
  EXPECT_EQ(usage["speculative"]["proposed_tokens"], 16);
  EXPECT_EQ(usage["speculative"]["accepted_tokens"], 9);
  EXPECT_EQ(usage["speculative"]["acceptance_rate"].get<double>(), 9.0 / 16.0);
  // Streamed: in the usage event only.
  const ApiRequest s = request(R"({"prompt": [1, 2], "n": 2, "stream": true, "stream_options": {"include_usage": true}})");
  CompletionAssembler b(s, tokenizer(), "m", "cmpl-test", kCreated);
  for (const std::string& e : b.feed(0, finished(0, 3, 1))) EXPECT_TRUE(event_json(e)["usage"].is_null());
  b.feed(0, finished(1, 2, 2));
  const std::vector<std::string> events = b.finish();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(event_json(events[0])["usage"], json::parse(R"({"prompt_tokens": 2, "completion_tokens": 2,
      "total_tokens": 4, "speculative": {"proposed_tokens": 5, "accepted_tokens": 3, "acceptance_rate": 0.6}})"));
  // Nothing drafted anywhere: OpenAI's three fields only.
  const ApiRequest plain = request(R"({"prompt": [1]})");
  CompletionAssembler c(plain, tokenizer(), "m", "cmpl-test", kCreated);
  c.feed(0, finished(0, 0, 0));
  EXPECT_FALSE(c.body()["usage"].contains("speculative"));
}

TEST(CompletionResponse, StreamedEchoWaitsForThePromptsEntries) {
  const ApiRequest r = request(R"({"prompt": "Hello!", "echo": true, "logprobs": 0, "n": 2, "stream": true,
      "max_tokens": 1})");
  CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
  // Choice 1 comes first: its echo needs the prompt's entries, which come with choice 0.
  EXPECT_TRUE(a.feed(0, chunk(1, "!", {token(0, -2.0f)}, "length")).empty());
  CompletionChunk c0 = chunk(0, " world", {token(1917, -0.5f)}, "length");
  c0.prompt_tokens = {token(9906), token(0, -1.5f)};
  const std::vector<std::string> events = a.feed(0, c0);
  ASSERT_EQ(events.size(), 2u);
  const json e0 = event_json(events[0])["choices"][0], e1 = event_json(events[1])["choices"][0];
  EXPECT_EQ(e0["index"], 0);
  EXPECT_EQ(e0["text"], "Hello! world");
  EXPECT_EQ(e0["logprobs"], json::parse(R"({"tokens": ["Hello", "!", " world"],
      "token_logprobs": [null, -1.5, -0.5], "top_logprobs": [null, {"!": -1.5}, {" world": -0.5}],
      "text_offset": [0, 5, 6]})"));
  EXPECT_EQ(e1["index"], 1);
  EXPECT_EQ(e1["text"], "Hello!!");
  EXPECT_EQ(e1["logprobs"]["text_offset"], json::parse("[0, 5, 6]"));
  EXPECT_EQ(e1["logprobs"]["token_logprobs"], json::parse("[null, -1.5, -2.0]"));
  EXPECT_TRUE(a.done());
}

TEST(CompletionResponse, AnErrorEndsTheResponseWithTheSameCodeStreamedOrNot) {
  CompletionChunk failure;
  failure.error = "the server is shutting down";
  failure.error_status = 503;
  const ApiRequest s = request(R"({"prompt": [1], "stream": true, "stream_options": {"include_usage": true}})");
  CompletionAssembler streamed(s, tokenizer(), "m", "cmpl-test", kCreated);
  streamed.feed(0, chunk(0, "a", tokens_of({1})));
  const std::vector<std::string> events = streamed.feed(0, failure);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(event_json(events[0]), json::parse(R"({"error": {"message": "the server is shutting down",
      "type": "service_unavailable", "param": null, "code": 503}})"));
  EXPECT_TRUE(streamed.done());
  EXPECT_TRUE(streamed.feed(0, chunk(0, "late", tokens_of({2}), "stop")).empty());
  EXPECT_EQ(streamed.finish(), std::vector<std::string>{"data: [DONE]\n\n"});  // no usage after an error
  const ApiRequest n = request(R"({"prompt": [1]})");
  CompletionAssembler whole(n, tokenizer(), "m", "cmpl-test", kCreated);
  whole.feed(0, failure);
  EXPECT_TRUE(whole.done());
  EXPECT_EQ(whole.error_status(), 503);
  EXPECT_EQ(whole.error_message(), "the server is shutting down");
  EXPECT_THROW(whole.body(), Error);
  failure.error_status = 0;  // no status given: 503, or 500 for an internal error
  CompletionAssembler shutdown(n, tokenizer(), "m", "cmpl-test", kCreated);
  shutdown.feed(0, failure);
  EXPECT_EQ(shutdown.error_status(), 503);
  failure.error = "internal error: rank 1 stopped";
  CompletionAssembler other(n, tokenizer(), "m", "cmpl-test", kCreated);
  other.feed(0, failure);
  EXPECT_EQ(other.error_status(), 500);
  EXPECT_NO_THROW(other.feed(0, chunk(5, "x", {})));  // after the end, even a bad chunk is ignored
}

TEST(CompletionResponse, ChunksOfUnknownChoicesAreAnEngineBug) {
  const ApiRequest r = request(R"({"prompt": [1], "n": 2})");
  CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
  EXPECT_THROW(a.feed(0, chunk(2, "x", {})), Error);
  EXPECT_THROW(a.feed(1, chunk(0, "x", {})), Error);
}

TEST(CompletionResponse, ReturnTokensAsTokenIds) {
  const ApiRequest r = request(R"({"prompt": [1], "logprobs": 1, "return_tokens_as_token_ids": true})");
  CompletionAssembler a(r, tokenizer(), "m", "cmpl-test", kCreated);
  a.feed(0, chunk(0, "Hello", {token(9906, -0.25f, {{-0.25f, 9906}, {-2.0f, 0}})}, "length"));
  EXPECT_EQ(a.body()["choices"][0]["logprobs"], json::parse(R"({"tokens": ["token_id:9906"],
      "token_logprobs": [-0.25], "top_logprobs": [{"token_id:9906": -0.25}], "text_offset": [0]})"));
}

TEST(ResponseId, RandomHexUniquePerRequest) {
  const std::regex cmpl("cmpl-[0-9a-f]{32}"), chat("chatcmpl-[0-9a-f]{32}");
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i) {
    const std::string id = make_response_id("cmpl-");
    EXPECT_TRUE(std::regex_match(id, cmpl)) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 10000u);
  EXPECT_TRUE(std::regex_match(make_response_id("chatcmpl-"), chat));
}

}  // namespace
}  // namespace olmo2
