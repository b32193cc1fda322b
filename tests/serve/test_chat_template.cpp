// docs/architecture.md §8 (chat templates): the chat-template interpreter renders real
// templates (OLMo 2 Instruct, Qwen2.5, Qwen3, Llama 3.3, Mistral, Zephyr) and one-construct
// feature templates byte for byte as transformers' apply_chat_template does (fixture:
// tests/serve/fixtures/make_chat_template_fixtures.py), refuses what transformers refuses,
// loads model directories as transformers does, and refuses at parse time what it cannot run.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "runtime/serve/chat/chat_template.h"

namespace olmo2 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ordered = nlohmann::ordered_json;  // the fixture's key order is the request's

const std::string kFixtures = std::string(OLMO2_SOURCE_DIR) + "/tests/serve/fixtures/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ordered& fixture() {
  static const ordered f = ordered::parse(read(kFixtures + "chat_templates.json"));
  return f;
}

/// A fresh empty directory under the test's temporary folder.
fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("olmo2_chat_template_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no InputError>";
}

/// Renders every fixture case of the templates `select` picks; returns how many ran.
int check_cases(const std::function<bool(const std::string&)>& select) {
  int ran = 0;
  for (const ordered& c : fixture()["cases"]) {
    const std::string tname = c["template"];
    if (!select(tname)) continue;
    ++ran;
    const std::string label = tname + " / " + c["name"].get<std::string>();
    const ChatTemplate t = ChatTemplate::parse(fixture()["templates"][tname]["template"]);
    const auto run = [&] { return t.render(c["messages"], c["add_generation_prompt"], c["variables"]); };
    if (c.contains("expected")) {
      std::string got;
      try {
        got = run();
      } catch (const std::exception& e) {
        ADD_FAILURE() << label << ": threw " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>()) << label;
    } else {
      const std::string what = what_of([&] { run(); });
      EXPECT_NE(what, "<no InputError>") << label << ": transformers refused with: " << c["error"];
      if (c["raised"]) {
        EXPECT_EQ(what, c["error"].get<std::string>()) << label << ": raise_exception's message, as is";
      }
    }
  }
  return ran;
}

TEST(ChatTemplate, Olmo2InstructMatchesTransformers) {
  EXPECT_EQ(check_cases([](const std::string& t) { return t == "olmo2"; }), 16);
}

TEST(ChatTemplate, OtherRealTemplatesMatchTransformers) {
  const int ran = check_cases([](const std::string& t) { return t != "olmo2" && t.rfind("feature:", 0) != 0; });
  EXPECT_GE(ran, 50) << "Qwen2.5, Qwen3, Llama 3.3, Mistral and Zephyr cases";
}

TEST(ChatTemplate, FeatureTemplatesMatchTransformers) {
  EXPECT_GE(check_cases([](const std::string& t) { return t.rfind("feature:", 0) == 0; }), 100);
}

TEST(ChatTemplate, Olmo2PromptIsTheTuluFormat) {
  // Independent of the fixture: the published OLMo 2 Instruct format, written out.
  const auto t = ChatTemplate::parse(fixture()["templates"]["olmo2"]["template"]);
  const json msgs = json::parse(R"([{"role":"system","content":"S"},{"role":"user","content":"U"},
                                    {"role":"assistant","content":"A"},{"role":"user","content":"V"}])");
  EXPECT_EQ(t.render(msgs, true, {{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}}),
            "<|endoftext|><|system|>\nS\n<|user|>\nU\n<|assistant|>\nA<|endoftext|>\n<|user|>\nV\n<|assistant|>\n");
}

