// The JSON Schema and json_object compilers' refusals and grammar text
// (runtime/structured/json_schema*.cpp; docs/architecture.md §8, "Structured outputs").
// Which texts the grammars accept is in test_schema_acceptance.cpp.
#include <string>

#include <gtest/gtest.h>

#include "runtime/structured/constraint.h"

namespace olmo2::structured {
namespace {

struct Refusal {
  const char* schema;
  const char* path;     // ConstraintError::path()
  const char* message;  // a substring of what()
};

void expect_refused(const Refusal& r) {
  SCOPED_TRACE(r.schema);
  try {
    json_schema_to_grammar(r.schema);
    ADD_FAILURE() << "compiled";
  } catch (const ConstraintError& e) {
    EXPECT_EQ(e.path(), r.path) << e.what();
    EXPECT_NE(std::string(e.what()).find(r.message), std::string::npos) << e.what();
  }
}

TEST(JsonSchema, UnsupportedKeywordsAreNamedWithTheirPointer) {
  for (const char* kw : {"patternProperties", "if", "then", "else", "not", "dependentRequired", "dependentSchemas",
                         "uniqueItems", "multipleOf", "minProperties", "maxProperties", "contains", "propertyNames",
                         "unevaluatedProperties", "$dynamicRef"}) {
    const std::string schema = std::string(R"({"type":"object","properties":{"a":{"type":"array","items":{")") + kw +
                               R"(":1}}}})";
    const std::string path = std::string("/properties/a/items/") + kw;
    const std::string message = std::string("unsupported keyword \"") + kw + "\"";
    expect_refused({schema.c_str(), path.c_str(), message.c_str()});
  }
}

TEST(JsonSchema, AnnotationsAndNoOpValuesAreAccepted) {
  const std::string plain = json_schema_to_grammar(R"({"type":"array","items":{"type":"integer"}})");
  EXPECT_EQ(json_schema_to_grammar(
                R"({"type":"array","items":{"type":"integer","title":"n","description":"d","default":1,"examples":[2],
                    "deprecated":false,"readOnly":true,"$comment":"c"},"uniqueItems":false,"minProperties":0,
                    "$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x"})"),
            plain);
}

TEST(JsonSchema, UnsatisfiableSchemasSaySo) {
  const Refusal cases[] = {
      {R"({"type":"string","minLength":5,"maxLength":4})", "/", "unsatisfiable: minLength 5 > maxLength 4"},
      {R"({"type":"integer","minimum":10,"maximum":9})", "/", "unsatisfiable"},
      {R"({"type":"integer","exclusiveMinimum":5,"exclusiveMaximum":6})", "/", "unsatisfiable"},
      {R"({"type":"number","minimum":0.2,"maximum":0.8})", "/", "unsatisfiable"},
      {R"({"properties":{"e":{"enum":[]}}})", "/properties/e/enum", "unsatisfiable: empty enum"},
      {R"({"type":"string","enum":[1,2,null]})", "/", "unsatisfiable"},
      {R"({"const":"abc","type":"string","maxLength":2})", "/", "unsatisfiable"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"],"additionalProperties":false})", "/required",
       "unsatisfiable: required property \"b\""},
      {R"({"type":"object","properties":{"a":false},"required":["a"]})", "/properties/a", "unsatisfiable"},
      {R"({"type":"array","minItems":3,"maxItems":2})", "/", "unsatisfiable"},
      {R"({"type":"array","prefixItems":[{}],"items":false,"minItems":2})", "/", "unsatisfiable"},
      {"false", "/", "unsatisfiable"},
      {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "/allOf/1/type", "unsatisfiable: no type left"},
      {R"({"anyOf":[{"enum":[]},{"type":"string","minLength":2,"maxLength":1}]})", "/anyOf", "unsatisfiable"},
  };
  for (const auto& c : cases) expect_refused(c);
}

