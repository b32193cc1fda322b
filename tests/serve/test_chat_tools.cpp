// Tools in /v1/chat/completions requests (runtime/serve/api/tool_fields.h, chat_request.h):
// the fields' rules and 400s, tool-call histories rendered by the Olmo 3 Instruct and
// Qwen2.5 templates exactly as transformers renders them (fixtures/chat_templates.json),
// the schemas of "required" and a named function, and whether a template takes tools.
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/serve/chat/chat_template.h"
#include "runtime/structured/constraint.h"
#include "tests/serve/api_test_util.h"

namespace olmo2 {
namespace {

using namespace api_test;
using nlohmann::json;
using ordered = nlohmann::ordered_json;
using ::testing::HasSubstr;

const ServedModel kRoomy{.name = "m", .context_length = 4096, .vocab_size = 100352, .cache_tokens = 100000};
const ChatToolSupport kOlmo3{true, ToolCallFormat::Olmo3};

const ordered& templates() {
  static const ordered f = [] {
    std::ifstream in(std::string(OLMO2_SOURCE_DIR) + "/tests/serve/fixtures/chat_templates.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return ordered::parse(ss.str());
  }();
  return f;
}

const ordered& fixture_case(const std::string& tmpl, const std::string& name) {
  for (const ordered& c : templates()["cases"]) {
    if (c["template"] == tmpl && c["name"] == name) return c;
  }
  throw std::runtime_error("no fixture case " + tmpl + "/" + name);
}

std::string plain_render(const ordered& messages, bool, const ordered&) { return messages.dump(); }

const std::string kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "d",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time"}}])";

std::string body(const std::string& fields) {
  return R"({"messages": [{"role": "user", "content": "Hi"}], "tools": )" + kTools + fields + "}";
}

ApiRequest parse(const std::string& b, const ChatToolSupport& s = kOlmo3, const ChatRenderer& r = plain_render) {
  return parse_chat(b, kRoomy, tokenizer(), r, kFallbackSeed, s);
}

TEST(ChatTools, ToolChoiceDefaultsAndModes) {
  EXPECT_EQ(parse(body("")).tool_plan.mode, ToolPlan::Mode::Auto);
  EXPECT_EQ(parse(body("")).tool_plan.format, ToolCallFormat::Olmo3);
  EXPECT_TRUE(parse(body("")).tool_plan.parallel_tool_calls);
  EXPECT_EQ(parse(body(R"(, "tool_choice": "none")")).tool_plan.mode, ToolPlan::Mode::None);
  EXPECT_FALSE(parse(body(R"(, "parallel_tool_calls": false)")).tool_plan.parallel_tool_calls);
  // No tools: no tool calls; an empty list is no tools; "none" needs none.
  const std::string no_tools = R"({"messages": [{"role": "user", "content": "Hi"}])";
  EXPECT_EQ(parse(no_tools + "}").tool_plan.mode, ToolPlan::Mode::None);
  EXPECT_EQ(parse(no_tools + R"(, "tools": [], "tool_choice": "none"})").tool_plan.mode, ToolPlan::Mode::None);
  // The template gets the tools as sent (key order kept), with tool_choice none too (vLLM).
  ordered seen;
  const ChatRenderer spy = [&](const ordered&, bool, const ordered& tools) { return (seen = tools).dump(); };
  parse(body(R"(, "tool_choice": "none")"), kOlmo3, spy);
  EXPECT_EQ(seen, ordered::parse(kTools));
  EXPECT_EQ(seen.dump(), ordered::parse(kTools).dump());  // same order: "type" before "function"
}

TEST(ChatTools, SchemasOfRequiredAndNamed) {
  const json named = json::parse(body(R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}})"));
  Fields f(named);  // Fields holds a reference: the body must outlive it
  ToolFields t = read_tool_fields(f, ordered::parse(kTools), kOlmo3);
  EXPECT_EQ(t.plan.mode, ToolPlan::Mode::Named);
  EXPECT_EQ(t.plan.function, "get_time");
  EXPECT_EQ(t.schema, R"({"type":"object","properties":{}})");
  const json required = json::parse(body(R"(, "tool_choice": "required", "parallel_tool_calls": false)"));
  Fields g(required);
  t = read_tool_fields(g, ordered::parse(kTools), kOlmo3);
  EXPECT_EQ(t.plan.mode, ToolPlan::Mode::Required);
  EXPECT_EQ(ordered::parse(t.schema), ordered::parse(R"({"type": "array", "minItems": 1, "maxItems": 1, "items": {
      "anyOf": [
        {"type": "object", "properties": {"name": {"type": "string", "enum": ["get_weather"]},
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
         "required": ["name", "parameters"]},
        {"type": "object", "properties": {"name": {"type": "string", "enum": ["get_time"]},
          "parameters": {"type": "object", "properties": {}}}, "required": ["name", "parameters"]}]}})"));
}

// The grammar a request gets accepts exactly the JSON the schema allows (bytes fed to the
// engine's matcher over a vocabulary of the 256 single bytes).
TEST(ChatTools, RequiredAndNamedConstrainTheOutput) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  bytes.push_back("");
  const auto vocab = std::make_shared<const structured::Vocabulary>(bytes, std::vector<int32_t>{}, std::vector<int32_t>{256});
  const auto accepts = [&](const ApiRequest& r, const std::string& text) {
    structured::Matcher m(r.prompts[0].grammar, vocab);
    return m.accept_bytes(text) && m.complete();
  };
  const ApiRequest named = parse(body(R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})"));
  ASSERT_NE(named.prompts[0].grammar, nullptr);
  EXPECT_TRUE(accepts(named, R"({"city":"Paris"})"));
  EXPECT_FALSE(accepts(named, R"({"city":5})"));
  EXPECT_FALSE(accepts(named, R"({})"));  // city is required
  const ApiRequest required = parse(body(R"(, "tool_choice": "required")"));
  EXPECT_TRUE(accepts(required, R"([{"name":"get_time","parameters":{}},{"name":"get_weather","parameters":{"city":"x"}}])"));
  EXPECT_FALSE(accepts(required, R"([])"));
  EXPECT_FALSE(accepts(required, R"([{"name":"get_date","parameters":{}}])"));
  EXPECT_FALSE(accepts(required, R"([{"name":"get_weather","parameters":{}}])"));
  const ApiRequest single = parse(body(R"(, "tool_choice": "required", "parallel_tool_calls": false)"));
  EXPECT_FALSE(accepts(single, R"([{"name":"get_time","parameters":{}},{"name":"get_time","parameters":{}}])"));
  EXPECT_EQ(parse(body("")).prompts[0].grammar, nullptr);  // auto: unconstrained
  // Two constraints at once.
  const Refusal r = refusal("two", [&] {
    parse(body(R"(, "tool_choice": "required", "response_format": {"type": "json_object"})"));
  });
  EXPECT_EQ(r.param, "tool_choice");
}

TEST(ChatTools, EveryRefusalIs400NamingItsField) {
  const std::string m = R"({"messages": [{"role": "user", "content": "x"}], )";
  const struct {
    std::string body, param;
  } cases[] = {
      {m + R"("tools": {"type": "function"}})", "tools"},
      {m + R"("tools": [5]})", "tools[0]"},
      {m + R"("tools": [{"type": "code", "function": {"name": "a"}}]})", "tools[0].type"},
      {m + R"("tools": [{"type": "function"}]})", "tools[0].function"},
      {m + R"("tools": [{"type": "function", "function": {"name": "a b"}}]})", "tools[0].function.name"},
      {m + R"("tools": [{"type": "function", "function": {}}]})", "tools[0].function.name"},
      {m + R"("tools": [{"type": "function", "function": {"name": ")" + std::string(65, 'a') + R"("}}]})",
       "tools[0].function.name"},
      {m + R"("tools": [{"type": "function", "function": {"name": "a", "parameters": [1]}}]})",
       "tools[0].function.parameters"},
      {m + R"("tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "string"}}}]})",
       "tools[0].function.parameters"},
      {m + R"("tools": [{"type": "function", "function": {"name": "a", "description": 5}}]})",
       "tools[0].function.description"},
      {m + R"("tools": [{"type": "function", "function": {"name": "a", "strict": "yes"}}]})", "tools[0].function.strict"},
      {m + R"("tools": [{"type": "function", "function": {"name": "a", "x": 1}}]})", "tools[0].function.x"},
      {m + R"("tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]})",
       "tools[1].function.name"},
      {m + R"("tool_choice": "auto"})", "tool_choice"},
      {m + R"("tool_choice": "always", "tools": )" + kTools + "}", "tool_choice"},
      {m + R"("tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": )" + kTools + "}",
       "tool_choice.function.name"},
      {m + R"("tool_choice": {"type": "function"}, "tools": )" + kTools + "}", "tool_choice.function"},
      {m + R"("tool_choice": {"type": "function", "function": {"name": "get_time"}}})", "tool_choice"},
      {m + R"("parallel_tool_calls": "yes"})", "parallel_tool_calls"},
      {m + R"("functions": [{"name": "a"}]})", "functions"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].tool_call_id"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
          "function": {"name": "a", "arguments": "{not json"}}]}]})", "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
          "function": {"name": "a", "arguments": "[1]"}}]}]})", "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
          "function": {"name": "a", "arguments": {"k": 1}}}]}]})", "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function",
          "function": {"name": "a", "arguments": "{}"}}]}]})", "messages[0].tool_calls[0].id"},
      {R"({"messages": [{"role": "assistant"}]})", "messages[0].content"},
  };
  for (const auto& c : cases) {
    const Refusal r = refusal(c.body, [&] { parse(c.body); });
    EXPECT_EQ(r.status, 400) << c.body;
    EXPECT_EQ(r.param, c.param) << c.body << ": " << r.message;
  }
  // A template that never reads `tools`.
  const Refusal r = refusal("no tools", [&] { parse(body(""), ChatToolSupport{false, ToolCallFormat::None}); });
  EXPECT_EQ(r.param, "tools");
  EXPECT_THAT(r.message, HasSubstr("does not take tools"));
  // /v1/completions has no tools.
  const Refusal c = refusal("completions", [&] {
    parse_completions(R"({"prompt": "a", "tools": )" + kTools + "}", kRoomy, tokenizer(), kFallbackSeed);
  });
  EXPECT_EQ(c.param, "tools");
}

