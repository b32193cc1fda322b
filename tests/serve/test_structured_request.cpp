// The structured-output request fields (runtime/serve/api/structured_fields.h): each form
// reaches CompletionParams::grammar (checked by matching texts against it: a JSON text
// valid against the schema and one that is not, per Python's jsonschema's verdicts), one
// compilation per distinct constraint, the schema's property order and the server's
// whitespace option kept, and every bad input a 400 naming its field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/serve/api/grammar_cache.h"
#include "runtime/structured/constraint.h"
#include "tests/serve/api_test_util.h"

namespace olmo2 {
namespace {

using namespace api_test;
using ::testing::AllOf;
using ::testing::HasSubstr;

ApiRequest complete(const std::string& fields, const ServedModel& model = kModel) {
  return parse_completions(R"({"prompt": [1], "max_tokens": 8, )" + fields + "}", model, tokenizer(), kFallbackSeed);
}

ApiRequest chat(const std::string& fields) {
  const ChatRenderer render = [](const nlohmann::ordered_json&, bool, const nlohmann::ordered_json&) { return std::string("hi"); };
  return parse_chat(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 8, )" + fields + "}", kModel,
                    tokenizer(), render, kFallbackSeed);
}

/// A vocabulary of the 256 single bytes (ids 0 … 255) and EOS 256: enough to match texts.
std::shared_ptr<const structured::Vocabulary> byte_vocabulary() {
  static const auto v = [] {
    std::vector<std::string> bytes(257);
    for (int b = 0; b < 256; ++b) bytes[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
    return std::make_shared<const structured::Vocabulary>(std::move(bytes), std::vector<int32_t>{},
                                                          std::vector<int32_t>{256});
  }();
  return v;
}

/// Whether `text` is a whole sentence of the request's grammar.
bool matches(const ApiRequest& r, const std::string& text) {
  const auto& g = r.prompts.at(0).grammar;
  EXPECT_TRUE(g) << "no grammar";
  if (!g) return false;
  structured::Matcher m(g, byte_vocabulary());
  return m.accept_bytes(text) && m.complete();
}

const char* kPerson =
    R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name", "age"], "additionalProperties": false})";

TEST(StructuredRequest, EachFormReachesTheGrammar) {
  const std::string schema = kPerson;
  for (const ApiRequest& r :
       {complete(R"("response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": true,
                 "schema": )" + schema + "}}"),
        complete(R"("guided_json": )" + schema), complete(R"("guided_json": )" + nlohmann::json(schema).dump()),
        complete(R"("structured_outputs": {"json": )" + schema + "}"),
        chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": )" + schema + "}}")}) {
    EXPECT_TRUE(matches(r, R"({"name":"Ann","age":41})"));
    EXPECT_FALSE(matches(r, R"({"name":"Ann","age":-1})")) << "minimum 0";
    EXPECT_FALSE(matches(r, R"({"name":"Ann"})")) << "age is required";
  }
  for (const ApiRequest& r : {complete(R"("response_format": {"type": "json_object"})"),
                              complete(R"("structured_outputs": {"json_object": true})"),
                              chat(R"("response_format": {"type": "json_object"})")}) {
    EXPECT_TRUE(matches(r, R"({"a":[1,{"b":null}]})"));
    EXPECT_FALSE(matches(r, "[1]")) << "an object only";
  }
  for (const ApiRequest& r : {complete(R"("guided_regex": "[a-c]{2}\\d")"),
                              complete(R"("structured_outputs": {"regex": "[a-c]{2}\\d"})")}) {
    EXPECT_TRUE(matches(r, "ca7"));
    EXPECT_FALSE(matches(r, "cd7"));
  }
  for (const ApiRequest& r : {complete(R"("guided_choice": ["yes", "no"])"),
                              complete(R"("structured_outputs": {"choice": ["yes", "no"]})"),
                              chat(R"("guided_choice": ["yes", "no"])")}) {
    EXPECT_TRUE(matches(r, "no"));
    EXPECT_FALSE(matches(r, "maybe"));
  }
  for (const ApiRequest& r : {complete(R"("guided_grammar": "root ::= \"x\"+")"),
                              complete(R"("structured_outputs": {"grammar": "root ::= \"x\"+"})")}) {
    EXPECT_TRUE(matches(r, "xxx"));
    EXPECT_FALSE(matches(r, "xy"));
  }
  EXPECT_FALSE(complete(R"("response_format": {"type": "text"})").prompts[0].grammar);
  EXPECT_FALSE(complete(R"("guided_decoding_backend": "xgrammar")").prompts[0].grammar);
}

TEST(StructuredRequest, PropertiesKeepTheSchemasOrderAndWhitespaceFollowsTheServer) {
  const std::string rf = R"("response_format": {"type": "json_schema", "json_schema": {"name": "z", "schema":
      {"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "boolean"}},
       "required": ["zeta", "alpha"], "additionalProperties": false}}})";
  const ApiRequest compact = complete(rf);
  EXPECT_TRUE(matches(compact, R"({"zeta":1,"alpha":true})"));
  EXPECT_FALSE(matches(compact, R"({"alpha":true,"zeta":1})")) << "properties in the schema's order";
  EXPECT_FALSE(matches(compact, R"({"zeta": 1, "alpha": true})")) << "compact: no whitespace";
  ServedModel any = kModel;
  any.json_options.whitespace = structured::JsonSchemaOptions::Whitespace::Any;
  EXPECT_TRUE(matches(complete(rf, any), R"({"zeta": 1, "alpha": true})"));
  // structured_outputs' disable_any_whitespace false asks for JSON's whitespace per request.
  EXPECT_TRUE(matches(complete(R"("structured_outputs": {"json_object": true, "disable_any_whitespace": false})"),
                      R"({ "a" : 1 })"));
}

