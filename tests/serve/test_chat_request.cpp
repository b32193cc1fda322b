// /v1/chat/completions bodies → ApiRequest (runtime/serve/api/chat_request.h): messages
// checked and rendered, the rendered text tokenized as `tokenizers` does, the chat fields,
// and refusals naming messages[i] or the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/serve/chat/chat_template.h"
#include "tests/serve/api_test_util.h"

namespace olmo2 {
namespace {

using namespace api_test;
using nlohmann::json;
using ordered = nlohmann::ordered_json;
using ::testing::HasSubstr;

/// The fixture's jinja2 template written out by hand: "<|endoftext|>" then
/// "<|role|>\ncontent\n" per message, then "<|assistant|>\n" when asked.
template <typename Json>
std::string render_text(const Json& messages, bool add_generation_prompt) {
  std::string out = "<|endoftext|>";
  for (const Json& m : messages) {
    out += "<|" + m.at("role").template get<std::string>() + "|>\n" + m.at("content").template get<std::string>() + "\n";
  }
  if (add_generation_prompt) out += "<|assistant|>\n";
  return out;
}
std::string render(const ordered& messages, bool add_generation_prompt, const ordered&) {
  return render_text(messages, add_generation_prompt);
}

/// The fixture's messages with the second one's content as two text parts.
std::string messages_with_parts() {
  json m = fixture()["chat"]["messages"];
  m[1]["content"] = json::array({{{"type", "text"}, {"text", "Hi"}}, {{"type", "text"}, {"text", "there"}}});
  return m.dump();
}

ApiRequest parse(const std::string& body, const ServedModel& model = kModel, const ChatRenderer& r = render) {
  return parse_chat(body, model, tokenizer(), r, kFallbackSeed);
}

Refusal refused(const std::string& body, const ServedModel& model = kModel, const ChatRenderer& r = render) {
  return refusal(body, [&] { parse(body, model, r); });
}

TEST(ChatRequest, TheRenderedMessagesAreTokenizedWithAddedTokensWhole) {
  const json& chat = fixture()["chat"];
  // The hand-written renderer is the fixture's template.
  EXPECT_EQ(render_text(chat["messages"], true), chat["rendered"].get<std::string>());
  json seen;
  bool seen_generation_prompt = false;
  const ChatRenderer spy = [&](const ordered& m, bool g, const ordered& tools) {
    seen = json::parse(m.dump()), seen_generation_prompt = g;
    EXPECT_TRUE(tools.is_null());
    return render_text(m, g);
  };
  const ApiRequest r = parse(R"({"messages": )" + messages_with_parts() + "}", kModel, spy);
  EXPECT_EQ(seen, chat["messages"]);  // parts joined with "\n"
  EXPECT_TRUE(seen_generation_prompt);
  EXPECT_EQ(r.endpoint, ApiEndpoint::Chat);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].prompt, chat["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(r.prompts[0].prompt[0], fixture()["eos"]["id"].get<int32_t>());  // "<|endoftext|>" is one token
  EXPECT_TRUE(r.prompt_texts.empty());
}

TEST(ChatRequest, TheServersChatTemplateRendersTheCheckedMessages) {
  // ChatTemplate (runtime/serve/chat/) as the renderer, its special tokens given as extra.
  const json& chat = fixture()["chat"];
  const ChatTemplate t = ChatTemplate::parse(chat["template"].get<std::string>());
  const ordered extra = {{"bos_token", chat["bos_token"]}};
  const ChatRenderer renderer = [&](const ordered& m, bool g, const ordered&) { return t.render(m, g, extra); };
  const ApiRequest r = parse(R"({"messages": )" + messages_with_parts() + "}", kModel, renderer);
  EXPECT_EQ(r.prompts[0].prompt, chat["ids"].get<std::vector<int32_t>>());
}

TEST(ChatRequest, FieldsAndDefaults) {
  const std::string m = R"({"messages": )" + fixture()["chat"]["messages"].dump();
  const int64_t plen = static_cast<int64_t>(fixture()["chat"]["ids"].size());
  ApiRequest r = parse(m + "}");
  EXPECT_EQ(r.prompts[0].max_tokens, 64 - plen);  // the room left in the context
  EXPECT_EQ(r.prompts[0].sampling.temperature, 1.0);
  EXPECT_EQ(r.prompts[0].sampling.seed, kFallbackSeed);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.want_logprobs || r.stream || r.echo);
  // With n choices the KV cache holds the prompt once and each choice's tokens.
  const ServedModel small{.name = "m", .context_length = 64, .vocab_size = 100352, .cache_tokens = 80};
  r = parse(m + R"(, "n": 2})", small);
  EXPECT_EQ(r.prompts[0].max_tokens, (80 - plen) / 2);
  EXPECT_EQ(r.prompts[0].choices, 2);
  EXPECT_EQ(parse(m + R"(, "max_tokens": 5})").prompts[0].max_tokens, 5);
  EXPECT_EQ(parse(m + R"(, "max_completion_tokens": 6})").prompts[0].max_tokens, 6);
  EXPECT_EQ(parse(m + R"(, "max_tokens": 7, "max_completion_tokens": 7})").prompts[0].max_tokens, 7);
  r = parse(m + R"(, "logprobs": true, "top_logprobs": 3, "stream": true,
      "stream_options": {"include_usage": true}, "temperature": 0, "seed": 5, "stop": "x",
      "logit_bias": {"9906": -5}, "min_p": 0.1, "return_tokens_as_token_ids": true,
      "skip_special_tokens": false, "user": "u"})");
  EXPECT_TRUE(r.want_logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.prompts[0].logprobs, 3);
  EXPECT_TRUE(r.prompts[0].want_logprobs);
  EXPECT_TRUE(r.stream && r.include_usage && r.prompts[0].stream);
  EXPECT_EQ(r.prompts[0].sampling.temperature, 0.0);
  EXPECT_EQ(r.prompts[0].sampling.seed, 5u);
  EXPECT_EQ(r.prompts[0].stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.prompts[0].adjust.logit_bias, (std::vector<std::pair<int32_t, float>>{{9906, -5.0f}}));
  EXPECT_EQ(r.prompts[0].sampling.min_p, 0.1);
  EXPECT_TRUE(r.return_tokens_as_token_ids);
  EXPECT_FALSE(r.skip_special_tokens);
}

