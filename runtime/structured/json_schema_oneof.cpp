// Disjointness of two schemas, so that oneOf compiles as anyOf exactly (json_schema.cpp;
// docs/architecture.md §8, "Structured outputs"). A sufficient check, never a guess:
// schemas whose values can share no JSON type; const/enum value sets with nothing in
// common; strings with length ranges apart; objects where one side always writes a
// property the other requires it never writes (or forbids) — pydantic's unions, tagged
// unions by a const tag, and Optional. Anything else is not provably disjoint.
#include <set>

#include "runtime/structured/json_schema_internal.h"

namespace olmo2::structured::detail {

namespace {

const std::set<std::string> kAll = {"object", "array", "string", "number", "integer", "boolean", "null"};

std::string type_of(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_string()) return "string";
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  return "number";
}

// The JSON types a schema's values can have (integer counted as number as well).
std::set<std::string> types(const json& s) {
  std::set<std::string> out;
  if (s.is_boolean()) return s.get<bool>() ? kAll : out;
  if (s.contains("enum") || s.contains("const")) {
    for (const json& v : s.contains("const") ? json::array({s["const"]}) : s["enum"]) out.insert(type_of(v));
  } else if (s.contains("type")) {
    for (const json& t : s["type"].is_array() ? s["type"] : json::array({s["type"]}))
      if (t.is_string()) out.insert(t.get<std::string>());
  } else {  // inferred from the keywords, as SchemaCompiler::compile does
    auto any = [&](std::initializer_list<const char*> keys) {
      for (const char* k : keys)
        if (s.contains(k)) return true;
      return false;
    };
    if (any({"properties", "required", "additionalProperties"})) out.insert("object");
    if (any({"items", "prefixItems", "additionalItems", "minItems", "maxItems"})) out.insert("array");
    if (any({"minLength", "maxLength", "pattern", "format"})) out.insert("string");
    if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) out.insert("number");
    if (out.empty()) return kAll;
  }
  if (out.contains("integer")) out.insert("number");
  return out;
}

std::optional<json> values(const json& s) {
  if (s.is_object() && s.contains("const")) return json::array({s["const"]});
  if (s.is_object() && s.contains("enum")) return s["enum"];
  return std::nullopt;
}

}  // namespace

bool SchemaCompiler::disjoint(const json& a0, const json& b0) {
  // Follow plain references (a few hops: a cycle of bare $refs is refused elsewhere).
  auto follow = [&](json s) {
    for (int hop = 0; hop < 8 && s.is_object() && s.contains("$ref") && s.size() == 1; ++hop)
      s = resolve(s["$ref"].get<std::string>(), "", nullptr);
    return s;
  };
  const json a = follow(a0), b = follow(b0);
  if (!(a.is_object() || a.is_boolean()) || !(b.is_object() || b.is_boolean())) return false;
  if (a.is_object() && (a.contains("anyOf") || a.contains("oneOf") || a.contains("allOf") || a.contains("$ref")))
    return false;
  if (b.is_object() && (b.contains("anyOf") || b.contains("oneOf") || b.contains("allOf") || b.contains("$ref")))
    return false;
  std::set<std::string> common;
  for (const auto& t : types(a))
    if (types(b).contains(t) && t != "integer") common.insert(t);
  if (common.empty()) return true;
  if (const auto va = values(a), vb = values(b); va && vb) {
    for (const json& x : *va)
      for (const json& y : *vb)
        if (x == y) return false;
    return true;
  }
  if (values(a) || values(b) || common.size() != 1) return false;
  const std::string& t = *common.begin();
  if (t == "string") {
    const long long alo = count_keyword(a, "minLength", "", 100000).value_or(0);
    const long long blo = count_keyword(b, "minLength", "", 100000).value_or(0);
    const auto ahi = count_keyword(a, "maxLength", "", 100000), bhi = count_keyword(b, "maxLength", "", 100000);
    return (ahi && *ahi < blo) || (bhi && *bhi < alo);
  }
  if (t != "object") return false;
  // Properties an object schema always writes (required) and those it never writes.
  auto required = [](const json& s) {
    std::set<std::string> out;
    if (s.contains("required") && s["required"].is_array())
      for (const json& r : s["required"])
        if (r.is_string()) out.insert(r.get<std::string>());
    return out;
  };
  auto never_writes = [&](const json& s, const std::string& name) {
    const json props = s.contains("properties") && s["properties"].is_object() ? s["properties"] : json::object();
    if (props.contains(name)) return props[name].is_boolean() && !props[name].get<bool>();
    if (required(s).contains(name)) return false;
    const bool extras = s.contains("additionalProperties") ? !(s["additionalProperties"].is_boolean() &&
                                                               !s["additionalProperties"].get<bool>())
                                                           : ctx_.options.additional_properties_default;
    return !extras;
  };
  // Every value of `x` fails `y`: y requires a property x never writes, or x always
  // writes one y forbids (not in y's properties, additionalProperties false given).
  auto fails = [&](const json& x, const json& y) {
    for (const auto& name : required(y))
      if (never_writes(x, name)) return true;
    const bool y_closed = y.contains("additionalProperties") && y["additionalProperties"].is_boolean() &&
                          !y["additionalProperties"].get<bool>();
    for (const auto& name : required(x)) {
      const bool listed = y.contains("properties") && y["properties"].is_object() && y["properties"].contains(name);
      if (y_closed && !listed) return true;
      // A tag: both list it with const/enum values that do not meet.
      if (listed && x.contains("properties") && x["properties"].contains(name)) {
        const auto vx = values(x["properties"][name]), vy = values(y["properties"][name]);
        if (vx && vy) {
          bool meet = false;
          for (const json& p : *vx)
            for (const json& q : *vy) meet |= p == q;
          if (!meet) return true;
        }
      }
    }
    return false;
  };
  return fails(a, b) && fails(b, a);
}

}  // namespace olmo2::structured::detail
