// Template values with Python's conversions (template_value.h). Sources: the Python
// Language Reference (truth values, comparisons), float.__repr__ (David Gay's shortest
// round-trip digits, printed in fixed notation for exponents -4 < decpt <= 16), and the
// json module's encoder (json.dumps) for tojson.
#include "runtime/serve/chat/template_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "runtime/serve/chat/python_str.h"

namespace olmo2::chat {

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::Float;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.s_ = std::move(s);
  return v;
}
Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.b_ = true;
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::name_space(Dict d) {
  Value v = dict(std::move(d));
  v.kind_ = Kind::Namespace;
  return v;
}
Value Value::macro(std::shared_ptr<const MacroDef> m) {
  Value v;
  v.kind_ = Kind::Macro;
  v.macro_ = std::move(m);
  return v;
}
Value Value::function(std::string name) {
  Value v;
  v.kind_ = Kind::Function;
  v.s_ = std::move(name);
  return v;
}

namespace {
constexpr int kMaxJsonDepth = 256;

template <typename Json>
Value value_from_json(const Json& j, int depth = 0) {
  if (depth > kMaxJsonDepth) OLMO2_THROW(InputError, "chat template: JSON nested over ", kMaxJsonDepth, " levels");
  switch (j.type()) {
    case Json::value_t::null: return Value::none();
    case Json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case Json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) OLMO2_THROW(InputError, "chat template: integer ", u, " is too large");
      return Value::integer(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float: return Value::number(j.template get<double>());
    case Json::value_t::string: return Value::string(j.template get<std::string>());
    case Json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(value_from_json(e, depth + 1));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.entries.emplace_back(k, value_from_json(e, depth + 1));
      return Value::dict(std::move(d));
    }
    default: OLMO2_THROW(InputError, "chat template: unsupported JSON value of type ", j.type_name());
  }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return value_from_json(j); }
Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j); }

double Value::as_float() const { return kind_ == Kind::Float ? f_ : static_cast<double>(as_int()); }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0.0;
    case Kind::String: return !s_.empty();
    case Kind::List: return !list_->empty();
    case Kind::Dict: return !dict_->entries.empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Macro: return "Macro";
    default: return "function";
  }
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // shortest round-trip digits: "-1.2345e-07"
  const size_t e_at = sci.find('e');
  std::string mantissa = sci.substr(0, e_at);
  const int exponent = std::stoi(sci.substr(e_at + 1));
  std::string sign;
  if (mantissa[0] == '-') sign = "-", mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  const int decpt = exponent + 1;  // position of the decimal point after the first digit
  if (decpt <= -4 || decpt > 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + buf;
  }
  if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
  if (decpt >= static_cast<int>(digits.size()))
    return sign + digits + std::string(decpt - digits.size(), '0') + ".0";
  return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
}

namespace {
std::string join_repr(const Value& v) {
  std::string out;
  if (v.is_list()) {
    out = v.is_tuple() ? "(" : "[";
    for (size_t i = 0; i < v.items().size(); ++i) out += (i ? ", " : "") + to_repr(v.items()[i]);
    if (v.is_tuple()) return out + (v.items().size() == 1 ? ",)" : ")");
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (const auto& [k, e] : v.entries().entries) {
    out += (first ? "" : ", ") + py_str_repr(k) + ": " + to_repr(e);
    first = false;
  }
  return out + "}";
}
}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return float_repr(v.as_float());
    case Value::Kind::String: return v.text();
    case Value::Kind::List:
    case Value::Kind::Dict: return join_repr(v);
    case Value::Kind::Namespace: return "<Namespace " + join_repr(Value::dict(v.entries())) + ">";
    case Value::Kind::Macro: return "<Macro>";
    default: return "<built-in function " + v.text() + ">";
  }
}

std::string to_repr(const Value& v) {
  if (v.is_string()) return py_str_repr(v.text());
  if (v.is_undefined()) return "Undefined";
  return to_str(v);
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.text() == b.text();
    case Value::Kind::List:
      return a.is_tuple() == b.is_tuple() && a.items().size() == b.items().size() &&
             std::equal(a.items().begin(), a.items().end(), b.items().begin(), equals);
    case Value::Kind::Dict: {
      if (a.entries().entries.size() != b.entries().entries.size()) return false;
      for (const auto& [k, e] : a.entries().entries) {
        const Value* other = b.entries().find(k);
        if (!other || !equals(e, *other)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace: return &a.entries() == &b.entries();
    case Value::Kind::Function: return a.text() == b.text();
    default: return &a.macro_def() == &b.macro_def();
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_float() < b.as_float();
  }
  if (a.is_string() && b.is_string()) return a.text() < b.text();  // UTF-8 order is code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const List& x = a.items();
    const List& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
    return x.size() < y.size();
  }
  OLMO2_THROW(InputError, "chat template: '<' not supported between instances of '", a.type_name(), "' and '",
              b.type_name(), "'");
}

namespace {
void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  char buf[16];
  out += '"';
  for (char32_t c : decode_utf8(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F && c < 0x10000)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else if (ensure_ascii && c >= 0x10000) {
      const char32_t v = c - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                    static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
      out += buf;
    } else {
      out += encode_utf8(std::u32string(1, c));
    }
  }
  out += '"';
}

void json_value(const Value& v, const JsonOptions& o, int level, std::string& out) {
  const std::string item_sep = o.item_separator.empty() ? (o.indent >= 0 ? "," : ", ") : o.item_separator;
  auto newline = [&](int lvl) {
    if (o.indent >= 0) out += "\n" + std::string(static_cast<size_t>(o.indent) * lvl, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double f = v.as_float();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f < 0 ? "-Infinity" : "Infinity") : float_repr(f);
      return;
    }
    case Value::Kind::String: json_string(v.text(), o.ensure_ascii, out); return;
    case Value::Kind::List: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_value(v.items()[i], o, level + 1, out);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.entries().entries.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.entries().entries) entries.push_back(&e);
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](auto* x, auto* y) { return x->first < y->first; });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_string(entries[i]->first, o.ensure_ascii, out);
        out += o.key_separator;
        json_value(entries[i]->second, o, level + 1, out);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      OLMO2_THROW(InputError, "chat template: tojson: Object of type ", v.type_name(), " is not JSON serializable");
  }
}
}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(v, options, 0, out);
  return out;
}

}  // namespace olmo2::chat