TEST(ChatTemplate, FromModelDirReadsTheOlmo2Config) {
  const fs::path dir = temp_dir("olmo2");
  fs::copy_file(kFixtures + "olmo2_instruct_tokenizer_config.json", dir / "tokenizer_config.json");
  const std::optional<ChatTemplate> t = ChatTemplate::from_model_dir(dir.string());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->source(), fixture()["templates"]["olmo2"]["template"].get<std::string>());
  const std::map<std::string, std::string> tokens{
      {"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}, {"pad_token", "<|pad|>"}, {"unk_token", "<|endoftext|>"}};
  EXPECT_EQ(t->special_tokens(), tokens);
  int ran = 0;
  for (const ordered& c : fixture()["cases"]) {
    if (c["template"] != "olmo2" || !c.contains("expected")) continue;
    ++ran;
    EXPECT_EQ(t->render(c["messages"], c["add_generation_prompt"]), c["expected"].get<std::string>()) << c["name"];
  }
  EXPECT_EQ(ran, 15);
  fs::remove_all(dir);
}

TEST(ChatTemplate, FromModelDirForms) {
  const fs::path dir = temp_dir("forms");
  EXPECT_FALSE(ChatTemplate::from_model_dir(dir.string()).has_value()) << "no tokenizer_config.json";
  write(dir / "tokenizer_config.json", R"({"eos_token": "</s>"})");
  EXPECT_FALSE(ChatTemplate::from_model_dir(dir.string()).has_value()) << "no chat_template field";
  write(dir / "tokenizer_config.json", R"({"chat_template": null})");
  EXPECT_FALSE(ChatTemplate::from_model_dir(dir.string()).has_value()) << "a null chat_template";

  write(dir / "tokenizer_config.json", R"({
    "bos_token": {"content": "<s>", "lstrip": false, "special": true}, "eos_token": "</s>", "pad_token": null,
    "chat_template": [{"name": "tool_use", "template": "tools"},
                      {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}]})");
  auto t = ChatTemplate::from_model_dir(dir.string());
  ASSERT_TRUE(t.has_value());
  const json hi = json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(t->render(hi, false), "<s>hi</s>") << "the \"default\" template; a {\"content\"} token";
  EXPECT_EQ(t->render(hi, false, {{"eos_token", "[E]"}}), "<s>hi[E]") << "extra overrides a special token";
  EXPECT_EQ(t->special_tokens().count("pad_token"), 0u) << "a null token is absent";

  write(dir / "chat_template.jinja", "J:{{ messages[0].content }}\n");
  t = ChatTemplate::from_model_dir(dir.string());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->render(hi, false), "J:hi") << "chat_template.jinja comes first; its trailing newline is dropped";
  fs::remove(dir / "chat_template.jinja");

  write(dir / "tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  EXPECT_NE(what_of([&] { ChatTemplate::from_model_dir(dir.string()); }).find("no template named \"default\""),
            std::string::npos);
  write(dir / "tokenizer_config.json", R"({"chat_template": "x", "eos_token": 5})");
  EXPECT_NE(what_of([&] { ChatTemplate::from_model_dir(dir.string()); }).find("eos_token"), std::string::npos);
  write(dir / "tokenizer_config.json", "{not json");
  EXPECT_NE(what_of([&] { ChatTemplate::from_model_dir(dir.string()); }).find("tokenizer_config.json"), std::string::npos);
  write(dir / "tokenizer_config.json", R"({"chat_template": "{% include 'x' %}"})");
  const std::string bad = what_of([&] { ChatTemplate::from_model_dir(dir.string()); });
  EXPECT_NE(bad.find("tokenizer_config.json"), std::string::npos) << bad;
  EXPECT_NE(bad.find("unsupported tag 'include'"), std::string::npos) << bad;
  fs::remove_all(dir);
}

TEST(ChatTemplate, UnsupportedConstructsAreRefusedAtParseTime) {
  const std::pair<const char*, const char*> cases[] = {
      {"{% include 'header.jinja' %}", "unsupported tag 'include' at line 1, column 4"},
      {"{% import 'm.jinja' as m %}", "unsupported tag 'import' at line 1, column 4"},
      {"{% extends 'base' %}", "unsupported tag 'extends'"},
      {"{% block body %}x{% endblock %}", "unsupported tag 'block'"},
      {"{% filter upper %}x{% endfilter %}", "unsupported tag 'filter'"},
      {"{% with a = 1 %}{% endwith %}", "unsupported tag 'with'"},
      {"ok\n  {{ messages | shout }}", "unsupported filter 'shout' at line 2, column 17"},
      {"{{ x is palindrome }}", "unsupported test 'palindrome' at line 1, column 9"},
      {"{% for m in messages recursive %}{% endfor %}", "unsupported recursive for loop"},
      {"{{ f(*args) }}", "unsupported *args"},
      {"{% if x %}never closed", "expected 'endif'"},
      {"{{ x ", "expected '}}'"},
      {"{# no end", "missing end of comment tag"},
      {"{{ 'open }}", "unterminated string"},
      {"{% endfor %}", "unexpected 'endfor'"},
      {"{{ a $ b }}", "unexpected character '$'"},
      {"{{ (1 }}", "unexpected '}'"},
  };
  for (const auto& [source, message] : cases) {
    const std::string what = what_of([&] { ChatTemplate::parse(source); });
    EXPECT_NE(what.find(message), std::string::npos) << source << " → " << what;
  }
}

