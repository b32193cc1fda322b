// Generic JSON rules (json_schema_internal.h Context; docs/architecture.md §8): strings,
// numbers, any value, any object — and json_object_grammar.
#include <cmath>

#include "runtime/structured/json_schema_internal.h"

namespace olmo2::structured::detail {

void schema_fail(const std::string& pointer, const std::string& message) {
  throw ConstraintError("schema " + (pointer.empty() ? std::string("root") : pointer) + ": " + message,
                        pointer.empty() ? "/" : pointer, __FILE__, __LINE__);
}

std::string child(const std::string& pointer, const std::string& token) {
  std::string out = pointer + "/";
  for (const char c : token) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::optional<long long> count_keyword(const json& s, const char* key, const std::string& pointer, long long limit) {
  if (!s.contains(key)) return std::nullopt;
  const json& v = s.at(key);
  const bool integral = v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (!integral || v.get<double>() < 0)
    schema_fail(child(pointer, key), std::string(key) + " must be a non-negative integer, not " + v.dump());
  if (v.get<double>() > double(limit))
    schema_fail(child(pointer, key), std::string(key) + " above " + std::to_string(limit) + " is not supported");
  return static_cast<long long>(v.get<double>());
}

Context::Context(const JsonSchemaOptions& opts) : options(opts) {}

std::string Context::ws() {
  if (options.whitespace == JsonSchemaOptions::Whitespace::Compact || options.max_whitespace <= 0) return "";
  if (ws_rule_.empty())
    ws_rule_ = rules.add("ws", "[ \\t\\n\\r]{0," + std::to_string(options.max_whitespace) + "}");
  return " " + ws_rule_;
}

std::string Context::json_char() {
  const std::string hex = rules.add("hex", "[0-9a-fA-F]");
  const std::string u = rules.add("unicode-escape", "\"u\" ([0-9a-cA-Ce-fE-F] " + hex + "{3} | [dD] [0-7] " + hex + "{2})");
  return rules.add("char", "[^\\\"\\\\\\x00-\\x1F] | \"\\\\\" ([\\\"\\\\/bfnrt] | " + u + ")");
}

std::string Context::any_string() { return rules.add("string", "\"\\\"\" " + json_char() + "* \"\\\"\""); }

// At most 16 integer digits, 16 fraction digits and a 2-digit exponent (llama.cpp's JSON
// grammars bound them alike): every output parses to a finite number in Python, JavaScript
// and pydantic, where a random model would otherwise write thousands of digits
// (docs/architecture.md §8, the compilers).
std::string Context::any_integer() { return rules.add("integer", "\"-\"? (\"0\" | [1-9] [0-9]{0,15})"); }

std::string Context::any_number() {
  return rules.add("number", "\"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [+\\-]? [0-9]{1,2})?");
}

std::string Context::any_value() {
  if (!value_rule_.empty()) return value_rule_;
  value_rule_ = rules.reserve("value");
  const std::string w = ws();
  const std::string array = rules.add("array", "\"[\"" + w + " (" + value_rule_ + w + " (\",\"" + w + " " +
                                                   value_rule_ + w + ")*)? \"]\"");
  rules.define(value_rule_, any_object() + " | " + array + " | " + any_string() + " | " + any_number() +
                                " | \"true\" | \"false\" | \"null\"");
  return value_rule_;
}

std::string Context::any_object() {
  const std::string w = ws();
  const std::string value = any_value();
  const std::string member = rules.add("member", any_string() + w + " \":\"" + w + " " + value + w);
  return rules.add("object", "\"{\"" + w + " (" + member + " (\",\"" + w + " " + member + ")*)? \"}\"");
}

}  // namespace olmo2::structured::detail

namespace olmo2::structured {

std::string json_object_grammar(const JsonSchemaOptions& options) {
  detail::Context ctx(options);
  return ctx.rules.text(ctx.any_object());
}

}  // namespace olmo2::structured
