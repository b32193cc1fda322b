// Filters and tests of the chat-template interpreter (template_builtins.h). Semantics:
// Jinja2 3.1's filters.py and tests.py; tojson is transformers' override of it
// (json.dumps with ensure_ascii=False, indent, separators, sort_keys). select, reject,
// selectattr, rejectattr and map return lists where Jinja2 returns generators: the same
// items for every use a chat template makes of them (join, list, length after list, for).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "runtime/serve/chat/python_str.h"
#include "runtime/serve/chat/template_builtins.h"

namespace olmo2::chat {
namespace {

const char* const kFilters[] = {"abs",    "capitalize", "count",  "d",         "default", "first", "float",
                                "int",    "items",      "join",   "last",      "length",  "list",  "lower",
                                "map",    "reject",     "rejectattr", "replace", "reverse", "safe", "select",
                                "selectattr", "string", "title",  "tojson",    "trim",    "unique", "upper"};
const char* const kTests[] = {"boolean", "callable", "defined", "divisibleby", "eq",     "equalto",   "escaped",
                              "even",    "false",    "float",   "ge",          "greaterthan", "gt",   "in",
                              "integer", "iterable", "le",      "lessthan",    "lower",  "lt",        "mapping",
                              "ne",      "none",     "number",  "odd",         "sameas", "sequence",  "string",
                              "true",    "undefined", "upper",  "==",          "!=",     "<",         "<=",
                              ">",       ">="};

/// Argument `index` or `key`, or nullptr when absent.
const Value* arg(const std::vector<Value>& args, const Named& named, size_t index, const char* key) {
  if (index < args.size()) return &args[index];
  for (const auto& [k, v] : named)
    if (k == key) return &v;
  return nullptr;
}

void check_named(const std::string& filter, const Named& named, std::initializer_list<const char*> allowed) {
  for (const auto& [k, v] : named)
    if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; }) == allowed.end())
      OLMO2_THROW(BuiltinError, "filter '", filter, "' got an unexpected keyword argument '", k, "'");
}

// Jinja2's make_attrgetter: a dotted path of keys or integer indices.
Value attribute_of(const Value& item, const Value& attribute) {
  if (attribute.is_integral()) return get_item(item, attribute);
  Value v = item;
  for (const std::string& part : py_split(to_str(attribute), std::string("."), -1)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = digits ? get_item(v, Value::integer(std::atoll(part.c_str()))) : get_item(v, Value::string(part));
  }
  return v;
}

bool py_islower_or_upper(const std::string& s, bool lower) {
  bool cased = false;
  for (char c : s) {
    if (c >= 'a' && c <= 'z') {
      if (!lower) return false;
      cased = true;
    } else if (c >= 'A' && c <= 'Z') {
      if (lower) return false;
      cased = true;
    }
  }
  return cased;
}