TEST(StructuredRequest, EachDistinctConstraintCompilesOnce) {
  GrammarCache& cache = grammar_cache();
  const std::string body = R"("guided_json": {"type": "array", "items": {"type": "integer"}, "maxItems": 3})";
  const ApiRequest a = complete(body);
  const int64_t misses = cache.misses(), hits = cache.hits();
  const ApiRequest b = complete(body);
  const ApiRequest c = chat(R"("structured_outputs": {"json": {"type": "array", "items": {"type": "integer"},
                               "maxItems": 3}})");
  EXPECT_EQ(a.prompts[0].grammar, b.prompts[0].grammar) << "the same compiled grammar";
  EXPECT_EQ(a.prompts[0].grammar, c.prompts[0].grammar) << "another field, the same constraint";
  EXPECT_EQ(cache.misses(), misses);
  EXPECT_EQ(cache.hits(), hits + 2);
  const ApiRequest d = complete(R"("guided_json": {"type": "array", "items": {"type": "integer"}, "maxItems": 4})");
  EXPECT_NE(d.prompts[0].grammar, a.prompts[0].grammar);
  EXPECT_EQ(cache.misses(), misses + 1);
  // A batch of prompts shares the one grammar.
  const ApiRequest batch = parse_completions(R"({"prompt": ["a", "b"], "guided_choice": ["x"]})", kModel, tokenizer(),
                                             kFallbackSeed);
  EXPECT_EQ(batch.prompts[0].grammar, batch.prompts[1].grammar);
  GrammarCache small(2);  // bounded: the least recently used leaves
  int compiled = 0;
  const auto text = [&] { ++compiled; return std::string("root ::= \"a\""); };
  small.get("1", text), small.get("2", text), small.get("1", text), small.get("3", text), small.get("1", text);
  EXPECT_EQ(small.size(), 2);
  EXPECT_EQ(compiled, 3);
  small.get("2", text);
  EXPECT_EQ(compiled, 4) << "2 had left";
}

TEST(StructuredRequest, BadInputIs400NamingTheField) {
  const struct {
    std::string fields, param, says;
  } cases[] = {
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string"}}})",
       "response_format.json_schema.name", "name is required"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}})",
       "response_format.json_schema.name", "a-z"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a"}})",
       "response_format.json_schema.schema", "schema is required"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": []}})",
       "response_format.json_schema.schema", "object"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {}, "x": 1}})",
       "response_format.json_schema.x", "unknown field"},
      {R"("response_format": {"type": "json_schema"})", "response_format.json_schema", "required"},
      {R"("response_format": "json")", "response_format", "object"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema":
          {"type": "object", "patternProperties": {"^x": {"type": "string"}}}}})",
       "response_format.json_schema.schema", "patternProperties"},
      {R"("guided_json": "{\"type\": ")", "guided_json", "not valid JSON"},
      {R"("guided_json": {"type": "integer", "minimum": 5, "maximum": 1})", "guided_json", "guided_json"},
      {R"("guided_json": {"type": "strin"})", "guided_json", "strin"},
      {R"("guided_regex": "(ab")", "guided_regex", "regex offset"},
      {R"~("guided_regex": "a(?=b)")~", "guided_regex", "regex offset"},
      {R"("guided_choice": [])", "guided_choice", "non-empty list"},
      {R"("guided_choice": ["a", 1])", "guided_choice", "guided_choice[1]"},
      {R"("guided_grammar": "root ::= missing")", "guided_grammar", "missing"},
      {R"("guided_decoding_backend": 3)", "guided_decoding_backend", "string"},
      {R"("guided_whitespace_pattern": "[ ]?")", "guided_whitespace_pattern", "--structured-whitespace"},
      {R"("structured_outputs": {})", "structured_outputs", "names no constraint"},
      {R"("structured_outputs": {"regex": "a", "choice": ["b"]})", "structured_outputs.choice",
       "structured_outputs.regex and structured_outputs.choice"},
      {R"("structured_outputs": {"whitespace_pattern": " "})", "structured_outputs.whitespace_pattern", ""},
      {R"("guided_regex": "a", "guided_choice": ["a"])", "guided_choice", "guided_regex and guided_choice"},
      {R"("response_format": {"type": "json_object"}, "guided_json": {})", "guided_json",
       "response_format and guided_json"},
      {R"("guided_choice": ["a"], "ignore_eos": true)", "ignore_eos", "guided_choice"},
  };
  for (const auto& c : cases) {
    const Refusal r = refusal(c.fields, [&] { complete(c.fields); });
    EXPECT_EQ(r.status, 400) << c.fields;
    EXPECT_EQ(r.param, c.param) << c.fields << ": " << r.message;
    EXPECT_THAT(r.message, HasSubstr(c.says)) << c.fields;
  }
  const Refusal r = refusal("chat", [&] { chat(R"("guided_regex": "[")"); });
  EXPECT_EQ(r.param, "guided_regex");
}

}  // namespace
}  // namespace olmo2