TEST(JsonSchema, MalformedOrMistypedSchemasAreRefused) {
  const Refusal cases[] = {
      {"{", "/", "malformed JSON"},
      {"", "/", "malformed JSON"},
      {R"({"type":5})", "/type", "type must be a string"},
      {R"({"type":"float"})", "/type", "unknown type \"float\""},
      {R"({"type":"object","properties":[]})", "/properties", "properties must be an object"},
      {R"({"type":"object","required":"a"})", "/required", "required must be an array"},
      {R"({"type":"string","minLength":-1})", "/minLength", "non-negative integer"},
      {R"({"type":"string","format":"ipv4"})", "/format", "unsupported format \"ipv4\""},
      {R"({"type":"string","format":"date","maxLength":3})", "/", "cannot be combined"},
      {R"({"type":"string","pattern":"(a"})", "/pattern regex offset 2", "missing ')'"},
      {R"({"type":"string","pattern":"ab","maxLength":3})", "/pattern", "only when anchored"},
      {R"({"type":"string","pattern":"^a+b+$","maxLength":3})", "/pattern", "one repeated character class"},
      {R"({"type":"string","pattern":"^abc$","maxLength":2})", "/pattern", "unsatisfiable"},
      {R"({"type":"string","pattern":"^ab[0-9]{3,}$","maxLength":4})", "/pattern", "unsatisfiable"},
      {R"({"$ref":"#/$defs/missing"})", "/$ref", "unresolvable $ref \"#/$defs/missing\""},
      {R"({"$ref":"https://example.com/s.json"})", "/$ref", "only local references"},
      {R"({"$ref":"#/$defs/a","type":"string","$defs":{"a":{"$ref":"#/$defs/b"},"b":{}}})", "/type",
       "beside a $ref to a boolean or to another $ref"},
      {R"({"type":"array","maxItems":2.5})", "/maxItems", "non-negative integer"},
      {R"({"type":"number","maximum":1e300})", "/maximum", "outside the supported range"},
      {R"({"type":"integer","exclusiveMinimum":true})", "/exclusiveMinimum", "must be a number"},
      {R"({"items":[1]})", "/items/0", "a schema must be an object or a boolean"},
      {R"({"enum":["a"],"pattern":"a"})", "/pattern", "beside enum/const is unsupported"},
      {R"({"oneOf":[{"type":"integer"},{"minimum":2}]})", "/oneOf", "may both match one value"},
      {R"({"type":"string","oneOf":[{"minLength":2},{"maxLength":4}]})", "/oneOf", "may both match one value"},
      {R"({"oneOf":[{"type":"object","properties":{"t":{"const":1}},"required":["t"]},
                    {"type":"object","properties":{"t":{"enum":[2,1]}},"required":["t"]}]})",
       "/oneOf", "may both match one value"},
  };
  for (const auto& c : cases) expect_refused(c);
}

TEST(JsonSchema, DeepNestingIsRefusedNotOverflowed) {
  std::string schema;
  for (int i = 0; i < 400; ++i) schema += R"({"type":"array","items":)";
  schema += "{}";
  for (int i = 0; i < 400; ++i) schema += "}";
  EXPECT_THROW(json_schema_to_grammar(schema), ConstraintError);
  // A chain of references, each target a fresh pointer.
  std::string defs = R"({"$ref":"#/$defs/d0","$defs":{)";
  for (int i = 0; i < 2000; ++i)
    defs += "\"d" + std::to_string(i) + "\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/d" + std::to_string(i + 1) + "\"}},";
  defs += R"("d2000":{"type":"null"}}})";
  EXPECT_THROW(json_schema_to_grammar(defs), ConstraintError);
}

TEST(JsonSchema, CompactFormHasNoWhitespaceRuleAndAnyFormBoundsIt) {
  const std::string compact = json_schema_to_grammar(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  EXPECT_EQ(compact.find("ws"), std::string::npos) << compact;
  JsonSchemaOptions any;
  any.whitespace = JsonSchemaOptions::Whitespace::Any;
  any.max_whitespace = 3;
  const std::string spaced = json_schema_to_grammar(R"({"type":"array"})", any);
  EXPECT_NE(spaced.find("ws ::= [ \\t\\n\\r]{0,3}"), std::string::npos) << spaced;
  EXPECT_EQ(json_object_grammar().find("ws"), std::string::npos);
}

TEST(JsonSchema, IntegerRangesAreDigitPatterns) {
  // 17..243: 1[7-9] | [2-9][0-9] | 1[0-9]{2} | 2[0-3][0-9] | 24[0-3]; −5..−1: "-" [1-5].
  const std::string g = json_schema_to_grammar(R"({"type":"integer","minimum":-5,"maximum":-1})");
  EXPECT_NE(g.find("\"-\" [1-5]"), std::string::npos) << g;
  const std::string h = json_schema_to_grammar(R"({"type":"integer","minimum":17,"maximum":243})");
  for (const char* part : {"\"1\" [7-9]", "[2-9] [0-9]", "\"1\" [0-9]{2}", "\"2\" [0-3] [0-9]", "\"2\" \"4\" [0-3]"})
    EXPECT_NE(h.find(part), std::string::npos) << part << "\n" << h;
}

TEST(JsonSchema, RecursiveReferencesBecomeRecursiveRules) {
  const std::string g = json_schema_to_grammar(
      R"({"$defs":{"t":{"type":"object","properties":{"k":{"type":"array","items":{"$ref":"#/$defs/t"}}}}},"$ref":"#/$defs/t"})");
  EXPECT_NE(g.find("root ::= t\n"), std::string::npos) << g;
  EXPECT_NE(g.find("\"[\" (t (\",\" t)*)? \"]\""), std::string::npos) << g;
}

}  // namespace
}  // namespace olmo2::structured