// select / reject / selectattr / rejectattr: keep items whose test (or truthiness) is `keep`.
Value select_items(const Value& v, const std::vector<Value>& args, bool by_attr, bool keep) {
  List out;
  if (!v.truthy()) return Value::list({});
  if (by_attr && args.empty()) OLMO2_THROW(BuiltinError, "Missing parameter for attribute name");
  const size_t off = by_attr ? 1 : 0;
  for (const Value& item : iterate(v)) {
    const Value subject = by_attr ? attribute_of(item, args[0]) : item;
    bool pass;
    if (args.size() > off) {
      if (!args[off].is_string() || !is_known_test(args[off].text()))
        OLMO2_THROW(BuiltinError, "unsupported test ", to_repr(args[off]));
      pass = apply_test(args[off].text(), subject, std::vector<Value>(args.begin() + off + 1, args.end()));
    } else {
      pass = subject.truthy();
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value tojson(const Value& v, const std::vector<Value>& args, const Named& named) {
  check_named("tojson", named, {"indent", "ensure_ascii", "separators", "sort_keys"});
  JsonOptions o;  // transformers' signature: tojson(x, ensure_ascii, indent, separators, sort_keys)
  if (const Value* a = arg(args, named, 0, "ensure_ascii")) o.ensure_ascii = a->truthy();
  if (const Value* indent = arg(args, named, 1, "indent"); indent && !indent->is_none()) {
    if (!indent->is_integral()) OLMO2_THROW(BuiltinError, "tojson indent must be an integer");
    o.indent = static_cast<int>(std::max<int64_t>(0, indent->as_int()));
  }
  if (const Value* sep = arg(args, named, 2, "separators"); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->items().size() != 2 || !sep->items()[0].is_string() || !sep->items()[1].is_string())
      OLMO2_THROW(BuiltinError, "tojson separators must be two strings");
    o.item_separator = sep->items()[0].text();
    o.key_separator = sep->items()[1].text();
    if (o.item_separator.empty()) OLMO2_THROW(BuiltinError, "unsupported: an empty tojson item separator");
  }
  if (const Value* s = arg(args, named, 3, "sort_keys")) o.sort_keys = s->truthy();
  return Value::string(to_json(v, o));
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return static_cast<int64_t>(py_len(v.text()));
    case Value::Kind::List: return static_cast<int64_t>(v.items().size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.entries().entries.size());
    default: OLMO2_THROW(BuiltinError, "object of type '", v.type_name(), "' has no len()");
  }
}

}  // namespace

