// The JSON Schema compiler's shared state and the split of its work across files
// (json_schema*.cpp, json_value_rules.cpp; docs/architecture.md §8, "Structured
// outputs"). Internal.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/structured/constraint.h"
#include "runtime/structured/grammar_writer.h"

namespace olmo2::structured::detail {

// ordered: `properties` keep the schema's order, which is the output's.
using json = nlohmann::ordered_json;

/// Throws ConstraintError at schema pointer `pointer` ("" is the root).
[[noreturn]] void schema_fail(const std::string& pointer, const std::string& message);
/// `pointer` + "/" + `token`, with JSON pointer escaping (~0, ~1).
std::string child(const std::string& pointer, const std::string& token);

/// A count keyword (minLength, maxItems, …) of `s`: a non-negative integer (2.0 too, as
/// JSON Schema counts integral numbers as integers) up to `limit`; empty when absent.
/// Throws ConstraintError naming the keyword otherwise.
std::optional<long long> count_keyword(const json& s, const char* key, const std::string& pointer, long long limit);

/// One compilation: the rule table and the generic JSON rules, made on first use.
class Context {
 public:
  explicit Context(const JsonSchemaOptions& options);
  RuleTable rules;
  const JsonSchemaOptions options;
  /// " ws" where whitespace may stand (options.whitespace Any), else "".
  std::string ws();
  /// Rule of one character of a JSON string's content: a raw code point ≥ 0x20 but
  /// " and \, or an escape (\" \\ \/ \b \f \n \r \t, \uXXXX outside the surrogates, so
  /// that each is one code point of the decoded string).
  std::string json_char();
  std::string any_string();
  /// JSON number syntax (no leading zeros; fraction and exponent).
  std::string any_number();
  /// An integer: -?(0|[1-9][0-9]*).
  std::string any_integer();
  /// Any JSON value, nested objects and arrays included.
  std::string any_value();
  /// Any JSON object (its keys any strings, duplicates not excluded).
  std::string any_object();

 private:
  std::string ws_rule_;
  std::string value_rule_;
};

/// Grammar expression of a `"type": "string"` schema's strings: minLength/maxLength
/// (code points), pattern, format. Throws ConstraintError as json_schema_to_grammar.
std::string string_schema(const json& schema, const std::string& pointer, Context& ctx);
/// Grammar expression of `"type": "integer"` with minimum/maximum/exclusive bounds.
std::string integer_schema(const json& schema, const std::string& pointer, Context& ctx);
/// Grammar expression of `"type": "number"` with bounds (see json_schema_numbers.cpp).
std::string number_schema(const json& schema, const std::string& pointer, Context& ctx);

/// The walk over one schema document: keywords checked, $ref resolved (each target one
/// rule, so recursive references become recursive rules), combinators expanded.
class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, Context& ctx) : root_(root), ctx_(ctx) {}
  /// Grammar expression of the values valid against `schema` at `pointer`.
  std::string compile(const json& schema, const std::string& pointer);
  /// `"type": "object"` part of `schema` (json_schema_objects.cpp).
  std::string object_schema(const json& schema, const std::string& pointer);
  /// `"type": "array"` part of `schema` (json_schema_objects.cpp).
  std::string array_schema(const json& schema, const std::string& pointer);
  Context& ctx() { return ctx_; }

 private:
  std::string reference(const json& schema, const std::string& pointer);
  std::string alternatives(const json& schema, const std::string& pointer);
  std::string enumeration(const json& schema, const std::string& pointer);
  const json& resolve(const std::string& ref, const std::string& pointer, std::string* target_pointer);
  /// No JSON value is valid against both `a` and `b` as compiled here — a sufficient
  /// check that makes oneOf exact as anyOf (json_schema_oneof.cpp).
  bool disjoint(const json& a, const json& b);
  json merge(json into, const json& from, const std::string& pointer);

  const json& root_;
  Context& ctx_;
  std::map<std::string, std::string> ref_rules_;
  int depth_ = 0;
};

}  // namespace olmo2::structured::detail
