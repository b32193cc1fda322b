// Tool calls in chat responses (runtime/serve/api/tool_call_response.h, chat_response.h):
// the message's content and tool_calls and the finish_reason under each tool_choice,
// whole and streamed (plain text streams at once, calls come in the last delta).
#include <gtest/gtest.h>

#include "runtime/serve/api/chat_response.h"
#include "tests/serve/api_test_util.h"

namespace olmo2 {
namespace {

using namespace api_test;
using nlohmann::json;

ToolPlan plan(ToolPlan::Mode mode, ToolCallFormat format = ToolCallFormat::Olmo3, std::string function = "") {
  ToolPlan p;
  p.mode = mode, p.format = format, p.function = std::move(function);
  return p;
}

// The calls without their random ids (checked for shape separately).
json without_ids(json calls) {
  for (json& c : calls) {
    EXPECT_EQ(c["id"].get<std::string>().rfind("call_", 0), 0u);
    EXPECT_EQ(c["id"].get<std::string>().size(), 5u + 32u);
    c.erase("id");
  }
  return calls;
}

TEST(ToolCallResponse, AutoParsesTheModelsCalls) {
  const ToolCallMessage m = tool_call_message(
      plan(ToolPlan::Mode::Auto), "Checking.<function_calls>get_weather(city=\"Paris\")\nget_time()</function_calls>",
      "stop");
  EXPECT_EQ(m.content, "Checking.");
  EXPECT_EQ(m.finish_reason, "tool_calls");
  EXPECT_EQ(without_ids(m.tool_calls), json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
      {"type": "function", "function": {"name": "get_time", "arguments": "{}"}}])"));
  // parallel_tool_calls false: the first call only.
  ToolPlan one = plan(ToolPlan::Mode::Auto);
  one.parallel_tool_calls = false;
  EXPECT_EQ(tool_call_message(one, "<function_calls>a()\nb()</function_calls>", "stop").tool_calls.size(), 1u);
  // No call, or a malformed one: plain content, the engine's finish_reason.
  const ToolCallMessage plain = tool_call_message(plan(ToolPlan::Mode::Auto), "<function_calls>a(1)</function_calls>", "length");
  EXPECT_EQ(plain.content, "<function_calls>a(1)</function_calls>");
  EXPECT_TRUE(plain.tool_calls.is_null());
  EXPECT_EQ(plain.finish_reason, "length");
  // Only the calls: content null.
  EXPECT_TRUE(tool_call_message(plan(ToolPlan::Mode::Auto), "<function_calls>a()</function_calls>", "stop").content.is_null());
}

TEST(ToolCallResponse, NamedAndRequiredReadTheConstrainedJson) {
  ToolCallMessage m = tool_call_message(plan(ToolPlan::Mode::Named, ToolCallFormat::None, "get_weather"),
                                        R"({"city":"Paris","days":2})", "stop");
  EXPECT_TRUE(m.content.is_null());
  EXPECT_EQ(m.finish_reason, "stop");  // OpenAI's and vLLM's for a named function
  EXPECT_EQ(without_ids(m.tool_calls), json::parse(R"([{"type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"days\":2}"}}])"));
  m = tool_call_message(plan(ToolPlan::Mode::Required), R"([{"name":"a","parameters":{"x":1}},{"name":"b","parameters":{}}])",
                        "stop");
  EXPECT_EQ(m.finish_reason, "tool_calls");
  EXPECT_EQ(without_ids(m.tool_calls), json::parse(R"([
      {"type": "function", "function": {"name": "a", "arguments": "{\"x\":1}"}},
      {"type": "function", "function": {"name": "b", "arguments": "{}"}}])"));
  // Cut short by max_tokens: plain content.
  m = tool_call_message(plan(ToolPlan::Mode::Required), R"([{"name":"a","param)", "length");
  EXPECT_EQ(m.content, R"([{"name":"a","param)");
  EXPECT_TRUE(m.tool_calls.is_null());
  EXPECT_EQ(m.finish_reason, "length");
}

TEST(ToolCallResponse, StreamSendsPlainTextAtOnceAndHoldsFromTheOpeningTag) {
  ToolCallStream s(plan(ToolPlan::Mode::Auto));
  EXPECT_EQ(s.feed("Let me "), "Let me ");
  EXPECT_EQ(s.feed("check <func"), "check ");  // may be the tag: held
  EXPECT_EQ(s.feed("tion_calls>get_time("), "");
  EXPECT_EQ(s.feed(")</function_calls>"), "");
  const ToolCallMessage end = s.finish("stop");
  EXPECT_TRUE(end.content.is_null());
  EXPECT_EQ(end.finish_reason, "tool_calls");
  ASSERT_EQ(end.tool_calls.size(), 1u);
  EXPECT_EQ(end.tool_calls[0]["index"], 0);
  EXPECT_EQ(end.tool_calls[0]["function"]["name"], "get_time");
  // A held prefix that turns out not to be the tag is sent on.
  ToolCallStream t(plan(ToolPlan::Mode::Auto));
  EXPECT_EQ(t.feed("a <fun"), "a ");
  EXPECT_EQ(t.feed("ny> b"), "<funny> b");
  EXPECT_EQ(t.finish("stop").content, "");
}

TEST(ToolCallResponse, ChatBodyAndStreamCarryToolCalls) {
  ApiRequest r;
  r.endpoint = ApiEndpoint::Chat;
  r.prompts.resize(1);
  r.prompts[0].choices = 1;
  r.tool_plan = plan(ToolPlan::Mode::Auto);
  ChatAssembler a(r, tokenizer(), "m", "chatcmpl-test", 1700000000);
  a.feed(0, chunk(0, "<function_calls>f(a=1)", {token(1)}));
  a.feed(0, chunk(0, "</function_calls>", {token(2)}, "stop"));
  const json choice = a.body()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  EXPECT_EQ(without_ids(choice["message"]["tool_calls"]),
            json::parse(R"([{"type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}])"));

  r.stream = true;
  ChatAssembler s(r, tokenizer(), "m", "chatcmpl-test", 1700000000);
  std::vector<json> deltas;
  for (const CompletionChunk& c : {chunk(0, "Hi ", {token(1)}), chunk(0, "<function_calls>f(", {token(2)}),
                                   chunk(0, "a=1)</function_calls>", {token(3)}, "stop")}) {
    for (const std::string& e : s.feed(0, c)) deltas.push_back(event_json(e)["choices"][0]);
  }
  ASSERT_EQ(deltas.size(), 3u);
  EXPECT_EQ(deltas[0]["delta"], json::parse(R"({"role": "assistant", "content": "Hi "})"));
  EXPECT_EQ(deltas[1]["delta"], json::parse(R"({"content": ""})"));
  EXPECT_EQ(deltas[2]["finish_reason"], "tool_calls");
  EXPECT_FALSE(deltas[2]["delta"].contains("content"));
  const json calls = deltas[2]["delta"]["tool_calls"];
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"], json::parse(R"({"name": "f", "arguments": "{\"a\":1}"})"));
}

}  // namespace
}  // namespace olmo2