// The server's path (check_messages, then ChatTemplate with the tools) renders an OpenAI
// tool round trip — arguments as JSON text — exactly as transformers renders the same
// conversation given the arguments as dicts (vLLM's conversion).
TEST(ChatTools, ToolHistoriesRenderAsTransformersRendersThem) {
  for (const auto& [tmpl, name] : std::vector<std::pair<std::string, std::string>>{
           {"olmo3", "openai_tool_round"}, {"olmo3", "nested_arguments"}, {"qwen2.5", "openai_tool_round"},
           {"qwen2.5", "nested_arguments"}, {"olmo3", "tools_default_system_gen"}}) {
    SCOPED_TRACE(tmpl + "/" + name);
    const ordered& c = fixture_case(tmpl, name);
    const ChatTemplate t = ChatTemplate::parse(templates()["templates"][tmpl]["template"].get<std::string>());
    ordered vars = c["variables"];
    const ordered tools = vars.value("tools", ordered());
    vars.erase("tools");
    ordered messages = c["messages"];
    for (ordered& m : messages) {
      if (!m.contains("tool_calls")) continue;
      for (ordered& call : m["tool_calls"]) call["function"]["arguments"] = call["function"]["arguments"].dump();
    }
    std::string rendered;
    const ChatRenderer render = [&](const ordered& msgs, bool g, const ordered& tl) {
      ordered extra = vars;
      if (!tl.is_null()) extra["tools"] = tl;
      return rendered = t.render(msgs, g, extra);
    };
    ordered request = {{"messages", messages}, {"add_generation_prompt", c["add_generation_prompt"]}};
    if (!tools.is_null()) request["tools"] = tools;
    parse(request.dump(), ChatToolSupport{true, ToolCallFormat::Olmo3}, render);
    EXPECT_EQ(rendered, c["expected"].get<std::string>());
  }
}

TEST(ChatTools, WhetherATemplateReadsTools) {
  for (const char* name : {"olmo3", "qwen2.5", "qwen3", "llama3.3"}) {
    EXPECT_TRUE(ChatTemplate::parse(templates()["templates"][name]["template"].get<std::string>()).reads_variable("tools"))
        << name;
  }
  for (const char* name : {"olmo2", "zephyr", "mistral"}) {
    EXPECT_FALSE(ChatTemplate::parse(templates()["templates"][name]["template"].get<std::string>()).reads_variable("tools"))
        << name;
  }
  EXPECT_FALSE(ChatTemplate::parse("{{ m.tools }}<tools>{{ 'tools' }}").reads_variable("tools"));
  EXPECT_TRUE(ChatTemplate::parse("{% if tools %}x{% endif %}").reads_variable("tools"));
  EXPECT_EQ(detect_tool_call_format(templates()["templates"]["olmo3"]["template"].get<std::string>()),
            ToolCallFormat::Olmo3);
  EXPECT_EQ(detect_tool_call_format(templates()["templates"]["qwen2.5"]["template"].get<std::string>()),
            ToolCallFormat::Hermes);
}

}  // namespace
}  // namespace olmo2