TEST(ChatTemplate, RenderingErrorsNameTheProblemAndPosition) {
  const json one = json::parse(R"([{"role": "user", "content": "hi"}])");
  std::string what = what_of([&] { ChatTemplate::parse("a\n{{ missing.attr }}").render(one, true); });
  EXPECT_NE(what.find("'missing' is undefined at line 2"), std::string::npos) << what;
  what = what_of([&] { ChatTemplate::parse("{{ messages[0].content + 1 }}").render(one, true); });
  EXPECT_NE(what.find("'str' and 'int'"), std::string::npos) << what;
  what = what_of([&] { ChatTemplate::parse("{{ raise_exception('Roles must alternate') }}").render(one, true); });
  EXPECT_EQ(what, "Roles must alternate") << "the template's own message, nothing added";
  what = what_of([&] { ChatTemplate::parse("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").render(one, true); });
  EXPECT_NE(what.find("macros nested over 100 deep"), std::string::npos) << what;
}

TEST(ChatTemplate, StrftimeNowFormatsTheLocalDate) {
  // transformers' strftime_now(format) is datetime.now().strftime(format): only its shape is fixed.
  const json one = json::parse(R"([{"role": "user", "content": "hi"}])");
  const std::string date = ChatTemplate::parse("{{ strftime_now('%Y-%m-%d') }}").render(one, true);
  EXPECT_TRUE(std::regex_match(date, std::regex(R"(\d{4}-\d{2}-\d{2})"))) << date;
}

TEST(ChatTemplate, NestingIsBoundedInsteadOfOverflowingTheStack) {
  std::string deep_expr = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(what_of([&] { ChatTemplate::parse(deep_expr); }).find("nested over 200 levels"), std::string::npos);
  std::string deep_blocks;
  for (int i = 0; i < 5000; ++i) deep_blocks += "{% if 1 %}";
  EXPECT_NE(what_of([&] { ChatTemplate::parse(deep_blocks); }).find("nested over 200 levels"), std::string::npos);
  const std::string deep_json =
      R"([{"role": "user", "content": "x", "extra": )" + std::string(5000, '[') + std::string(5000, ']') + "}]";
  EXPECT_NE(what_of([&] { ChatTemplate::parse("{{ 1 }}").render(json::parse(deep_json), true); })
                .find("JSON nested over 256 levels"),
            std::string::npos);
}

TEST(ChatTemplate, MalformedMessagesAreRefused) {
  const auto t = ChatTemplate::parse("{% for m in messages %}{{ m.content }}{% endfor %}");
  const std::pair<const char*, const char*> cases[] = {
      {R"({"role": "user"})", "messages must be an array"},
      {R"([])", "messages must not be empty"},
      {R"(["hi"])", "messages[0] must be an object"},
      {R"([{"content": "hi"}])", "messages[0].role must be a string"},
      {R"([{"role": "user", "content": 5}])", "messages[0].content must be a string or a list of text parts"},
      {R"([{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])",
       "messages[1].content[0]: unsupported content part type \"image_url\""},
      {R"([{"role": "user", "content": [{"type": "text"}]}])", "messages[0].content[0].text must be a string"},
  };
  for (const auto& [messages, message] : cases) {
    const std::string what = what_of([&] { t.render(json::parse(messages), true); });
    EXPECT_NE(what.find(message), std::string::npos) << messages << " → " << what;
  }
  const json one = json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_NE(what_of([&] { t.render(one, true, {{"messages", json::array()}}); }).find("'messages' cannot be set"),
            std::string::npos);
  EXPECT_NE(what_of([&] { t.render(one, true, json::array()); }).find("must be a JSON object"), std::string::npos);
}

}  // namespace
}  // namespace olmo2
