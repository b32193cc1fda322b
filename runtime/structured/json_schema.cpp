// JSON Schema → grammar text (constraint.h json_schema_to_grammar; docs/architecture.md
// §8, "Structured outputs"): keyword checks, $ref/$defs, enum/const, anyOf/oneOf,
// trivially mergeable allOf, and the dispatch by type. Objects and arrays are in
// json_schema_objects.cpp, strings in json_schema_strings.cpp, numbers in
// json_schema_numbers.cpp.
//
// oneOf is compiled as anyOf where that is exact: only when every two branches are
// provably disjoint (json_schema_oneof.cpp), else refused.
// Without "type", the type is inferred from the keywords present (properties → object,
// items → array, …; none → any JSON value): a subset of what the schema allows.
#include <cctype>
#include <cmath>
#include <set>

#include "runtime/structured/json_schema_internal.h"

namespace olmo2::structured::detail {

namespace {

// Annotations (no validator asserts them by default) and the definitions container.
const std::set<std::string> kIgnored = {"description", "title", "default", "examples", "$schema", "$id", "$comment",
                                        "deprecated", "readOnly", "writeOnly", "discriminator", "$defs", "definitions",
                                        "contentEncoding", "contentMediaType", "$anchor"};

// Keywords outside the supported set whose value here constrains nothing.
bool no_op(const std::string& k, const json& v) {
  if (k == "uniqueItems") return v == json(false);
  if (k == "minProperties" || k == "minContains") return v == json(0);
  return false;
}
const std::set<std::string> kSupported = {
    "type",     "properties", "required",  "additionalProperties", "items",     "prefixItems", "additionalItems",
    "minItems", "maxItems",   "enum",      "const",                "anyOf",     "oneOf",       "allOf",
    "$ref",     "minLength",  "maxLength", "pattern",              "format",    "minimum",     "maximum",
    "exclusiveMinimum",       "exclusiveMaximum"};
const std::set<std::string> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};

// The keywords of `s` that constrain (neither ignored nor in `except`).
std::vector<std::string> constraining(const json& s, const std::set<std::string>& except) {
  std::vector<std::string> out;
  for (const auto& [k, v] : s.items())
    if (!kIgnored.contains(k) && !except.contains(k) && !no_op(k, v)) out.push_back(k);
  return out;
}

bool has_type(const json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "number") return v.is_number();
  if (type == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  return false;
}

// Code points of a UTF-8 string.
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string SchemaCompiler::compile(const json& s, const std::string& pointer) {
  if (s.is_boolean()) {
    if (s.get<bool>()) return ctx_.any_value();
    schema_fail(pointer, "unsatisfiable: the schema is false");
  }
  if (!s.is_object()) schema_fail(pointer, "a schema must be an object or a boolean, not " + s.dump());
  // Nesting through keywords and through chains of $ref targets (each a fresh pointer).
  struct Depth {
    int& d;
    explicit Depth(int& depth) : d(++depth) {}
    ~Depth() { --d; }
  } depth(depth_);
  if (depth_ > 256 || std::count(pointer.begin(), pointer.end(), '/') > 256)
    schema_fail(pointer, "schema nested too deeply");
  for (const auto& [k, v] : s.items())
    if (!kIgnored.contains(k) && !kSupported.contains(k) && !no_op(k, v))
      schema_fail(child(pointer, k), "unsupported keyword \"" + k + "\"");
  if (s.contains("$ref")) return reference(s, pointer);
  if (s.contains("allOf")) {
    const json& all = s["allOf"];
    if (!all.is_array() || all.empty()) schema_fail(child(pointer, "allOf"), "allOf must be a non-empty array");
    json merged = s;
    merged.erase("allOf");
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string at = child(child(pointer, "allOf"), std::to_string(i));
      json part = all[i];
      if (part.is_object() && part.contains("$ref") && constraining(part, {"$ref"}).empty())
        part = resolve(part["$ref"].get<std::string>(), at, nullptr);
      if (!part.is_object()) schema_fail(at, "allOf entries must be schema objects");
      if (part.contains("$ref")) schema_fail(at, "allOf with $ref and other keywords is unsupported");
      merged = merge(std::move(merged), part, at);
    }
    return compile(merged, pointer);
  }
  if (s.contains("anyOf") || s.contains("oneOf")) return alternatives(s, pointer);
  if (s.contains("enum") || s.contains("const")) return enumeration(s, pointer);

