// Tool-call parsers (runtime/serve/api/tool_call_parser.h) on committed model outputs whose
// expected calls Python's own parsers made (fixtures/make_tool_call_fixtures.py: `ast` for
// Olmo 3's pythonic calls, `json` for Hermes' blocks); the format names and the detection
// of a template's family.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/serve/api/tool_call_parser.h"

namespace olmo2 {
namespace {

using ordered = nlohmann::ordered_json;

const ordered& fixture() {
  static const ordered f = [] {
    std::ifstream in(std::string(OLMO2_SOURCE_DIR) + "/tests/serve/fixtures/tool_calls.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return ordered::parse(ss.str());
  }();
  return f;
}

TEST(ToolCallParser, MatchesPythonsParsersOnEveryFixtureCase) {
  ASSERT_GE(fixture()["cases"].size(), 25u);
  for (const ordered& c : fixture()["cases"]) {
    SCOPED_TRACE(c["format"].get<std::string>() + " " + c["name"].get<std::string>());
    const ParsedToolOutput got =
        parse_tool_calls(tool_call_format_from_name(c["format"].get<std::string>()), c["text"].get<std::string>());
    EXPECT_EQ(got.content, c["content"].get<std::string>());
    ASSERT_EQ(got.calls.size(), c["calls"].size());
    for (size_t i = 0; i < got.calls.size(); ++i) {
      EXPECT_EQ(got.calls[i].name, c["calls"][i]["name"].get<std::string>());
      const ordered args = ordered::parse(got.calls[i].arguments);
      EXPECT_EQ(args, c["calls"][i]["arguments"]) << got.calls[i].arguments;
      // The generated key order is kept (the fixture's objects are in Python's dict order).
      EXPECT_EQ(args.dump(), got.calls[i].arguments);
    }
  }
}

TEST(ToolCallParser, ArgumentsAreCompactJsonInTheOrderGenerated) {
  const ParsedToolOutput out =
      parse_tool_calls(ToolCallFormat::Olmo3, "<function_calls>f(z=1, a='x', m=[None])</function_calls>");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, R"({"z":1,"a":"x","m":[null]})");
  EXPECT_EQ(out.content, "");
}

TEST(ToolCallParser, NoneFormatKeepsEverythingAsContent) {
  const std::string text = "<function_calls>f(a=1)</function_calls>";
  const ParsedToolOutput out = parse_tool_calls(ToolCallFormat::None, text);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.calls.empty());
}

TEST(ToolCallParser, PythonicErrorsNameTheOffset) {
  try {
    parse_pythonic_calls("f(a=b)");
    FAIL() << "a bare name is not a literal";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("offset 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_pythonic_calls("f(a=1, a=2)"), InputError);
  EXPECT_THROW(parse_pythonic_calls("f(a=1) g(b=2)"), InputError);
  EXPECT_THROW(parse_pythonic_calls(""), InputError);
  EXPECT_THROW(parse_pythonic_calls("f(a='\\ud800')"), InputError);
}

TEST(ToolCallParser, FormatNamesAndTemplateDetection) {
  EXPECT_EQ(tool_call_format_from_name("olmo3"), ToolCallFormat::Olmo3);
  EXPECT_EQ(tool_call_format_from_name("hermes"), ToolCallFormat::Hermes);
  EXPECT_EQ(tool_call_format_from_name("none"), ToolCallFormat::None);
  EXPECT_THROW(tool_call_format_from_name("llama3_json"), InputError);
  EXPECT_STREQ(tool_call_format_name(ToolCallFormat::Hermes), "hermes");
  EXPECT_EQ(detect_tool_call_format("{{- '<function_calls>' -}}"), ToolCallFormat::Olmo3);
  EXPECT_EQ(detect_tool_call_format("{{- '\\n<tool_call>\\n{\"name\": \"' }}"), ToolCallFormat::Hermes);
  EXPECT_EQ(detect_tool_call_format("{{ messages[0].content }}"), ToolCallFormat::None);
  EXPECT_EQ(tool_call_start(ToolCallFormat::Olmo3), "<function_calls>");
  EXPECT_EQ(tool_call_start(ToolCallFormat::None), "");
}

}  // namespace
}  // namespace olmo2
