// The compiled grammars of JSON Schemas and regexes, run by the matcher, against
// reference verdicts (tests/structured/fixtures/schema_fixtures.json, written by
// make_schema_fixtures.py from Python's jsonschema and re): valid texts in the
// compiler's output form are accepted, invalid ones and the documented narrowings
// rejected; integers exhaustively over [-1200, 1200] against bounds; bounded numbers
// never accepted when invalid (docs/architecture.md §8, "Structured outputs").
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/structured/constraint.h"
#include "tests/test_util.h"

namespace olmo2::structured {
namespace {

using nlohmann::ordered_json;

const ordered_json& fixtures() {
  static const ordered_json f = [] {
    std::ifstream in(test::source_path("tests/structured/fixtures/schema_fixtures.json"));
    return ordered_json::parse(in);
  }();
  return f;
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g, nullptr);
  return m.accept_bytes(text) && m.complete();
}

std::shared_ptr<const Grammar> schema_grammar(const ordered_json& schema, const ordered_json& options = ordered_json::object()) {
  JsonSchemaOptions o;
  if (options.value("whitespace", "") == "any") o.whitespace = JsonSchemaOptions::Whitespace::Any;
  o.max_whitespace = options.value("max_whitespace", 4);
  return Grammar::parse(json_schema_to_grammar(schema.dump(), o));
}

TEST(SchemaAcceptance, ValidTextsAcceptedInvalidRejected) {
  int checked = 0;
  for (const auto& c : fixtures()["schemas"]) {
    SCOPED_TRACE(c["schema"].dump());
    const auto g = schema_grammar(c["schema"], c["options"]);
    for (const auto& t : c["accept"]) {
      EXPECT_TRUE(accepts(g, t.get<std::string>())) << t.get<std::string>();
      ++checked;
    }
    for (const auto& t : c["reject"]) {
      EXPECT_FALSE(accepts(g, t.get<std::string>())) << t.get<std::string>();
      ++checked;
    }
  }
  EXPECT_GE(checked, 250);
}

TEST(SchemaAcceptance, IntegerBoundsExactOverAWindow) {
  for (const auto& w : fixtures()["integer_windows"]) {
    ordered_json schema = {{"type", "integer"}};
    schema.update(w["bounds"]);
    SCOPED_TRACE(schema.dump());
    const auto g = schema_grammar(schema);
    const std::string valid = w["valid"];
    const int from = w["from"];
    int wrong = 0;
    for (size_t k = 0; k < valid.size(); ++k) {
      const std::string text = std::to_string(from + static_cast<int>(k));
      if (accepts(g, text) != (valid[k] == '1') && ++wrong <= 5) ADD_FAILURE() << text << " expected " << valid[k];
    }
    EXPECT_EQ(wrong, 0);
  }
}

TEST(SchemaAcceptance, BoundedNumbersAcceptOnlyValidValuesAndEveryValidInteger) {
  for (const auto& w : fixtures()["numbers"]) {
    ordered_json schema = {{"type", "number"}};
    schema.update(w["bounds"]);
    SCOPED_TRACE(schema.dump());
    const auto g = schema_grammar(schema);
    for (size_t k = 0; k < w["texts"].size(); ++k) {
      const std::string text = w["texts"][k];
      const bool valid = w["valid"][k];
      const bool accepted = accepts(g, text);
      if (!valid) EXPECT_FALSE(accepted) << text;
      const bool plain_integer = text.find_first_of(".eE") == std::string::npos && text != "-0";
      if (valid && plain_integer) EXPECT_TRUE(accepted) << text;
    }
  }
}

TEST(SchemaAcceptance, RegexesAgreeWithPythonFullmatch) {
  for (const auto& r : fixtures()["regexes"]) {
    const std::string pattern = r["pattern"];
    SCOPED_TRACE(pattern);
    const auto g = Grammar::parse(regex_to_grammar(pattern));
    for (size_t k = 0; k < r["strings"].size(); ++k)
      EXPECT_EQ(accepts(g, r["strings"][k].get<std::string>()), r["match"][k].get<bool>())
          << ordered_json(r["strings"][k]).dump();
  }
}

TEST(SchemaAcceptance, JsonObjectGrammar) {
  for (const auto ws : {JsonSchemaOptions::Whitespace::Compact, JsonSchemaOptions::Whitespace::Any}) {
    JsonSchemaOptions o;
    o.whitespace = ws;
    const auto g = Grammar::parse(json_object_grammar(o));
    for (const char* ok : {"{}", R"({"a":[1,-2.5e+3,{"b":null}],"":"\u00e9\n"})", R"({"a":{"a":{"a":true}}})"})
      EXPECT_TRUE(accepts(g, ok)) << ok;
    for (const char* bad : {"[]", "\"x\"", R"({"a":1,})", R"({"a":01})", R"({'a':1})", R"({"a":"\ud800"})", "{"})
      EXPECT_FALSE(accepts(g, bad)) << bad;
    EXPECT_EQ(accepts(g, "{ \"a\" :\n1 }"), ws == JsonSchemaOptions::Whitespace::Any);
  }
}

}  // namespace
}  // namespace olmo2::structured