  std::vector<std::string> types;
  if (s.contains("type")) {
    const json& t = s["type"];
    if (t.is_string()) types.push_back(t.get<std::string>());
    else if (t.is_array() && !t.empty())
      for (const json& x : t) {
        if (!x.is_string()) schema_fail(child(pointer, "type"), "type entries must be strings, not " + x.dump());
        types.push_back(x.get<std::string>());
      }
    else schema_fail(child(pointer, "type"), "type must be a string or a non-empty array, not " + t.dump());
    for (const auto& x : types)
      if (!kTypes.contains(x)) schema_fail(child(pointer, "type"), "unknown type \"" + x + "\"");
  } else {
    auto any = [&](std::initializer_list<const char*> keys) {
      for (const char* k : keys)
        if (s.contains(k)) return true;
      return false;
    };
    if (any({"properties", "required", "additionalProperties"})) types.push_back("object");
    if (any({"items", "prefixItems", "additionalItems", "minItems", "maxItems"})) types.push_back("array");
    if (any({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
    if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("number");
    if (types.empty()) return ctx_.any_value();
  }
  const bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
  std::vector<std::string> alts;
  std::set<std::string> seen;
  for (const auto& t : types) {
    if (!seen.insert(t).second || (t == "integer" && has_number)) continue;
    if (t == "object") alts.push_back(object_schema(s, pointer));
    else if (t == "array") alts.push_back(array_schema(s, pointer));
    else if (t == "string") alts.push_back(string_schema(s, pointer, ctx_));
    else if (t == "integer") alts.push_back(integer_schema(s, pointer, ctx_));
    else if (t == "number") alts.push_back(number_schema(s, pointer, ctx_));
    else if (t == "boolean") alts.push_back("(\"true\" | \"false\")");
    else alts.push_back("\"null\"");
  }
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

const json& SchemaCompiler::resolve(const std::string& ref, const std::string& pointer, std::string* target) {
  if (ref.empty() || ref[0] != '#')
    schema_fail(child(pointer, "$ref"), "only local references (\"#/...\") are supported, not \"" + ref + "\"");
  const json* node = &root_;
  std::string path;  // the fragment, percent-decoded (a URI fragment holding a JSON pointer)
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
      path += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      path += ref[i];
    }
  }
  if (!path.empty() && path[0] != '/') schema_fail(child(pointer, "$ref"), "unresolvable $ref \"" + ref + "\"");
  size_t at = 1;
  while (at <= path.size() && !path.empty()) {
    const size_t end = std::min(path.find('/', at), path.size());
    std::string token = path.substr(at, end - at);
    for (size_t p; (p = token.find("~1")) != std::string::npos;) token.replace(p, 2, "/");
    for (size_t p; (p = token.find("~0")) != std::string::npos;) token.replace(p, 2, "~");
    if (node->is_object() && node->contains(token)) node = &(*node)[token];
    else if (node->is_array() && !token.empty() && token.size() < 10 &&
             token.find_first_not_of("0123456789") == std::string::npos &&
             std::stoul(token) < node->size())
      node = &(*node)[std::stoul(token)];
    else schema_fail(child(pointer, "$ref"), "unresolvable $ref \"" + ref + "\"");
    at = end + 1;
  }
  if (target) *target = path;
  return *node;
}

std::string SchemaCompiler::reference(const json& s, const std::string& pointer) {
  if (!s["$ref"].is_string()) schema_fail(child(pointer, "$ref"), "$ref must be a string");
  const std::string ref = s["$ref"].get<std::string>();
  if (const auto others = constraining(s, {"$ref"}); !others.empty()) {
    // Keywords beside $ref apply together with its target: merged as allOf would.
    json siblings = s;
    siblings.erase("$ref");
    const json& target = resolve(ref, pointer, nullptr);
    if (!target.is_object() || target.contains("$ref"))
      schema_fail(child(pointer, others[0]), "\"" + others[0] + "\" beside a $ref to a boolean or to another $ref is unsupported");
    return compile(merge(siblings, target, child(pointer, "$ref")), pointer);
  }
  std::string target;
  const json& node = resolve(ref, pointer, &target);
  if (const auto it = ref_rules_.find(target); it != ref_rules_.end()) return it->second;
  const std::string name = ctx_.rules.reserve(target.empty() ? "schema" : target.substr(target.rfind('/') + 1));
  ref_rules_.emplace(target, name);
  ctx_.rules.define(name, compile(node, target));
  return name;
}

json SchemaCompiler::merge(json into, const json& from, const std::string& pointer) {
  for (const auto& [k, v] : from.items()) {
    if (kIgnored.contains(k)) continue;
    if (!into.contains(k)) {
      into[k] = v;
    } else if (into[k] == v) {
    } else if (k == "required" && v.is_array() && into[k].is_array()) {
      for (const json& r : v)
        if (std::find(into[k].begin(), into[k].end(), r) == into[k].end()) into[k].push_back(r);
    } else if (k == "properties" && v.is_object() && into[k].is_object()) {
      for (const auto& [name, sub] : v.items()) {
        if (into[k].contains(name) && into[k][name] != sub)
          schema_fail(child(child(pointer, k), name), "properties that differ do not merge (unsupported)");
        into[k][name] = sub;
      }
    } else if (k == "type") {
      auto as_set = [](const json& t) {
        std::set<std::string> out;
        if (t.is_string()) out.insert(t.get<std::string>());
        else if (t.is_array()) for (const json& x : t) if (x.is_string()) out.insert(x.get<std::string>());
        return out;
      };
      const auto a = as_set(into[k]), b = as_set(v);
      json both = json::array();
      for (const auto& t : a)
        if (b.contains(t) || (t == "integer" && b.contains("number"))) both.push_back(t);
      for (const auto& t : b)
        if (t == "integer" && a.contains("number") && !a.contains("integer")) both.push_back(t);
      if (both.empty()) schema_fail(child(pointer, k), "unsatisfiable: no type left");
      into[k] = both;
    } else {
      schema_fail(child(pointer, k), "\"" + k + "\" values that differ do not merge (unsupported)");
    }
  }
  return into;
}

std::string SchemaCompiler::alternatives(const json& s, const std::string& pointer) {
  if (s.contains("anyOf") && s.contains("oneOf")) schema_fail(pointer, "anyOf together with oneOf is unsupported");
  const std::string key = s.contains("anyOf") ? "anyOf" : "oneOf";
  const json& list = s[key];
  if (!list.is_array() || list.empty()) schema_fail(child(pointer, key), key + " must be a non-empty array");
  json siblings = s;
  siblings.erase(key);
  const bool plain = constraining(siblings, {}).empty();
  std::vector<std::string> alts;
  std::vector<std::pair<json, std::string>> kept;  // each compiled branch and its pointer
  std::string last_error;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = child(child(pointer, key), std::to_string(i));
    try {
      json branch = list[i];
      if (!plain) {
        if (branch.is_object() && branch.contains("$ref") && constraining(branch, {"$ref"}).empty())
          branch = resolve(branch["$ref"].get<std::string>(), at, nullptr);
        if (branch.is_boolean()) branch = branch.get<bool>() ? json::object() : json{{"enum", json::array()}};
        if (!branch.is_object()) schema_fail(at, "a schema must be an object or a boolean");
        branch = merge(siblings, branch, at);
      }
      alts.push_back(compile(branch, at));
      kept.emplace_back(std::move(branch), at);
    } catch (const ConstraintError& e) {
      if (std::string(e.what()).find("unsatisfiable") == std::string::npos) throw;
      last_error = e.what();  // an unsatisfiable branch is left out
    }
  }
  if (key == "oneOf")
    for (size_t i = 0; i < kept.size(); ++i)
      for (size_t j = i + 1; j < kept.size(); ++j)
        if (!disjoint(kept[i].first, kept[j].first))
          schema_fail(child(pointer, key), "oneOf branches " + kept[i].second + " and " + kept[j].second +
                                               " may both match one value: unsupported (anyOf would allow it)");
  if (alts.empty()) schema_fail(child(pointer, key), "unsatisfiable: every branch is (" + last_error + ")");
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

std::string SchemaCompiler::enumeration(const json& s, const std::string& pointer) {
  const auto others = constraining(s, {"enum", "const", "type", "minLength", "maxLength", "minimum", "maximum",
                                       "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems"});
  if (!others.empty()) schema_fail(child(pointer, others[0]), "\"" + others[0] + "\" beside enum/const is unsupported");
  json values = json::array();
  if (s.contains("enum")) {
    if (!s["enum"].is_array()) schema_fail(child(pointer, "enum"), "enum must be an array");
    if (s["enum"].empty()) schema_fail(child(pointer, "enum"), "unsatisfiable: empty enum");
    values = s["enum"];
  }
  if (s.contains("const")) {
    if (s.contains("enum") && std::find(values.begin(), values.end(), s["const"]) == values.end())
      schema_fail(child(pointer, "const"), "unsatisfiable: const is not in enum");
    values = json::array({s["const"]});
  }
  std::vector<std::string> alts;
  for (const json& v : values) {
    bool ok = true;
    if (s.contains("type")) {
      const json& t = s["type"];
      ok = false;
      for (const json& x : t.is_array() ? t : json::array({t})) ok |= x.is_string() && has_type(v, x.get<std::string>());
    }
    if (v.is_string()) {
      const size_t n = code_points(v.get<std::string>());
      if (s.contains("minLength") && s["minLength"].is_number() && n < s["minLength"].get<double>()) ok = false;
      if (s.contains("maxLength") && s["maxLength"].is_number() && n > s["maxLength"].get<double>()) ok = false;
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      auto num = [&](const char* k) { return s.contains(k) && s[k].is_number(); };
      if (num("minimum") && x < s["minimum"].get<double>()) ok = false;
      if (num("maximum") && x > s["maximum"].get<double>()) ok = false;
      if (num("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) ok = false;
      if (num("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) ok = false;
    }
    if (v.is_array()) {
      if (s.contains("minItems") && s["minItems"].is_number() && v.size() < s["minItems"].get<double>()) ok = false;
      if (s.contains("maxItems") && s["maxItems"].is_number() && v.size() > s["maxItems"].get<double>()) ok = false;
    }
    if (ok) alts.push_back(literal(v.dump()));
  }
  if (alts.empty()) schema_fail(pointer, "unsatisfiable: no enum/const value fits the other keywords");
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

}  // namespace olmo2::structured::detail

namespace olmo2::structured {

std::string json_schema_to_grammar(const std::string& schema_json, const JsonSchemaOptions& options) {
  detail::json doc;
  try {
    doc = detail::json::parse(schema_json);
  } catch (const detail::json::exception& e) {
    throw ConstraintError(std::string("schema: malformed JSON: ") + e.what(), "/", __FILE__, __LINE__);
  }
  detail::Context ctx(options);
  detail::SchemaCompiler compiler(doc, ctx);
  const std::string root = compiler.compile(doc, "");
  return ctx.rules.text(root);
}

}  // namespace olmo2::structured