TEST(ChatRequest, AddGenerationPromptAndEcho) {
  bool generation_prompt = true;
  const ChatRenderer spy = [&](const ordered& m, bool g, const ordered&) {
    generation_prompt = g;
    return render_text(m, g);
  };
  // The last message is the assistant's: echo returns it first, to be continued.
  ApiRequest r = parse(R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello, I am"}], "add_generation_prompt": false, "echo": true})",
                       kModel, spy);
  EXPECT_FALSE(generation_prompt);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.echo_prefix, "Hello, I am");
  r = parse(R"({"messages": [{"role": "user", "content": "Hi"}], "echo": true})");
  EXPECT_EQ(r.echo_prefix, "");
}

TEST(ChatRequest, EveryRefusalIs400NamingItsField) {
  const struct {
    std::string body, param;
  } cases[] = {
      {R"({})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": "Hi"})", "messages"},
      {R"({"messages": [5]})", "messages[0]"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "x"}]})", "messages[1].tool_call_id"},
      {R"({"messages": [{"role": "developer", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content[0].text"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "x": 1}]}]})",
       "messages[0].content[0].x"},
      {R"({"messages": [{"role": "user", "content": "x", "name": "bob"}]})", "messages[0].name"},
      {R"({"messages": [{"role": "assistant", "content": "x", "tool_calls": 5}]})", "messages[0].tool_calls"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "max_completion_tokens": 6})",
       "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})", "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 60})", "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 60})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 5})", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "best_of": 2})", "best_of"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "echo": "x"})", "echo"},
      {R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": "no"})", "add_generation_prompt"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools[0].function"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}})",
       "response_format.json_schema"},
      {R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})", "continue_final_message"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template": "{{x}}"})", "chat_template"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "high"})", "reasoning_effort"},
      {R"({"messages": [{"role": "user", "content": "x"}], "modalities": ["audio"]})", "modalities"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}})",
       "stream_options"},
      {R"({"messages": [{"role": "user", "content": "x"}], "frobnicate": true})", "frobnicate"},
      {R"({"messages": [{"role": "user", "content": 1e999}]})", "messages"},
  };
  for (const auto& c : cases) {
    const Refusal r = refused(c.body);
    EXPECT_EQ(r.status, 400) << c.body;
    EXPECT_EQ(r.param, c.param) << c.body << ": " << r.message;
    EXPECT_FALSE(r.message.empty()) << c.body;
  }
  Refusal r = refused(R"({"messages": [{"role": "user", "content": 1e999}]})");
  EXPECT_THAT(r.message, HasSubstr("messages: the number 1e999"));
  r = refused(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "max_completion_tokens": 6})");
  EXPECT_THAT(r.message, HasSubstr("max_completion_tokens 6 and its alias max_tokens 5 differ"));
}

TEST(ChatRequest, TemplateFailuresAndAMissingTemplateAre400) {
  const std::string body = R"({"messages": [{"role": "user", "content": "x"}]})";
  const ChatRenderer failing = [](const ordered&, bool, const ordered&) -> std::string {
    throw std::runtime_error("unknown filter");
  };
  Refusal r = refused(body, kModel, failing);
  EXPECT_EQ(r.param, "messages");
  EXPECT_THAT(r.message, HasSubstr("unknown filter"));
  r = refused(body, kModel, ChatRenderer());
  EXPECT_EQ(r.param, "messages");
  EXPECT_THAT(r.message, HasSubstr("--chat-template"));
  // A rendered prompt that fills the context leaves no room: refused, stating the lengths.
  const ServedModel tiny{.name = "m", .context_length = 8, .vocab_size = 100352, .cache_tokens = 1000};
  r = refused(body, tiny);
  EXPECT_EQ(r.param, "messages");
  EXPECT_THAT(r.message, HasSubstr("the rendered prompt has"));
}

}  // namespace
}  // namespace olmo2