bool is_known_filter(const std::string& name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool is_known_test(const std::string& name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

Value apply_filter(const std::string& name, const Value& v, const std::vector<Value>& args, const Named& named) {
  if (name == "trim") {
    const Value* chars = arg(args, named, 0, "chars");
    std::optional<std::string> set;
    if (chars && !chars->is_none()) set = to_str(*chars);
    return Value::string(py_strip(to_str(v), set, true, true));
  }
  if (name == "upper") return Value::string(py_upper(to_str(v)));
  if (name == "lower") return Value::string(py_lower(to_str(v)));
  if (name == "capitalize") return Value::string(py_capitalize(to_str(v)));
  if (name == "title") return Value::string(jinja_title(to_str(v)));
  if (name == "string") return v.is_string() ? v : Value::string(to_str(v));
  if (name == "safe") return v;
  if (name == "length" || name == "count") return Value::integer(length_of(v));
  if (name == "tojson") return tojson(v, args, named);
  if (name == "default" || name == "d") {
    const Value* fallback = arg(args, named, 0, "default_value");
    const Value* boolean = arg(args, named, 1, "boolean");
    const bool use_fallback = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
    return use_fallback ? (fallback ? *fallback : Value::string("")) : v;
  }
  if (name == "replace") {
    const Value* old = arg(args, named, 0, "old");
    const Value* repl = arg(args, named, 1, "new");
    const Value* count = arg(args, named, 2, "count");
    if (!old || !repl) OLMO2_THROW(BuiltinError, "replace takes two arguments");
    const long n = count && !count->is_none() ? static_cast<long>(count->as_int()) : -1;
    return Value::string(py_replace(to_str(v), to_str(*old), to_str(*repl), n));
  }
  if (name == "join") {
    const Value* sep = arg(args, named, 0, "d");
    const Value* attribute = arg(args, named, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      out += (first ? "" : (sep ? to_str(*sep) : "")) + to_str(attribute ? attribute_of(item, *attribute) : item);
      first = false;
    }
    return Value::string(std::move(out));
  }
  if (name == "first" || name == "last") {
    const List items = iterate(v);
    if (items.empty()) return Value::undefined(std::string("No ") + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::list(iterate(v));
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string cps = decode_utf8(v.text());
      std::reverse(cps.begin(), cps.end());
      return Value::string(encode_utf8(cps));
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "unique") {
    List out;
    for (const Value& item : iterate(v))
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return equals(o, item); })) out.push_back(item);
    return Value::list(std::move(out));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) OLMO2_THROW(BuiltinError, "Can only get item pairs from a mapping.");
    return call_method(v, "items", {}, {});
  }
  if (name == "select" || name == "reject") return select_items(v, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select_items(v, args, true, name == "selectattr");
  if (name == "map") {
    List out;
    const Value* attribute = arg({}, named, 0, "attribute");
    if (!attribute && (args.empty() || !args[0].is_string() || !is_known_filter(args[0].text())))
      OLMO2_THROW(BuiltinError, "map requires a known filter name or attribute=");
    for (const Value& item : iterate(v)) {
      if (attribute) {
        Value got = attribute_of(item, *attribute);
        const Value* fallback = arg({}, named, 0, "default");
        out.push_back(got.is_undefined() && fallback ? *fallback : got);
      } else {
        out.push_back(apply_filter(args[0].text(), item, std::vector<Value>(args.begin() + 1, args.end()), named));
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "abs") {
    if (v.is_integral()) return Value::integer(std::llabs(v.as_int()));
    if (v.is_number()) return Value::number(std::fabs(v.as_float()));
    OLMO2_THROW(BuiltinError, "bad operand type for abs(): '", v.type_name(), "'");
  }
  if (name == "int") {
    const Value* fallback = arg(args, named, 0, "default");
    if (v.is_integral()) return Value::integer(v.as_int());
    if (v.kind() == Value::Kind::Float && std::isfinite(v.as_float())) return Value::integer(static_cast<int64_t>(v.as_float()));
    if (v.is_string()) {
      const std::string s = py_strip(v.text(), std::nullopt, true, true);
      char* end = nullptr;
      const double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(f)) return Value::integer(static_cast<int64_t>(f));
    }
    return fallback ? *fallback : Value::integer(0);
  }
  if (name == "float") {
    const Value* fallback = arg(args, named, 0, "default");
    if (v.is_number()) return Value::number(v.as_float());
    if (v.is_string()) {
      const std::string s = py_strip(v.text(), std::nullopt, true, true);
      char* end = nullptr;
      const double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::number(f);
    }
    return fallback ? *fallback : Value::number(0.0);
  }
  OLMO2_THROW(BuiltinError, "unsupported filter '", name, "'");
}

bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  auto other = [&]() -> const Value& {
    if (args.empty()) OLMO2_THROW(BuiltinError, "test '", name, "' needs an argument");
    return args[0];
  };
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::Int;
  if (name == "float") return v.kind() == K::Float;
  if (name == "boolean") return v.kind() == K::Bool;
  if (name == "true") return v.kind() == K::Bool && v.as_bool();
  if (name == "false") return v.kind() == K::Bool && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.is_undefined() || v.kind() == K::Macro || v.kind() == K::Function;
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") return py_islower_or_upper(to_str(v), name == "lower");
  if (name == "odd" || name == "even" || name == "divisibleby") {
    const Value divisor = name == "divisibleby" ? other() : Value::integer(2);
    return equals(binary_op("%", v, divisor), Value::integer(name == "odd" ? 1 : 0));
  }
  if (name == "sameas") {
    const Value& o = other();
    if (v.is_none() || v.kind() == K::Bool) return v.kind() == o.kind() && equals(v, o);
    // CPython keeps one object for each int in [-5, 256]
    return v.kind() == K::Int && o.kind() == K::Int && v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
  if (name == "ne" || name == "!=") return !equals(v, other());
  if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, other());
  if (name == "le" || name == "<=") return !less_than(other(), v);
  if (name == "gt" || name == "greaterthan" || name == ">") return less_than(other(), v);
  if (name == "ge" || name == ">=") return !less_than(v, other());
  if (name == "in") return contains(other(), v);
  OLMO2_THROW(BuiltinError, "unsupported test '", name, "'");
}

}  // namespace olmo2::chat
